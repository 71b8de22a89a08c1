#include "eval/replay/replay_tier.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "core/chunk_format.h"

namespace kvtier::internal {
namespace {

constexpr std::string_view kTokensSuffix = "tokens";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Bytes one scaled block occupies in a tier of this URL: the memory tier rounds to its page; tiers
// that keep chunks in files add the chunk header and align to 4 KiB (core/chunk_format.h).
Result<uint64_t> StoredBlockBytes(const TierUrl& url, const ReplayScale& scale) {
  if (url.scheme == "mem") {
    KVTIER_ASSIGN_OR_RETURN(const uint64_t page, url.GetSize("page", scale.BlockBytes()));
    if (page == 0) return Status::InvalidArgument("mem:// page must be positive");
    return AlignUp(scale.BlockBytes(), page);
  }
  return StoredChunkBytes(scale.BlockBytes());
}

Status SetCapacityTokens(ReplayTier* tier, uint64_t tokens, const ReplayScale& scale) {
  if (tokens == 0) {
    tier->unlimited = true;
    tier->capacity_blocks = 0;
    return Status::OK();
  }
  const uint64_t blocks = tokens / scale.block_tokens;
  if (blocks == 0) {
    return Status::InvalidArgument("capacity of " + std::to_string(tokens) +
                                   " tokens is below one block of " +
                                   std::to_string(scale.block_tokens) + " tokens");
  }
  if (tier->stored_block_bytes != 0 && blocks > UINT64_MAX / tier->stored_block_bytes) {
    return Status::InvalidArgument("capacity of " + std::to_string(tokens) +
                                   " tokens is more bytes than 64 bits count");
  }
  tier->unlimited = false;
  tier->capacity_blocks = blocks;
  return Status::OK();
}

}  // namespace

Layout ReplayScale::ReplayLayout() const {
  return Layout{1, 1, bytes_per_token / 2, DType::kFP8, block_tokens};
}

Status ReplayScale::Validate() const {
  if (block_tokens == 0) return Status::InvalidArgument("block tokens must be positive");
  if (bytes_per_token < 2 || bytes_per_token % 2 != 0) {
    return Status::InvalidArgument("replay bytes per token must be even and at least 2");
  }
  if (model_bytes_per_token == 0) return Status::InvalidArgument("model bytes per token unknown");
  return ReplayLayout().Validate();
}

Result<uint64_t> ParseTokenCount(std::string_view text) {
  const std::string s(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) || ec != std::errc()) {
    return Status::InvalidArgument("not a token count: '" + s + "'");
  }
  const size_t used = static_cast<size_t>(end - s.data());
  const std::string_view unit = std::string_view(s).substr(used);
  double mult = 1;
  if (unit == "k" || unit == "K") {
    mult = 1e3;
  } else if (unit == "M") {
    mult = 1e6;
  } else if (unit == "G") {
    mult = 1e9;
  } else if (!unit.empty()) {
    return Status::InvalidArgument("not a token count: '" + s + "' (use e.g. 250000, 250k, 1.5M)");
  }
  const double tokens = std::floor(value * mult);
  if (!(tokens >= 0) || tokens > 1e18) return Status::InvalidArgument("token count out of range");
  return static_cast<uint64_t>(tokens);
}

Result<ReplayTier> ParseReplayTier(std::string_view url, const ReplayScale& scale) {
  KVTIER_RETURN_IF_ERROR(scale.Validate());
  ReplayTier tier;
  tier.url = std::string(url);
  KVTIER_ASSIGN_OR_RETURN(tier.parsed, TierUrl::Parse(url));
  if (tier.parsed.scheme == "mem" && !tier.parsed.params.count("page")) {
    // One block per page, so capacity counts whole blocks as the full-size tier would.
    tier.parsed.params["page"] = std::to_string(scale.BlockBytes());
  }
  KVTIER_ASSIGN_OR_RETURN(tier.stored_block_bytes, StoredBlockBytes(tier.parsed, scale));
  auto it = tier.parsed.params.find("capacity");
  if (it == tier.parsed.params.end()) return tier;
  const std::string cap = it->second;
  tier.parsed.params.erase(it);
  uint64_t tokens = 0;
  if (EndsWith(cap, kTokensSuffix)) {
    KVTIER_ASSIGN_OR_RETURN(tokens,
                            ParseTokenCount(cap.substr(0, cap.size() - kTokensSuffix.size())));
  } else {
    auto bytes = ParseSize(cap);
    if (!bytes.ok()) {
      return Status::InvalidArgument("capacity '" + cap + "' is neither a size nor <N>tokens");
    }
    tokens = *bytes / scale.ModelBlockBytes() * scale.block_tokens;  // model-sized blocks, as a real deployment has
  }
  if (tokens == 0) return Status::InvalidArgument("capacity '" + cap + "' is zero");
  KVTIER_RETURN_IF_ERROR(SetCapacityTokens(&tier, tokens, scale));
  return tier;
}

Result<ReplayTier> WithCapacityTokens(const ReplayTier& tier, uint64_t capacity_tokens,
                                      const ReplayScale& scale) {
  ReplayTier out = tier;
  KVTIER_RETURN_IF_ERROR(SetCapacityTokens(&out, capacity_tokens, scale));
  return out;
}

std::string ReplayTier::OpenUrl(uint64_t unlimited_blocks, const std::string& path) const {
  TierUrl u = parsed;
  const uint64_t blocks = unlimited ? std::max<uint64_t>(unlimited_blocks, 1) : capacity_blocks;
  u.params["capacity"] = std::to_string(blocks * stored_block_bytes);
  if (!path.empty()) u.path = path;
  return u.ToString();
}

}  // namespace kvtier::internal
