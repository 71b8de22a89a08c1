#include "kvtier/keys.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kvtier {
namespace {

// Known answers computed independently with python3 hashlib (SHA-256) and libxxhash via ctypes
// (XXH3-64), following keys.h and Namespace::Make in src/core/keys.cc:
//   lp(s)      = struct.pack("<Q", len(s)) + s
//   fp         = XXH3_64(struct.pack("<IIIIBI", 1, 2, 1, 4, 2, 4))           # layout 2x1x4 bf16, 4 tok
//   namespace  = sha256(lp("kvtier-namespace-v1") + lp("test/model") + pack("<Q", fp)
//                       + lp("tenant-a") + lp(""))
//   key[i]     = sha256(namespace + key[i-1] + pack("<4I", *tokens[4i:4i+4])), key[-1] = 32 zero bytes
// with tokens 1..8.
constexpr const char* kNamespaceHex = "ca814704526062c792e25d7735199f6d9a8216a2d8ed5a93eaa16216851f835f";
constexpr const char* kKey0Hex = "4afeb55ceae08b4c6f5c6f750234fc42b99ffa4705a07235522a955018c903c9";
constexpr const char* kKey1Hex = "dae6e20d05d3c449dfa5679a4a340950d065bde2c0309a66509da9d6f32e02c1";

Layout TinyLayout() { return Layout{2, 1, 4, DType::kBF16, 4}; }

TEST(KeysTest, KnownAnswer) {
  EXPECT_EQ(TinyLayout().Fingerprint(), 0x895410de1473cfabull);
  auto ns = Namespace::Make("test/model", TinyLayout(), "tenant-a");
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(ns->Hex(), kNamespaceHex);
  std::vector<uint32_t> tokens(8);
  std::iota(tokens.begin(), tokens.end(), 1u);
  auto keys = ComputeChunkKeys(*ns, tokens);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].Hex(), kKey0Hex);
  EXPECT_EQ(keys[1].Hex(), kKey1Hex);
}

TEST(KeysTest, PartialChunkHasNoKeyAndPrefixesShareKeys) {
  auto ns = Namespace::Make("test/model", TinyLayout(), "tenant-a");
  ASSERT_TRUE(ns.ok());
  std::vector<uint32_t> tokens(11);
  std::iota(tokens.begin(), tokens.end(), 1u);
  auto keys = ComputeChunkKeys(*ns, tokens);
  ASSERT_EQ(keys.size(), 2u);  // 11 tokens = 2 full chunks + 3 uncached
  EXPECT_EQ(keys[1].Hex(), kKey1Hex);
  EXPECT_TRUE(ComputeChunkKeys(*ns, std::span<const uint32_t>(tokens.data(), 3)).empty());
}

TEST(KeysTest, KeyDependsOnWholePrefix) {
  auto ns = Namespace::Make("test/model", TinyLayout(), "tenant-a");
  ASSERT_TRUE(ns.ok());
  std::vector<uint32_t> a(8), b(8);
  std::iota(a.begin(), a.end(), 1u);
  b = a;
  b[0] = 99;  // differs only in the first chunk
  auto ka = ComputeChunkKeys(*ns, a), kb = ComputeChunkKeys(*ns, b);
  EXPECT_NE(ka[0], kb[0]);
  EXPECT_NE(ka[1], kb[1]);  // same tokens in chunk 1, different history
}

TEST(KeysTest, NamespacesSeparateTenantsModelsLayoutsSalts) {
  const Layout l = TinyLayout();
  Layout other = l;
  other.tokens_per_chunk = 8;
  const std::string base = Namespace::Make("m", l, "t")->Hex();
  EXPECT_NE(base, Namespace::Make("m", l, "u")->Hex());
  EXPECT_NE(base, Namespace::Make("n", l, "t")->Hex());
  EXPECT_NE(base, Namespace::Make("m", other, "t")->Hex());
  EXPECT_NE(base, Namespace::Make("m", l, "t", "salt")->Hex());
  EXPECT_EQ(base, Namespace::Make("m", l, "t")->Hex());
  // Length prefixes keep field boundaries: ("ab","c") and ("a","bc") differ.
  EXPECT_NE(Namespace::Make("ab", l, "c")->Hex(), Namespace::Make("a", l, "bc")->Hex());
}

TEST(KeysTest, NamespaceRejectsBadInput) {
  EXPECT_EQ(Namespace::Make("", TinyLayout(), "t").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Namespace::Make("m", Layout{}, "t").status().code(), Code::kInvalidArgument);
}

TEST(KeysTest, DigestHexRoundTrip) {
  auto d = DigestFromHex(kKey0Hex);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(DigestHex(*d), kKey0Hex);
  auto upper = DigestFromHex("4AFEB55CEAE08B4C6F5C6F750234FC42B99FFA4705A07235522A955018C903C9");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(*upper, *d);
  EXPECT_FALSE(DigestFromHex("abc").ok());
  EXPECT_FALSE(DigestFromHex(std::string(64, 'g')).ok());
}

TEST(KeysTest, NextChunkKeyMatchesComputeChunkKeys) {
  auto ns = Namespace::Make("test/model", TinyLayout(), "tenant-a");
  ASSERT_TRUE(ns.ok());
  std::vector<uint32_t> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 100u);
  auto keys = ComputeChunkKeys(*ns, tokens);
  ChunkKey k0 = NextChunkKey(*ns, nullptr, std::span<const uint32_t>(tokens.data(), 4));
  ChunkKey k1 = NextChunkKey(*ns, &k0, std::span<const uint32_t>(tokens.data() + 4, 4));
  EXPECT_EQ(keys[0], k0);
  EXPECT_EQ(keys[1], k1);
  EXPECT_NE(ChunkKeyHash{}(keys[0]), ChunkKeyHash{}(keys[1]));
}

}  // namespace
}  // namespace kvtier
