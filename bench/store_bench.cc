// Store benchmarks over mem://, each next to a plain memcpy of the same bytes. Workloads:
//   BM_Memcpy/N            memcpy of N bytes into a warm buffer: the reference
//   BM_LoadMem/N           Store::Load of N bytes of llama-3.1-8b chunks (32 MiB each, scattered into
//                          one 1 MiB piece per layer) from mem://   (target >= 80% of memcpy)
//   BM_SaveMem/N           Store::Save of N bytes into mem://, caller-visible time (target <= 1.2x)
//   BM_SaveMemOverFile/N   the same with a file:// tier below (written in the background; only the
//                          caller's time is measured)
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "bench_main.h"
#include "kvtier/store.h"

namespace kvtier::bench {
namespace {

constexpr int64_t kChunks = 4;
const Layout kLayout{32, 8, 128, DType::kBF16, 256};  // llama-3.1-8b: 32 MiB per chunk
const uint64_t kChunkBytes = kLayout.BytesPerChunk();
const uint64_t kPieceBytes = kChunkBytes / kLayout.layers;

const Namespace& Ns() {
  static const Namespace ns = *Namespace::Make("meta-llama/Llama-3.1-8B", kLayout, "bench");
  return ns;
}

std::vector<ChunkKey> KeysFrom(uint32_t first_token, int64_t chunks) {
  return SequentialKeys(Ns(), first_token, chunks);
}

// Caller buffers, one piece per layer per chunk, as an engine's paged pool would hand them over.
struct Buffers {
  explicit Buffers(int64_t chunks) : bytes(static_cast<size_t>(chunks) * kChunkBytes, std::byte{7}) {
    for (int64_t c = 0; c < chunks; ++c) {
      for (uint32_t l = 0; l < kLayout.layers; ++l) {
        std::byte* p = bytes.data() + c * kChunkBytes + l * kPieceBytes;
        out.emplace_back(p, kPieceBytes);
        in.emplace_back(p, kPieceBytes);
      }
    }
    for (int64_t c = 0; c < chunks; ++c) {
      dsts.emplace_back(out.data() + c * kLayout.layers, kLayout.layers);
      srcs.emplace_back(in.data() + c * kLayout.layers, kLayout.layers);
    }
  }
  std::vector<std::byte> bytes;
  std::vector<std::span<std::byte>> out;
  std::vector<std::span<const std::byte>> in;
  std::vector<ScatterList> dsts;
  std::vector<GatherList> srcs;
};

std::unique_ptr<Store> OpenStore(std::vector<std::string> tiers) {
  StoreOptions opt;
  opt.tiers = std::move(tiers);
  auto s = Store::Open(opt);
  return s.ok() ? std::move(s).value() : nullptr;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) * kChunkBytes;
  std::vector<std::byte> src(n, std::byte{3}), dst(n, std::byte{0});
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_Memcpy)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same bytes (kChunks chunks) copied by one thread per core, each copying its share in memcpy
// calls of range(0) MiB: what slice size costs. glibc's memcpy switches to non-temporal stores only
// above a size threshold, so small calls and one huge call differ on the same bytes.
void BM_MemcpyThreads(benchmark::State& state) {
  const size_t n = kChunks * kChunkBytes;
  const size_t slice = static_cast<size_t>(state.range(0)) << 20;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::byte> src(n, std::byte{3}), dst(n, std::byte{0});
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (size_t at = t * slice; at < n; at += threads * slice) {
          std::memcpy(dst.data() + at, src.data() + at, std::min(slice, n - at));
        }
      });
    }
    for (auto& w : workers) w.join();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n));
  state.counters["threads"] = threads;
}
BENCHMARK(BM_MemcpyThreads)->Arg(2)->Arg(32)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoadMem(benchmark::State& state) {
  auto store = OpenStore({"mem://?capacity=" + std::to_string(2 * kChunks * kChunkBytes)});
  if (!store) return state.SkipWithError("cannot open mem://");
  Buffers buf(state.range(0));
  const auto keys = KeysFrom(1, state.range(0));
  if (!store->Save(Ns(), keys, buf.srcs).ok()) return state.SkipWithError("save failed");
  for (auto _ : state) {
    auto n = store->Load(Ns(), keys, buf.dsts);
    if (!n.ok() || *n != keys.size()) return state.SkipWithError("load missed");
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * static_cast<int64_t>(kChunkBytes));
}
BENCHMARK(BM_LoadMem)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

// Saves fresh keys every iteration into a tier that holds two batches, so the timed loop includes
// eviction; a warm-up pass first touches every page of the tier once (as a long-running store has).
// With `flush`, each timed Save also waits for the background writes to the lower tiers (the cost of
// the whole save path, not only the caller's part).
void SaveLoop(benchmark::State& state, std::unique_ptr<Store> store, bool flush = false) {
  if (!store) return state.SkipWithError("cannot open the store");
  Buffers buf(state.range(0));
  uint32_t next = 1;
  for (int i = 0; i < 3; ++i, next += 1u << 20) {
    if (!store->Save(Ns(), KeysFrom(next, state.range(0)), buf.srcs).ok()) {
      return state.SkipWithError("warm-up save failed");
    }
  }
  (void)store->Flush();
  for (auto _ : state) {
    state.PauseTiming();
    const auto keys = KeysFrom(next, state.range(0));
    next += 1u << 20;
    state.ResumeTiming();
    if (!store->Save(Ns(), keys, buf.srcs).ok()) return state.SkipWithError("save failed");
    if (flush && !store->Flush().ok()) return state.SkipWithError("flush failed");
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * static_cast<int64_t>(kChunkBytes));
  const StoreStats s = store->Stats();
  state.counters["dropped"] = static_cast<double>(s.dropped_saves);
  state.counters["evictions"] = static_cast<double>(s.tiers[0].evictions);
}

std::string MemUrl() { return "mem://?capacity=" + std::to_string(2 * kChunks * kChunkBytes); }

void BM_SaveMem(benchmark::State& state) { SaveLoop(state, OpenStore({MemUrl()})); }
BENCHMARK(BM_SaveMem)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SaveMemOverFile(benchmark::State& state) {
  std::string dir = (std::filesystem::temp_directory_path() / "kvtier-bench-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return state.SkipWithError("mkdtemp failed");
  SaveLoop(state, OpenStore({MemUrl(), "file://" + dir + "?capacity=4GiB"}));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
BENCHMARK(BM_SaveMemOverFile)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SaveMemOverFileFlushed(benchmark::State& state) {
  std::string dir = (std::filesystem::temp_directory_path() / "kvtier-bench-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return state.SkipWithError("mkdtemp failed");
  SaveLoop(state, OpenStore({MemUrl(), "file://" + dir + "?capacity=4GiB"}), /*flush=*/true);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
BENCHMARK(BM_SaveMemOverFileFlushed)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using kvtier::bench::Comparison;
  return kvtier::bench::RunBenchmarks(
      argc, argv,
      {{Comparison::kThroughputAtLeast, "BM_LoadMem/4/real_time", "BM_Memcpy/4/real_time", 0.8,
        "Load from mem:// vs memcpy"},
       {Comparison::kRatioAtMost, "BM_SaveMem/4/real_time", "BM_Memcpy/4/real_time", 1.2,
        "Save into mem:// vs memcpy"},
       {Comparison::kRatioAtMost, "BM_SaveMemOverFile/4/real_time", "BM_Memcpy/4/real_time", 1.2,
        "Save, mem:// over file:// vs memcpy"}});
}
