// Parsing of tier URLs and sizes: outside input, so every malformed case is an InvalidArgument.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/uri_encode.h"
#include "kvtier/tier.h"

namespace kvtier {
namespace {

constexpr uint64_t kMaxDurationSeconds = 36525ull * 86400;  // 100 years

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> PercentDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) {
      return Status::InvalidArgument("truncated %-escape in URL");
    }
    const int hi = HexDigit(in[i + 1]), lo = HexDigit(in[i + 2]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("bad %-escape in URL");
    out.push_back(static_cast<char>(hi << 4 | lo));
    i += 2;
  }
  return out;
}

bool ValidScheme(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

Status ParseParams(std::string_view query, std::map<std::string, std::string>* params) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    KVTIER_ASSIGN_OR_RETURN(std::string name, PercentDecode(item.substr(0, eq)));
    std::string value;
    if (eq != std::string_view::npos) {
      KVTIER_ASSIGN_OR_RETURN(value, PercentDecode(item.substr(eq + 1)));
    }
    if (name.empty()) return Status::InvalidArgument("empty parameter name in URL");
    if (!params->emplace(name, value).second) {
      return Status::InvalidArgument("parameter '" + name + "' given twice in URL");
    }
  }
  return Status::OK();
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// *acc = *acc * mul + add; false on overflow (then *acc is unspecified).
bool MulAdd(uint64_t* acc, uint64_t mul, uint64_t add) {
  return !__builtin_mul_overflow(*acc, mul, acc) && !__builtin_add_overflow(*acc, add, acc);
}

Status TooLarge(const std::string& s) {
  return Status::InvalidArgument("size too large: '" + s + "' (the limit is 2^64 - 1 bytes)");
}

Status DurationTooLong(const std::string& s) {
  return Status::InvalidArgument("duration too long: '" + s + "' (the limit is 100 years, 36525d)");
}

// A whole decimal number without sign or spaces, checked against overflow.
Result<uint64_t> ParseDigits(const std::string& v) {
  if (v.empty()) return Status::InvalidArgument("");
  uint64_t out = 0;
  for (char c : v) {
    if (!IsDigit(c)) return Status::InvalidArgument("");
    if (!MulAdd(&out, 10, static_cast<uint64_t>(c - '0'))) {
      return Status::InvalidArgument("above 2^64 - 1");
    }
  }
  return out;
}

// Bytes per unit, exact; 0 for an unknown unit.
uint64_t UnitMultiplier(std::string unit) {
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1},          {"b", 1},           {"k", 1ull << 10},   {"kb", 1'000},
      {"kib", 1ull << 10}, {"m", 1ull << 20}, {"mb", 1'000'000},  {"mib", 1ull << 20},
      {"g", 1ull << 30}, {"gb", 1'000'000'000}, {"gib", 1ull << 30}, {"t", 1ull << 40},
      {"tb", 1'000'000'000'000}, {"tib", 1ull << 40}};
  for (const auto& [name, m] : kUnits) {
    if (unit == name) return m;
  }
  return 0;
}

// Tier paths are absolute or empty: a relative one would depend on the working directory and "~" is
// not expanded here (it would create a folder named "~").
// Schemes whose path is not a directory: a node list (redis://host:port,...), a pool or a bucket.
bool PathIsNodeList(const std::string& scheme) { return scheme == "redis" || scheme == "rados" || scheme == "s3" || scheme == "shm"; }

Status CheckAbsolute(const std::string& scheme, const std::string& path) {
  if (path.empty() || path[0] == '/' || PathIsNodeList(scheme)) return Status::OK();
  std::string hint;
  if (path == "~" || path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    hint = (home != nullptr && home[0] == '/' ? std::string(home) : std::string("$HOME")) + path.substr(1);
  } else {
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    hint = (ec || cwd.empty() ? std::string("/<cwd>") : cwd) + "/" + path;
  }
  return Status::InvalidArgument(scheme + ":// paths must be absolute: " + path + " (did you mean " +
                                 scheme + "://" + hint + "?)");
}

}  // namespace

Result<TierUrl> TierUrl::Parse(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return Status::InvalidArgument("not a tier URL (expected scheme://path?options): '" +
                                   std::string(url) + "'");
  }
  // A '#fragment', a space (a trailing one pasted from a shell or a config) or a control character
  // would otherwise become part of a path or a value and silently name another pool: refused; write
  // them percent-encoded (%23, %20) when they are meant.
  for (const char c : url) {
    if (c == '#' || static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument("tier URL '" + std::string(url) + "' holds " +
                                     (c == '#' ? std::string("a '#' (fragment)")
                                               : "whitespace or a control character") +
                                     "; percent-encode it if it is meant (e.g. %23, %20)");
    }
  }
  TierUrl out;
  out.scheme = std::string(url.substr(0, sep));
  if (!ValidScheme(out.scheme)) {
    return Status::InvalidArgument("bad scheme in URL '" + std::string(url) + "'");
  }
  std::string_view rest = url.substr(sep + 3);
  const size_t q = rest.find('?');
  KVTIER_ASSIGN_OR_RETURN(out.path, PercentDecode(rest.substr(0, q)));
  if (out.path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("NUL byte in URL path");
  }
  KVTIER_RETURN_IF_ERROR(CheckAbsolute(out.scheme, out.path));
  if (q != std::string_view::npos) KVTIER_RETURN_IF_ERROR(ParseParams(rest.substr(q + 1), &out.params));
  return out;
}

namespace {

// What Parse refuses raw ('#', whitespace, control characters) and '%' itself, percent-encoded, so
// that Parse(ToString()) gives the same URL back.
std::string EncodeRefused(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '#' || c == '%' || u <= 0x20 || u == 0x7f) {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string TierUrl::ToString() const {
  std::string s = scheme + "://" + EncodeRefused(path);
  char sep = '?';
  for (const auto& [k, v] : params) {
    s += sep;
    s += EncodeRefused(k) + "=" + EncodeRefused(v);
    sep = '&';
  }
  return s;
}

Result<uint64_t> TierUrl::GetSize(const std::string& name, uint64_t default_value,
                                  uint64_t max_value) const {
  auto it = params.find(name);
  if (it == params.end()) return default_value;
  auto r = ParseSize(it->second);
  if (!r.ok()) return Status::InvalidArgument("option " + name + ": " + r.status().message());
  if (*r > max_value) {
    return Status::InvalidArgument("option " + name + "=" + it->second + " is above its limit of " +
                                   FormatBytes(max_value));
  }
  return r;
}

Result<uint64_t> TierUrl::GetUint(const std::string& name, uint64_t default_value,
                                  uint64_t max_value) const {
  auto it = params.find(name);
  if (it == params.end()) return default_value;
  const std::string& v = it->second;
  auto n = ParseDigits(v);
  if (!n.ok()) {
    return Status::InvalidArgument("option " + name + " wants a whole number, got '" + v + "'" +
                                   (n.status().message().empty() ? "" : ": " + n.status().message()));
  }
  if (*n > max_value) {
    return Status::InvalidArgument("option " + name + "=" + v + " is above its limit of " +
                                   std::to_string(max_value));
  }
  return n;
}

Result<bool> TierUrl::GetBool(const std::string& name, bool default_value) const {
  auto it = params.find(name);
  if (it == params.end()) return default_value;
  const std::string& v = it->second;
  if (v == "1" || v == "true" || v == "on" || v == "yes" || v.empty()) return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  return Status::InvalidArgument("option " + name + " wants true or false, got '" + v + "'");
}

Status TierUrl::CheckKnown(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : params) {
    bool found = false;
    for (auto n : known) found = found || n == k;
    if (!found) {
      std::string list;
      for (auto n : known) list += (list.empty() ? "" : ", ") + std::string(n);
      return Status::InvalidArgument("unknown option '" + k + "' for " + scheme +
                                     ":// (known: " + list + ")");
    }
  }
  return Status::OK();
}

Result<uint64_t> ParseSize(std::string_view text) {
  const std::string s(text);
  size_t i = 0;
  uint64_t whole = 0;
  bool any_digit = false;
  for (; i < s.size() && IsDigit(s[i]); ++i, any_digit = true) {
    if (!MulAdd(&whole, 10, static_cast<uint64_t>(s[i] - '0'))) return TooLarge(s);
  }
  // The fraction, exact to 18 digits (later digits are below a byte for every unit and are dropped).
  uint64_t frac = 0, frac_scale = 1;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && IsDigit(s[i]); ++i, any_digit = true) {
      if (frac_scale < 1'000'000'000'000'000'000ull) {
        frac = frac * 10 + static_cast<uint64_t>(s[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (!any_digit) return Status::InvalidArgument("not a size: '" + s + "'");
  while (i < s.size() && s[i] == ' ') ++i;
  const uint64_t mult = UnitMultiplier(s.substr(i));
  if (mult == 0) return Status::InvalidArgument("unknown size unit in '" + s + "'");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(whole, mult, &bytes)) return TooLarge(s);
  // frac < 10^18 and mult <= 2^40: the product fits in 128 bits; round half up.
  __extension__ using U128 = unsigned __int128;
  const U128 part = (static_cast<U128>(frac) * mult + frac_scale / 2) / frac_scale;
  if (part > UINT64_MAX || __builtin_add_overflow(bytes, static_cast<uint64_t>(part), &bytes)) {
    return TooLarge(s);
  }
  return bytes;
}

Result<std::chrono::seconds> ParseDuration(std::string_view text) {
  const std::string s(text);
  size_t i = 0;
  uint64_t n = 0;
  for (; i < s.size() && IsDigit(s[i]); ++i) {
    if (!MulAdd(&n, 10, static_cast<uint64_t>(s[i] - '0'))) return DurationTooLong(s);
  }
  if (i == 0) return Status::InvalidArgument("not a duration: '" + s + "' (e.g. 600, 600s, 10m, 2h, 1d)");
  const std::string unit = s.substr(i);
  uint64_t unit_s = 0;
  if (unit.empty() || unit == "s") unit_s = 1;
  if (unit == "m") unit_s = 60;
  if (unit == "h") unit_s = 3600;
  if (unit == "d") unit_s = 86400;
  if (unit_s == 0) {
    return Status::InvalidArgument("unknown duration unit in '" + s + "' (use s, m, h or d)");
  }
  if (n > kMaxDurationSeconds / unit_s) return DurationTooLong(s);
  return std::chrono::seconds(static_cast<int64_t>(n * unit_s));
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[u]);
  return buf;
}

namespace internal {

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace internal
}  // namespace kvtier
