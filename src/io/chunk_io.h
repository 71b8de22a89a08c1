// File I/O for persistent tiers (file://, fs://): atomic publication of chunk files and a parallel,
// verified reader. Both use the format of core/chunk_format.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/chunk_cipher.h"
#include "core/chunk_format.h"
#include "io/filesystem.h"
#include "kvtier/host_allocator.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

// Heap memory aligned for O_DIRECT. Move-only; frees on destruction.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Abort-free: an empty buffer (data() == nullptr) when the allocation fails.
  static AlignedBuffer Allocate(size_t size, size_t align = kChunkAlign);
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

struct WriteOptions {
  bool sync = false;  // fsync the file before rename (and the directory after), for crash durability
  // Write a plain chunk with O_DIRECT (past the page cache) when its pieces allow: each starts on a
  // 4 KiB boundary and all but the last span whole 4 KiB blocks (mem:// arena pages do); only the
  // last partial block is copied, into an aligned block with its padding. Otherwise, or where the
  // filesystem refuses O_DIRECT, the write goes through the page cache.
  bool direct = false;
  // O_DIRECT writes run asynchronously through the writing thread's io_uring (io/async_writes.h), so
  // the device writes while the thread hashes or seals the rest of the chunk; false (or a kernel that
  // refuses io_uring): each write completes before the thread goes on. Buffered writes are synchronous.
  bool io_uring = true;
  // When set, the payload is encrypted and authenticated (AES-256-GCM, per-namespace key) as a v2
  // encrypted chunk; otherwise it is written as a plain v2 chunk with per-piece xxh3-64 sums.
  std::shared_ptr<const ChunkCipher> cipher = nullptr;
};

// True when O_DIRECT can write `payload` in place: every piece starts on a 4 KiB boundary and every
// piece but the last spans whole blocks (empty pieces are skipped). WriteChunkBody writes such a payload
// straight from its pages when options.direct; others go through the page cache.
bool DirectWritable(GatherList payload);

// Encodes chunk `id` (header, payload, padding) into `fd`, a new file opened through `fs`, whose space is
// taken first at its stored size (FileSystem::Preallocate, where the filesystem has it), resuming
// after short writes; fsyncs it when options.sync. `where` names the file in messages. Returns the
// bytes written (StoredChunkBytes). Publication (temporary + rename) is ChunkDir::WriteChunk.
Result<uint64_t> WriteChunkBody(FileSystem& fs, int fd, const std::string& where, const ChunkId& id,
                                GatherList payload, const WriteOptions& options);

// Reads and verifies a whole chunk file without a destination, streaming it through the checksum (for
// scrubbing, e.g. `kvtier verify`). `path` is relative to the root of `fs`. Returns its header. NotFound when the file is gone; Corruption when
// header, length or payload checksum are wrong or the header names another chunk than `expected`
// (expected.layout_fingerprint == 0 skips the layout check); VersionMismatch for a newer format;
// IOError when the storage refuses. Thread-safe.
// With `cipher`, only encrypted chunks that authenticate under it pass (the payload is decrypted and
// dropped); without, an encrypted chunk is Corruption.
Result<ChunkHeader> VerifyChunkFile(FileSystem& fs, const std::string& path, const ChunkId& expected,
                                    const ChunkCipher* cipher = nullptr);

// Reads `ranges` of a chunk file's payload of `payload_bytes` bytes into `dst` (their concatenation),
// reading and verifying every piece a range touches and no other (a v1 chunk is one piece). Returns
// the bytes read from the file (its header and those pieces). Errors as VerifyChunkFile, and
// InvalidArgument for bad ranges or a chunk of another size. `dst` is not zeroed on failure.
Result<uint64_t> ReadChunkRanges(FileSystem& fs, const std::string& path, const ChunkId& expected,
                                 uint64_t payload_bytes, const ChunkCipher* cipher,
                                 std::span<const ByteRange> ranges, ScatterList dst);

// The header of the open chunk file `fd`, checked against `expected` and the file's size, which must be
// exactly what a chunk of the header's payload occupies.
Result<ChunkHeader> ReadCheckedFileHeader(FileSystem& fs, int fd, const std::string& path, const ChunkId& expected);

// Reads and checks only a chunk file's header against `expected` and the file's size (no payload):
// what an index rebuild needs to trust a file's length. Same errors as VerifyChunkFile.
Result<ChunkHeader> ReadChunkHeader(FileSystem& fs, const std::string& path, const ChunkId& expected);

// One chunk read by ChunkReader::ReadMany.
struct ChunkRead {
  FileSystem* fs = nullptr;  // the tier directory's filesystem; every open and read goes through it
  std::string path;      // file to read, relative to fs's root
  ChunkId expected;      // the chunk the caller wants; checked against the stored header
  ScatterList dst;       // receives the verified payload; total size must equal the payload size
  Status status;         // set by ReadMany: OK, NotFound, Corruption, InvalidArgument or IOError
  uint64_t stored_bytes = 0;  // set by ReadMany: file size
  // When set, receives each piece's range as soon as it is verified in `dst` (io_uring engine; the
  // preadv engine reports nothing and the Store reports the chunk whole when the read returns).
  ReadProgress* progress = nullptr;
};

// Verification threads a reader gets unless told otherwise: one per core, 1 to 8.
unsigned DefaultVerifyThreads();

struct ReaderOptions {
  // Bound on payload bytes being read, plus bounce-buffered bytes not yet verified and copied out. A
  // chunk read in place (into the caller's buffers) leaves the bound when its reads land, while it is
  // verified, so at one chunk in flight reading and verifying overlap.
  uint64_t max_inflight_bytes = 256ull << 20;
  bool direct_io = true;          // O_DIRECT where the filesystem accepts it
  bool use_io_uring = true;       // else (or if the kernel refuses io_uring) a pool of preadv threads
  // io_uring engine: read the payload straight into the destination when its pieces allow (with
  // O_DIRECT: 4 KiB aligned), verifying (and decrypting) it there; saves a copy. Whatever the engine,
  // a read that fails (other than NotFound) leaves its destination zeroed.
  bool read_into_destination = true;
  unsigned fallback_threads = 4;
  // Threads (besides the reading thread) that verify or decrypt, and copy out, what the reader read.
  // io_uring engine: each piece of a chunk (v2: 1 MiB and up; v1: the whole payload) is handed to
  // them as soon as its bytes have landed, while the ring keeps reading; preadv engine: the pieces of
  // one chunk in parallel. 0 keeps all of it on the reading thread.
  unsigned verify_threads = DefaultVerifyThreads();
  // Bench only (`kvtier bench datapath`'s unverified row); no tier sets it: false skips the payload
  // checksum of plain chunks (the header is still checked; encrypted chunks are still authenticated).
  bool verify_payload = true;
  // When set, only encrypted chunks that authenticate under this key are accepted (a plain, foreign
  // or forged chunk is Corruption) and are decrypted into the destination. When unset, an encrypted
  // chunk is Corruption: ciphertext is never returned as data.
  std::shared_ptr<const ChunkCipher> cipher = nullptr;
  // Where the io_uring engine's bounce slab (io/read_slab.h) takes its segments from, e.g. pinned
  // memory (include/kvtier/gpu.h: PinnedHostAllocator); null, or a refused segment: aligned heap
  // memory. The preadv engine's buffers and the header pages always come from the heap.
  std::shared_ptr<HostAllocator> host_allocator = nullptr;
};

// Reads many chunk files in parallel, verifies header and checksum of each, and copies each payload
// into its destination. A chunk that fails verification gets Corruption (the caller removes it).
// Every read that fails with a status other than NotFound (a missing file: nothing read) has its
// destination zeroed, so no byte of a bad, foreign or partly read chunk reaches the caller.
// Thread-safe: ReadMany may run on many threads at once; the in-flight byte bound is per reader.
class ChunkReader {
 public:
  virtual ~ChunkReader() = default;
  static std::unique_ptr<ChunkReader> Create(const ReaderOptions& options);

  virtual void ReadMany(std::span<ChunkRead> reads) = 0;
  // "io_uring+O_DIRECT", "io_uring", "preadv+O_DIRECT" or "preadv": what this reader actually uses.
  virtual std::string_view engine() const = 0;
  // OK, or why a thread of the reader could not start (its owner then fails to open).
  virtual Status status() const { return Status::OK(); }

  // What the reader did since it was created (for tests and benches). Thread-safe.
  struct Stats {
    uint64_t in_place_chunks = 0;  // read straight into the caller's destination
    uint64_t bounce_chunks = 0;    // read into reader memory, verified, copied out
    uint64_t fixed_reads = 0;      // io_uring READ_FIXED requests (into registered reader memory)
    uint64_t plain_reads = 0;      // other read requests (the caller's memory, or nothing registered)
    uint64_t buffer_allocations = 0;  // bounce memory allocated: slab segments and heap buffers
    uint64_t slab_misses = 0;      // bounce reads that found no room in the slab and used the heap
    uint64_t slab_bytes = 0;       // memory the slab holds now
    uint64_t verify_tasks = 0;     // pieces verified by the verification threads
    uint64_t max_chunks_in_flight = 0;  // io_uring: most chunks holding budget at once (being read)
  };
  virtual Stats stats() const { return {}; }
};

}  // namespace kvtier::internal
