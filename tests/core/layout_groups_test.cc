// Layer groups (kvtier/layout.h): one layout model for every model family, the classic form kept bit
// for bit, the spec text that the C API and Python share.
#include "kvtier/layout.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvtier {
namespace {

LayerGroup KV(std::vector<uint32_t> layers, uint32_t heads, uint32_t k_dim, uint32_t v_dim) {
  LayerGroup g;
  g.layers = std::move(layers);
  g.kv_heads = heads;
  g.k_head_dim = k_dim;
  g.v_head_dim = v_dim;
  return g;
}

LayerGroup Window(std::vector<uint32_t> layers, uint32_t heads, uint32_t dim, uint32_t window) {
  LayerGroup g = KV(std::move(layers), heads, dim, dim);
  g.kind = GroupKind::kWindowKV;
  g.window = window;
  return g;
}

LayerGroup Latent(std::vector<uint32_t> layers, uint32_t dim, DType dtype = DType::kBF16) {
  LayerGroup g;
  g.kind = GroupKind::kLatent;
  g.layers = std::move(layers);
  g.latent_dim = dim;
  g.dtype = dtype;
  return g;
}

LayerGroup State(std::vector<uint32_t> layers, uint64_t bytes) {
  LayerGroup g;
  g.kind = GroupKind::kState;
  g.layers = std::move(layers);
  g.state_bytes = bytes;
  g.dtype = DType::kFP32;
  return g;
}

Layout Grouped(uint32_t layers, std::vector<LayerGroup> groups, uint32_t tokens = 16) {
  Layout l;
  l.layers = layers;
  l.tokens_per_chunk = tokens;
  l.groups = std::move(groups);
  return l;
}

// Every kind at once: window layers 0 and 2, full layers 1 and 3 (K and V dims differ), an MLA-like
// layer 4 in fp8, a state layer 5.
Layout Mixed() {
  return Grouped(6, {Window({0, 2}, 4, 8, 4), KV({1, 3}, 4, 16, 8), Latent({4}, 24, DType::kFP8), State({5}, 100)});
}

TEST(LayoutGroupsTest, ClassicIsOneKVGroupOverEveryLayer) {
  const Layout l{4, 2, 8, DType::kFP16, 16};
  ASSERT_TRUE(l.classic());
  const auto groups = l.Groups();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, GroupKind::kKV);
  EXPECT_EQ(groups[0].layers, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(groups[0].kv_heads, 2u);
  EXPECT_EQ(groups[0].k_head_dim, 8u);
  EXPECT_EQ(groups[0].v_head_dim, 8u);
  EXPECT_EQ(groups[0].dtype, DType::kFP16);
  // The grouped form holds the same groups, but orders a chunk head-major: another layout.
  const Layout g = l.Grouped();
  EXPECT_FALSE(g.classic());
  EXPECT_EQ(g.Groups(), groups);
  EXPECT_EQ(g.BytesPerChunk(), l.BytesPerChunk());
  EXPECT_NE(g.Fingerprint(), l.Fingerprint());
  EXPECT_TRUE(g.Validate().ok()) << g.Validate().ToString();
}

TEST(LayoutGroupsTest, BytesOfEveryKind) {
  const Layout l = Mixed();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  // Per token: window 2 layers x 4 heads x (8 + 8) x 2 bytes; full 2 x 4 x (16 + 8) x 2; latent 24 x 1.
  const uint64_t per_token = 2 * 4 * 16 * 2 + 2 * 4 * 24 * 2 + 24;
  EXPECT_EQ(l.BytesPerToken(), per_token);
  EXPECT_EQ(l.BytesPerChunk(), per_token * 16 + 100);  // the state once per chunk
  EXPECT_EQ(l.HeadSplitHeads(), 4u);
}

TEST(LayoutGroupsTest, GroupedFingerprintKnownAnswerAndSensitivity) {
  // XXH3-64 of the version-2 encoding (docs/models.md), computed with python3 + libxxhash through
  // ctypes: struct.pack("<IIII", 2, 2, 16, 1) + pack("<BB", 1, 2) + pack("<IIIII", 0, 0, 0, 576, 0) +
  // pack("<Q", 0) + pack("<III", 2, 0, 1).
  EXPECT_EQ(Grouped(2, {Latent({0, 1}, 576)}).Fingerprint(), 0xabfbfb2e3b226bd9ull);
  std::set<uint64_t> seen;
  for (const Layout& l : {Mixed(), Grouped(6, {Window({0, 2}, 4, 8, 4), KV({1, 3}, 4, 16, 4), Latent({4}, 24, DType::kFP8), State({5}, 100)}),
                          Grouped(6, {Window({0, 2}, 4, 8, 8), KV({1, 3}, 4, 16, 8), Latent({4}, 24, DType::kFP8), State({5}, 100)}),
                          Grouped(6, {Window({0, 1}, 4, 8, 4), KV({2, 3}, 4, 16, 8), Latent({4}, 24, DType::kFP8), State({5}, 100)}),
                          Grouped(6, {Window({0, 2}, 4, 8, 4), KV({1, 3}, 4, 16, 8), Latent({4}, 24), State({5}, 100)}),
                          Grouped(6, {Window({0, 2}, 4, 8, 4), KV({1, 3}, 4, 16, 8), Latent({4}, 24, DType::kFP8), State({5}, 101)}),
                          Grouped(6, {KV({1, 3}, 4, 16, 8), Window({0, 2}, 4, 8, 4), Latent({4}, 24, DType::kFP8), State({5}, 100)}),
                          Grouped(6, {Window({0, 2}, 4, 8, 4), KV({1, 3}, 4, 16, 8), Latent({4}, 24, DType::kFP8), State({5}, 100)}, 32)}) {
    ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
    seen.insert(l.Fingerprint());
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(LayoutGroupsTest, ValidateRefusesWhatItWasNotWrittenFor) {
  const auto bad = [](const Layout& l) { return !l.Validate().ok(); };
  EXPECT_TRUE(bad(Grouped(3, {KV({0, 1}, 2, 8, 8)})));                       // layer 2 in no group
  EXPECT_TRUE(bad(Grouped(2, {KV({0, 1}, 2, 8, 8), Latent({1}, 8)})));       // layer 1 twice
  EXPECT_TRUE(bad(Grouped(2, {KV({0, 2}, 2, 8, 8)})));                       // past the layers
  EXPECT_TRUE(bad(Grouped(2, {KV({1, 0}, 2, 8, 8)})));                       // not ascending
  EXPECT_TRUE(bad(Grouped(2, {KV({0}, 2, 8, 8), KV({1}, 4, 8, 8)})));        // heads differ
  EXPECT_TRUE(bad(Grouped(2, {KV({0}, 2, 8, 0), Latent({1}, 8)})));          // a zero V dim
  EXPECT_TRUE(bad(Grouped(2, {Window({0, 1}, 2, 8, 0)})));                   // a window of 0
  LayerGroup kv_with_window = KV({0, 1}, 2, 8, 8);
  kv_with_window.window = 4;
  EXPECT_TRUE(bad(Grouped(2, {kv_with_window})));
  LayerGroup latent_with_heads = Latent({0, 1}, 8);
  latent_with_heads.kv_heads = 1;
  EXPECT_TRUE(bad(Grouped(2, {latent_with_heads})));
  EXPECT_TRUE(bad(Grouped(2, {State({0, 1}, 0)})));
  LayerGroup unknown = Latent({0, 1}, 8);
  unknown.kind = static_cast<GroupKind>(9);
  EXPECT_TRUE(bad(Grouped(2, {unknown})));
  Layout mixed_forms = Grouped(2, {KV({0, 1}, 2, 8, 8)});
  mixed_forms.kv_heads = 2;  // a grouped layout leaves the classic fields alone
  EXPECT_TRUE(bad(mixed_forms));
  EXPECT_TRUE(bad(Grouped(2, {State({0, 1}, 3ull << 30)})));              // 6 GiB of state per chunk
  EXPECT_TRUE(bad(Grouped(1, {KV({0}, 1u << 20, 1u << 20, 1u << 20)})));  // products past 2^64 refused
  EXPECT_TRUE(bad(Grouped(2, {KV({0, 1}, 2, 8, 8)}, 0)));                 // no tokens
  EXPECT_FALSE(bad(Mixed()));
}

TEST(LayoutGroupsTest, SpecRoundTripsBothForms) {
  for (const Layout& l : {Mixed(), Layout{32, 8, 128, DType::kBF16, 256}, Layout{4, 2, 8, DType::kFP16, 16}.Grouped()}) {
    auto parsed = ParseLayoutSpec(l.Spec());
    ASSERT_TRUE(parsed.ok()) << l.Spec() << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, l) << l.Spec();
    EXPECT_EQ(parsed->Fingerprint(), l.Fingerprint());
  }
  EXPECT_EQ(Layout({32, 8, 128, DType::kBF16, 256}).Spec(), "layers=32 tokens=256 classic:heads=8,dim=128,dtype=bf16");
  EXPECT_EQ(Mixed().Spec(),
            "layers=6 tokens=16 window:layers=0+2,heads=4,dim=8,window=4,dtype=bf16 "
            "kv:layers=1+3,heads=4,dim=16,v_dim=8,dtype=bf16 latent:layers=4,dim=24,dtype=fp8 "
            "state:layers=5,bytes=100,dtype=fp32");
  auto every = ParseLayoutSpec("layers=8 tokens=4 window:layers=0-6/2,heads=1,dim=2,window=3,dtype=bf16 kv:layers=1-7/2,heads=1,dim=2,dtype=bf16");
  ASSERT_TRUE(every.ok()) << every.status().ToString();
  EXPECT_EQ(every->groups[0].layers, (std::vector<uint32_t>{0, 2, 4, 6}));
  EXPECT_EQ(every->groups[1].layers, (std::vector<uint32_t>{1, 3, 5, 7}));
}

TEST(LayoutGroupsTest, SpecRefusesAnythingElse) {
  for (const char* spec : {"", "layers=2", "layers=2 tokens=16", "tokens=16 layers=2 latent:layers=0-1,dim=8,dtype=bf16",
                           "layers=02 tokens=16 latent:layers=0-1,dim=8,dtype=bf16",
                           "layers=2 tokens=16 latent:layers=0-1,dim=8",
                           "layers=2 tokens=16 latent:layers=0-1,dim=8,dim=8,dtype=bf16",
                           "layers=2 tokens=16 latent:layers=0-1,dim=8,dtype=bf17",
                           "layers=2 tokens=16 latent:layers=0-1,heads=2,dim=8,dtype=bf16",
                           "layers=2 tokens=16 mamba:layers=0-1,bytes=8,dtype=bf16",
                           "layers=2 tokens=16 latent:layers=1-0,dim=8,dtype=bf16",
                           "layers=2 tokens=16 latent:layers=0/2,dim=8,dtype=bf16",
                           "layers=2 tokens=16  latent:layers=0-1,dim=8,dtype=bf16",
                           "layers=2 tokens=16 classic:heads=2,dim=8,dtype=bf16 latent:layers=0-1,dim=8,dtype=bf16",
                           "layers=2 tokens=16 classic:heads=2,dim=8",
                           "layers=2 tokens=16 latent:layers=0,dim=8,dtype=bf16"}) {
    auto parsed = ParseLayoutSpec(spec);
    EXPECT_FALSE(parsed.ok()) << spec;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << spec;
    }
  }
}

TEST(LayoutGroupsTest, RequireClassicLayoutNamesWhoRefuses) {
  EXPECT_TRUE(RequireClassicLayout(Layout{2, 2, 8}, "bench x").ok());
  const Status s = RequireClassicLayout(Mixed(), "bench x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("bench x"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
