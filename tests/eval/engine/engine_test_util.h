// Helpers shared by the engine tests: a tiny engine, deterministic prompts and logit comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "eval/engine/engine.h"

namespace kvtier::internal::enginetest {

inline ModelConfig TinyConfig() {
  auto c = FindModelConfig("tiny");
  EXPECT_TRUE(c.ok());
  return *c;
}

inline std::unique_ptr<Engine> MakeTinyEngine(Store* store = nullptr, uint64_t pool_bytes = 1ull << 20,
                                              uint32_t step = 0) {
  EngineOptions opt;
  opt.model = TinyConfig();
  opt.pool_bytes = pool_bytes;
  opt.store = store;
  opt.prefill_step_tokens = step;
  opt.blas_threads = 1;  // one thread: sums are reduced in one fixed order
  auto e = Engine::Create(opt);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Deterministic pseudo-random tokens below `vocab`.
inline std::vector<uint32_t> Tokens(size_t n, uint64_t seed, uint32_t vocab = 256) {
  std::vector<uint32_t> t(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 12345;
  for (auto& v : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<uint32_t>(x % vocab);
  }
  return t;
}

// The oracle's tolerance: max |a - b| <= 1e-3 of the reference's logit range.
inline void ExpectLogitsMatch(const std::vector<float>& ref, const std::vector<float>& got) {
  ASSERT_EQ(ref.size(), got.size());
  ASSERT_FALSE(ref.empty());
  auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
  float range = *hi - *lo, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - got[i]));
  EXPECT_GT(range, 0.f);
  EXPECT_LE(worst, 1e-3f * range) << "max abs diff " << worst << ", logit range " << range;
}

// Prefill + greedy decode of `new_tokens`; returns the request (ended).
inline std::unique_ptr<Request> RunPrompt(Engine& e, uint64_t session, const std::vector<uint32_t>& prompt,
                                    uint32_t new_tokens) {
  auto r = e.Prefill(session, prompt, new_tokens);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  EXPECT_TRUE(e.Generate(**r).ok());
  e.End(**r);
  return std::move(r).value();
}

}  // namespace kvtier::internal::enginetest
