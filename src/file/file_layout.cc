#include "file/file_layout.h"

namespace kvtier::internal {

std::string ChunkFilePath(const std::string& dir, const Digest& ns, const ChunkKey& key) {
  const std::string key_hex = key.Hex();
  std::string path = dir;
  if (path.empty() || path.back() != '/') path += '/';
  path += DigestHex(ns);
  path += '/';
  path += std::string_view(key_hex).substr(0, 2);
  path += '/';
  path += key_hex;
  path += kChunkSuffix;
  return path;
}

bool IsTempName(std::string_view file_name) { return file_name.find(".tmp.") != std::string_view::npos; }

std::optional<ChunkId> ParseChunkPath(std::string_view ns_dir, std::string_view fan_dir,
                                      std::string_view file_name) {
  if (!file_name.ends_with(kChunkSuffix)) return std::nullopt;
  const std::string_view key_hex = file_name.substr(0, file_name.size() - kChunkSuffix.size());
  auto ns = DigestFromHex(ns_dir);
  auto key = DigestFromHex(key_hex);
  if (!ns.ok() || !key.ok() || fan_dir != key_hex.substr(0, 2)) return std::nullopt;
  // Only names we write (lower case) count, so two spellings never name one chunk.
  if (DigestHex(*ns) != ns_dir || DigestHex(*key) != key_hex) return std::nullopt;
  ChunkId id;
  id.ns = *ns;
  id.key.bytes = *key;
  return id;
}

}  // namespace kvtier::internal
