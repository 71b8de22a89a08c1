// The reference engine without a store: numerics, the paged pool, residency and eviction.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/engine/kernels.h"
#include "eval/engine/kv_convert.h"
#include "engine_test_util.h"

namespace kvtier::internal {
namespace {

using enginetest::ExpectLogitsMatch;
using enginetest::MakeTinyEngine;
using enginetest::RunPrompt;
using enginetest::Tokens;

TEST(KvConvert, Bf16RoundTripsRepresentableValuesAndRoundsToNearestEven) {
  for (float f : {0.f, 1.f, -2.5f, 3.140625f, 0x1p-100f, -65536.f}) {
    EXPECT_EQ(Bf16ToFloat(FloatToBf16(f)), f) << f;
  }
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.00390625f)), 1.f);         // tie: to even (down)
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.01171875f)), 1.015625f);   // tie: to even (up)
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

TEST(KvConvert, Fp16RoundTripsAndSaturates) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(Fp16ToFloat(FloatToFp16(f)), f) << f;
  }
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.00048828125f)), 1.f);  // half an ulp: to even
  EXPECT_TRUE(std::isinf(Fp16ToFloat(FloatToFp16(1e6f))));
  EXPECT_NEAR(Fp16ToFloat(FloatToFp16(0.1f)), 0.1f, 1e-4f);
}

TEST(Kernels, MaskedSoftmaxMatchesTheExactFormulaAndZeroesTheMaskedTail) {
  std::vector<float> row = {0.5f, -3.f, 2.f, -80.f, 10.f, 1.f, 7.f, 99.f};
  std::vector<double> want(5);
  double sum = 0;
  for (size_t i = 0; i < 5; ++i) sum += want[i] = std::exp(double{row[i]} - 10.0);
  MaskedSoftmax(row.data(), 5, row.size());
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(row[i], want[i] / sum, 1e-6 * (want[i] / sum) + 1e-30);
  for (size_t i = 5; i < row.size(); ++i) EXPECT_EQ(row[i], 0.f);
}

TEST(KvPool, BlocksAreChunksAndPiecesCoverOneChunk) {
  ModelConfig c = enginetest::TinyConfig();
  Layout layout = c.KvLayout();
  auto pool = KvPool::Create(layout, layout.BytesPerChunk() * 3 + 7);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->block_count(), 3u);
  auto pieces = (*pool)->Pieces(1);
  EXPECT_EQ(pieces.size(), size_t{c.layers} * 2);
  size_t total = 0;
  for (auto p : pieces) total += p.size();
  EXPECT_EQ(total, layout.BytesPerChunk());
  auto a = (*pool)->Allocate(2);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*pool)->Allocate(2).status().IsNoSpace());
  (*pool)->Free(*a);
  EXPECT_EQ((*pool)->free_blocks(), 3u);
  EXPECT_TRUE(KvPool::Create(layout, layout.BytesPerChunk() - 1).status().IsNoSpace());
}

TEST(ModelConfig, PresetsValidateAndUnknownNamesAreRejected) {
  for (auto name : ModelConfigNames()) {
    auto c = FindModelConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(c->Validate().ok()) << name;
  }
  auto q = FindModelConfig("qwen2.5-0.5b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->KvLayout().BytesPerToken(), 2u * 24 * 2 * 64 * 2);
  EXPECT_EQ(FindModelConfig("huge").status().code(), Code::kInvalidArgument);
}

TEST(Engine, SameSeedGivesSameOutputAndAnotherSeedDoesNot) {
  auto prompt = Tokens(50, 1);
  auto a = MakeTinyEngine();
  auto b = MakeTinyEngine();
  auto ra = RunPrompt(*a, 1, prompt, 16);
  auto rb = RunPrompt(*b, 1, prompt, 16);
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->prompt_logits(), rb->prompt_logits());
  EXPECT_EQ(ra->output(), rb->output());
  EXPECT_EQ(ra->output().size(), 16u);

  EngineOptions opt;
  opt.model = enginetest::TinyConfig();
  opt.model.seed = 2;
  opt.pool_bytes = 1 << 20;
  auto c = Engine::Create(opt);
  ASSERT_TRUE(c.ok());
  auto rc = RunPrompt(**c, 1, prompt, 16);
  ASSERT_TRUE(rc);
  EXPECT_NE(rc->prompt_logits(), ra->prompt_logits());
  EXPECT_NE((*c)->ns().id(), a->ns().id());  // different weights never share chunks
}

TEST(Engine, OutputDoesNotDependOnThePrefillStep) {
  auto prompt = Tokens(77, 3);
  auto one_chunk = MakeTinyEngine(nullptr, 1 << 20, 16);
  auto four_chunks = MakeTinyEngine(nullptr, 1 << 20, 64);
  auto a = RunPrompt(*one_chunk, 1, prompt, 16);
  auto b = RunPrompt(*four_chunks, 1, prompt, 16);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->stats().computed_tokens, 77u);
  ExpectLogitsMatch(a->prompt_logits(), b->prompt_logits());
  EXPECT_EQ(a->output(), b->output());
}

TEST(Engine, DecodeBatchMatchesDecodingAlone) {
  auto e = MakeTinyEngine();
  auto p1 = Tokens(40, 4), p2 = Tokens(23, 5);
  auto alone1 = RunPrompt(*e, 1, p1, 8);
  auto alone2 = RunPrompt(*e, 2, p2, 8);
  e->EvictIdle();
  auto r1 = e->Prefill(3, p1, 8);
  auto r2 = e->Prefill(4, p2, 8);
  ASSERT_TRUE(r1.ok() && r2.ok());
  Request* both[] = {r1->get(), r2->get()};
  while ((*r1)->output().size() < 8) ASSERT_TRUE(e->Decode(both).ok());
  EXPECT_EQ((*r1)->output(), alone1->output());
  EXPECT_EQ((*r2)->output(), alone2->output());
  EXPECT_FALSE(e->Decode(both).ok());  // at the limit
  e->End(**r1);
  e->End(**r2);
}

TEST(Engine, ReturningSessionReusesResidentKvAndMatchesRecompute) {
  auto turn1 = Tokens(40, 6);
  auto e = MakeTinyEngine();
  auto first = RunPrompt(*e, 7, turn1, 8);
  ASSERT_TRUE(first);
  // Turn 2 repeats turn 1 and its answer, then adds a question.
  std::vector<uint32_t> turn2 = turn1;
  turn2.insert(turn2.end(), first->output().begin(), first->output().end());
  auto more = Tokens(12, 8);
  turn2.insert(turn2.end(), more.begin(), more.end());
  auto second = RunPrompt(*e, 7, turn2, 16);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->stats().resident_tokens, 32u);  // whole chunks of turn 1
  EXPECT_EQ(second->stats().computed_tokens, turn2.size() - 32);

  auto fresh = MakeTinyEngine();
  auto ref = RunPrompt(*fresh, 7, turn2, 16);
  ASSERT_TRUE(ref);
  ExpectLogitsMatch(ref->prompt_logits(), second->prompt_logits());
  EXPECT_EQ(ref->output(), second->output());
}

TEST(Engine, IdleSessionsAreEvictedWhenThePoolIsFullAndActiveOnesAreNot) {
  Layout layout = enginetest::TinyConfig().KvLayout();
  auto e = MakeTinyEngine(nullptr, layout.BytesPerChunk() * 4);
  auto prompt = Tokens(40, 9);  // 40 + 8 tokens = 3 blocks
  auto a = e->Prefill(1, prompt, 8);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(e->Begin(2, prompt, 8).status().code(), Code::kBusy);  // session 1 is active
  e->End(**a);
  auto b = e->Prefill(2, prompt, 8);  // evicts idle session 1
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(e->evictions(), 1u);
  e->End(**b);
  EXPECT_EQ(e->Begin(3, Tokens(100, 1), 0).status().code(), Code::kNoSpace);  // can never fit
  auto c = e->Prefill(1, prompt, 8);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->stats().resident_tokens, 0u);  // its KV was evicted: recomputed
  ExpectLogitsMatch((*a)->prompt_logits(), (*c)->prompt_logits());
  e->End(**c);
}

TEST(Engine, RejectsEmptyPromptsAndBusySessions) {
  auto e = MakeTinyEngine();
  EXPECT_EQ(e->Begin(1, {}, 4).status().code(), Code::kInvalidArgument);
  auto prompt = Tokens(10, 1);
  auto a = e->Begin(1, prompt, 4);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(e->Begin(1, prompt, 4).status().code(), Code::kInvalidArgument);
  e->End(**a);
}

}  // namespace
}  // namespace kvtier::internal
