#include "kvtier/layout.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace kvtier {
namespace {

TEST(LayoutTest, BytesPerTokenAndChunk) {
  Layout l{32, 8, 128, DType::kBF16, 256};
  EXPECT_EQ(l.BytesPerToken(), 2ull * 32 * 8 * 128 * 2);
  EXPECT_EQ(l.BytesPerChunk(), l.BytesPerToken() * 256);
  l.dtype = DType::kFP32;
  EXPECT_EQ(l.BytesPerToken(), 2ull * 32 * 8 * 128 * 4);
  l.dtype = DType::kFP8;
  EXPECT_EQ(l.BytesPerToken(), 2ull * 32 * 8 * 128);
}

TEST(LayoutTest, PresetSizes) {
  // 2 (K,V) x layers x kv_heads x head_dim x 2 bytes (bf16), from each model's config.json.
  struct Want {
    const char* name;
    uint64_t bytes_per_token;
  };
  const Want wants[] = {
      {"llama-3.1-8b", 128ull << 10},   // 2*32*8*128*2
      {"llama-3.1-70b", 320ull << 10},  // 2*80*8*128*2
      {"qwen2.5-32b", 256ull << 10},    // 2*64*8*128*2
      {"qwen3-coder-480b-a35b", 2ull * 62 * 8 * 128 * 2},
      {"qwen2.5-0.5b", 12ull << 10},    // 2*24*2*64*2
      {"deepseek-v3", 61ull * 576 * 2},  // 61 MLA layers of kv_lora_rank 512 + rope 64
      {"gpt-oss-120b", 36ull * 8 * 128 * 2},  // 36 layers (18 window, 18 full) x 8 heads x (64 + 64)
      {"gpt-oss-20b", 24ull * 8 * 128 * 2},
      {"gemma-3-27b", 62ull * 16 * 256 * 2},  // 62 layers (52 window, 10 global) x 16 heads x (128 + 128)
      {"qwen3-next-80b-a3b", 12ull * 2 * 512 * 2},  // the 12 full-attention layers; 36 carry a state
  };
  for (const Want& w : wants) {
    auto p = FindModelPreset(w.name);
    ASSERT_TRUE(p.ok()) << w.name;
    EXPECT_EQ(p->layout.BytesPerToken(), w.bytes_per_token) << w.name;
    EXPECT_EQ(p->layout.tokens_per_chunk, 256u);
    EXPECT_EQ(p->layout.dtype, DType::kBF16);
    EXPECT_TRUE(p->layout.Validate().ok());
  }
  EXPECT_EQ(FindModelPreset("llama-3.1-8b")->layout.BytesPerChunk(), 32ull << 20);
  // A state is stored once per chunk: 36 Gated DeltaNet layers x (32 x 128 x 128 + 8192 x 3) bf16 values.
  EXPECT_EQ(FindModelPreset("qwen3-next-80b-a3b")->layout.BytesPerChunk(), 12ull * 2 * 512 * 2 * 256 + 36ull * 1097728);
  EXPECT_EQ(ModelPresets().size(), std::size(wants));
}

TEST(LayoutTest, PresetGroupsFollowTheirConfigs) {
  const Layout gpt = FindModelPreset("gpt-oss-120b")->layout;
  ASSERT_EQ(gpt.groups.size(), 2u);
  EXPECT_EQ(gpt.groups[0].kind, GroupKind::kWindowKV);
  EXPECT_EQ(gpt.groups[0].window, 128u);
  EXPECT_EQ(gpt.groups[0].layers.front(), 0u);  // layer_types starts with sliding_attention
  EXPECT_EQ(gpt.groups[1].layers.front(), 1u);
  const Layout gemma = FindModelPreset("gemma-3-27b")->layout;
  EXPECT_EQ(gemma.groups[1].layers, (std::vector<uint32_t>{5, 11, 17, 23, 29, 35, 41, 47, 53, 59}));
  EXPECT_EQ(gemma.groups[0].window, 1024u);
  const Layout qwen = FindModelPreset("qwen3-next-80b-a3b")->layout;
  EXPECT_EQ(qwen.groups[0].layers.front(), 3u);  // full_attention_interval 4
  EXPECT_EQ(qwen.groups[0].layers.size(), 12u);
  EXPECT_EQ(qwen.groups[1].kind, GroupKind::kState);
  for (const ModelPreset& p : ModelPresets()) {
    EXPECT_FALSE(p.source.empty()) << p.name;
    auto spec = ParseLayoutSpec(p.layout.Spec());
    ASSERT_TRUE(spec.ok()) << p.name << ": " << spec.status().ToString();
    EXPECT_EQ(*spec, p.layout) << p.name;
  }
}

TEST(LayoutTest, UnknownPresetListsKnownOnes) {
  auto p = FindModelPreset("gpt-17");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("llama-3.1-8b"), std::string::npos);
}

TEST(LayoutTest, ValidateRejectsZeroAndHuge) {
  EXPECT_FALSE((Layout{0, 8, 128}).Validate().ok());
  EXPECT_FALSE((Layout{32, 0, 128}).Validate().ok());
  EXPECT_FALSE((Layout{32, 8, 0}).Validate().ok());
  EXPECT_FALSE((Layout{32, 8, 128, DType::kBF16, 0}).Validate().ok());
  EXPECT_FALSE((Layout{1024, 64, 256, DType::kFP32, 4096}).Validate().ok());  // > 4 GiB per chunk
  EXPECT_TRUE((Layout{1, 1, 1, DType::kFP8, 1}).Validate().ok());
}

TEST(LayoutTest, FingerprintKnownAnswerAndSensitivity) {
  // XXH3-64 of the 21-byte encoding (u32 1, layers, kv_heads, head_dim, u8 dtype, u32 tokens), computed
  // with python3 + libxxhash through ctypes (struct.pack("<IIIIBI", 1, 32, 8, 128, 2, 256)).
  EXPECT_EQ((Layout{32, 8, 128, DType::kBF16, 256}).Fingerprint(), 0x162f86d263d2d600ull);
  std::set<uint64_t> seen;
  seen.insert(Layout{32, 8, 128}.Fingerprint());
  seen.insert(Layout{33, 8, 128}.Fingerprint());
  seen.insert(Layout{32, 4, 128}.Fingerprint());
  seen.insert(Layout{32, 8, 64}.Fingerprint());
  seen.insert(Layout{32, 8, 128, DType::kFP16}.Fingerprint());
  seen.insert(Layout{32, 8, 128, DType::kBF16, 128}.Fingerprint());
  EXPECT_EQ(seen.size(), 6u);
}

// Chunk headers and namespace ids carry these fingerprints: pools written by earlier builds stay
// readable only while every preset of then keeps its fingerprint bit for bit. Computed by the code of
// commit 6efcd0e (before layouts had groups), which wrote Layout::Fingerprint() of each preset.
TEST(LayoutTest, PresetFingerprintsArePinned) {
  const std::pair<const char*, uint64_t> pinned[] = {
      {"llama-3.1-8b", 0x162f86d263d2d600ull},
      {"llama-3.1-70b", 0xb572fac31b8bcabaull},
      {"qwen2.5-32b", 0x24af90074f46c481ull},
      {"qwen3-coder-480b-a35b", 0xab0be10317727445ull},
      {"qwen2.5-0.5b", 0x08383a1a9a291bcdull},
  };
  for (const auto& [name, fingerprint] : pinned) {
    auto p = FindModelPreset(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p->layout.Fingerprint(), fingerprint) << name;
  }
}

TEST(LayoutTest, DTypeNamesRoundTrip) {
  for (DType d : {DType::kFP32, DType::kFP16, DType::kBF16, DType::kFP8}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_FALSE(ParseDType("int4").ok());
  EXPECT_EQ((Layout{32, 8, 128}).ToString(), "32x8x128 bf16, 256 tokens/chunk");
}

}  // namespace
}  // namespace kvtier
