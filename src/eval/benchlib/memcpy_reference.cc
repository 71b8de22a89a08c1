#include "eval/benchlib/memcpy_reference.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace kvtier::internal {
namespace {

// One pass: `n` bytes from `src` to `dst`, each thread its own contiguous slice (64-byte aligned cuts
// so no two threads write one cache line).
void CopyInSlices(std::byte* dst, const std::byte* src, size_t n, unsigned threads) {
  const size_t slice = (n / threads + 63) & ~size_t{63};
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (unsigned t = 1; t < threads; ++t) {
    const size_t at = std::min(n, t * slice);
    const size_t len = std::min(n - at, slice);
    if (len > 0) workers.emplace_back([=] { std::memcpy(dst + at, src + at, len); });
  }
  std::memcpy(dst, src, std::min(n, slice));  // slice 0 on this thread, like a tier's caller
  for (auto& w : workers) w.join();
}

}  // namespace

unsigned MemcpyReferenceThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

PhaseResult ParallelMemcpyReference(std::span<std::byte> area, unsigned threads) {
  if (threads == 0) threads = MemcpyReferenceThreads();
  const size_t half = area.size() / 2;
  PhaseResult r;
  r.chunks = threads;
  if (half == 0) return r;
  const auto t0 = std::chrono::steady_clock::now();
  CopyInSlices(area.data() + half, area.data(), half, threads);
  CopyInSlices(area.data(), area.data() + half, half, threads);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.bytes = 2 * half;
  return r;
}

}  // namespace kvtier::internal
