// Atomic publication of one chunk file: write a temporary beside the final name, then rename.
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/chunk_io.h"
#include "io/fd.h"

namespace kvtier::internal {
namespace {

Status EnsureParentDir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return Status::OK();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return Status::FromErrno(ec.value(), "mkdir " + parent.string());
  return Status::OK();
}

// Writes every iovec, resuming after short writes. `iov` is consumed.
Status WriteAll(int fd, std::vector<iovec> iov, const std::string& path) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = ::writev(fd, iov.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + path);
    }
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

Status SyncDir(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  Fd fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open directory " + dir);
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync directory " + dir);
  return Status::OK();
}

// Writes `len` bytes at `offset`, resuming after short writes.
Status PwriteAll(int fd, const std::byte* data, size_t len, uint64_t offset, const std::string& path) {
  for (size_t done = 0; done < len;) {
    const ssize_t n = ::pwrite(fd, data + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + path);
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

const std::array<std::byte, kChunkAlign>& Zeros() {
  static const std::array<std::byte, kChunkAlign> kZeros{};
  return kZeros;
}

// A plain v2 chunk: per-piece xxh3-64 sums, then header + payload + padding in one writev.
Status WritePlainBody(int fd, const std::string& path, const ChunkId& id, GatherList payload) {
  ChunkHeader header = NewChunkHeader(id, TotalBytes(payload), /*encrypted=*/false);
  std::vector<std::span<const std::byte>> piece;
  for (uint32_t i = 0; i < header.piece_count; ++i) {
    SubList(payload, header.PieceOffset(i), header.PieceLength(i), piece);
    header.piece_sums[i] = PayloadChecksum(GatherList(piece));
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
  return WriteAll(fd, std::move(iov), path);
}

// An encrypted v2 chunk: each piece sealed into a piece-sized buffer and written at its offset, then
// the padding, then the header (which carries the tags) at offset 0.
Status WriteEncryptedBody(int fd, const std::string& path, const ChunkId& id, GatherList payload,
                          const ChunkCipher& cipher) {
  ChunkHeader header = NewChunkHeader(id, TotalBytes(payload), /*encrypted=*/true);
  KVTIER_ASSIGN_OR_RETURN(header.nonce_base, ChunkCipher::RandomNonceBase());
  NamespaceKey key;
  KVTIER_RETURN_IF_ERROR(cipher.DeriveKey(id.ns, &key));
  AlignedBuffer buf = AlignedBuffer::Allocate(std::max<uint64_t>(header.PieceLength(0), kChunkAlign));
  if (buf.data() == nullptr) return Status::IOError("out of memory for an encrypted write", true);
  std::vector<std::span<const std::byte>> piece;
  for (uint32_t i = 0; i < header.piece_count; ++i) {
    const uint64_t len = header.PieceLength(i);
    SubList(payload, header.PieceOffset(i), len, piece);
    KVTIER_RETURN_IF_ERROR(SealPiece(&header, key, i, piece, {buf.data(), len}));
    KVTIER_RETURN_IF_ERROR(PwriteAll(fd, buf.data(), len, kChunkHeaderSize + header.PieceOffset(i), path));
  }
  const size_t pad = AlignUp(header.payload_bytes) - header.payload_bytes;
  KVTIER_RETURN_IF_ERROR(PwriteAll(fd, Zeros().data(), pad, kChunkHeaderSize + header.payload_bytes, path));
  std::array<std::byte, kChunkHeaderSize> head;
  EncodeChunkHeader(header, head);
  return PwriteAll(fd, head.data(), head.size(), 0, path);
}

Status WriteTemp(const std::string& tmp_path, const ChunkId& id, GatherList payload,
                 const WriteOptions& options) {
  Fd fd(::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno(errno, "create " + tmp_path);
  KVTIER_RETURN_IF_ERROR(options.cipher != nullptr
                             ? WriteEncryptedBody(fd.get(), tmp_path, id, payload, *options.cipher)
                             : WritePlainBody(fd.get(), tmp_path, id, payload));
  if (options.sync && ::fdatasync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + tmp_path);
  if (fd.Close() != 0) return Status::FromErrno(errno, "close " + tmp_path);
  return Status::OK();
}

}  // namespace

std::string TempPathFor(const std::string& final_path) {
  // pid alone repeats between hosts sharing a pool: a random per-process nonce keeps names unique.
  static const uint64_t nonce = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  return final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(nonce) + "." +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

Result<uint64_t> WriteChunkFileAtomic(const std::string& final_path, const std::string& tmp_path,
                                      const ChunkId& id, GatherList payload,
                                      const WriteOptions& options) {
  if (TotalBytes(payload) > kMaxChunkPayload) return Status::InvalidArgument("chunk payload over 4 GiB");
  KVTIER_RETURN_IF_ERROR(EnsureParentDir(final_path));
  KVTIER_RETURN_IF_ERROR(EnsureParentDir(tmp_path));
  Status s = WriteTemp(tmp_path, id, payload, options);
  if (s.ok() && ::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    s = Status::FromErrno(errno, "rename " + tmp_path + " to " + final_path);
  }
  if (!s.ok()) {
    ::unlink(tmp_path.c_str());
    return s;
  }
  if (options.sync) KVTIER_RETURN_IF_ERROR(SyncDir(final_path));
  return StoredChunkBytes(TotalBytes(payload));
}

}  // namespace kvtier::internal
