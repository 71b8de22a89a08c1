// ShmPool: one shm:// pool file mapped into this process: opening (create-then-link, or validate an
// existing file), the robust pool lock with its repair pass, and the slot, page, index and pin
// operations the tier builds on. Every *Locked method REQUIRES the pool lock (a PoolLock in scope).
//
// Thread-safety: the lock serialises threads of this process and of every other process mapping the pool.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/tier.h"
#include "tiers/shm/shm_layout.h"

namespace kvtier::internal::shm {

struct RepairClaims;  // shm_repair.cc

struct PoolSpec {
  std::string name;            // [A-Za-z0-9._-], 1 to 64 characters, not starting with '.'
  std::string dir = "/dev/shm";
  bool hugetlbfs = false;      // dir must be a hugetlbfs mount (hugepages=DIR)
  uint64_t capacity = 0;       // 0: open an existing pool at its own bound
  uint64_t page_bytes = 64ull << 10;
  long group = -1;             // gid the file is shared with (mode 0660); -1: mode 0600
  bool read_only = false;
  // Page tables of the whole mapping set up at open (MADV_POPULATE_WRITE, or _READ for a read-only
  // opener), so neither writes nor first reads fault page by page: kRequired fails the open when that
  // cannot be done (populate=1), kBestEffort falls back to faulting on first touch (the writable
  // default), kLazy does not try (populate=0; a read-only opener's default: looking stays cheap).
  enum class Populate { kLazy, kBestEffort, kRequired };
  Populate populate = Populate::kLazy;
  unsigned populate_threads = 1;  // threads that share the populate pass (the tier's copy threads)
  uint64_t key_check = 0;      // written into a pool this opener creates (0: plain); see PoolHeader
};

// "kvtier-shm-NAME": the file name of pool NAME; InvalidArgument for a name that is not allowed.
Result<std::string> PoolFileName(const std::string& name);

// Start time of process `pid` (field 22 of /proc/PID/stat); 0 when it is gone or a zombie.
uint64_t ProcessStartTime(pid_t pid);

class ShmPool {
 public:
  static Result<std::unique_ptr<ShmPool>> Open(const PoolSpec& spec);
  ~ShmPool();
  ShmPool(const ShmPool&) = delete;
  ShmPool& operator=(const ShmPool&) = delete;

  const std::string& path() const { return path_; }
  // This process's whole mapping of the pool file (PROT_READ for a read-only opener).
  std::span<std::byte> mapping() const { return {base_, map_bytes_}; }
  PoolHeader& header() const { return *hdr_; }
  bool read_only() const { return read_only_; }
  uint64_t page_bytes() const { return hdr_->page_bytes; }
  uint64_t page_count() const { return hdr_->page_count; }
  uint64_t slot_count() const { return hdr_->slot_count; }
  Slot& slot(uint32_t s) const { return slots_[s]; }

  // IOError when the file under the pool's name is no longer the file this process mapped, or has
  // been cut short: nothing may then be read or written through the mapping.
  Status CheckFile(bool check_name) const;

  // The pool lock. Lock() repairs the pool when the previous holder died holding it.
  Status Lock();
  void Unlock();

  // --- REQUIRES the lock ---
  // A free slot owning `pages` pages in state kReserved by this process, evicting and reclaiming as
  // needed; NoSpace when the bound (or pinned chunks) leave no room.
  Result<uint32_t> ReserveLocked(uint64_t pages);
  // Publishes a kReserved slot of this process whose fields are set; false (and the slot freed) when
  // another copy of the same chunk was published first.
  bool PublishLocked(uint32_t s);
  uint32_t FindLocked(const ChunkId& id) const;
  void RemoveLocked(uint32_t s);  // a published slot: out of the index; freed now, or by its last reader
  void FreeLocked(uint32_t s);    // back to kFree with its pages
  bool PinLocked(uint32_t s);     // false: no pin record free
  void UnpinLocked(uint32_t s);
  bool EvictOneLocked();
  // Told of each chunk EvictOneLocked evicts (with the lock held); set before the pool is shared.
  void SetEvictionListener(std::function<void(const ChunkId&)> fn) { on_evict_ = std::move(fn); }
  // True when slot s's chunk (published or dead) reads back whole: its table and every piece match
  // their checksums. Called by RepairLocked, with the lock held, only for slots whose page chains
  // overlap. Set before the pool is shared; without it an overlap keeps the earlier slot.
  void SetChainCheck(std::function<bool(uint32_t)> fn) { chain_check_ = std::move(fn); }
  // Takes back reservations and pins of processes that are gone; returns how many.
  uint64_t ReclaimDeadLocked();
  // Rebuilds every derived structure from the slots and pin records (shm_repair.cc). Of two page
  // chains that share a page, the one whose chunk passes the chain check is kept (when only one does).
  void RepairLocked();
  // RepairLocked() when the header's counters disagree with the slots or the page bitmap: an O(slots)
  // check, run by every writer that opens the pool.
  void CheckCountersLocked();
  // Lowers (or raises, up to the arena) the bound and evicts down to it.
  void SetCapacityLocked(uint64_t bytes);

  // --- no lock needed while the slot is pinned or reserved by this process ---
  // The runs of bytes [offset, offset + len) of a chunk stored from `first_page` over its page chain.
  // Empty when the chain leaves the arena (only possible for a lock-free reader racing a writer).
  std::vector<std::span<std::byte>> Runs(uint32_t first_page, uint64_t pages, uint64_t offset, uint64_t len) const;

  static void SetId(Slot& x, const ChunkId& id);
  static bool SameId(const Slot& x, const ChunkId& id);
  static ChunkId IdOf(const Slot& x);

  pid_t pid() const { return pid_; }

 private:
  std::function<void(const ChunkId&)> on_evict_;
  std::function<bool(uint32_t)> chain_check_;
  ShmPool() = default;
  static Result<std::unique_ptr<ShmPool>> Map(int fd, const std::string& path, const PoolSpec& spec);
  static Status Create(const PoolSpec& spec, const std::string& path);
  void InitFresh(const Geometry& g, uint64_t capacity, uint64_t key_check);
  Status Validate(uint64_t file_size) const;
  uint64_t HashId(const ChunkId& id) const;
  uint64_t HashSlot(uint32_t s) const;
  [[nodiscard]] bool IndexInsertLocked(uint32_t s);  // false: no free place (a scribbled index)
  Result<uint32_t> ReserveOnceLocked(uint64_t pages);  // Internal when the derived state disagrees
  bool CountersPlausibleLocked() const;              // the header's counters within the geometry
  bool UsedPagesAgreeLocked() const;                 // used_pages equals the slots' pages
  bool NeedsRoomLocked(uint64_t pages) const;        // a reservation of `pages` must evict first
  bool UsedPagesMatchBitmapLocked() const;           // used_pages equals the bits set (O(pages / 64))
  bool CountersAgreeLocked() const;                  // used, live and bitmap agree with the slots
  void RebuildPinCountsLocked();
  bool ClaimChainLocked(uint32_t s, RepairClaims& c);  // false: s's chain is dropped
  void ReleaseChainLocked(uint32_t s, RepairClaims& c) const;
  bool IntactLocked(uint32_t s, RepairClaims& c) const;
  void IndexEraseLocked(uint32_t s);
  bool TakePagesLocked(uint64_t pages, uint32_t* first);
  void SetBits(uint32_t first, uint64_t pages, bool on);
  bool Alive(uint64_t pid, uint64_t start) const;

  std::string path_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool read_only_ = false;
  pid_t pid_ = 0;
  uint64_t start_ = 0;
  std::byte* base_ = nullptr;
  uint64_t map_bytes_ = 0;
  PoolHeader* hdr_ = nullptr;
  Slot* slots_ = nullptr;
  std::atomic<uint32_t>* index_ = nullptr;
  std::atomic<uint64_t>* bitmap_ = nullptr;
  std::atomic<uint32_t>* next_ = nullptr;
  PinRecord* pins_ = nullptr;
  std::byte* arena_ = nullptr;
};

}  // namespace kvtier::internal::shm
