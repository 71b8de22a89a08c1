// Where file:// keeps each chunk: <dir>/<namespace hex>/<key hex[0:2]>/<key hex>.kvc. The two-character
// fan-out keeps directories small; the namespace level lets `kvtier inspect` count per namespace and
// lets an operator delete one model's cache with one `rm -r`. Pure functions, thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr std::string_view kChunkSuffix = ".kvc";

std::string ChunkFilePath(const std::string& dir, const Digest& ns, const ChunkKey& key);

// True for names made by TempPathFor (writes that never finished, or probes).
bool IsTempName(std::string_view file_name);

// The chunk named by <ns dir name>/<fan-out dir name>/<file name>; nullopt when the names are not ours
// or disagree with each other.
std::optional<ChunkId> ParseChunkPath(std::string_view ns_dir, std::string_view fan_dir,
                                      std::string_view file_name);

}  // namespace kvtier::internal
