// MetricsTierLabel: a tier URL made safe to publish as a label.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "kvtier/metrics.h"

namespace kvtier {
namespace {

// `name` percent-decoded (a malformed escape is kept as it is) and in lower case.
std::string DecodedLower(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '%' && i + 2 < name.size() && std::isxdigit(static_cast<unsigned char>(name[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(name[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(name.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += name[i];
    }
  }
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool LooksSecret(std::string_view name) {
  const std::string lower = DecodedLower(name);
  static constexpr std::array<std::string_view, 7> kWords = {"key",  "secret", "pass", "token",
                                                             "cred", "auth",   "sig"};
  return std::any_of(kWords.begin(), kWords.end(),
                     [&](std::string_view w) { return lower.find(w) != std::string::npos; });
}

// `url` without "user:password@" between "scheme://" and the next '/'.
std::string WithoutUserInfo(std::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  const size_t host = scheme_end + 3;
  const size_t host_end = std::min(url.find_first_of("/?", host), url.size());
  const size_t at = url.substr(host, host_end - host).rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, host)) + std::string(url.substr(host + at + 1));
}

}  // namespace

std::string MetricsTierLabel(std::string_view url) {
  const std::string bare = WithoutUserInfo(url);
  const size_t q = bare.find('?');
  if (q == std::string::npos) return bare;
  std::string out = bare.substr(0, q), query = bare.substr(q + 1);
  char sep = '?';
  size_t start = 0;
  while (start <= query.size()) {
    const size_t end = std::min(query.find('&', start), query.size());
    const std::string_view param = std::string_view(query).substr(start, end - start);
    const std::string_view name = param.substr(0, param.find('='));
    if (!param.empty() && !LooksSecret(name)) {
      out += sep;
      out += param;
      sep = '&';
    }
    start = end + 1;
  }
  return out;
}

}  // namespace kvtier
