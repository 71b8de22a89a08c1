// Parsing of tier URLs and sizes: outside input, so every malformed case is an InvalidArgument.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "kvtier/tier.h"

namespace kvtier {
namespace {

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

}  // namespace

Result<TierUrl> TierUrl::Parse(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return Status::InvalidArgument("not a tier URL (expected scheme://path?options): '" +
                                   std::string(url) + "'");
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
  if (q != std::string_view::npos) KVTIER_RETURN_IF_ERROR(ParseParams(rest.substr(q + 1), &out.params));
  return out;
}

std::string TierUrl::ToString() const {
  std::string s = scheme + "://" + path;
  char sep = '?';
  for (const auto& [k, v] : params) {
    s += sep;
    s += k + "=" + v;
    sep = '&';
  }
  return s;
}

Result<uint64_t> TierUrl::GetSize(const std::string& name, uint64_t default_value) const {
  auto it = params.find(name);
  if (it == params.end()) return default_value;
  auto r = ParseSize(it->second);
  if (!r.ok()) return Status::InvalidArgument("option " + name + ": " + r.status().message());
  return r;
}

Result<uint64_t> TierUrl::GetUint(const std::string& name, uint64_t default_value) const {
  auto it = params.find(name);
  if (it == params.end()) return default_value;
  const std::string& v = it->second;
  uint64_t out = 0;
  if (v.empty() || v.size() > 19) return Status::InvalidArgument("option " + name + " wants a number");
  for (char c : v) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("option " + name + " wants a number, got '" + v + "'");
    }
    out = out * 10 + static_cast<uint64_t>(c - '0');
  }
  return out;
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
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return Status::InvalidArgument("not a size: '" + s + "'");
  const std::string number = s.substr(0, i);
  if (number.find('.') != number.rfind('.')) return Status::InvalidArgument("not a size: '" + s + "'");
  size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  std::string unit = s.substr(j);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},       {"b", 1.0},          {"k", 1024.0},       {"kb", 1e3},
      {"kib", 1024.0}, {"m", 1048576.0},    {"mb", 1e6},         {"mib", 1048576.0},
      {"g", 1073741824.0}, {"gb", 1e9},     {"gib", 1073741824.0}, {"t", 1099511627776.0},
      {"tb", 1e12},    {"tib", 1099511627776.0}};
  double mult = 0;
  for (const auto& [name, m] : kUnits) {
    if (unit == name) mult = m;
  }
  if (mult == 0) return Status::InvalidArgument("unknown size unit in '" + s + "'");
  const double value = std::strtod(number.c_str(), nullptr) * mult;
  if (!std::isfinite(value) || value >= 1.8e19) return Status::InvalidArgument("size too large: '" + s + "'");
  return static_cast<uint64_t>(std::round(value));  // value < 2^64 here; llround overflowed past 2^63
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

}  // namespace kvtier
