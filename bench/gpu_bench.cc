// kvtier_gpu_bench: the GPU path's throughput next to its references, measured in the same run.
//
//   kvtier_gpu_bench --out FILE.json [--dir /abs/dir] [--gib 2] [--staging-mib 128] [--reps 3]
//                    [--host-threads 8]
//
// Workloads (llama-3.1-8b chunks, 32 MiB each, 16-token blocks):
//   h2d_reference   plain pinned host->GPU copies of 32 MiB pieces (cudaMemcpyAsync, CUDA events)
//   paged_load      mem:// -> GpuTransfer::Load -> paged blocks, from Load's call to Wait's return
//   disk_to_host    file:// (page cache dropped when /proc/sys/vm/drop_caches is writable) -> host memory
//   file_to_gpu     the same file:// chunks -> GpuTransfer::Load -> paged blocks
//   layer_wise      mem:// -> every chunk with 4 layer groups, in several batches that all fit in the
//                   staging slots at once (one wave), and again with paged_load's staging (several
//                   waves): time until layer group 0 has landed vs the last group
// Prints one line per workload and rewrites --out after each one (a run cut short keeps what it measured;
// "complete" is true only at the end). Exit 1 on any error, 2 (and {"skipped": reason}) when there is no
// usable GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/device_memory.h"
#include "kvtier/gpu.h"
#include "kvtier/store.h"

namespace {

using namespace kvtier;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string out, dir;
  uint64_t gib = 2, staging_mib = 128, reps = 3, host_threads = 8;
};

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// True when the page cache was dropped (needs root); the JSON says which.
bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f);
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvtier_gpu_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Check(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what, r.status());
  return std::move(*r);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what, s);
}

struct Bench {
  Layout layout = FindModelPreset("llama-3.1-8b").value().layout;
  uint32_t chunks = 0;
  std::vector<ChunkKey> keys;
  std::vector<std::byte> data;  // chunks x chunk bytes
  PagedKvCache cache;
  std::vector<uint32_t> table;

  void Init(uint64_t gib) {
    chunks = static_cast<uint32_t>((gib << 30) / layout.BytesPerChunk());
    Namespace ns = Namespace::Make("bench/gpu", layout, "bench").value();
    std::vector<uint32_t> tokens(uint64_t{chunks} * layout.tokens_per_chunk);
    std::iota(tokens.begin(), tokens.end(), 1u);
    keys = ComputeChunkKeys(ns, tokens);
    data.resize(uint64_t{chunks} * layout.BytesPerChunk());
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(data.data() + i, &x, 8);
    }
    cache.block_tokens = 16;
    cache.num_blocks = chunks * (layout.tokens_per_chunk / 16);
    const uint64_t tensor = uint64_t{cache.num_blocks} * 16 * 8 * 128 * 2;
    for (uint32_t l = 0; l < layout.layers; ++l) {
      cache.k.push_back(Check(internal::DeviceAlloc(0, tensor), "cudaMalloc K"));
      cache.v.push_back(Check(internal::DeviceAlloc(0, tensor), "cudaMalloc V"));
    }
    table.resize(cache.num_blocks);
    for (uint32_t i = 0; i < cache.num_blocks; ++i) table[i] = (i * 7919u) % cache.num_blocks;  // scattered
    if (std::gcd(7919u, cache.num_blocks) != 1) std::iota(table.begin(), table.end(), 0u);
  }

  Namespace ns() const { return Namespace::Make("bench/gpu", layout, "bench").value(); }

  void Fill(Store& store) {
    std::vector<std::span<const std::byte>> pieces;
    std::vector<GatherList> srcs;
    for (uint32_t i = 0; i < chunks; ++i) pieces.emplace_back(data.data() + i * layout.BytesPerChunk(), layout.BytesPerChunk());
    for (uint32_t i = 0; i < chunks; ++i) srcs.emplace_back(&pieces[i], 1);
    Check(store.Save(ns(), keys, srcs), "Save");
    Check(store.Flush(), "Flush");
  }

  // Seconds of one GPU load of every chunk.
  double GpuLoad(Store& store, GpuTransfer& t) {
    const auto a = Clock::now();
    auto load = Check(t.Load(store, ns(), keys, table), "GpuTransfer::Load");
    Check(load->Wait(), "GpuLoad::Wait");
    const auto b = Clock::now();
    if (load->chunks() != chunks) Die("GPU load", Status::Internal("loaded " + std::to_string(load->chunks())));
    return Seconds(a, b);
  }

  // Seconds of one Store::Load of every chunk into host memory.
  double HostLoad(Store& store, std::vector<std::byte>& host) {
    std::vector<std::span<std::byte>> pieces;
    std::vector<ScatterList> dsts;
    for (uint32_t i = 0; i < chunks; ++i) pieces.emplace_back(host.data() + i * layout.BytesPerChunk(), layout.BytesPerChunk());
    for (uint32_t i = 0; i < chunks; ++i) dsts.emplace_back(&pieces[i], 1);
    const auto a = Clock::now();
    const size_t got = Check(store.Load(ns(), keys, dsts), "Store::Load");
    const auto b = Clock::now();
    if (got != chunks) Die("host load", Status::Internal("loaded " + std::to_string(got)));
    return Seconds(a, b);
  }

  double Gbps(double seconds) const { return static_cast<double>(data.size()) / seconds / 1e9; }
};

bool Parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--out") a.out = v;
    else if (k == "--dir") a.dir = v;
    else if (k == "--gib") a.gib = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--staging-mib") a.staging_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--reps") a.reps = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--host-threads") a.host_threads = std::strtoull(v.c_str(), nullptr, 10);
    else return false;
  }
  return !a.out.empty() && a.gib > 0 && a.gib <= 64 && a.reps > 0 && a.staging_mib >= 32 &&
         a.host_threads >= 1 && a.host_threads <= 64 && (argc % 2) == 1;
}

// Written to a temporary name and renamed, so the file is always whole JSON.
void Write(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) Die("write " + tmp, Status::IOError("cannot write"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) Die("rename " + tmp, Status::IOError("cannot rename"));
}

// One layer-wise load of every chunk: when group 0 has landed vs the last group, from Load's call.
nlohmann::json LayerWise(Bench& b, Store& store, const GpuTransferOptions& base, uint32_t groups) {
  GpuTransferOptions lw = base;
  lw.layer_groups = groups;
  auto lt = Check(GpuTransfer::Open(b.layout, b.cache, lw), "GpuTransfer::Open layer-wise");
  Check(Check(lt->Load(store, b.ns(), b.keys, b.table), "layer-wise warm-up")->Wait(), "warm-up Wait");
  const auto t0 = Clock::now();
  auto load = Check(lt->Load(store, b.ns(), b.keys, b.table), "layer-wise Load");
  const auto t_queued = Clock::now();
  Check(load->WaitLayerGroup(0), "WaitLayerGroup(0)");
  const auto t_first = Clock::now();
  const bool last_done_then = Check(load->Done(), "Done");
  Check(load->Wait(), "Wait");
  const auto t_all = Clock::now();
  const uint64_t wave = uint64_t{lt->batch_chunks()} * (lw.host_threads + 1);
  const double ratio = Seconds(t0, t_first) / Seconds(t0, t_all);
  std::printf("layer_wise      %u chunks, %u groups, %u-chunk batches, %llu waves: group 0 at %.1f ms, all at %.1f ms "
              "(%.2f of the load; last group %s when group 0 was)\n", b.chunks, groups, lt->batch_chunks(),
              static_cast<unsigned long long>((b.chunks + wave - 1) / wave), 1e3 * Seconds(t0, t_first),
              1e3 * Seconds(t0, t_all), ratio, last_done_then ? "done" : "not done");
  return {{"groups", groups},
          {"chunks", b.chunks},
          {"batch_chunks", lt->batch_chunks()},
          {"waves", (b.chunks + wave - 1) / wave},
          {"queued_ms", 1e3 * Seconds(t0, t_queued)},
          {"layer0_ready_ms", 1e3 * Seconds(t0, t_first)},
          {"all_ready_ms", 1e3 * Seconds(t0, t_all)},
          {"layer0_over_all", ratio},
          {"layer0_before_last", !last_done_then}};
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line reaches the log even if a timeout kills the run
  Args a;
  if (!Parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: kvtier_gpu_bench --out FILE.json [--dir /abs/dir] [--gib 2] "
                         "[--staging-mib 128] [--reps 3] [--host-threads 8]\n");
    return 1;
  }
  nlohmann::json j;
  if (Status s = GpuAvailable(0); !s.ok()) {
    j["skipped"] = s.ToString();
    Write(a.out, j);
    std::printf("kvtier_gpu_bench: skipped: %s\n", s.ToString().c_str());
    return 2;
  }
  Bench b;
  b.Init(a.gib);
  j["complete"] = false;
  j["chunks"] = b.chunks;
  j["bytes"] = b.data.size();
  j["layout"] = b.layout.ToString();
  j["block_tokens"] = 16;

  // Reference: plain pinned host->GPU copies of one chunk's size.
  const std::shared_ptr<HostAllocator> pinned = PinnedHostAllocator();
  void* piece = pinned ? pinned->Allocate(b.layout.BytesPerChunk(), 4096) : nullptr;
  if (piece == nullptr) Die("cudaHostAlloc", Status::NoSpace("pinned reference buffer refused"));
  std::memcpy(piece, b.data.data(), b.layout.BytesPerChunk());
  std::vector<double> h2d;
  for (uint64_t r = 0; r < a.reps; ++r) {
    h2d.push_back(Check(internal::TimedHostToDevice(0, piece, b.layout.BytesPerChunk(), b.data.size()), "H2D"));
  }
  pinned->Free(piece, b.layout.BytesPerChunk());
  j["h2d_reference_gbps"] = Median(h2d);
  std::printf("h2d_reference   %.2f GB/s (pinned, 32 MiB pieces)\n", Median(h2d));
  Write(a.out, j);

  GpuTransferOptions opt;
  opt.staging_bytes = a.staging_mib << 20;
  opt.host_threads = static_cast<uint32_t>(a.host_threads);
  j["staging_mib"] = a.staging_mib;
  j["host_threads"] = a.host_threads;
  auto transfer = Check(GpuTransfer::Open(b.layout, b.cache, opt), "GpuTransfer::Open");
  {
    StoreOptions so;
    so.tiers = {"mem://?capacity=" + std::to_string(a.gib + 1) + "GiB"};
    auto store = Check(Store::Open(so), "Store::Open mem://");
    b.Fill(*store);
    (void)b.GpuLoad(*store, *transfer);  // warm-up
    std::vector<double> t;
    for (uint64_t r = 0; r < a.reps; ++r) t.push_back(b.GpuLoad(*store, *transfer));
    j["paged_load_gbps"] = b.Gbps(Median(t));
    j["paged_load_ratio"] = b.Gbps(Median(t)) / Median(h2d);
    std::printf("paged_load      %.2f GB/s (mem:// -> 16-token blocks), %.0f%% of h2d_reference\n",
                b.Gbps(Median(t)), 100 * b.Gbps(Median(t)) / Median(h2d));

    Write(a.out, j);
    // The e2e's 4 groups. layer_wise: staging sized so that every chunk fits in the slots at once (one
    // wave of several batches, as the e2e's 9 x 512 MiB for 32K tokens); layer_wise_waves: paged_load's
    // staging (several waves).
    GpuTransferOptions one_wave = opt;
    const uint64_t per_slot = (b.chunks + opt.host_threads) / (opt.host_threads + 1);
    one_wave.staging_bytes = per_slot * b.layout.BytesPerChunk();
    j["layer_wise"] = LayerWise(b, *store, one_wave, 4);
    Write(a.out, j);
    j["layer_wise_waves"] = LayerWise(b, *store, opt, 4);
    Write(a.out, j);
  }

  if (!a.dir.empty()) {
    StoreOptions so;
    so.tiers = {"file://" + a.dir + "?capacity=" + std::to_string(a.gib + 2) + "GiB"};
    so.promote_on_load = false;
    auto store = Check(Store::Open(so), "Store::Open file://");
    b.Fill(*store);
    std::vector<std::byte> host(b.data.size());
    std::vector<double> disk, gpu;
    bool dropped = true;
    for (uint64_t r = 0; r < a.reps; ++r) {  // alternate, so both see the same disk state
      dropped = DropCaches() && dropped;
      disk.push_back(b.HostLoad(*store, host));
      dropped = DropCaches() && dropped;
      gpu.push_back(b.GpuLoad(*store, *transfer));
    }
    if (host != b.data) Die("disk_to_host", Status::Corruption("loaded bytes differ"));
    j["disk_to_host_gbps"] = b.Gbps(Median(disk));
    j["file_to_gpu_gbps"] = b.Gbps(Median(gpu));
    j["file_to_gpu_ratio"] = Median(disk) / Median(gpu);
    j["page_cache_dropped"] = dropped;
    std::printf("disk_to_host    %.2f GB/s (file:// -> host memory, page cache %s)\n", b.Gbps(Median(disk)),
                dropped ? "dropped" : "NOT dropped");
    std::printf("file_to_gpu     %.2f GB/s (file:// -> 16-token blocks), %.0f%% of disk_to_host\n",
                b.Gbps(Median(gpu)), 100 * Median(disk) / Median(gpu));
  }
  transfer.reset();
  for (void* p : b.cache.k) internal::DeviceFree(0, p);
  for (void* p : b.cache.v) internal::DeviceFree(0, p);
  j["complete"] = true;
  Write(a.out, j);
  return 0;
}
