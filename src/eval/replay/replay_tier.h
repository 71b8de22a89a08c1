// Tier URLs of a replay, and the scaling that lets a small replay behave like the real store.
//
// A replay stores each trace block as a chunk of `block_tokens x bytes_per_token` bytes (a few
// bytes per token instead of the model's hundreds of KiB), so the whole trace fits in memory. For
// the capacities to mean what they would mean at full size, every capacity is first turned into a
// number of blocks, then into the bytes that many scaled blocks occupy in that tier:
//   capacity=1000000tokens   -> floor(1000000 / block_tokens) blocks
//   capacity=500GiB          -> bytes of the chosen model -> tokens -> blocks
//   no capacity              -> unlimited (sized to hold every distinct block of the trace)
// The `tokens` suffix is the replay's own notation; the URL handed to the tier carries bytes.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/layout.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

struct ReplayScale {
  uint32_t block_tokens = 512;
  uint32_t bytes_per_token = 2;        // replay payload bytes per token; even (K and V), >= 2
  uint64_t model_bytes_per_token = 0;  // KV bytes per token of the model the figures are scaled to
  // A hybrid model's per-sequence state (its layout's `state` groups), stored with every block as
  // kvtier stores it with every chunk (docs/models.md "Hybrid state at chunk boundaries").
  uint64_t model_state_bytes_per_block = 0;

  uint64_t BlockBytes() const { return uint64_t{block_tokens} * bytes_per_token; }
  uint64_t ModelBlockBytes() const {
    return uint64_t{block_tokens} * model_bytes_per_token + model_state_bytes_per_block;
  }
  // The namespace layout of replayed chunks: one fp8 layer whose chunk is BlockBytes() long.
  Layout ReplayLayout() const;
  // InvalidArgument for a zero block size, an odd or zero bytes_per_token, or no model size.
  Status Validate() const;
};

struct ReplayTier {
  std::string url;  // as the user wrote it
  TierUrl parsed;   // capacity removed; the rest is passed to the tier
  bool unlimited = true;
  uint64_t capacity_blocks = 0;     // when !unlimited; at least 1
  uint64_t stored_block_bytes = 0;  // bytes one scaled block occupies in this tier

  // The URL to open: capacity in bytes for `capacity_blocks` (or `unlimited_blocks` when
  // unlimited), the path replaced by `path` when not empty.
  std::string OpenUrl(uint64_t unlimited_blocks, const std::string& path) const;
  // True for tiers that keep chunks in files: each run gets a fresh directory under the given path.
  bool UsesPath() const { return parsed.scheme == "file" || parsed.scheme == "fs"; }
};

// Parses "mem://?capacity=1000000tokens", "file:///nvme/x?capacity=2TiB", ... InvalidArgument for a
// malformed URL or capacity, or a capacity below one block.
Result<ReplayTier> ParseReplayTier(std::string_view url, const ReplayScale& scale);

// Parses a token count: "1000000", "1.5M", "250k", "2G" (decimal multipliers). InvalidArgument
// otherwise.
Result<uint64_t> ParseTokenCount(std::string_view text);

// A copy of `tier` with its capacity set to `capacity_tokens` (0: unlimited). InvalidArgument when
// the capacity is below one block.
Result<ReplayTier> WithCapacityTokens(const ReplayTier& tier, uint64_t capacity_tokens,
                                      const ReplayScale& scale);

}  // namespace kvtier::internal
