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
#include <filesystem>
#include <random>
#include <string>
#include <vector>

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

}  // namespace

Result<uint64_t> WriteChunkBody(FileSystem& fs, int fd, const std::string& where, const ChunkId& id,
                                GatherList payload, const WriteOptions& options) {
  if (TotalBytes(payload) > (4ull << 30)) return Status::InvalidArgument("chunk payload over 4 GiB");
  ChunkHeader header;
  header.id = id;
  header.payload_bytes = TotalBytes(payload);
  header.payload_checksum = PayloadChecksum(payload);
  std::array<std::byte, kChunkHeaderSize> head;
  EncodeChunkHeader(header, head);
  static const std::array<std::byte, kChunkAlign> kZeros{};
  std::vector<iovec> iov;
  iov.reserve(payload.size() + 2);
  iov.push_back({head.data(), head.size()});
  for (const auto& piece : payload) {
    if (!piece.empty()) iov.push_back({const_cast<std::byte*>(piece.data()), piece.size()});
  }
  const size_t pad = AlignUp(header.payload_bytes) - header.payload_bytes;
  if (pad > 0) iov.push_back({const_cast<std::byte*>(kZeros.data()), pad});
  KVTIER_RETURN_IF_ERROR(WriteAll(fs, fd, std::move(iov), where));
  if (options.sync) KVTIER_RETURN_IF_ERROR(fs.SyncFile(fd));
  return StoredChunkBytes(header.payload_bytes);
}

}  // namespace kvtier::internal
