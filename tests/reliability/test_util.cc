#include "reliability/test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kvtier::reltest {

namespace fs = std::filesystem;

Layout SmallLayout() {
  Layout l;
  l.layers = 2;
  l.kv_heads = 1;
  l.head_dim = 16;
  l.dtype = DType::kFP16;
  l.tokens_per_chunk = 16;
  return l;
}

Namespace MakeNamespace(std::string_view tenant, const Layout& layout, std::string_view model) {
  return Namespace::Make(model, layout, tenant).value();
}

std::vector<uint32_t> Tokens(size_t n, uint32_t seed) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i * 2654435761u + seed);
  return t;
}

std::vector<ChunkKey> Keys(const Namespace& ns, size_t chunks, uint32_t seed) {
  return ComputeChunkKeys(ns, Tokens(chunks * ns.layout().tokens_per_chunk, seed));
}

std::vector<std::byte> PayloadFor(const ChunkId& id, size_t bytes) {
  std::vector<std::byte> p(bytes);
  uint64_t x = 0;
  std::memcpy(&x, id.key.bytes.data(), 8);
  uint64_t y = 0;
  std::memcpy(&y, id.ns.data(), 8);
  x ^= y * 0x9E3779B97F4A7C15ull ^ id.layout_fingerprint;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;  // xorshift64: cheap, and every chunk gets its own stream
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<std::byte>(x);
  }
  return p;
}

std::vector<std::byte> PayloadFor(const Namespace& ns, const ChunkKey& key) {
  return PayloadFor(ChunkId::Of(ns, key), ns.layout().BytesPerChunk());
}

Status PutExpected(Tier& tier, const Namespace& ns, const ChunkKey& key) {
  const std::vector<std::byte> p = PayloadFor(ns, key);
  const std::span<const std::byte> piece(p);
  return tier.Put(ChunkId::Of(ns, key), GatherList(&piece, 1));
}

Status GetAndVerify(Tier& tier, const Namespace& ns, const ChunkKey& key) {
  std::vector<std::byte> got(ns.layout().BytesPerChunk());
  const std::span<std::byte> piece(got);
  KVTIER_RETURN_IF_ERROR(tier.Get(ChunkId::Of(ns, key), ScatterList(&piece, 1)));
  if (got != PayloadFor(ns, key)) return Status::Internal("tier returned wrong bytes for " + key.Hex());
  return Status::OK();
}

LoadBuffers::LoadBuffers(size_t n, size_t bytes) : data(n, std::vector<std::byte>(bytes)) {
  for (auto& d : data) pieces.emplace_back(d);
  for (auto& p : pieces) dsts.emplace_back(&p, 1);
}

size_t LoadBuffers::CountExact(const Namespace& ns, std::span<const ChunkKey> keys, size_t n) const {
  size_t exact = 0;
  for (size_t i = 0; i < n && i < data.size(); ++i) exact += data[i] == PayloadFor(ns, keys[i]);
  return exact;
}

SaveSources::SaveSources(const Namespace& ns, std::span<const ChunkKey> keys) {
  for (const ChunkKey& k : keys) data.push_back(PayloadFor(ns, k));
  for (auto& d : data) pieces.emplace_back(d);
  for (auto& p : pieces) srcs.emplace_back(&p, 1);
}

size_t Scaled(size_t n, size_t min) {
  double scale = 1.0;
  if (const char* s = std::getenv("KVTIER_TEST_SCALE")) scale = std::strtod(s, nullptr);
  if (!(scale > 0)) scale = 1.0;
  const auto v = static_cast<size_t>(static_cast<double>(n) * scale);
  return v < min ? min : v;
}

bool UnderSanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

uint64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  in >> size_pages >> resident_pages;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string FileNameOf(const std::string& path) { return fs::path(path).filename().string(); }

bool IsTempName(const std::string& name) {
  // kvtier's temporaries (io/dir_names.h), and those of earlier builds.
  return name.find(".kvtmp.") != std::string::npos || name.find(".tmp.") != std::string::npos;
}

bool IsChunkName(const std::string& name) {
  return !IsTempName(name) && name.size() > 4 && name.compare(name.size() - 4, 4, ".kvc") == 0;
}

std::vector<std::string> FilesUnder(const std::string& dir,
                                    const std::function<bool(const std::string& name)>& pred) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && pred(it->path().filename().string())) out.push_back(it->path());
  }
  return out;
}

uint64_t BytesUnder(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const std::string& f : FilesUnder(dir, [](const std::string&) { return true; })) {
    const auto n = fs::file_size(f, ec);
    if (!ec) total += n;
  }
  return total;
}

}  // namespace kvtier::reltest
