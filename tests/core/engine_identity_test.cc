// EngineIdentity: canonical encoding, strict parsing, and namespaces that differ in every field.
#include "kvtier/engine_identity.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier {
namespace {

Layout SmallLayout() { return Layout{2, 1, 4, DType::kBF16, 4}; }

EngineIdentity Sglang() {
  EngineIdentity id;
  EXPECT_TRUE(id.Set("engine", "sglang").ok());
  EXPECT_TRUE(id.Set("model", "org/model").ok());
  EXPECT_TRUE(id.Set("layout", "page_first").ok());
  EXPECT_TRUE(id.Set("tp_size", "2").ok());
  return id;
}

TEST(EngineIdentity, EncodingIsSortedVersionedAndRoundTrips) {
  const EngineIdentity id = Sglang();
  const std::string text = id.Encode();
  EXPECT_EQ(text, "kvtier-engine-identity-v1\nengine=sglang\nlayout=page_first\nmodel=org/model\ntp_size=2\n");
  auto back = EngineIdentity::Parse(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Encode(), text);
}

TEST(EngineIdentity, RefusesControlCharactersBadNamesAndNonCanonicalText) {
  EngineIdentity id;
  EXPECT_FALSE(id.Set("model", std::string("a\0b", 3)).ok());
  EXPECT_FALSE(id.Set("model", "a\nb").ok());
  EXPECT_FALSE(id.Set("model", "a\x7f").ok());
  EXPECT_FALSE(id.Set("Model", "x").ok());
  EXPECT_FALSE(id.Set("mo=del", "x").ok());
  EXPECT_FALSE(id.Set("", "x").ok());
  EXPECT_FALSE(id.Set("model", std::string(EngineIdentity::kMaxValueBytes + 1, 'x')).ok());
  EXPECT_FALSE(id.Validate().ok());  // engine and model are required
  for (const char* bad : {"", "kvtier-engine-identity-v2\nengine=a\nmodel=b\n",
                          "kvtier-engine-identity-v1\nmodel=b\nengine=a\n",   // not sorted
                          "kvtier-engine-identity-v1\nengine=a\nengine=a\nmodel=b\n",
                          "kvtier-engine-identity-v1\nengine=a\nmodel=b",      // unterminated
                          "kvtier-engine-identity-v1\nengine=a\n"}) {         // no model
    EXPECT_FALSE(EngineIdentity::Parse(bad).ok()) << bad;
  }
}

// Known answers computed independently with python3 hashlib, lp(s) = struct.pack("<Q", len(s)) + s,
// fp = 0x895410de1473cfab (SmallLayout's fingerprint, keys_test.cc), enc = Sglang().Encode():
//   identity = sha256(lp("kvtier-identity-namespace-v2") + lp("org/model") + pack("<Q", fp) + lp("t") + lp(enc))
//   plain    = sha256(lp("kvtier-namespace-v1")          + lp("org/model") + pack("<Q", fp) + lp("t") + lp(enc))
// `plain` is also the id identity namespaces had before the domain step (builds before issue 39 item 8).
constexpr const char* kIdentityNsHex = "4714c8e186c1b228b390115e6be08f680ace91dee24df441c7a7bd2e3aa1ab14";
constexpr const char* kPlainSaltedNsHex = "9fe784592442fbd8c2e59b400fec9fbbc0c62c76e63de74e2a42eb027a5517f0";

TEST(EngineIdentity, IdentityNamespacesHaveTheirOwnDomainAndEveryFieldChangesThem) {
  const EngineIdentity base = Sglang();
  auto ns = MakeNamespace(base, SmallLayout(), "t");
  ASSERT_TRUE(ns.ok());
  ASSERT_NE(ns->identity(), nullptr);
  EXPECT_EQ(*ns->identity(), base.Encode());
  EXPECT_EQ(ns->Hex(), kIdentityNsHex);
  // A plain namespace whose salt is the encoding keeps its id, and it is not the identity's: neither
  // kind of namespace can be made to stand for the other (issue 39, item 8).
  auto plain = Namespace::Make("org/model", SmallLayout(), "t", base.Encode());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->Hex(), kPlainSaltedNsHex);
  EXPECT_NE(ns->id(), plain->id());
  EXPECT_EQ(plain->identity(), nullptr);
  for (const auto& [name, value] : base.fields()) {
    EngineIdentity changed = base;
    ASSERT_TRUE(changed.Set(name, value + "x").ok());
    EXPECT_NE(MakeNamespace(changed, SmallLayout(), "t")->id(), ns->id()) << name;
  }
  EngineIdentity more = base;
  ASSERT_TRUE(more.Set("io_path", "v1").ok());
  EXPECT_NE(MakeNamespace(more, SmallLayout(), "t")->id(), ns->id());
  EXPECT_NE(MakeNamespace(base, SmallLayout(), "u")->id(), ns->id());
}

}  // namespace
}  // namespace kvtier
