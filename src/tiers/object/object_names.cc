#include "tiers/object/object_names.h"

#include "core/chunk_format.h"

namespace kvtier::object {

std::string ChunkNamePrefix(std::string_view prefix) {
  return std::string(prefix) + "kvtier:" + std::to_string(internal::kChunkFormatVersion) + ":";
}

std::string ChunkObjectName(std::string_view prefix, const ChunkId& id) {
  return ChunkNamePrefix(prefix) + DigestHex(id.ns) + ":" + id.key.Hex();
}

std::optional<ChunkId> ParseChunkObjectName(std::string_view prefix, std::string_view name) {
  const std::string head = ChunkNamePrefix(prefix);
  if (name.size() != head.size() + 64 + 1 + 64 || name.substr(0, head.size()) != head) return std::nullopt;
  name.remove_prefix(head.size());
  if (name[64] != ':') return std::nullopt;
  auto ns = DigestFromHex(name.substr(0, 64));
  auto key = DigestFromHex(name.substr(65));
  if (!ns.ok() || !key.ok()) return std::nullopt;
  ChunkId id;
  id.ns = *ns;
  id.key.bytes = *key;
  if (ChunkObjectName(prefix, id) != head + std::string(name)) return std::nullopt;  // not canonical (case)
  return id;
}

}  // namespace kvtier::object
