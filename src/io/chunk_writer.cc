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

#include "io/chunk_encode.h"
#include "io/chunk_io.h"
#include "io/fd.h"

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

// Writes `len` bytes at `offset`, resuming after short writes.
Status PwriteAll(FileSystem& fs, int fd, const std::byte* data, size_t len, uint64_t offset, const std::string& path) {
  for (size_t done = 0; done < len;) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, fs.WriteAt(fd, data + done, len - done, offset + done));
    if (n == 0) return Status::IOError("write " + path + " made no progress");
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

const std::array<std::byte, kChunkAlign>& Zeros() {
  static const std::array<std::byte, kChunkAlign> kZeros{};
  return kZeros;
}

// True when O_DIRECT can write `payload` in place: every piece starts on a block boundary and every
// piece but the last spans whole blocks (empty pieces are skipped).
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

// Sets or clears O_DIRECT on `fd`; false when the kernel or filesystem refuses it.
bool SetDirect(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  return fcntl(fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) == 0;
}

// A plain v2 chunk written with O_DIRECT straight from the caller's pages: header and the payload's
// last partial block (zero padded) go through one aligned 8 KiB buffer, everything else is written
// where it lies. REQUIRES: DirectWritable(payload), `fd` at offset 0. InvalidArgument when the
// filesystem refuses the direct write (the caller then writes through the page cache).
Status WriteDirectBody(FileSystem& fs, int fd, const std::string& path, const ChunkHeader& header, GatherList payload) {
  AlignedBuffer edge = AlignedBuffer::Allocate(kChunkHeaderSize + kChunkAlign);
  if (edge.data() == nullptr) return Status::InvalidArgument("no aligned buffer for a direct write");
  std::memset(edge.data(), 0, edge.size());
  EncodeChunkHeader(header, std::span<std::byte, kChunkHeaderSize>(edge.data(), kChunkHeaderSize));
  std::byte* tail = edge.data() + kChunkHeaderSize;
  std::vector<iovec> iov;
  iov.reserve(payload.size() + 2);
  iov.push_back({edge.data(), kChunkHeaderSize});
  size_t tail_bytes = 0;
  for (const auto& p : payload) {
    if (p.empty()) continue;
    const size_t whole = p.size() / kChunkAlign * kChunkAlign;  // only the last piece has a remainder
    if (whole > 0) iov.push_back({const_cast<std::byte*>(p.data()), whole});
    if (whole < p.size()) {
      tail_bytes = p.size() - whole;
      std::memcpy(tail, p.data() + whole, tail_bytes);
    }
  }
  if (tail_bytes > 0) iov.push_back({tail, kChunkAlign});
  if (!SetDirect(fd, true)) return Status::InvalidArgument("O_DIRECT refused on " + path);
  Status s = WriteAll(fs, fd, std::move(iov), path);
  (void)SetDirect(fd, false);
  return s;
}

// A plain v2 chunk: per-piece xxh3-64 sums (the one pass over the payload), then header + payload +
// padding in one writev, with O_DIRECT from the caller's pages when `direct` and they allow.
Status WritePlainBody(FileSystem& fs, int fd, const std::string& path, const ChunkId& id, GatherList payload,
                      bool direct) {
  const ChunkHeader header = PlainChunkHeader(id, payload);
  if (direct && DirectWritable(payload)) {
    Status s = WriteDirectBody(fs, fd, path, header, payload);
    if (s.code() != Code::kInvalidArgument) return s;
    // Refused (EINVAL: a filesystem without O_DIRECT, or a block size above 4 KiB): start over
    // through the page cache, from the top of the file.
    if (lseek(fd, 0, SEEK_SET) != 0) return Status::FromErrno(errno, "lseek " + path);
  }
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

// Bytes of sealed pieces an encrypted direct write gathers before writing its whole blocks with O_DIRECT.
constexpr uint64_t kSealWindowBytes = 8ull << 20;

// An aligned buffer of at least `size` bytes that this thread keeps for its next encrypted write: a
// fresh allocation of this size is mapped by malloc and faulted in (the kernel zeroes every page) on
// each chunk, which cost more than sealing it. Buffers above a window and a block are not kept.
class WriteScratch {
 public:
  explicit WriteScratch(uint64_t size) {
    thread_local AlignedBuffer kept;
    if (size > kSealWindowBytes + kChunkAlign) {
      own_ = AlignedBuffer::Allocate(size);
      buf_ = &own_;
      return;
    }
    if (kept.size() < size) kept = AlignedBuffer::Allocate(kSealWindowBytes + kChunkAlign);
    buf_ = &kept;
  }
  AlignedBuffer& get() { return *buf_; }

 private:
  AlignedBuffer own_;
  AlignedBuffer* buf_ = nullptr;
};

// Sealed pieces gathered in an aligned window whose whole 4 KiB blocks are written with O_DIRECT at their
// offsets, so every write starts on a block; the last one carries the zero padding.
class SealWindow {
 public:
  SealWindow(FileSystem& fs, int fd, const std::string& path) : fs_(fs), fd_(fd), path_(path) {}

  // Room for kSealWindowBytes or the largest piece plus a partial block, whichever is more (never more
  // than the payload needs).
  Status Allocate(uint64_t payload_bytes, uint64_t largest_piece) {
    const uint64_t window = std::max<uint64_t>(kSealWindowBytes, AlignUp(largest_piece) + kChunkAlign);
    const uint64_t size = std::max<uint64_t>(AlignUp(std::min(window, payload_bytes)), kChunkAlign);
    scratch_.emplace(size);
    if (scratch_->get().data() == nullptr) return Status::IOError("out of memory for an encrypted write", true);
    size_ = size;
    return Status::OK();
  }

  // Where piece `len` bytes long is sealed: when the window cannot hold it, its whole blocks are written
  // out first and the partial block's bytes moved to its start (pieces need not end on a block).
  Result<std::span<std::byte>> Target(uint64_t len) {
    if (filled_ + len > size_) {
      const uint64_t whole = filled_ / kChunkAlign * kChunkAlign;
      KVTIER_RETURN_IF_ERROR(PwriteAll(fs_, fd_, BufData(), whole, offset_, path_));
      std::memmove(BufData(), BufData() + whole, filled_ - whole);
      offset_ += whole;
      filled_ -= whole;
    }
    if (filled_ + len > size_) return Status::Internal("encrypted write: a piece larger than its window");
    return BufSpan().subspan(filled_, len);
  }
  void Sealed(uint64_t len) { filled_ += len; }

  // Writes what the window holds, zero padded to a whole block, at its offset in the file (the end).
  Status Drain() {
    if (filled_ == 0) return Status::OK();
    const uint64_t bytes = AlignUp(filled_);
    std::memset(BufData() + filled_, 0, bytes - filled_);
    KVTIER_RETURN_IF_ERROR(PwriteAll(fs_, fd_, BufData(), bytes, offset_, path_));
    offset_ += filled_;
    filled_ = 0;
    return Status::OK();
  }

 private:
  FileSystem& fs_;
  const int fd_;
  const std::string& path_;
  std::byte* BufData() { return scratch_->get().data(); }
  std::span<std::byte> BufSpan() { return std::span<std::byte>(BufData(), size_); }
  std::optional<WriteScratch> scratch_;
  uint64_t size_ = 0;
  uint64_t filled_ = 0;
  uint64_t offset_ = kChunkHeaderSize;
};

// An encrypted v2 chunk written with O_DIRECT: pieces sealed into an aligned window that is written
// whenever it is full (no page-cache copy of the ciphertext), then the header (which carries the tags)
// at offset 0 from an aligned block. InvalidArgument when the filesystem refuses the direct write (the
// caller then writes through the page cache).
Status WriteEncryptedDirect(FileSystem& fs, int fd, const std::string& path, const ChunkId& id, GatherList payload,
                            const ChunkCipher& cipher) {
  SealWindow window(fs, fd, path);
  KVTIER_RETURN_IF_ERROR(window.Allocate(TotalBytes(payload), LargestPiece(id, TotalBytes(payload))));
  AlignedBuffer head = AlignedBuffer::Allocate(kChunkHeaderSize);
  if (head.data() == nullptr) return Status::IOError("out of memory for an encrypted write", true);
  if (!SetDirect(fd, true)) return Status::InvalidArgument("O_DIRECT refused on " + path);
  Status failed;  // a window that could not be written while sealing
  auto target = [&](uint32_t, uint64_t len) -> std::span<std::byte> {
    Result<std::span<std::byte>> t = failed.ok() ? window.Target(len) : Result<std::span<std::byte>>(failed);
    if (t.ok()) return *t;
    failed = t.status();
    return {};
  };
  auto sealed = [&](uint32_t, std::span<const std::byte> piece) {
    KVTIER_RETURN_IF_ERROR(failed);
    window.Sealed(piece.size());
    return Status::OK();
  };
  Result<ChunkHeader> header = SealChunk(id, payload, cipher, target, sealed);
  Status s = !failed.ok() ? failed : header.status();
  if (s.ok()) s = window.Drain();
  if (s.ok()) {
    EncodeChunkHeader(*header, std::span<std::byte, kChunkHeaderSize>(head.data(), kChunkHeaderSize));
    s = PwriteAll(fs, fd, head.data(), kChunkHeaderSize, 0, path);
  }
  (void)SetDirect(fd, false);
  return s;
}

// An encrypted v2 chunk through the page cache: each piece sealed into a piece-sized buffer and written
// at its offset, then the padding, then the header (which carries the tags) at offset 0.
Status WriteEncryptedBuffered(FileSystem& fs, int fd, const std::string& path, const ChunkId& id,
                              GatherList payload, const ChunkCipher& cipher) {
  WriteScratch scratch(std::max<uint64_t>(LargestPiece(id, TotalBytes(payload)), kChunkAlign));
  AlignedBuffer& buf = scratch.get();
  if (buf.data() == nullptr) return Status::IOError("out of memory for an encrypted write", true);
  auto target = [&buf](uint32_t, uint64_t len) { return buf.span().first(len); };
  uint64_t offset = kChunkHeaderSize;
  auto write = [&](uint32_t, std::span<const std::byte> sealed) {
    KVTIER_RETURN_IF_ERROR(PwriteAll(fs, fd, sealed.data(), sealed.size(), offset, path));
    offset += sealed.size();
    return Status::OK();
  };
  KVTIER_ASSIGN_OR_RETURN(const ChunkHeader header, SealChunk(id, payload, cipher, target, write));
  const size_t pad = AlignUp(header.payload_bytes) - header.payload_bytes;
  KVTIER_RETURN_IF_ERROR(PwriteAll(fs, fd, Zeros().data(), pad, kChunkHeaderSize + header.payload_bytes, path));
  std::array<std::byte, kChunkHeaderSize> head;
  EncodeChunkHeader(header, head);
  return PwriteAll(fs, fd, head.data(), head.size(), 0, path);
}

// An encrypted v2 chunk, with O_DIRECT when `direct` and the filesystem allows it.
Status WriteEncryptedBody(FileSystem& fs, int fd, const std::string& path, const ChunkId& id, GatherList payload,
                          const ChunkCipher& cipher, bool direct) {
  if (direct) {
    Status s = WriteEncryptedDirect(fs, fd, path, id, payload, cipher);
    if (s.code() != Code::kInvalidArgument) return s;
    // Refused: every byte is written again at its offset through the page cache (same file size).
  }
  return WriteEncryptedBuffered(fs, fd, path, id, payload, cipher);
}

}  // namespace

Result<uint64_t> WriteChunkBody(FileSystem& fs, int fd, const std::string& where, const ChunkId& id,
                                GatherList payload, const WriteOptions& options) {
  if (TotalBytes(payload) > kMaxChunkPayload) return Status::InvalidArgument("chunk payload over 4 GiB");
  KVTIER_RETURN_IF_ERROR(options.cipher != nullptr ? WriteEncryptedBody(fs, fd, where, id, payload, *options.cipher, options.direct)
                                                   : WritePlainBody(fs, fd, where, id, payload, options.direct));
  if (options.sync) KVTIER_RETURN_IF_ERROR(fs.SyncFile(fd));
  return StoredChunkBytes(TotalBytes(payload));
}

}  // namespace kvtier::internal
