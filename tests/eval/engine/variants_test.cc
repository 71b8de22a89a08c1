// The oracle for the engine's attention variants (docs/engine.md, "Attention variants"): sliding
// window, MLA and linear attention (a per-sequence state), each on mem:// and file://: a reloaded
// prefix gives the recomputed logits and greedy tokens; a corrupt state is a miss, never a stale hit;
// and KV saved by a TP-2 instance is byte for byte a TP-1 instance's and loads at TP 1 and TP 4.
//
// The returning engine's pool is filled with NaN (0xffff in bf16) before it loads: a byte it uses that
// was neither loaded nor computed (a window row the Store skipped, a state never handed over) turns
// the logits into NaN, which every test here checks for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine_test_util.h"
#include "kvtier/store.h"
#include "support/temp_dir.h"

namespace kvtier::internal::variants_test {
namespace {

using enginetest::ExpectLogitsMatch;
using enginetest::RunPrompt;
using enginetest::Tokens;

constexpr uint32_t kOutputTokens = 16;
constexpr size_t kContextTokens = 80;  // 5 chunks of 16

std::unique_ptr<Engine> MakeEngine(const std::string& model, Store* store = nullptr, uint32_t tp = 1,
                                   bool save = true) {
  EngineOptions opt;
  opt.model = FindModelConfig(model).value();
  opt.pool_bytes = 1ull << 20;
  opt.store = store;
  opt.save = save;
  opt.tp = tp;
  opt.blas_threads = 1;
  auto e = Engine::Create(opt);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Every byte of every block becomes 0xff: NaN wherever a 16-bit row or an fp32 state is read.
void Poison(Engine& e) {
  for (uint32_t b = 0; b < e.pool().block_count(); ++b) {
    for (std::span<std::byte> p : e.pool().Pieces(b)) std::memset(p.data(), 0xff, p.size());
  }
}

void ExpectFinite(const std::vector<float>& logits) {
  size_t bad = 0;
  for (float x : logits) bad += std::isfinite(x) ? 0 : 1;
  EXPECT_EQ(bad, 0u) << "logits that are not finite: a byte that was never loaded or computed was used";
}

std::vector<uint32_t> Prompt(uint64_t seed) {
  std::vector<uint32_t> p = Tokens(kContextTokens, seed);
  const std::vector<uint32_t> turn = Tokens(9, seed + 1);
  p.insert(p.end(), turn.begin(), turn.end());
  return p;
}

std::vector<uint32_t> Context(const std::vector<uint32_t>& prompt) {
  return {prompt.begin(), prompt.begin() + kContextTokens};
}

// One tier that outlives the engines; file:// is closed and reopened between turns, as by another process.
class TierHolder {
 public:
  explicit TierHolder(std::string scheme) : scheme_(std::move(scheme)) { Open(); }
  Store* store() { return store_.get(); }
  void Reopen() {
    if (scheme_ != "file") return;
    EXPECT_TRUE(store_->Flush().ok());
    store_.reset();
    Open();
  }
  // The whole stored chunk `key`, read from the tier itself once the Store's background writes to it
  // (file:// is not a memory tier: its Puts are queued) have landed.
  std::vector<std::byte> Chunk(const Namespace& ns, const ChunkKey& key) {
    EXPECT_TRUE(store_->Flush().ok());
    std::vector<std::byte> out(ns.layout().BytesPerChunk());
    const std::span<std::byte> all(out);
    const Status s = store_->tier(0).Get(ChunkId::Of(ns, key), ScatterList(&all, 1));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  const std::string& dir() const { return dir_.path(); }

 private:
  void Open() {
    StoreOptions opt;
    opt.tiers = {scheme_ == "mem" ? "mem://?capacity=16MiB" : "file://" + dir_.path() + "/file?capacity=64MiB"};
    auto s = Store::Open(opt);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  std::string scheme_;
  kvtier::testing::TempDir dir_;
  std::unique_ptr<Store> store_;
};

struct VariantCase {
  std::string model;
  std::string scheme;  // "mem" or "file"
};

void PrintTo(const VariantCase& c, std::ostream* os) { *os << c.model << " on " << c.scheme << "://"; }

std::string CaseName(const ::testing::TestParamInfo<VariantCase>& info) {
  std::string name = info.param.model + "_" + info.param.scheme;
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  return name;
}

class VariantOracleTest : public ::testing::TestWithParam<VariantCase> {};

TEST_P(VariantOracleTest, ReloadedPrefixGivesTheRecomputedLogitsAndTokens) {
  const VariantCase& c = GetParam();
  const auto prompt = Prompt(21);
  TierHolder tier(c.scheme);
  auto first = MakeEngine(c.model, tier.store());
  auto r1 = RunPrompt(*first, 1, Context(prompt), 1);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->stats().saved_chunks, 5u);
  tier.Reopen();
  auto second = MakeEngine(c.model, tier.store());
  Poison(*second);
  auto loaded = RunPrompt(*second, 1, prompt, kOutputTokens);
  auto ref = RunPrompt(*MakeEngine(c.model), 1, prompt, kOutputTokens);
  ASSERT_TRUE(loaded && ref);
  EXPECT_EQ(loaded->stats().loaded_tokens, kContextTokens);
  EXPECT_EQ(loaded->stats().computed_tokens, 9u);
  ExpectFinite(loaded->prompt_logits());
  ExpectLogitsMatch(ref->prompt_logits(), loaded->prompt_logits());
  EXPECT_EQ(loaded->output(), ref->output());
  // A window layer's rows older than the prefix's last `window` tokens are not read from file://
  // (chunks 0-2 of 5 with a window of 20): they stay NaN in the pool, and the answer is the same.
  const Layout layout = second->ns().layout();
  uint64_t window_group = 0;
  for (const LayerGroup& g : layout.groups) {
    if (g.kind == GroupKind::kWindowKV) window_group += g.BytesPerTokenLayer() * g.layers.size() * layout.tokens_per_chunk;
  }
  const uint64_t skipped = c.scheme == "file" ? 3 * window_group : 0;
  EXPECT_EQ(tier.store()->Stats().load_bytes_skipped, skipped);
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantOracleTest,
                         ::testing::Values(VariantCase{"tiny-window", "mem"}, VariantCase{"tiny-window", "file"},
                                           VariantCase{"tiny-mla", "mem"}, VariantCase{"tiny-mla", "file"},
                                           VariantCase{"tiny-hybrid", "mem"}, VariantCase{"tiny-hybrid", "file"}),
                         CaseName);

// Flips one byte of chunk `index`'s state (the layout's last group: the end of the payload).
int CorruptState(const std::string& dir, const Namespace& ns, const std::vector<uint32_t>& context, size_t index) {
  const std::string hex = ComputeChunkKeys(ns, context).at(index).Hex();
  const uint64_t at = 4096 + ns.layout().BytesPerChunk() - 10;  // after the 4 KiB header
  int corrupted = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename().string().find(hex) == std::string::npos) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    char ch = 0;
    f.seekg(static_cast<std::streamoff>(at));
    f.read(&ch, 1);
    ch = static_cast<char>(ch ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&ch, 1);
    corrupted += f.good() ? 1 : 0;
  }
  return corrupted;
}

// A prefix whose chunk 2 has a corrupt state is a hit of chunks 0-1 only: the engine continues from
// chunk 1's state and recomputes the rest, with the recomputed answer.
TEST(VariantStateTest, ACorruptStateEndsThePrefixAndTheAnswerStaysIdentical) {
  const auto prompt = Prompt(23);
  TierHolder tier("file");
  auto first = MakeEngine("tiny-hybrid", tier.store());
  ASSERT_TRUE(RunPrompt(*first, 1, Context(prompt), 1));
  const Layout layout = first->ns().layout();
  ASSERT_EQ(layout.groups.back().kind, GroupKind::kState);
  tier.Reopen();
  EXPECT_GE(CorruptState(tier.dir(), first->ns(), Context(prompt), 2), 1);
  auto second = MakeEngine("tiny-hybrid", tier.store());
  Poison(*second);
  auto loaded = RunPrompt(*second, 1, prompt, kOutputTokens);
  auto ref = RunPrompt(*MakeEngine("tiny-hybrid"), 1, prompt, kOutputTokens);
  ASSERT_TRUE(loaded && ref);
  EXPECT_EQ(loaded->stats().lookup_chunks, 5u);
  EXPECT_EQ(loaded->stats().loaded_tokens, 32u);
  ExpectFinite(loaded->prompt_logits());
  ExpectLogitsMatch(ref->prompt_logits(), loaded->prompt_logits());
  EXPECT_EQ(loaded->output(), ref->output());
  EXPECT_GE(tier.store()->Stats().tiers.at(0).corrupt, 1u);
}

class VariantTpTest : public ::testing::TestWithParam<VariantCase> {};

// KV saved by a TP-2 instance: every chunk is byte for byte what TP-1 and TP-4 instances compute, and a
// TP-1 and a TP-4 instance that load it answer as their own full recompute.
TEST_P(VariantTpTest, SavedAtTp2LoadsAtTp1AndTp4) {
  const VariantCase& c = GetParam();
  const auto prompt = Prompt(25);
  TierHolder tier(c.scheme);
  auto tp2 = MakeEngine(c.model, tier.store(), 2);
  ASSERT_TRUE(tp2 && RunPrompt(*tp2, 1, Context(prompt), 1));
  const Namespace ns = tp2->ns();
  const std::vector<ChunkKey> keys = ComputeChunkKeys(ns, Context(prompt));
  ASSERT_EQ(keys.size(), 5u);
  std::vector<std::unique_ptr<Request>> refs;
  for (uint32_t tp : {1u, 4u}) {
    TierHolder own("mem");
    auto e = MakeEngine(c.model, own.store(), tp);
    ASSERT_TRUE(e && RunPrompt(*e, 1, Context(prompt), 1));
    EXPECT_EQ(e->ns().Hex(), ns.Hex()) << "the namespace does not depend on the TP degree";
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(own.Chunk(ns, keys[i]) == tier.Chunk(ns, keys[i])) << "chunk " << i << " at TP " << tp;
    }
    refs.push_back(RunPrompt(*MakeEngine(c.model, nullptr, tp), 1, prompt, kOutputTokens));
    ASSERT_TRUE(refs.back());
  }
  EXPECT_EQ(refs[0]->output(), refs[1]->output());
  EXPECT_EQ(refs[0]->prompt_logits(), refs[1]->prompt_logits()) << "TP 1 and TP 4 compute the same bits";
  tier.Reopen();
  for (uint32_t i = 0; i < 2; ++i) {
    const uint32_t tp = i == 0 ? 1 : 4;
    auto e = MakeEngine(c.model, tier.store(), tp, false);
    Poison(*e);
    auto loaded = RunPrompt(*e, 1, prompt, kOutputTokens);
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->stats().loaded_tokens, kContextTokens) << "TP " << tp;
    ExpectFinite(loaded->prompt_logits());
    ExpectLogitsMatch(refs[i]->prompt_logits(), loaded->prompt_logits());
    EXPECT_EQ(loaded->output(), refs[i]->output()) << "TP " << tp;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantTpTest,
                         ::testing::Values(VariantCase{"tiny-window", "mem"}, VariantCase{"tiny-window", "file"},
                                           VariantCase{"tiny-mla", "file"}, VariantCase{"tiny-hybrid", "file"}),
                         CaseName);

TEST(VariantConfigTest, LayoutsAreGroupedAndTpIsChecked) {
  EXPECT_TRUE(FindModelConfig("tiny").value().KvLayout().classic());
  EXPECT_EQ(FindModelConfig("tiny-window").value().KvLayout().Spec(),
            "layers=4 tokens=16 kv:layers=1+3,heads=4,dim=16,dtype=bf16 "
            "window:layers=0+2,heads=4,dim=16,window=20,dtype=bf16");
  EXPECT_EQ(FindModelConfig("tiny-mla").value().KvLayout().Spec(),
            "layers=2 tokens=16 latent:layers=0-1,dim=32,dtype=bf16");
  EXPECT_EQ(FindModelConfig("tiny-hybrid").value().KvLayout().Spec(),
            "layers=4 tokens=16 kv:layers=3,heads=4,dim=16,dtype=bf16 state:layers=0-2,bytes=4096,dtype=fp32");
  EngineOptions opt;
  opt.model = FindModelConfig("tiny").value();
  opt.tp = 2;  // the classic layout interleaves heads
  EXPECT_FALSE(Engine::Create(opt).ok());
  opt.model = FindModelConfig("tiny-window").value();
  opt.tp = 3;
  EXPECT_FALSE(Engine::Create(opt).ok());
  opt.tp = 8;  // divides the 8 query heads, not the 4 KV heads
  EXPECT_FALSE(Engine::Create(opt).ok());
}

}  // namespace
}  // namespace kvtier::internal::variants_test
