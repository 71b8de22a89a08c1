// Conversion of the C API's chunk buffers (kvtier_buf pieces) and keys into the Store's spans.
#include <cstdint>
#include <cstring>
#include <string>

#include "capi/capi_internal.h"

namespace kvtier::capi {
namespace {

std::string At(const char* fn, size_t chunk) {
  return std::string(fn) + ": chunk " + std::to_string(chunk);
}

template <typename Byte>
Status Build(const char* fn, size_t n_chunks, const kvtier_buf* pieces, const size_t* pieces_per_chunk,
             uint64_t chunk_bytes, ChunkBuffers<Byte>& out) {
  if (n_chunks == 0) return Status::OK();
  if (pieces == nullptr) return NullArgument(fn, "pieces");
  // Count every piece first (overflow-checked), so that `pieces` is never read past its end.
  size_t total = 0;
  for (size_t c = 0; c < n_chunks; ++c) {
    const size_t n = pieces_per_chunk == nullptr ? 1 : pieces_per_chunk[c];
    if (__builtin_add_overflow(total, n, &total)) {
      return Status::InvalidArgument(std::string(fn) + ": pieces_per_chunk adds up past SIZE_MAX");
    }
  }
  out.pieces.reserve(total);
  out.chunks.reserve(n_chunks);
  size_t next = 0;
  for (size_t c = 0; c < n_chunks; ++c) {
    const size_t n = pieces_per_chunk == nullptr ? 1 : pieces_per_chunk[c];
    uint64_t bytes = 0;
    for (size_t p = next; p < next + n; ++p) {
      if (pieces[p].data == nullptr && pieces[p].size > 0) {
        return Status::InvalidArgument(At(fn, c) + ": a piece has NULL data and size " +
                                       std::to_string(pieces[p].size));
      }
      if (__builtin_add_overflow(bytes, uint64_t{pieces[p].size}, &bytes)) {
        return Status::InvalidArgument(At(fn, c) + ": piece sizes add up past 2^64");
      }
      out.pieces.emplace_back(static_cast<Byte*>(pieces[p].data), pieces[p].size);
    }
    if (bytes != chunk_bytes) {
      return Status::InvalidArgument(At(fn, c) + ": buffers hold " + std::to_string(bytes) +
                                     " bytes, a chunk is " + std::to_string(chunk_bytes));
    }
    out.chunks.emplace_back(out.pieces.data() + next, n);
    next += n;
  }
  return Status::OK();
}

}  // namespace

Status BuildBuffers(const char* fn, size_t n_chunks, const kvtier_buf* pieces,
                    const size_t* pieces_per_chunk, uint64_t chunk_bytes, ChunkBuffers<std::byte>& out) {
  return Build(fn, n_chunks, pieces, pieces_per_chunk, chunk_bytes, out);
}

Status BuildBuffers(const char* fn, size_t n_chunks, const kvtier_buf* pieces,
                    const size_t* pieces_per_chunk, uint64_t chunk_bytes,
                    ChunkBuffers<const std::byte>& out) {
  return Build(fn, n_chunks, pieces, pieces_per_chunk, chunk_bytes, out);
}

Result<std::vector<ChunkKey>> CopyKeys(const char* fn, const kvtier_key* keys, size_t n) {
  if (keys == nullptr && n > 0) return NullArgument(fn, "keys");
  if (n > SIZE_MAX / sizeof(kvtier_key)) {
    return Status::InvalidArgument(std::string(fn) + ": n_keys " + std::to_string(n) + " is too large");
  }
  std::vector<ChunkKey> out(n);
  for (size_t i = 0; i < n; ++i) std::memcpy(out[i].bytes.data(), keys[i].bytes, KVTIER_KEY_BYTES);
  return out;
}

}  // namespace kvtier::capi
