#include "io/read_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace kvtier::internal {
namespace {

Result<Fd> OpenFile(const std::string& path, bool direct) {
  const int flags = O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  return Fd(fd);
}

}  // namespace

Result<OpenedChunk> OpenChunk(const std::string& path, uint64_t payload_bytes, bool direct) {
  OpenedChunk c;
  auto fd = OpenFile(path, direct);
  if (!fd.ok() && direct && fd.status().code() == Code::kInvalidArgument) {
    fd = OpenFile(path, false);  // EINVAL: this filesystem refuses O_DIRECT
    direct = false;
  }
  if (!fd.ok()) return fd.status();
  c.fd = std::move(fd).value();
  c.direct = direct;
  struct stat st {};
  if (::fstat(c.fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  c.file_size = static_cast<uint64_t>(st.st_size);
  if (c.file_size < kChunkHeaderSize) {
    return Status::Corruption("chunk truncated: " + path + " holds " + std::to_string(c.file_size) +
                              " bytes, less than a header");
  }
  c.read_len = std::min(AlignUp(c.file_size), StoredChunkBytes(payload_bytes));
  return c;
}

Status ReopenBuffered(const std::string& path, OpenedChunk* chunk) {
  KVTIER_ASSIGN_OR_RETURN(chunk->fd, OpenFile(path, false));
  chunk->direct = false;
  return Status::OK();
}

Result<uint64_t> PreadAll(int fd, std::byte* buf, uint64_t len, const std::string& path) {
  return PreadAt(fd, buf, len, 0, path);
}

Result<uint64_t> PreadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < len) {
    iovec iov{buf + done, len - done};
    const ssize_t n = ::preadv(fd, &iov, 1, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + path);
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return done;
}

namespace {

// Decodes the header and checks it against the requested chunk, the file's size, the destination's size
// and the bytes actually read.
Result<ChunkHeader> CheckReadHeader(std::span<const std::byte> header_bytes, uint64_t file_size,
                                    uint64_t valid_bytes, const ChunkId& expected, uint64_t want) {
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, DecodeChunkHeader(header_bytes));
  KVTIER_RETURN_IF_ERROR(CheckChunkHeader(header, expected, file_size));
  if (header.payload_bytes != want) {
    return Status::InvalidArgument("destination holds " + std::to_string(want) +
                                   " bytes but the stored chunk has " +
                                   std::to_string(header.payload_bytes));
  }
  if (valid_bytes < kChunkHeaderSize + want) return Status::Corruption("chunk truncated while being read");
  return header;
}

}  // namespace

Status VerifyAndScatter(std::span<const std::byte> image, uint64_t file_size, const ChunkId& expected,
                        ScatterList dst) {
  const uint64_t want = TotalBytes(dst);
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header,
                          CheckReadHeader(image, file_size, image.size(), expected, want));
  const std::span<const std::byte> payload = image.subspan(kChunkHeaderSize, want);
  KVTIER_RETURN_IF_ERROR(CheckPayload(header, payload));
  size_t at = 0;
  for (const auto& piece : dst) {
    if (!piece.empty()) std::memcpy(piece.data(), payload.data() + at, piece.size());
    at += piece.size();
  }
  return Status::OK();
}

namespace {

Status ReadSyncVerified(ChunkRead& read, bool direct, ByteBudget& budget, BufferPool& buffers) {
  KVTIER_ASSIGN_OR_RETURN(OpenedChunk chunk, OpenChunk(read.path, TotalBytes(read.dst), direct));
  read.stored_bytes = chunk.file_size;
  budget.Acquire(chunk.read_len);
  AlignedBuffer buf = buffers.Get(chunk.read_len);
  Status s;
  if (buf.data() == nullptr) {
    s = Status::IOError("out of memory for a " + std::to_string(chunk.read_len) + " byte read", true);
  } else {
    auto got = PreadAll(chunk.fd.get(), buf.data(), chunk.read_len, read.path);
    if (!got.ok() && chunk.direct && got.status().code() == Code::kInvalidArgument) {
      s = ReopenBuffered(read.path, &chunk);  // O_DIRECT accepted at open, refused at read
      if (s.ok()) got = PreadAll(chunk.fd.get(), buf.data(), chunk.read_len, read.path);
    }
    if (s.ok()) s = got.status();
    if (s.ok()) {
      const uint64_t valid = std::min(*got, chunk.file_size);
      s = VerifyAndScatter({buf.data(), valid}, chunk.file_size, read.expected, read.dst);
    }
  }
  buffers.Put(std::move(buf));
  budget.Release(chunk.read_len);
  return s;
}

}  // namespace

void ReadChunkSync(ChunkRead& read, bool direct, ByteBudget& budget, BufferPool& buffers) {
  read.stored_bytes = 0;
  read.status = ReadSyncVerified(read, direct, budget, buffers);
}

Status VerifyInPlace(std::span<const std::byte> header_bytes, uint64_t file_size, uint64_t valid_bytes,
                     const ChunkId& expected, ScatterList dst) {
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, CheckReadHeader(header_bytes, file_size, valid_bytes,
                                                              expected, TotalBytes(dst)));
  std::vector<std::span<const std::byte>> pieces(dst.begin(), dst.end());
  if (PayloadChecksum(GatherList(pieces)) != header.payload_checksum) {
    return Status::Corruption("chunk payload checksum mismatch");
  }
  return Status::OK();
}

AlignedBuffer BufferPool::Get(uint64_t size) {
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      // Reuse only a close fit, so one huge buffer does not serve (and pin) every small read.
      if (free_[i].size() >= size && free_[i].size() <= 2 * size) {
        AlignedBuffer b = std::move(free_[i]);
        free_[i] = std::move(free_.back());
        free_.pop_back();
        cached_ -= b.size();
        return b;
      }
    }
  }
  return AlignedBuffer::Allocate(size);
}

void BufferPool::Put(AlignedBuffer buffer) {
  if (buffer.data() == nullptr) return;
  MutexLock lock(mu_);
  if (cached_ + buffer.size() > max_cached_) return;  // freed on return
  cached_ += buffer.size();
  free_.push_back(std::move(buffer));
}

}  // namespace kvtier::internal
