// Encoding one chunk file (header, payload, padding) into an open file. Publication (temporary name,
// rename) is io/chunk_dir.cc's.
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/async_writes.h"
#include "io/chunk_encode.h"
#include "io/chunk_io.h"
#include "io/fd.h"
#include "io/seal_spread.h"

namespace kvtier::internal {
namespace {

// Writes every iovec, resuming after short writes. `iov` is consumed.
Status WriteAll(FileSystem& fs, int fd, std::vector<iovec> iov, const std::string& path) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, fs.WriteV(fd, iov.data() + first, count));
    if (n == 0) return Status::IOError("write " + path + " made no progress");
    size_t left = static_cast<size_t>(n);
    while (left > 0 && first < iov.size()) {
      const size_t take = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      left -= take;
      if (iov[first].iov_len == 0) ++first;
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
  return Status::OK();
}

const std::array<std::byte, kChunkAlign>& Zeros() {
  static const std::array<std::byte, kChunkAlign> kZeros{};
  return kZeros;
}

// Sets or clears O_DIRECT on `fd`; false when the kernel or filesystem refuses it.
bool SetDirect(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  return fcntl(fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) == 0;
}

// A plain v2 chunk written with O_DIRECT straight from the caller's pages. The payload's whole blocks and
// its last partial block (copied, zero padded, into one aligned 8 KiB buffer that also holds the header)
// are submitted first (io/async_writes.h); the per-piece checksums are computed while they are in
// flight, then the header block, which carries them, is written at offset 0. Hashing pages the device is
// reading relies on the payload not changing during the Put. Tier::Put (include/kvtier/tier.h) does not
// say so in words; kvtier's callers hold to it: the Store's worker writes from its own aligned copy
// (docs/architecture.md "Save"), the benches from buffers no one writes. Bytes changed anyway make a
// chunk that fails its checksum when read, as when the sums were computed before the write.
// REQUIRES: DirectWritable(payload).
// InvalidArgument when the filesystem refuses the direct write (the caller then writes through the page
// cache); every write has finished when this returns.
Status WriteDirectBody(FileSystem& fs, int fd, const std::string& path, const ChunkId& id, GatherList payload,
                       bool use_ring) {
  AlignedBuffer edge = AlignedBuffer::Allocate(kChunkHeaderSize + kChunkAlign);
  if (edge.data() == nullptr) return Status::InvalidArgument("no aligned buffer for a direct write");
  std::memset(edge.data(), 0, edge.size());
  std::byte* tail = edge.data() + kChunkHeaderSize;
  if (!SetDirect(fd, true)) return Status::InvalidArgument("O_DIRECT refused on " + path);
  Status s;
  {
    AsyncWrites writes(fs, fd, path, use_ring);
    uint64_t offset = kChunkHeaderSize;
    for (const auto& p : payload) {
      if (p.empty() || !s.ok()) continue;
      const size_t whole = p.size() / kChunkAlign * kChunkAlign;  // only the last piece has a remainder
      if (whole > 0) s = writes.Write(p.data(), whole, offset);
      offset += whole;
      if (whole < p.size()) {
        std::memcpy(tail, p.data() + whole, p.size() - whole);
        s = writes.Write(tail, kChunkAlign, offset);
      }
    }
    if (s.ok()) {
      const std::span<std::byte, kChunkHeaderSize> head(edge.data(), kChunkHeaderSize);
      EncodeChunkHeader(PlainChunkHeader(id, payload), head);
      s = writes.Write(edge.data(), kChunkHeaderSize, 0);
    }
    const Status landed = writes.WaitAll();
    if (s.ok()) s = landed;
  }
  (void)SetDirect(fd, false);
  return s;
}

// A plain v2 chunk: with O_DIRECT from the caller's pages when `direct` and they allow; otherwise
// per-piece xxh3-64 sums (the one pass over the payload), then header + payload + padding in one writev
// through the page cache.
Status WritePlainBody(FileSystem& fs, int fd, const std::string& path, const ChunkId& id, GatherList payload,
                      const WriteOptions& options) {
  if (options.direct && DirectWritable(payload)) {
    Status s = WriteDirectBody(fs, fd, path, id, payload, options.io_uring);
    if (s.code() != Code::kInvalidArgument) return s;
    // Refused (EINVAL: a filesystem without O_DIRECT, or a block size above 4 KiB): start over
    // through the page cache, from the top of the file.
    if (lseek(fd, 0, SEEK_SET) != 0) return Status::FromErrno(errno, "lseek " + path);
  }
  const ChunkHeader header = PlainChunkHeader(id, payload);
  std::array<std::byte, kChunkHeaderSize> head;
  EncodeChunkHeader(header, head);
  std::vector<iovec> iov;
  iov.reserve(payload.size() + 2);
  iov.push_back({head.data(), head.size()});
  for (const auto& p : payload) {
    if (!p.empty()) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  const size_t pad = AlignUp(header.payload_bytes) - header.payload_bytes;
  if (pad > 0) iov.push_back({const_cast<std::byte*>(Zeros().data()), pad});
  return WriteAll(fs, fd, std::move(iov), path);
}

// The longest piece of a payload of `n` bytes: power-of-two pieces, or listed ones (grouped layouts),
// which may be longer.
uint64_t LargestPiece(const ChunkId& id, uint64_t n) {
  uint64_t largest = std::min<uint64_t>(n, PieceBytesFor(n));
  if (id.piece_lengths != nullptr) {
    for (uint64_t p : *id.piece_lengths) largest = std::max(largest, std::min(p, n));
  }
  return largest;
}

// Bytes of sealed pieces an encrypted write gathers in one window before writing its whole blocks (with
// O_DIRECT where it can), and the windows it fills in turn: up to three are written while the next is
// sealed into. Four windows of 2 MiB keep the 8 MiB a thread held before; against two of 4 MiB the
// device gets a chunk's first write sooner and more of it at once, which preallocated chunk files need
// (docs/qualification.md, "Preallocation and seal windows"). On a VM whose kernel zeroes fresh pages
// slowly, every MiB more per writing thread cost more than it gained (8 x 2 MiB and 4 x 8 MiB measured
// slower at 16 writing threads).
constexpr uint64_t kSealWindowBytes = 2ull << 20;
constexpr int kSealWindows = 4;
static_assert(kSealWindows <= AsyncWrites::kGroups);
constexpr uint64_t kKeptScratchBytes = kSealWindows * (kSealWindowBytes + kChunkAlign);

// An aligned buffer of at least `size` bytes that this thread keeps for its next encrypted write: a
// fresh allocation of this size is mapped by malloc and faulted in (the kernel zeroes every page) on
// each chunk, which cost more than sealing it. Buffers above kKeptScratchBytes are not kept.
class WriteScratch {
 public:
  explicit WriteScratch(uint64_t size) {
    thread_local AlignedBuffer kept;
    if (size > kKeptScratchBytes) {
      own_ = AlignedBuffer::Allocate(size);
      buf_ = &own_;
      return;
    }
    if (kept.size() < size) kept = AlignedBuffer::Allocate(kKeptScratchBytes);
    buf_ = &kept;
  }
  AlignedBuffer& get() { return *buf_; }

 private:
  AlignedBuffer own_;
  AlignedBuffer* buf_ = nullptr;
};

// Sealed pieces gathered in aligned windows whose whole 4 KiB blocks are written (with O_DIRECT where the
// file is open so) at their offsets, so every write starts on a block; the last one carries the zero padding, and the header
// block goes last, at offset 0. A full window's write is started (io/async_writes.h) and sealing goes on
// in the next window, whose own earlier write is waited for first.
class SealWindows {
 public:
  SealWindows(FileSystem& fs, int fd, const std::string& path, bool use_ring) : writes_(fs, fd, path, use_ring) {}

  // Windows of kSealWindowBytes or the largest piece plus a partial block, whichever is more (one window
  // when the payload fits in it; two to kSealWindows otherwise), and the header block.
  Status Allocate(uint64_t payload_bytes, uint64_t largest_piece) {
    const uint64_t window = std::max<uint64_t>(kSealWindowBytes, AlignUp(largest_piece) + kChunkAlign);
    const uint64_t size = std::max<uint64_t>(AlignUp(std::min(window, payload_bytes)), kChunkAlign);
    // Windows widened for large pieces are fewer (at least two), so the thread's kept scratch still
    // holds them where it can.
    const uint64_t kept_count = std::clamp<uint64_t>(kKeptScratchBytes / size, 2, kSealWindows);
    count_ = payload_bytes > size ? static_cast<int>(kept_count) : 1;
    scratch_.emplace(size * count_);
    head_ = AlignedBuffer::Allocate(kChunkHeaderSize);
    if (scratch_->get().data() == nullptr || head_.data() == nullptr) {
      return Status::IOError("out of memory for an encrypted write", true);
    }
    size_ = size;
    return Status::OK();
  }

  // True when the current window has room for `len` more bytes.
  bool Fits(uint64_t len) const { return filled_ + len <= size_; }
  // The next `len` bytes of the current window, where a piece is sealed. REQUIRES: Fits(len).
  std::span<std::byte> Place(uint64_t len) {
    const std::span<std::byte> at = std::span<std::byte>(Window(current_), size_).subspan(filled_, len);
    filled_ += len;
    return at;
  }

  // Starts writing the current window's whole blocks and moves to the next window once its earlier write
  // has landed, carrying the partial block's bytes to its start (pieces need not end on a block).
  // REQUIRES: every piece placed in the current window is sealed.
  Status NextWindow() {
    const uint64_t whole = filled_ / kChunkAlign * kChunkAlign;
    KVTIER_RETURN_IF_ERROR(writes_.Write(Window(current_), whole, offset_, current_));
    const int next = (current_ + 1) % count_;
    KVTIER_RETURN_IF_ERROR(writes_.WaitGroup(next));
    std::memmove(Window(next), Window(current_) + whole, filled_ - whole);
    offset_ += whole;
    filled_ -= whole;
    current_ = next;
    return Status::OK();
  }

  // Writes what the window holds, zero padded to a whole block (the end of the file), then the header
  // block at offset 0, and waits for every write of the chunk.
  Status Finish(const ChunkHeader& header) {
    if (filled_ > 0) {
      const uint64_t bytes = AlignUp(filled_);
      std::memset(Window(current_) + filled_, 0, bytes - filled_);
      (void)writes_.Write(Window(current_), bytes, offset_, current_);
    }
    EncodeChunkHeader(header, std::span<std::byte, kChunkHeaderSize>(head_.data(), kChunkHeaderSize));
    (void)writes_.Write(head_.data(), kChunkHeaderSize, 0);
    return writes_.WaitAll();
  }
  Status WaitAll() { return writes_.WaitAll(); }

 private:
  std::byte* Window(int i) { return scratch_->get().data() + static_cast<uint64_t>(i) * size_; }

  std::optional<WriteScratch> scratch_;
  AlignedBuffer head_;
  uint64_t size_ = 0;  // of one window
  int count_ = 1;
  int current_ = 0;
  uint64_t filled_ = 0;
  uint64_t offset_ = kChunkHeaderSize;  // where the current window's first byte goes
  AsyncWrites writes_;  // declared last: destroyed (every write waited for) before the buffers it reads
};

// A piece of the chunk and where in the current window it is sealed.
struct PlacedPiece {
  uint32_t index;
  std::span<std::byte> target;
};

// Seals the pieces placed in the current window, on more than one core where some are idle
// (io/seal_spread.h).
Status SealPlaced(ChunkSealer& sealer, GatherList payload, const std::vector<PlacedPiece>& placed) {
  return SealSpread(placed.size(),
                    [&](size_t k) { return sealer.Seal(placed[k].index, payload, placed[k].target); });
}

// Places the pieces in the windows in order; a window is sealed when the next piece does not fit, then
// its write starts while the next window fills.
Status SealIntoWindows(ChunkSealer& sealer, GatherList payload, SealWindows& windows) {
  std::vector<PlacedPiece> placed;
  for (uint32_t i = 0; i < sealer.pieces(); ++i) {
    const uint64_t len = sealer.PieceLength(i);
    if (!windows.Fits(len)) {
      KVTIER_RETURN_IF_ERROR(SealPlaced(sealer, payload, placed));
      placed.clear();
      KVTIER_RETURN_IF_ERROR(windows.NextWindow());
      if (!windows.Fits(len)) return Status::Internal("encrypted write: a piece larger than its window");
    }
    placed.push_back({i, windows.Place(len)});
  }
  return SealPlaced(sealer, payload, placed);
}

// An encrypted v2 chunk: pieces sealed into aligned windows, each written while the next is sealed,
// then the header (which carries the tags) at offset 0 from an aligned block. With `direct` the writes
// bypass the page cache (no copy of the ciphertext there); InvalidArgument when the filesystem refuses
// that (the caller then writes again without it). Every write has finished when this returns.
Status WriteEncryptedWindows(FileSystem& fs, int fd, const std::string& path, const ChunkId& id,
                             GatherList payload, const ChunkCipher& cipher, bool direct, bool use_ring) {
  if (direct && !SetDirect(fd, true)) return Status::InvalidArgument("O_DIRECT refused on " + path);
  Status s;
  {
    ChunkSealer sealer;
    SealWindows windows(fs, fd, path, use_ring);
    s = sealer.Start(id, TotalBytes(payload), cipher);
    if (s.ok()) s = windows.Allocate(TotalBytes(payload), LargestPiece(id, TotalBytes(payload)));
    if (s.ok()) s = SealIntoWindows(sealer, payload, windows);
    if (s.ok()) s = windows.Finish(sealer.header());
    const Status landed = windows.WaitAll();
    if (s.ok()) s = landed;
  }
  if (direct) (void)SetDirect(fd, false);
  return s;
}

// An encrypted v2 chunk, with O_DIRECT when options.direct and the filesystem allows it, otherwise
// through the page cache; in both, the windows' writes go through the thread's io_uring (unless
// options.io_uring is false), so the kernel copies or writes one window while the next is sealed.
Status WriteEncryptedBody(FileSystem& fs, int fd, const std::string& path, const ChunkId& id, GatherList payload,
                          const ChunkCipher& cipher, const WriteOptions& options) {
  if (options.direct) {
    Status s = WriteEncryptedWindows(fs, fd, path, id, payload, cipher, /*direct=*/true, options.io_uring);
    if (s.code() != Code::kInvalidArgument) return s;
    // Refused: every byte is written again at its offset through the page cache (same file size).
  }
  return WriteEncryptedWindows(fs, fd, path, id, payload, cipher, /*direct=*/false, options.io_uring);
}

// Takes the new file's `stored` bytes at once before the writes (one extent where free space allows, as
// fio lays out its files), not piece by piece as each write extends it, which left the header block,
// written last, apart from the payload. Without fallocate on this filesystem the writes allocate as
// they go; NoSpace fails the chunk before any byte is written.
Status TakeSpace(FileSystem& fs, int fd, uint64_t stored) {
  const Status s = fs.Preallocate(fd, stored);
  return s.code() == Code::kNotSupported ? Status::OK() : s;
}

}  // namespace

bool DirectWritable(GatherList payload) {
  const std::span<const std::byte>* last = nullptr;
  for (const auto& p : payload) {
    if (p.empty()) continue;
    if (last != nullptr && last->size() % kChunkAlign != 0) return false;
    if (reinterpret_cast<uintptr_t>(p.data()) % kChunkAlign != 0) return false;
    last = &p;
  }
  return true;
}

Result<uint64_t> WriteChunkBody(FileSystem& fs, int fd, const std::string& where, const ChunkId& id,
                                GatherList payload, const WriteOptions& options) {
  if (TotalBytes(payload) > kMaxChunkPayload) return Status::InvalidArgument("chunk payload over 4 GiB");
  const uint64_t stored = StoredChunkBytes(TotalBytes(payload));
  KVTIER_RETURN_IF_ERROR(TakeSpace(fs, fd, stored));
  KVTIER_RETURN_IF_ERROR(options.cipher != nullptr ? WriteEncryptedBody(fs, fd, where, id, payload, *options.cipher, options)
                                                   : WritePlainBody(fs, fd, where, id, payload, options));
  if (options.sync) KVTIER_RETURN_IF_ERROR(fs.SyncFile(fd));
  return stored;
}

}  // namespace kvtier::internal
