// Scrubbing a chunk file: header checks, then the payload streamed through xxHash3 in bounded pieces,
// so verifying a large cache needs little memory.
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "io/chunk_io.h"
#include "io/fd.h"
#include "io/read_common.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kScrubPiece = 4ull << 20;

}  // namespace

Result<ChunkHeader> VerifyChunkFile(FileSystem& fs, const std::string& path, const ChunkId& expected) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.OpenForRead(path, /*direct=*/false));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  std::vector<std::byte> buf(kChunkHeaderSize);
  KVTIER_ASSIGN_OR_RETURN(uint64_t got, PreadAll(fs, fd.get(), buf.data(), kChunkHeaderSize, path));
  if (got < kChunkHeaderSize) return Status::Corruption("chunk truncated: " + path + " has no full header");
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, DecodeChunkHeader(buf));
  KVTIER_RETURN_IF_ERROR(CheckChunkHeader(header, expected, file_size));
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  buf.resize(std::min(kScrubPiece, std::max<uint64_t>(header.payload_bytes, 1)));
  for (uint64_t off = 0; off < header.payload_bytes;) {
    const uint64_t want = std::min<uint64_t>(buf.size(), header.payload_bytes - off);
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, PreadAt(fs, fd.get(), buf.data(), want, kChunkHeaderSize + off, path));
    if (n < want) return Status::Corruption("chunk truncated while being verified: " + path);
    XXH3_64bits_update(&state, buf.data(), n);
    off += n;
  }
  if (XXH3_64bits_digest(&state) != header.payload_checksum) {
    return Status::Corruption("chunk payload checksum mismatch: " + path);
  }
  return header;
}

Result<ChunkHeader> ReadChunkHeader(FileSystem& fs, const std::string& path, const ChunkId& expected) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.OpenForRead(path, /*direct=*/false));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  std::vector<std::byte> buf(kChunkHeaderSize);
  KVTIER_ASSIGN_OR_RETURN(uint64_t got, PreadAll(fs, fd.get(), buf.data(), kChunkHeaderSize, path));
  if (got < kChunkHeaderSize) return Status::Corruption("chunk truncated: " + path + " has no full header");
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, DecodeChunkHeader(buf));
  KVTIER_RETURN_IF_ERROR(CheckChunkHeader(header, expected, static_cast<uint64_t>(st.st_size)));
  return header;
}

}  // namespace kvtier::internal
