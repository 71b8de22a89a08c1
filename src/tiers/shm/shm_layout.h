// The bytes of a shm:// pool file, shared by every process that maps it (docs/shared-pool.md; the crash
// safety argument is in docs/architecture.md, "shm:// crash safety").
//
//   [0, 4096)            PoolHeader: identity and geometry (written once, before the file gets its name),
//                        then the robust process-shared mutex and the pool-wide counters
//   [slots_off, ...)     Slot[slot_count]: one per chunk or reservation; the source of truth
//   [index_off, ...)     u32[index_size]: key -> slot hash table (derived from the slots; rebuilt by repair)
//   [bitmap_off, ...)    u64[ceil(page_count / 64)]: pages in use (derived; rebuilt by repair)
//   [next_off, ...)      u32[page_count]: the next page of a chunk's page chain
//   [pins_off, ...)      PinRecord[pin_count]: reader pins, by process (pid + start time)
//   [arena_off, ...)     page_count pages of page_bytes: each chunk's table (piece checksums; in an
//                        encrypted pool also the nonce base and the pieces' GCM tags), then its payload
//
// Every shared word is a std::atomic (lock-free, address-free), so processes and threads read and write
// it without data races; the words that change are changed with the pool mutex held, except a slot's
// state word, which lock-free readers (read-only openers) may read at any time.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kvtier::internal::shm {

inline constexpr uint64_t kPoolMagic = 0x314C4F4F504D4853ull;  // "SHMPOOL1" read as LE bytes
inline constexpr uint32_t kPoolVersion = 2;  // 2: key_check (encrypted pools)
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr uint64_t kPieceBytes = 1ull << 20;  // each piece of a payload has its own xxh3-64
inline constexpr uint32_t kNone = 0xFFFFFFFFu;
inline constexpr uint32_t kPinProbe = 32;  // a pin lives within this many records of its hash

// A slot's state, in the low 8 bits of its state word; the generation (bumped at every free) above.
enum SlotState : uint64_t { kFree = 0, kReserved = 1, kPublished = 2, kDead = 3 };

inline uint64_t StateOf(uint64_t word) { return word & 0xFF; }
inline uint64_t GenOf(uint64_t word) { return word >> 8; }
inline uint64_t MakeWord(uint64_t gen, SlotState s) { return (gen << 8) | s; }

struct Slot {
  std::atomic<uint64_t> word;         // state | generation << 8
  std::atomic<uint64_t> owner_pid;    // the reserving writer (kReserved)
  std::atomic<uint64_t> owner_start;  // its start time (clock ticks after boot, /proc/PID/stat)
  std::atomic<uint64_t> pages;        // first page (low 32 bits) | page count (high 32 bits)
  std::atomic<uint64_t> bytes;        // payload bytes
  std::atomic<uint64_t> table_sum;    // xxh3-64 of the piece-checksum table
  std::atomic<uint64_t> layout;       // layout fingerprint
  std::atomic<uint64_t> ns[4];
  std::atomic<uint64_t> key[4];
  std::atomic<uint32_t> pins;  // readers holding it (derived from the pin records)
  std::atomic<uint32_t> ref;   // CLOCK reference bit
};
static_assert(sizeof(Slot) == 128);

struct PinRecord {
  std::atomic<uint64_t> pid;
  std::atomic<uint64_t> start;
  std::atomic<uint32_t> slot;
  std::atomic<uint32_t> count;  // 0: free
};
static_assert(sizeof(PinRecord) == 24);

struct PoolHeader {
  // Identity and geometry: written by the creator before the file is linked under its name, never after.
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t file_bytes;
  uint64_t page_bytes;
  uint64_t page_count;
  uint64_t slot_count;
  uint64_t index_size;  // a power of two
  uint64_t pin_count;
  uint64_t slots_off, index_off, bitmap_off, next_off, pins_off, arena_off;
  uint64_t owner_uid;
  uint64_t key_check;     // 0: chunks stored plain; else every chunk is sealed under the key it checks
  uint64_t geometry_sum;  // xxh3-64 of every field above
  // Shared state.
  alignas(64) pthread_mutex_t mu;  // robust, process-shared
  alignas(64) std::atomic<uint64_t> capacity_bytes;  // the bound in force (<= page_count * page_bytes)
  std::atomic<uint64_t> used_pages;
  std::atomic<uint64_t> live_chunks;
  std::atomic<uint64_t> clock_hand;
  std::atomic<uint64_t> slot_hint;
  std::atomic<uint64_t> page_hint;
  std::atomic<uint64_t> repairs;    // times a dead lock holder's state was repaired
  std::atomic<uint64_t> reclaimed;  // reservations and pins of dead processes taken back
  std::atomic<uint64_t> evictions;
};
static_assert(sizeof(PoolHeader) <= kHeaderBytes);

// The geometry of a pool: offsets of every region for `page_count` pages of `page_bytes`.
struct Geometry {
  uint64_t page_bytes = 0, page_count = 0, slot_count = 0, index_size = 0, pin_count = 0;
  uint64_t slots_off = 0, index_off = 0, bitmap_off = 0, next_off = 0, pins_off = 0, arena_off = 0;
  uint64_t file_bytes = 0;
};

// The layout of a pool of `page_count` pages; `file_align`: the file size is rounded up to it (huge pages).
Geometry MakeGeometry(uint64_t page_bytes, uint64_t page_count, uint64_t file_align);

}  // namespace kvtier::internal::shm
