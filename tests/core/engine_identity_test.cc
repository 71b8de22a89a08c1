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

TEST(EngineIdentity, EveryFieldChangesTheNamespaceAndOldNamespacesKeepTheirIds) {
  const EngineIdentity base = Sglang();
  auto ns = MakeNamespace(base, SmallLayout(), "t");
  ASSERT_TRUE(ns.ok());
  ASSERT_NE(ns->identity(), nullptr);
  EXPECT_EQ(*ns->identity(), base.Encode());
  // The id is Namespace::Make's with the encoding as its salt: the existing function is unchanged.
  EXPECT_EQ(ns->id(), Namespace::Make("org/model", SmallLayout(), "t", base.Encode())->id());
  EXPECT_EQ(Namespace::Make("org/model", SmallLayout(), "t")->identity(), nullptr);
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
