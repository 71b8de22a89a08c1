// Fuzz target: tier URLs and sizes, which come from users' command lines and configuration files.
// Properties: no crash; malformed input is InvalidArgument, never anything else; a parsed URL has a
// valid scheme and no NUL in its path; sizes agree with exact integer arithmetic where both apply.
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "kvtier/tier.h"

namespace kvtier::fuzz {
namespace {

void CheckSize(std::string_view text) {
  auto r = ParseSize(text);
  if (!r.ok()) {
    KVTIER_FUZZ_CHECK(r.status().code() == Code::kInvalidArgument);
    return;
  }
  // Plain decimal byte counts of up to 15 digits are exact in a double, so must come back exactly.
  bool digits = !text.empty() && text.size() <= 15;
  for (char c : text) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (digits) KVTIER_FUZZ_CHECK(*r == std::stoull(std::string(text)));
  // Any accepted size is at least as large as its number part (no unit shrinks a value, no overflow
  // wraps around).
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const double number = std::strtod(std::string(text.substr(0, i)).c_str(), nullptr);
  // Both sides are rounded to a double (the parse itself is exact): allow a few ulps of rounding.
  KVTIER_FUZZ_CHECK(static_cast<double>(*r) + 1.0 >= number * (1.0 - 4 * std::numeric_limits<double>::epsilon()));
}

void CheckUrl(std::string_view text) {
  auto r = TierUrl::Parse(text);
  if (!r.ok()) {
    KVTIER_FUZZ_CHECK(r.status().code() == Code::kInvalidArgument);
    return;
  }
  const TierUrl& url = *r;
  KVTIER_FUZZ_CHECK(!url.scheme.empty());
  KVTIER_FUZZ_CHECK(url.path.find('\0') == std::string::npos);
  for (const auto& [name, value] : url.params) {
    KVTIER_FUZZ_CHECK(!name.empty());
    auto s = url.GetSize(name, 0);
    KVTIER_FUZZ_CHECK(s.ok() || s.status().code() == Code::kInvalidArgument);
    auto u = url.GetUint(name, 0);
    KVTIER_FUZZ_CHECK(u.ok() || u.status().code() == Code::kInvalidArgument);
    auto b = url.GetBool(name, false);
    KVTIER_FUZZ_CHECK(b.ok() || b.status().code() == Code::kInvalidArgument);
  }
  const Status known = url.CheckKnown({"capacity", "sync", "direct"});
  KVTIER_FUZZ_CHECK(known.ok() || known.code() == Code::kInvalidArgument);
  KVTIER_FUZZ_CHECK(url.ToString().rfind(url.scheme + "://", 0) == 0);
}

}  // namespace

int FuzzTierUrl(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckUrl(text);
  CheckSize(text);
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzTierUrl)
