// The names kvtier gives files in its directories, and the parsers that recognise them. kvtier removes
// or renames only names that parse here in full; every other name belongs to someone else.
//
//   chunk       <64 lower-case hex>.kvc
//   temporary   <final name>.kvtmp.<writer 16 hex>.<pid>.<nonce 16 hex>.<counter>
//               (and, from earlier builds, <final name>.tmp.<pid>.<decimal nonce>.<counter>)
// where <final name> is itself a kvtier name (a chunk, or one of the tier's own small files), and
// <writer> identifies the host boot and pid namespace of the writing process, so a scan can tell a
// dead local writer's leftover from a live remote writer's file.
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr std::string_view kChunkSuffix = ".kvc";

std::string ChunkFileName(const ChunkKey& key);
std::optional<ChunkKey> ParseChunkFileName(std::string_view name);
// Exactly `len` lower-case hex characters.
bool IsLowerHex(std::string_view s, size_t len);

struct TempName {
  std::string final_name;
  std::optional<uint64_t> writer;  // absent for temporaries of earlier builds
  int64_t pid = 0;
};

// A fresh temporary name for `final_name`, unique across processes and hosts.
std::string MakeTempName(std::string_view final_name);
// The parts of a temporary name whose final name satisfies `is_final`; nullopt for anything else.
std::optional<TempName> ParseTempName(std::string_view name,
                                      const std::function<bool(std::string_view)>& is_final);

// Small "name=value" texts (markers, USAGE): the value of the first line `name=...`, or an empty view.
std::string_view FindKeyValue(std::string_view text, std::string_view name);
// A decimal number of at most 20 digits, <= max, without overflow.
bool ParseBoundedU64(std::string_view s, uint64_t max, uint64_t* out);

// This process's writer id (host boot and pid namespace).
uint64_t LocalWriterId();

// Whether a temporary is left over by a writer that is gone: written by this host and pid namespace
// and its pid is not running, or not modified for longer than `grace`. Arithmetic saturates: any
// grace, however large, only ever keeps files longer.
bool IsStaleTemp(const TempName& temp, int64_t mtime_ns, int64_t now_ns, std::chrono::seconds grace);

}  // namespace kvtier::internal
