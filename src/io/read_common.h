// Steps shared by the io_uring and preadv chunk readers: open and size a chunk file, verify the bytes
// read, copy the payload out, and recycle aligned buffers. Private to src/io.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "io/byte_budget.h"
#include "io/chunk_io.h"
#include "io/fd.h"
#include "io/thread_pool.h"

namespace kvtier::internal {

struct OpenedChunk {
  Fd fd;
  bool direct = false;     // fd was opened with O_DIRECT
  uint64_t file_size = 0;  // st_size at open
  uint64_t read_len = 0;   // bytes to read from offset 0: a multiple of kChunkAlign
};

// Opens `path` (with O_DIRECT when `direct` and the filesystem accepts it) and decides how much to read:
// the whole file, but never more than a chunk of `payload_bytes` occupies, so a stray huge file cannot
// exhaust memory. NotFound when the file is gone; Corruption when it is too short to hold a header.
Result<OpenedChunk> OpenChunk(FileSystem& fs, const std::string& path, uint64_t payload_bytes, bool direct);

// Reopens `chunk` without O_DIRECT (some filesystems accept the flag at open but refuse the reads).
Status ReopenBuffered(FileSystem& fs, const std::string& path, OpenedChunk* chunk);

// Reads [0, len) into `buf` with preadv, resuming after short reads; returns the bytes read (fewer at
// end of file).
Result<uint64_t> PreadAll(FileSystem& fs, int fd, std::byte* buf, uint64_t len, const std::string& path);
// The same from file offset `offset`.
Result<uint64_t> PreadAt(FileSystem& fs, int fd, std::byte* buf, uint64_t len, uint64_t offset,
                         const std::string& path);

// Verifies a chunk's payload piece by piece against its decoded header: plain pieces by xxh3-64,
// encrypted ones by AES-GCM, decrypting them. Pieces are independent: Piece() may run for different
// pieces on different threads at once, in any order, as they land.
class PayloadVerifier {
 public:
  // Corruption when the chunk's protection does not match the reader's: an encrypted chunk without a
  // cipher, or a plain chunk (v1 or v2) when the reader has one.
  static Result<std::unique_ptr<PayloadVerifier>> Make(ChunkHeader header, const ChunkCipher* cipher);

  const ChunkHeader& header() const { return header_; }
  uint32_t pieces() const { return header_.pieces(); }
  // Checks piece `i` of `src` (the whole stored payload) and leaves its verified plaintext at the same
  // offsets of `dst` (the whole destination). `in_place`: src and dst are the same memory.
  Status Piece(uint32_t i, GatherList src, ScatterList dst, bool in_place) const;
  // The same where `in` and `out` hold piece `i` alone (e.g. a scrubber reading one piece at a time).
  Status PieceBytes(uint32_t i, GatherList in, ScatterList out, bool in_place) const;
  // Every piece. With `pool` and more than one piece, pieces are claimed by the calling thread and up
  // to pool->size() helpers at once; the call returns when every piece is done. Otherwise in order,
  // stopping at the first failure.
  Status All(GatherList src, ScatterList dst, bool in_place, ThreadPool* pool = nullptr) const;

 private:
  PayloadVerifier(ChunkHeader header, std::unique_ptr<NamespaceKey> key)
      : header_(std::move(header)), key_(std::move(key)) {}
  ChunkHeader header_;
  std::unique_ptr<NamespaceKey> key_;  // set for an encrypted chunk
};

// Checks `image` (the first bytes of a chunk file of `file_size` bytes) against `expected` and copies
// the verified payload into `dst` (decrypting it with `cipher` when set). Corruption for a bad header,
// payload, tag or length; VersionMismatch for a newer format; InvalidArgument when `dst` does not
// match the stored payload size. `dst` is not zeroed on failure: the reader does that.
Status VerifyAndScatter(std::span<const std::byte> image, uint64_t file_size, const ChunkId& expected,
                        ScatterList dst, const ChunkCipher* cipher, ThreadPool* pool = nullptr);

// The same for a chunk whose payload was read straight into `dst`: checks `header` (the file's first
// kChunkHeaderSize bytes), that `valid_bytes` of the file were read, and the payload in place.
Status VerifyInPlace(std::span<const std::byte> header, uint64_t file_size, uint64_t valid_bytes,
                     const ChunkId& expected, ScatterList dst, const ChunkCipher* cipher,
                     ThreadPool* pool = nullptr);

// The same for a chunk stored as an object (object/object_tier.h): `image` is the whole object, header
// then payload, with no padding. Same errors; `dst` is not zeroed on failure.
Status VerifyObjectImage(std::span<const std::byte> image, const ChunkId& expected, ScatterList dst,
                         const ChunkCipher* cipher);

// The same for an object whose header is `header` and whose payload was read straight into `dst`;
// `object_bytes` is the object's whole size (header and payload, no padding).
Status VerifyObjectInPlace(std::span<const std::byte> header, uint64_t object_bytes, const ChunkId& expected,
                           ScatterList dst, const ChunkCipher* cipher);

// Zeroes the destination of every read that failed after its file was opened (any status but OK and
// NotFound; a NotFound read wrote nothing).
void ZeroFailedReads(std::span<ChunkRead> reads);

// A cache of freed aligned buffers, so steady reads do not fault fresh pages in for every chunk.
// Holds at most `max_cached_bytes`. Thread-safe.
class BufferPool {
 public:
  explicit BufferPool(uint64_t max_cached_bytes) : max_cached_(max_cached_bytes) {}
  // An empty buffer when memory is exhausted.
  AlignedBuffer Get(uint64_t size) EXCLUDES(mu_);
  void Put(AlignedBuffer buffer) EXCLUDES(mu_);

 private:
  const uint64_t max_cached_;
  Mutex mu_;
  std::vector<AlignedBuffer> free_ GUARDED_BY(mu_);
  uint64_t cached_ GUARDED_BY(mu_) = 0;
};

// Reads, verifies and copies out one chunk on the calling thread; sets read.status and
// read.stored_bytes. Takes its bytes from `budget` while it holds the buffer.
// REQUIRES: the caller holds no bytes of `budget`.
void ReadChunkSync(ChunkRead& read, bool direct, ByteBudget& budget, BufferPool& buffers,
                   const ChunkCipher* cipher, ThreadPool* pool = nullptr);

// The pool that verifies the pieces of one chunk in parallel (ReaderOptions::verify_threads), or
// nullptr when verification stays on the reading thread.
std::unique_ptr<ThreadPool> MakeVerifyPool(const ReaderOptions& options);

}  // namespace kvtier::internal
