// The non-virtual parts of the Tier interface. They live in kvtier_core so every tier library (and the
// io layer under them) can use them without depending on the store above.
#include "kvtier/tier.h"

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

void Tier::ContainsMany(std::span<const ChunkId> ids, std::span<bool> present) {
  for (size_t i = 0; i < ids.size() && i < present.size(); ++i) present[i] = Contains(ids[i]);
}

Result<BorrowedChunk> Tier::Borrow(const ChunkId&) {
  return Status::NotSupported(url() + " does not lend chunks in place");
}

std::vector<std::span<std::byte>> Tier::HostRegions() { return {}; }

Status Tier::DescribeNamespace(const Digest&, std::string_view) { return Status::OK(); }

Result<std::string> Tier::NamespaceDescription(const Digest& ns) {
  return Status::NotFound(url() + " keeps no namespace descriptions (namespace " + DigestHex(ns) + ")");
}

}  // namespace kvtier
