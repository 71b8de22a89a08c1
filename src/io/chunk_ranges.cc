// Ranged reads of a chunk file: only the pieces that hold the requested bytes are read and verified
// (a tensor-parallel rank's heads, docs/models.md).
#include <algorithm>
#include <vector>

#include "io/chunk_io.h"
#include "io/fd.h"
#include "io/read_common.h"

namespace kvtier::internal {

Result<uint64_t> ReadChunkRanges(FileSystem& fs, const std::string& path, const ChunkId& expected,
                                 uint64_t payload_bytes, const ChunkCipher* cipher,
                                 std::span<const ByteRange> ranges, ScatterList dst) {
  KVTIER_RETURN_IF_ERROR(CheckByteRanges(ranges, payload_bytes, TotalBytes(dst)));
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.OpenForRead(path, /*direct=*/false));
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, ReadCheckedFileHeader(fs, fd.get(), path, expected));
  if (header.payload_bytes != payload_bytes) {
    return Status::InvalidArgument("chunk " + path + " holds " + std::to_string(header.payload_bytes) +
                                   " bytes, not the " + std::to_string(payload_bytes) + " asked for");
  }
  KVTIER_ASSIGN_OR_RETURN(auto verifier, PayloadVerifier::Make(header, cipher));
  uint64_t read = kChunkHeaderSize;
  std::vector<std::byte> buf;
  uint32_t held = UINT32_MAX;  // the piece in `buf`, verified
  uint64_t out_at = 0;         // where the current range goes in `dst`
  std::vector<std::span<std::byte>> out;
  for (const ByteRange& r : ranges) {
    for (uint32_t i = header.PieceAt(r.offset); i < header.pieces(); ++i) {
      const uint64_t start = header.PieceOffset(i), len = header.PieceLength(i);
      if (start >= r.offset + r.bytes) break;
      if (i != held) {
        buf.resize(len);
        KVTIER_ASSIGN_OR_RETURN(uint64_t n, PreadAt(fs, fd.get(), buf.data(), len, kChunkHeaderSize + start, path));
        if (n < len) return Status::Corruption("chunk truncated while being read: " + path);
        const std::span<const std::byte> in{buf.data(), len};
        const std::span<std::byte> inout{buf.data(), len};
        KVTIER_RETURN_IF_ERROR(verifier->PieceBytes(i, GatherList(&in, 1), ScatterList(&inout, 1), true));
        read += len;
        held = i;
      }
      const uint64_t from = std::max(start, r.offset), to = std::min(start + len, r.offset + r.bytes);
      SubList(dst, out_at + (from - r.offset), to - from, out);
      uint64_t at = from - start;
      for (const auto& s : out) {
        std::copy_n(buf.data() + at, s.size(), s.data());
        at += s.size();
      }
    }
    out_at += r.bytes;
  }
  return read;
}

}  // namespace kvtier::internal
