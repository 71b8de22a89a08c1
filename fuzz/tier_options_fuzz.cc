// Fuzz target: the options of every persistent tier, as users write them in URLs and configuration
// (file://, fs://). Properties: no crash; a bad option is InvalidArgument, never another error; the
// accepted values are sane.
#include <cstdint>
#include <string_view>

#include "tiers/file/file_tier.h"
#include "tiers/fs/fs_tier.h"
#include "fuzz_check.h"

namespace kvtier::fuzz {

int FuzzTierOptions(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto url = TierUrl::Parse(text);
  if (!url.ok()) return 0;
  auto file = internal::ParseFileTierUrl(*url);
  if (file.ok()) {
    KVTIER_FUZZ_CHECK(file->reader.max_inflight_bytes > 0 || url->params.count("inflight") != 0);
  } else {
    KVTIER_FUZZ_CHECK(file.status().code() == Code::kInvalidArgument);
  }
  auto fs = internal::ParseFsTierOptions(*url);
  if (!fs.ok()) KVTIER_FUZZ_CHECK(fs.status().code() == Code::kInvalidArgument);
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzTierOptions)
