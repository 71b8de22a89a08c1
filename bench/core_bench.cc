// Core benchmarks. Workloads:
//   BM_Sha256Raw/131072        SHA-256 over 512 KiB (the token bytes of a 131,072-token prompt): reference
//   BM_ComputeChunkKeys/131072 chunk keys of a 131,072-token prompt (512 chunks of 256 tokens)
//   BM_HashAndLookup/131072    keys + Store::Lookup walking 512 cached chunks in mem:// (target <= 1 ms)
//   BM_LookupOnly/131072       Store::Lookup alone
//   BM_Memcpy/32MiB            memcpy of one llama-3.1-8b chunk: reference for the checksum
//   BM_PayloadChecksum/32MiB   xxh3 of the same bytes (the cost of verify=true and of persistent tiers)
#include <cstring>
#include <numeric>
#include <vector>

#include "bench_main.h"
#include "core/chunk_format.h"
#include "core/sha256.h"
#include "kvtier/store.h"

namespace kvtier::bench {
namespace {

constexpr int64_t kPromptTokens = 131072;

// Lookup cost does not depend on chunk size, so the store holds small chunks of a 256-token layout.
Layout LookupLayout() { return Layout{1, 1, 8, DType::kBF16, 256}; }  // 8 KiB chunks

std::vector<uint32_t> Prompt(int64_t tokens) {
  std::vector<uint32_t> t(static_cast<size_t>(tokens));
  std::iota(t.begin(), t.end(), 7u);
  return t;
}

void BM_Sha256Raw(benchmark::State& state) {
  const auto tokens = Prompt(state.range(0));
  internal::Sha256 h;
  for (auto _ : state) {
    h.Update(tokens.data(), tokens.size() * sizeof(uint32_t));
    benchmark::DoNotOptimize(h.Final());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4);
}
BENCHMARK(BM_Sha256Raw)->Arg(kPromptTokens)->Unit(benchmark::kMicrosecond);

void BM_ComputeChunkKeys(benchmark::State& state) {
  const auto ns = *Namespace::Make("bench/model", LookupLayout(), "tenant");
  const auto tokens = Prompt(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(ComputeChunkKeys(ns, tokens));
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4);
}
BENCHMARK(BM_ComputeChunkKeys)->Arg(kPromptTokens)->Unit(benchmark::kMicrosecond);

// A store holding every chunk of the prompt, so Lookup walks all 512 of them.
std::unique_ptr<Store> FilledStore(const Namespace& ns, const std::vector<ChunkKey>& keys) {
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=16MiB&page=8KiB"};
  auto store = Store::Open(opt);
  if (!store.ok()) return nullptr;
  std::vector<std::byte> chunk(ns.layout().BytesPerChunk(), std::byte{1});
  const std::span<const std::byte> piece[] = {chunk};
  std::vector<GatherList> srcs(keys.size(), GatherList(piece));
  if (!(*store)->Save(ns, keys, srcs).ok()) return nullptr;
  return std::move(store).value();
}

void BM_HashAndLookup(benchmark::State& state) {
  const auto ns = *Namespace::Make("bench/model", LookupLayout(), "tenant");
  const auto tokens = Prompt(state.range(0));
  auto store = FilledStore(ns, ComputeChunkKeys(ns, tokens));
  if (!store) return state.SkipWithError("could not fill the store");
  size_t found = 0;
  for (auto _ : state) {
    const auto keys = ComputeChunkKeys(ns, tokens);
    found = store->Lookup(ns, keys);
    benchmark::DoNotOptimize(found);
  }
  if (found != static_cast<size_t>(state.range(0)) / 256) state.SkipWithError("lookup missed");
  state.counters["chunks"] = static_cast<double>(found);
}
BENCHMARK(BM_HashAndLookup)->Arg(kPromptTokens)->Unit(benchmark::kMicrosecond);

void BM_LookupOnly(benchmark::State& state) {
  const auto ns = *Namespace::Make("bench/model", LookupLayout(), "tenant");
  const auto keys = ComputeChunkKeys(ns, Prompt(state.range(0)));
  auto store = FilledStore(ns, keys);
  if (!store) return state.SkipWithError("could not fill the store");
  for (auto _ : state) benchmark::DoNotOptimize(store->Lookup(ns, keys));
}
BENCHMARK(BM_LookupOnly)->Arg(kPromptTokens)->Unit(benchmark::kMicrosecond);

constexpr int64_t kChunk = 32ll << 20;  // one llama-3.1-8b chunk: 256 tokens x 128 KiB

void BM_Memcpy(benchmark::State& state) {
  std::vector<std::byte> src(static_cast<size_t>(state.range(0)), std::byte{3}),
      dst(static_cast<size_t>(state.range(0)), std::byte{0});
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Memcpy)->Arg(kChunk)->Unit(benchmark::kMillisecond);

void BM_PayloadChecksum(benchmark::State& state) {
  std::vector<std::byte> src(static_cast<size_t>(state.range(0)), std::byte{3});
  for (auto _ : state) benchmark::DoNotOptimize(internal::PayloadChecksum(std::span(src)));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PayloadChecksum)->Arg(kChunk)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using kvtier::bench::Comparison;
  const std::string n = "/131072";
  return kvtier::bench::RunBenchmarks(
      argc, argv,
      {{Comparison::kTimeAtMost, "BM_HashAndLookup" + n, "", 1e-3, "hash + Lookup, 131072 tokens"},
       {Comparison::kRatioAtMost, "BM_ComputeChunkKeys" + n, "BM_Sha256Raw" + n, 1.5,
        "chunk keys vs one SHA-256 pass"},
       {Comparison::kThroughputAtLeast, "BM_PayloadChecksum/33554432", "BM_Memcpy/33554432", 0.0,
        "xxh3 throughput vs memcpy (info)"}});
}
