// file:// benchmarks, each next to references measured in the same run. Workloads (N chunks of
// llama-3.1-8b geometry cut to 32 tokens: 4 MiB each, scattered into one 128 KiB piece per layer):
//   BM_Memcpy/N              memcpy of the same bytes: the ceiling for any tier
//   BM_PlainPread/N          serial pread of the chunk files into one buffer, page cache warm, no
//                            verification: what a naive reader costs
//   BM_PlainPreadDirect/N    the same with O_DIRECT (reads the device, not the page cache)
//   BM_GetManyBuffered/N     FileTier::GetMany, direct=false: verified and scattered, page cache warm
//   BM_GetManyDirect/N       FileTier::GetMany with io_uring + O_DIRECT
//   BM_GetManyPreadvDirect/N the same through the preadv thread-pool fallback
//   BM_GetManyDirectBounce/N BM_GetManyDirect into buffers 64 bytes off 4 KiB: the bounce path
//   BM_PlainWrite/N          write of N files of the same size (open, write, close): Put's reference
//   BM_Put/N                 FileTier::Put of N new chunks (temp file + rename, no fsync)
// Files live under $KVTIER_BENCH_DIR (default: a fresh directory under $TMPDIR or /tmp, removed at
// exit). All timings are wall time (UseRealTime): the readers work on kernel and helper threads.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "bench_main.h"
#include "tiers/file/file_tier.h"
#include "io/chunk_io.h"

namespace kvtier::bench {
namespace {

constexpr int64_t kChunks = 16;
const Layout kLayout{32, 8, 128, DType::kBF16, 32};  // 4 MiB per chunk
const uint64_t kChunkBytes = kLayout.BytesPerChunk();
const uint64_t kPieceBytes = kChunkBytes / kLayout.layers;

const Namespace& Ns() {
  static const Namespace ns = *Namespace::Make("meta-llama/Llama-3.1-8B", kLayout, "bench");
  return ns;
}

std::vector<ChunkKey> KeysFrom(uint32_t first_token, int64_t chunks) {
  return SequentialKeys(Ns(), first_token, chunks);
}

// A benchmark directory with kChunks chunks written once, shared by every read benchmark.
struct Fixture {
  Fixture() {
    const char* env = std::getenv("KVTIER_BENCH_DIR");
    const char* tmp = std::getenv("TMPDIR");
    std::string base = env && *env ? env : (tmp && *tmp ? tmp : "/tmp");
    std::string tmpl = base + "/kvtier-file-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return;
    dir = tmpl;
    keys = KeysFrom(1, kChunks);
    payload.assign(kChunkBytes, std::byte{3});
    for (size_t i = 0; i < payload.size(); i += 4096) payload[i] = static_cast<std::byte>(i >> 12);
    auto t = internal::OpenFileTier(Options(true, true));
    if (!t.ok()) return;
    const std::span<const std::byte> src[] = {payload};
    for (const ChunkKey& k : keys) {
      if (!(*t)->Put(ChunkId::Of(Ns(), k), src).ok()) return;
      paths.push_back(internal::FileChunkPathForTesting(dir + "/read", ChunkId::Of(Ns(), k)));
    }
    if ((*t)->Flush().ok()) ready = true;
  }
  ~Fixture() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
  internal::FileTierOptions Options(bool direct, bool uring, const std::string& sub = "read") const {
    internal::FileTierOptions o;
    o.dir = dir + "/" + sub;
    o.capacity_bytes = 64ull << 30;
    o.reader.direct_io = direct;
    o.reader.use_io_uring = uring;
    return o;
  }

  bool ready = false;
  std::string dir;
  std::vector<ChunkKey> keys;
  std::vector<std::byte> payload;
  std::vector<std::string> paths;
};

Fixture& Fix() {
  static Fixture f;
  return f;
}

// Caller buffers, one piece per layer per chunk, as an engine's paged pool would hand them over:
// 2 MiB aligned like the engine's pool (read in place), or `misalign` bytes off (read through the
// reader's bounce memory and copied).
struct Buffers {
  explicit Buffers(int64_t chunks, size_t misalign = 0)
      : memory(internal::AlignedBuffer::Allocate(static_cast<size_t>(chunks) * kChunkBytes + 4096, 2u << 20)) {
    std::memset(memory.data(), 7, memory.size());
    std::byte* base = memory.data() + misalign;
    bytes = {base, static_cast<size_t>(chunks) * kChunkBytes};
    for (int64_t c = 0; c < chunks; ++c) {
      for (uint32_t l = 0; l < kLayout.layers; ++l) {
        out.emplace_back(base + c * kChunkBytes + l * kPieceBytes, kPieceBytes);
      }
    }
  }
  ScatterList Dst(int64_t c) const { return {out.data() + c * kLayout.layers, kLayout.layers}; }
  internal::AlignedBuffer memory;
  std::span<std::byte> bytes;
  std::vector<std::span<std::byte>> out;
};

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<std::byte> src(n * kChunkBytes, std::byte{1});
  Buffers dst(n);
  for (auto _ : state) {
    std::memcpy(dst.bytes.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * kChunkBytes);
}
BENCHMARK(BM_Memcpy)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

void PlainPread(benchmark::State& state, bool direct) {
  Fixture& f = Fix();
  if (!f.ready) return state.SkipWithError("fixture setup failed");
  const uint64_t file_bytes = internal::StoredChunkBytes(kChunkBytes);
  internal::AlignedBuffer buf = internal::AlignedBuffer::Allocate(file_bytes);
  for (auto _ : state) {
    for (const std::string& p : f.paths) {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
      if (fd < 0) return state.SkipWithError("open failed (O_DIRECT refused?)");
      for (uint64_t done = 0; done < file_bytes;) {
        const ssize_t r = ::pread(fd, buf.data() + done, file_bytes - done, static_cast<off_t>(done));
        if (r <= 0) break;
        done += static_cast<uint64_t>(r);
      }
      ::close(fd);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * kChunkBytes);
}
void BM_PlainPread(benchmark::State& state) { PlainPread(state, false); }
void BM_PlainPreadDirect(benchmark::State& state) { PlainPread(state, true); }
BENCHMARK(BM_PlainPread)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlainPreadDirect)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

void GetMany(benchmark::State& state, bool direct, bool uring, size_t misalign = 0) {
  Fixture& f = Fix();
  if (!f.ready) return state.SkipWithError("fixture setup failed");
  auto tier = internal::OpenFileTier(f.Options(direct, uring));
  if (!tier.ok()) return state.SkipWithError(tier.status().ToString().c_str());
  const int64_t n = state.range(0);
  Buffers dst(n, misalign);
  std::vector<ReadOp> ops;
  for (int64_t c = 0; c < n; ++c) ops.push_back({ChunkId::Of(Ns(), f.keys[c]), dst.Dst(c), Status::OK()});
  for (auto _ : state) {
    (*tier)->GetMany(ops);
    for (const ReadOp& op : ops) {
      if (!op.status.ok()) return state.SkipWithError(op.status.ToString().c_str());
    }
  }
  if (std::memcmp(dst.bytes.data(), f.payload.data(), kChunkBytes) != 0) {
    return state.SkipWithError("loaded bytes differ from the saved ones");
  }
  state.SetBytesProcessed(state.iterations() * n * kChunkBytes);
  state.SetLabel(internal::GetFileTierReport(**tier).io_engine);
}
void BM_GetManyBuffered(benchmark::State& state) { GetMany(state, false, true); }
void BM_GetManyDirect(benchmark::State& state) { GetMany(state, true, true); }
void BM_GetManyPreadvDirect(benchmark::State& state) { GetMany(state, true, false); }
void BM_GetManyDirectBounce(benchmark::State& state) { GetMany(state, true, true, 64); }
BENCHMARK(BM_GetManyBuffered)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GetManyDirect)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GetManyPreadvDirect)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GetManyDirectBounce)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PlainWrite(benchmark::State& state) {
  Fixture& f = Fix();
  if (!f.ready) return state.SkipWithError("fixture setup failed");
  const std::string dir = f.dir + "/plain";
  std::filesystem::create_directories(dir);
  const int64_t n = state.range(0);
  const uint64_t file_bytes = internal::StoredChunkBytes(kChunkBytes);
  std::vector<std::byte> bytes(file_bytes, std::byte{3});
  for (auto _ : state) {
    for (int64_t c = 0; c < n; ++c) {
      const std::string p = dir + "/" + std::to_string(c);
      const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
        if (fd >= 0) ::close(fd);
        return state.SkipWithError("write failed");
      }
      ::close(fd);
    }
    state.PauseTiming();
    for (int64_t c = 0; c < n; ++c) ::unlink((dir + "/" + std::to_string(c)).c_str());
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * n * kChunkBytes);
}
BENCHMARK(BM_PlainWrite)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Put(benchmark::State& state) {
  Fixture& f = Fix();
  if (!f.ready) return state.SkipWithError("fixture setup failed");
  auto tier = internal::OpenFileTier(f.Options(true, true, "put"));
  if (!tier.ok()) return state.SkipWithError(tier.status().ToString().c_str());
  const int64_t n = state.range(0);
  const std::span<const std::byte> src[] = {f.payload};
  for (auto _ : state) {
    for (int64_t c = 0; c < n; ++c) {
      if (!(*tier)->Put(ChunkId::Of(Ns(), f.keys[c]), src).ok()) return state.SkipWithError("put failed");
    }
    state.PauseTiming();
    for (int64_t c = 0; c < n; ++c) (void)(*tier)->Remove(ChunkId::Of(Ns(), f.keys[c]));
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * n * kChunkBytes);
}
BENCHMARK(BM_Put)->Arg(kChunks)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using kvtier::bench::Comparison;
  return kvtier::bench::RunBenchmarks(
      argc, argv,
      {{Comparison::kThroughputAtLeast, "BM_GetManyBuffered/16/real_time", "BM_PlainPread/16/real_time",
        0.5, "GetMany page cache vs plain pread"},
       {Comparison::kThroughputAtLeast, "BM_GetManyDirect/16/real_time",
        "BM_PlainPreadDirect/16/real_time", 1.0, "GetMany io_uring+O_DIRECT vs serial pread"},
       {Comparison::kThroughputAtLeast, "BM_GetManyPreadvDirect/16/real_time",
        "BM_PlainPreadDirect/16/real_time", 1.0, "GetMany preadv+O_DIRECT vs serial pread"},
       {Comparison::kThroughputAtLeast, "BM_GetManyBuffered/16/real_time", "BM_Memcpy/16/real_time",
        0.5, "GetMany page cache vs memcpy"},
       {Comparison::kRatioAtMost, "BM_Put/16/real_time", "BM_PlainWrite/16/real_time", 1.3,
        "Put (no fsync) vs plain write"}});
}
