// The non-virtual parts of the Tier interface. They live in kvtier_core so every tier library (and the
// io layer under them) can use them without depending on the store above.
#include "kvtier/tier.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/chunk_format.h"

namespace kvtier {

size_t TotalBytes(ScatterList pieces) {
  size_t n = 0;
  for (const auto& p : pieces) n += p.size();
  return n;
}

size_t TotalBytes(GatherList pieces) {
  size_t n = 0;
  for (const auto& p : pieces) n += p.size();
  return n;
}

void Tier::GetMany(std::span<ReadOp> ops) {
  for (ReadOp& op : ops) op.status = Get(op.id, op.dst);
}

Status Tier::GetRanges(const ChunkId& id, uint64_t chunk_bytes, std::span<const ByteRange> ranges,
                       ScatterList dst) {
  KVTIER_RETURN_IF_ERROR(internal::CheckByteRanges(ranges, chunk_bytes, TotalBytes(dst)));
  std::vector<std::byte> whole(chunk_bytes);
  const std::span<std::byte> all(whole);
  Status s = Get(id, ScatterList(&all, 1));
  if (!s.ok()) {
    if (!s.IsNotFound()) {
      for (const auto& d : dst) std::fill(d.begin(), d.end(), std::byte{0});
    }
    return s;
  }
  std::vector<std::span<std::byte>> out;
  uint64_t at = 0;
  for (const ByteRange& r : ranges) {
    internal::SubList(dst, at, r.bytes, out);
    uint64_t from = r.offset;
    for (const auto& o : out) {
      std::memcpy(o.data(), whole.data() + from, o.size());
      from += o.size();
    }
    at += r.bytes;
  }
  return Status::OK();
}

void Tier::ContainsMany(std::span<const ChunkId> ids, std::span<bool> present) {
  for (size_t i = 0; i < ids.size() && i < present.size(); ++i) present[i] = Contains(ids[i]);
}

Result<BorrowedChunk> Tier::Borrow(const ChunkId&) {
  return Status::NotSupported(url() + " does not lend chunks in place");
}

Result<BorrowedChunk> Tier::Hold(const ChunkId&) {
  return Status::NotSupported(url() + " does not hold chunks in place");
}

std::vector<std::span<std::byte>> Tier::HostRegions() { return {}; }

Status Tier::DescribeNamespace(const Digest&, std::string_view) { return Status::OK(); }

Result<std::string> Tier::NamespaceDescription(const Digest& ns) {
  return Status::NotFound(url() + " keeps no namespace descriptions (namespace " + DigestHex(ns) + ")");
}

}  // namespace kvtier
