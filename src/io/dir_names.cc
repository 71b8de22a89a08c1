#include "io/dir_names.h"

#include "core/host_identity.h"

#include <signal.h>
#include <unistd.h>
#include "core/xxh3.h"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <limits>
#include <random>

namespace kvtier::internal {
namespace {

constexpr std::string_view kTempMarker = ".kvtmp.";
constexpr std::string_view kLegacyTempMarker = ".tmp.";

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool ParseDec(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool ParseHex16(std::string_view s, uint64_t* out) {
  if (!IsLowerHex(s, 16)) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

// Splits `s` into exactly `n` dot-separated fields.
bool SplitFields(std::string_view s, std::string_view* out, int n) {
  for (int i = 0; i < n - 1; ++i) {
    const size_t dot = s.find('.');
    if (dot == std::string_view::npos) return false;
    out[i] = s.substr(0, dot);
    s = s.substr(dot + 1);
  }
  out[n - 1] = s;
  return s.find('.') == std::string_view::npos;
}

}  // namespace

std::string_view FindKeyValue(std::string_view text, std::string_view name) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.size() > name.size() && line.starts_with(name) && line[name.size()] == '=') {
      return line.substr(name.size() + 1);
    }
  }
  return {};
}

bool ParseBoundedU64(std::string_view s, uint64_t max, uint64_t* out) {
  return ParseDec(s, out) && *out <= max;
}

bool IsLowerHex(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string ChunkFileName(const ChunkKey& key) { return key.Hex() + std::string(kChunkSuffix); }

std::optional<ChunkKey> ParseChunkFileName(std::string_view name) {
  if (name.size() != 64 + kChunkSuffix.size() || !name.ends_with(kChunkSuffix)) return std::nullopt;
  const std::string_view hex = name.substr(0, 64);
  if (!IsLowerHex(hex, 64)) return std::nullopt;
  auto d = DigestFromHex(hex);
  if (!d.ok()) return std::nullopt;
  ChunkKey key;
  key.bytes = *d;
  return key;
}

uint64_t LocalWriterId() {
  static const uint64_t id = [] {
    // boot_id changes at every boot, so pids of an earlier boot are never mistaken for live ones; the
    // pid namespace keeps containers sharing a kernel apart.
    const std::string who = BootId() + "|" + PidNamespace() + "|" + HostName();
    return XXH3_64bits(who.data(), who.size());
  }();
  return id;
}

std::string MakeTempName(std::string_view final_name) {
  static const uint64_t nonce = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  std::string out(final_name);
  out += kTempMarker;
  out += Hex16(LocalWriterId());
  out += '.';
  out += std::to_string(::getpid());
  out += '.';
  out += Hex16(nonce);
  out += '.';
  out += std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  return out;
}

std::optional<TempName> ParseTempName(std::string_view name,
                                      const std::function<bool(std::string_view)>& is_final) {
  for (const bool modern : {true, false}) {
    const std::string_view marker = modern ? kTempMarker : kLegacyTempMarker;
    const size_t at = name.find(marker);
    if (at == std::string_view::npos || at == 0) continue;
    // modern: writer.pid.nonce.counter; earlier builds: pid.nonce.counter (decimal)
    std::string_view f[4];
    if (!SplitFields(name.substr(at + marker.size()), f, modern ? 4 : 3)) continue;
    uint64_t writer = 0, pid = 0, nonce = 0, counter = 0;
    const bool ok = modern ? ParseHex16(f[0], &writer) && ParseDec(f[1], &pid) && ParseHex16(f[2], &nonce) &&
                                 ParseDec(f[3], &counter)
                           : ParseDec(f[0], &pid) && ParseDec(f[1], &nonce) && ParseDec(f[2], &counter);
    if (!ok || pid == 0 || pid > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) continue;
    TempName t;
    t.final_name = std::string(name.substr(0, at));
    if (!is_final(t.final_name)) continue;
    t.pid = static_cast<int64_t>(pid);
    if (modern) t.writer = writer;
    return t;
  }
  return std::nullopt;
}

bool IsStaleTemp(const TempName& temp, int64_t mtime_ns, int64_t now_ns, std::chrono::seconds grace) {
  if (temp.writer && *temp.writer == LocalWriterId() && temp.pid != ::getpid() &&
      ProcessIsGone(static_cast<pid_t>(temp.pid))) {
    return true;
  }
  if (now_ns <= mtime_ns) return false;
  const uint64_t idle_s = static_cast<uint64_t>(now_ns - mtime_ns) / 1'000'000'000ull;
  return grace.count() >= 0 && idle_s > static_cast<uint64_t>(grace.count());
}

}  // namespace kvtier::internal
