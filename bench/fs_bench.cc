// fs_bench: the shared pool (fs://) next to references measured in the same run. Workloads:
//   lookup_hit_512       Store::Lookup of 512 keys, all present, on a pool of --pool-chunks chunks,
//                        repeated as an engine's scheduler repeats it (the tier remembers hits for
//                        pos_ttl_ms: after the first run, no syscall); reference: the same Lookup on
//                        file:// (in-memory index)
//   lookup_hit_512_cold  the same Lookup on a freshly opened store each run: nothing remembered, one
//                        stat per key (the kernel's directory cache is warm)
//   miss_512_cold_neg    Contains of 512 absent keys, negative cache cold (one stat per key)
//   miss_512_warm_neg    the same keys again within the negative cache's ttl (no syscalls)
//   load_cold_fs         Store::Load of --load-chunks model-sized chunks (llama-3.1-8b: 32 MiB each,
//                        one 1 MiB piece per layer) from fs://, page cache dropped for the files first
//   load_cold_file       the same from file:// on the same disk: the reference
// Usage: fs_bench [--dir DIR] [--pool-chunks N] [--load-chunks N] [--repeat N] [--json FILE]
// Without --dir the run uses a fresh directory under $TMPDIR (or /tmp) and removes it afterwards; put
// --dir on the filesystem to measure (e.g. the shared mount). --json writes the figures as JSON.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace kvtier::bench {
namespace {

struct Args {
  std::string dir;
  size_t pool_chunks = 100000;
  size_t load_chunks = 16;
  int repeat = 5;
  std::string json;
};

struct Figure {
  std::string name;
  double seconds = 0;  // median over repeats
  double bytes = 0;    // per run, for bandwidth figures
  size_t items = 0;    // keys per run, for per-key figures
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename Fn>
double Median(int repeat, Fn&& fn) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) t.push_back(fn());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<ChunkKey> Keys(const Namespace& ns, size_t n, uint32_t seed) {
  std::vector<uint32_t> tokens(n * ns.layout().tokens_per_chunk);
  std::iota(tokens.begin(), tokens.end(), seed);
  return ComputeChunkKeys(ns, tokens);
}

std::unique_ptr<Store> OpenStore(const std::string& url) {
  StoreOptions o;
  o.tiers = {url};
  o.promote_on_load = false;
  auto s = Store::Open(o);
  if (!s.ok()) std::fprintf(stderr, "open %s: %s\n", url.c_str(), s.status().ToString().c_str());
  return s.ok() ? std::move(s).value() : nullptr;
}

// Puts chunks straight into the store's only tier (no background queue to wait for).
bool Fill(Store& store, const Namespace& ns, const std::vector<ChunkKey>& keys, std::span<const std::byte> payload) {
  const std::span<const std::byte> pieces[] = {payload};
  for (const ChunkKey& k : keys) {
    const Status s = store.tier(0).Put(ChunkId::Of(ns, k), pieces);
    if (!s.ok()) {
      std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
      return false;
    }
  }
  return true;
}

// Drops the page cache of every file under `dir` (cold reads without root or a global drop).
void DropCache(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void LookupFigures(const Args& a, std::vector<Figure>* out) {
  const Layout small{1, 1, 64, DType::kBF16, 16};  // 4 KiB payload: the pool's size is in chunk count
  const Namespace ns = *Namespace::Make("bench/pool-model", small, "bench");
  const auto keys = Keys(ns, a.pool_chunks, 1);
  const std::vector<ChunkKey> probe(keys.begin(), keys.begin() + std::min<size_t>(512, keys.size()));
  const auto absent = Keys(ns, 512, 0x40000000);
  std::vector<std::byte> payload(small.BytesPerChunk(), std::byte{1});
  auto fs = OpenStore("fs://" + a.dir + "/pool-lookup?neg_ttl_ms=60000");
  auto file = OpenStore("file://" + a.dir + "/file-lookup?capacity=2GiB");
  if (!fs || !file) return;
  const double t0 = Now();
  if (!Fill(*fs, ns, keys, payload) || !Fill(*file, ns, probe, payload)) return;
  std::printf("filled pool with %zu chunks in %.1f s\n", keys.size(), Now() - t0);
  auto timed = [](auto&& fn) { const double s = Now(); fn(); return Now() - s; };
  size_t found = 0;
  out->push_back({"lookup_hit_512", Median(a.repeat, [&] { return timed([&] { found = fs->Lookup(ns, probe); }); }), 0, probe.size()});
  out->push_back({"lookup_hit_512_cold", Median(a.repeat, [&] {
                    auto fresh = OpenStore("fs://" + a.dir + "/pool-lookup?neg_ttl_ms=60000");
                    if (!fresh) return 0.0;
                    return timed([&] { found = fresh->Lookup(ns, probe); });
                  }), 0, probe.size()});
  out->push_back({"lookup_hit_512_file_ref", Median(a.repeat, [&] { return timed([&] { (void)file->Lookup(ns, probe); }); }), 0, probe.size()});
  if (found != probe.size()) std::fprintf(stderr, "warning: lookup found %zu of %zu\n", found, probe.size());
  // Cold: a fresh tier each run, so nothing is remembered; warm: the same tier again.
  out->push_back({"miss_512_cold_neg", Median(a.repeat, [&] {
                    auto t = OpenTier("fs://" + a.dir + "/pool-lookup?neg_ttl_ms=60000");
                    return timed([&] { for (const auto& k : absent) (void)(*t)->Contains(ChunkId::Of(ns, k)); });
                  }), 0, absent.size()});
  auto warm = OpenTier("fs://" + a.dir + "/pool-lookup?neg_ttl_ms=60000");
  for (const auto& k : absent) (void)(*warm)->Contains(ChunkId::Of(ns, k));
  out->push_back({"miss_512_warm_neg", Median(a.repeat, [&] {
                    return timed([&] { for (const auto& k : absent) (void)(*warm)->Contains(ChunkId::Of(ns, k)); });
                  }), 0, absent.size()});
}

void LoadFigures(const Args& a, std::vector<Figure>* out) {
  const Layout model{32, 8, 128, DType::kBF16, 256};  // llama-3.1-8b: 32 MiB per chunk
  const Namespace ns = *Namespace::Make("meta-llama/Llama-3.1-8B", model, "bench");
  const auto keys = Keys(ns, a.load_chunks, 7);
  const size_t chunk = model.BytesPerChunk(), piece = chunk / model.layers;
  std::vector<std::byte> src(chunk, std::byte{5}), dst(chunk * keys.size());
  std::vector<std::span<std::byte>> pieces;
  for (size_t c = 0; c < keys.size(); ++c) {
    for (size_t l = 0; l < model.layers; ++l) pieces.emplace_back(dst.data() + c * chunk + l * piece, piece);
  }
  std::vector<ScatterList> dsts;
  for (size_t c = 0; c < keys.size(); ++c) dsts.emplace_back(pieces.data() + c * model.layers, model.layers);
  for (const std::string name : {"fs", "file"}) {
    const std::string dir = a.dir + "/load-" + name;
    auto store = OpenStore(name == "fs" ? "fs://" + dir : "file://" + dir + "?capacity=64GiB");
    if (!store || !Fill(*store, ns, keys, src)) return;
    const std::string engine_note = store->tier(0).capabilities().direct_io ? " (O_DIRECT)" : "";
    size_t loaded = 0;
    const double t = Median(a.repeat, [&] {
      DropCache(dir);
      const double s = Now();
      auto r = store->Load(ns, keys, dsts);
      loaded = r.ok() ? *r : 0;
      return Now() - s;
    });
    if (loaded != keys.size()) std::fprintf(stderr, "warning: %s loaded %zu of %zu\n", name.c_str(), loaded, keys.size());
    out->push_back({"load_cold_" + name + engine_note, t, static_cast<double>(chunk * keys.size()), keys.size()});
  }
}

void Print(const std::vector<Figure>& figs, const std::string& json) {
  std::printf("\n%-28s %12s %14s %12s\n", "workload", "median", "per key/chunk", "GB/s");
  for (const Figure& f : figs) {
    const double per = f.items ? f.seconds / static_cast<double>(f.items) : 0;
    char gbs[32] = "-";
    if (f.bytes > 0) std::snprintf(gbs, sizeof(gbs), "%.2f", f.bytes / f.seconds / 1e9);
    std::printf("%-28s %9.3f ms %11.2f us %12s\n", f.name.c_str(), f.seconds * 1e3, per * 1e6, gbs);
  }
  if (json.empty()) return;
  std::ofstream j(json);
  j << "[";
  for (size_t i = 0; i < figs.size(); ++i) {
    j << (i ? "," : "") << "{\"name\":\"" << figs[i].name << "\",\"seconds\":" << figs[i].seconds
      << ",\"bytes\":" << figs[i].bytes << ",\"items\":" << figs[i].items << "}";
  }
  j << "]\n";
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") a.dir = v;
    else if (k == "--pool-chunks") a.pool_chunks = std::stoul(v);
    else if (k == "--load-chunks") a.load_chunks = std::stoul(v);
    else if (k == "--repeat") a.repeat = std::max(1, std::stoi(v));
    else if (k == "--json") a.json = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const bool own_dir = a.dir.empty();
  if (own_dir) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kvtier-fs-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return 2;
    a.dir = tmpl;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they happen
  std::vector<kvtier::bench::Figure> figs;
  kvtier::bench::LookupFigures(a, &figs);
  kvtier::bench::LoadFigures(a, &figs);
  kvtier::bench::Print(figs, a.json);
  std::error_code ec;
  if (own_dir) std::filesystem::remove_all(a.dir, ec);
  return 0;
}
