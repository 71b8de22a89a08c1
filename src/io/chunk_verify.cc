// Scrubbing a chunk file: header checks, then the payload streamed through xxHash3 in bounded pieces,
// so verifying a large cache needs little memory.
#include <fcntl.h>
#include <sys/stat.h>
#include "core/xxh3.h"

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

Result<ChunkHeader> ReadCheckedFileHeader(FileSystem& fs, int fd, const std::string& path, const ChunkId& expected) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat " + path);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  std::vector<std::byte> buf(kChunkHeaderSize);
  KVTIER_ASSIGN_OR_RETURN(uint64_t got, PreadAll(fs, fd, buf.data(), kChunkHeaderSize, path));
  if (got < kChunkHeaderSize) return Status::Corruption("chunk truncated: " + path + " has no full header");
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, DecodeChunkHeader(buf));
  KVTIER_RETURN_IF_ERROR(CheckChunkHeader(header, expected, file_size));
  if (file_size != StoredChunkBytes(header.payload_bytes)) {
    return Status::Corruption("chunk file " + path + " has the wrong size for its payload");
  }
  return header;
}

Result<ChunkHeader> VerifyChunkFile(FileSystem& fs, const std::string& path, const ChunkId& expected,
                                    const ChunkCipher* cipher) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.OpenForRead(path, /*direct=*/false));
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, ReadCheckedFileHeader(fs, fd.get(), path, expected));
  KVTIER_ASSIGN_OR_RETURN(auto verifier, PayloadVerifier::Make(header, cipher));
  // v2: one piece at a time (at most 32 MiB, for the largest payloads); v1: streamed in kScrubPiece steps.
  const bool v1 = header.version == kChunkFormatV1;
  std::vector<std::byte> buf;
  buf.resize(std::min<uint64_t>(v1 ? kScrubPiece : header.PieceLength(0), std::max<uint64_t>(header.payload_bytes, 1)));
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (uint32_t i = 0; i < (v1 ? 0u : verifier->pieces()); ++i) {
    const uint64_t len = header.PieceLength(i);
    if (buf.size() < len) buf.resize(len);  // listed pieces differ in size
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, PreadAt(fs, fd.get(), buf.data(), len, kChunkHeaderSize + header.PieceOffset(i), path));
    if (n < len) return Status::Corruption("chunk truncated while being verified: " + path);
    const std::span<const std::byte> in{buf.data(), len};
    const std::span<std::byte> out{buf.data(), len};
    KVTIER_RETURN_IF_ERROR(verifier->PieceBytes(i, GatherList(&in, 1), ScatterList(&out, 1), true));
  }
  for (uint64_t off = 0; v1 && off < header.payload_bytes;) {
    const uint64_t want = std::min<uint64_t>(buf.size(), header.payload_bytes - off);
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, PreadAt(fs, fd.get(), buf.data(), want, kChunkHeaderSize + off, path));
    if (n < want) return Status::Corruption("chunk truncated while being verified: " + path);
    XXH3_64bits_update(&state, buf.data(), n);
    off += n;
  }
  if (v1 && XXH3_64bits_digest(&state) != header.payload_checksum) {
    return Status::Corruption("chunk payload checksum mismatch: " + path);
  }
  return header;
}

Result<ChunkHeader> ReadChunkHeader(FileSystem& fs, const std::string& path, const ChunkId& expected) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.OpenForRead(path, /*direct=*/false));
  return ReadCheckedFileHeader(fs, fd.get(), path, expected);
}

}  // namespace kvtier::internal
