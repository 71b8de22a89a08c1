// The correctness oracle: KV that went out to a tier and came back must make the engine produce what a
// full recompute produces. On `tiny`, for mem://, file:// and fs://: the last prompt token's logits
// match within 1e-3 of the logit range and 16 greedy tokens are identical; a corrupted chunk is
// recomputed and the answer stays identical; a prompt differing in one token of the first chunk
// gets no hit.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "engine_test_util.h"
#include "kvtier/store.h"
#include "testing/fault_tier.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;
using enginetest::ExpectLogitsMatch;
using enginetest::MakeTinyEngine;
using enginetest::RunPrompt;
using enginetest::Tokens;

constexpr uint32_t kNewTokens = 16;

// The reference: a full prefill with no store.
std::unique_ptr<Request> Recompute(const std::vector<uint32_t>& prompt) {
  auto e = MakeTinyEngine();
  return RunPrompt(*e, 1, prompt, kNewTokens);
}

struct TierCase {
  std::string name;
  std::string scheme;  // "mem", "file" or "fs"
};

void PrintTo(const TierCase& c, std::ostream* os) { *os << c.name; }

class OracleTest : public ::testing::TestWithParam<TierCase> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-oracle-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Url() const {
    const std::string& s = GetParam().scheme;
    if (s == "mem") return "mem://?capacity=16MiB";
    if (s == "file") return "file://" + dir_ + "/file?capacity=64MiB";
    return "fs://" + dir_ + "/fs";
  }
  bool persistent() const { return GetParam().scheme != "mem"; }

  void OpenStore() {
    StoreOptions opt;
    opt.tiers = {Url()};
    auto s = Store::Open(opt);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  // A persistent tier is closed and reopened, as by another process after a restart.
  void Reopen() {
    if (!persistent()) return;
    ASSERT_TRUE(store_->Flush().ok());
    store_.reset();
    OpenStore();
  }

  // Turn 1 on one engine saves `context`; the returning prompt runs on a fresh engine (empty pool).
  std::unique_ptr<Request> SaveThenReturn(const std::vector<uint32_t>& context,
                                          const std::vector<uint32_t>& prompt) {
    OpenStore();
    if (!store_) return nullptr;
    auto first = MakeTinyEngine(store_.get());
    auto r1 = RunPrompt(*first, 1, context, 1);
    EXPECT_TRUE(r1 && r1->stats().saved_chunks == context.size() / 16);
    Reopen();
    if (before_return_) before_return_();
    auto second = MakeTinyEngine(store_.get());
    return RunPrompt(*second, 1, prompt, kNewTokens);
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
  std::function<void()> before_return_;
};

std::vector<uint32_t> Concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_P(OracleTest, ReloadedPrefixGivesTheRecomputedLogitsAndContinuation) {
  const auto context = Tokens(80, 11);  // 5 chunks of 16
  const auto prompt = Concat(context, Tokens(9, 12));
  auto loaded = SaveThenReturn(context, prompt);
  auto ref = Recompute(prompt);
  ASSERT_TRUE(loaded && ref);
  EXPECT_EQ(loaded->stats().loaded_tokens, 80u);
  EXPECT_EQ(loaded->stats().computed_tokens, 9u);
  EXPECT_EQ(loaded->stats().loaded_bytes, 5 * enginetest::TinyConfig().KvLayout().BytesPerChunk());
  EXPECT_EQ(ref->stats().loaded_tokens, 0u);
  ExpectLogitsMatch(ref->prompt_logits(), loaded->prompt_logits());
  ASSERT_EQ(loaded->output().size(), kNewTokens);
  EXPECT_EQ(loaded->output(), ref->output());
}

TEST_P(OracleTest, APromptThatDiffersInTheFirstChunkGetsNoHit) {
  const auto context = Tokens(80, 13);
  auto prompt = Concat(context, Tokens(9, 14));
  prompt[3] = (prompt[3] + 1) % 256;
  auto other = SaveThenReturn(context, prompt);
  auto ref = Recompute(prompt);
  ASSERT_TRUE(other && ref);
  EXPECT_EQ(other->stats().lookup_chunks, 0u);
  EXPECT_EQ(other->stats().loaded_tokens, 0u);
  EXPECT_EQ(other->output(), ref->output());
}

// Flips one payload byte of the stored chunk `index` of `context` in every file that holds it.
int CorruptChunkFiles(const std::string& dir, const Namespace& ns, const std::vector<uint32_t>& context,
                      size_t index) {
  const std::string hex = ComputeChunkKeys(ns, context).at(index).Hex();
  int corrupted = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename().string().find(hex) == std::string::npos) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(4096 + 100);
    f.write(&c, 1);
    corrupted += f.good() ? 1 : 0;
  }
  return corrupted;
}

TEST_P(OracleTest, ACorruptedChunkIsRecomputedAndTheAnswerStaysIdentical) {
  if (!persistent()) GTEST_SKIP() << "corruption on disk applies to persistent tiers";
  const auto context = Tokens(80, 15);
  const auto prompt = Concat(context, Tokens(9, 16));
  const Namespace ns = MakeTinyEngine()->ns();
  before_return_ = [&] { EXPECT_GE(CorruptChunkFiles(dir_, ns, context, 2), 1); };
  auto loaded = SaveThenReturn(context, prompt);
  auto ref = Recompute(prompt);
  ASSERT_TRUE(loaded && ref);
  EXPECT_EQ(loaded->stats().loaded_tokens, 32u);  // chunks 0 and 1; 2.. are recomputed
  EXPECT_EQ(loaded->stats().computed_tokens, prompt.size() - 32);
  ExpectLogitsMatch(ref->prompt_logits(), loaded->prompt_logits());
  EXPECT_EQ(loaded->output(), ref->output());
  EXPECT_GE(store_->Stats().tiers.at(0).corrupt, 1u);
}

INSTANTIATE_TEST_SUITE_P(Tiers, OracleTest,
                         ::testing::Values(TierCase{"mem", "mem"}, TierCase{"file", "file"},
                                           TierCase{"fs", "fs"}),
                         [](const auto& info) { return info.param.name; });

// A tier whose reads come back short (half the bytes, then garbage) leaves junk in the pool blocks:
// the engine must recompute over it and answer the same.
TEST(OracleFaults, ShortReadsFallBackToRecompute) {
  auto base = OpenTier("mem://?capacity=16MiB");
  ASSERT_TRUE(base.ok());
  auto controls = std::make_shared<FaultControls>();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<FaultTier>(std::move(base).value(), controls));
  auto store = Store::Open(std::move(tiers), StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto context = Tokens(64, 17);
  const auto prompt = Concat(context, Tokens(5, 18));
  auto first = MakeTinyEngine(store->get());
  ASSERT_TRUE(RunPrompt(*first, 1, context, 1));
  controls->short_read = true;
  auto second = MakeTinyEngine(store->get());
  auto got = RunPrompt(*second, 1, prompt, kNewTokens);
  auto ref = Recompute(prompt);
  ASSERT_TRUE(got && ref);
  EXPECT_EQ(got->stats().lookup_chunks, 4u);
  EXPECT_EQ(got->stats().loaded_tokens, 0u);
  EXPECT_EQ(got->output(), ref->output());
  EXPECT_GE(controls->injected_short_reads.load(), 1u);
}

}  // namespace
}  // namespace kvtier::internal
