// Object names of chunks: <prefix>kvtier:<format version>:<namespace hex>:<chunk key hex>, e.g.
// "kvtier:2:9f..:3a..". The prefix is the URL's prefix= (empty by default; S3 and RADOS put their own
// before it). The version is the chunk format version this build writes (core/chunk_format.h), so a
// build writing another format never reads these objects as its own.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvtier/tier.h"

namespace kvtier::object {

// The part every chunk name of `prefix` starts with: "<prefix>kvtier:2:".
std::string ChunkNamePrefix(std::string_view prefix);
std::string ChunkObjectName(std::string_view prefix, const ChunkId& id);
// The chunk a name stands for (layout_fingerprint 0: names do not carry it); nullopt for any other name.
std::optional<ChunkId> ParseChunkObjectName(std::string_view prefix, std::string_view name);

}  // namespace kvtier::object
