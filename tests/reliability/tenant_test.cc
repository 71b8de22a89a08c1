// Tenant isolation: the same token ids sent by two tenants give disjoint keys and namespaces; one
// tenant's Lookup of another's prompt finds nothing; a chunk file of one tenant copied into the place
// of another's is rejected as corruption, never served.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "kvtier/store.h"
#include "reliability/test_util.h"

namespace kvtier::reltest {
namespace {

TEST(TenantIsolation, SameTokensGiveDisjointKeys) {
  const Namespace a = MakeNamespace("tenant-a"), b = MakeNamespace("tenant-b");
  EXPECT_NE(a.id(), b.id());
  const auto tokens = Tokens(64 * SmallLayout().tokens_per_chunk, 1);
  const auto ka = ComputeChunkKeys(a, tokens), kb = ComputeChunkKeys(b, tokens);
  ASSERT_EQ(ka.size(), 64u);
  std::set<std::string> seen;
  for (const auto& k : ka) seen.insert(k.Hex());
  for (const auto& k : kb) EXPECT_EQ(seen.count(k.Hex()), 0u) << "a key shared across tenants";
  // A salt separates just as well; the same inputs give the same keys (deterministic).
  const Namespace salted = Namespace::Make("kvtier/reltest-model", SmallLayout(), "tenant-a", "s").value();
  EXPECT_NE(salted.id(), a.id());
  EXPECT_EQ(ComputeChunkKeys(MakeNamespace("tenant-a"), tokens)[63], ka[63]);
}

TEST(TenantIsolation, LookupOfAnotherTenantsPromptFindsNothing) {
  TempDir tmp;
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=2MiB"};
  if (OpenTier("file://" + tmp.path() + "/probe").ok()) opt.tiers.push_back("file://" + tmp.path() + "/f");
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const Namespace a = MakeNamespace("tenant-a"), b = MakeNamespace("tenant-b");
  const auto tokens = Tokens(8 * SmallLayout().tokens_per_chunk, 2);
  const auto ka = ComputeChunkKeys(a, tokens), kb = ComputeChunkKeys(b, tokens);
  SaveSources src(a, ka);
  ASSERT_TRUE((*store)->Save(a, ka, src.srcs).ok());
  ASSERT_TRUE((*store)->Flush().ok());
  EXPECT_EQ((*store)->Lookup(a, ka), ka.size());
  EXPECT_EQ((*store)->Lookup(b, kb), 0u);
  // Even a caller that presents tenant A's keys under tenant B's namespace finds nothing.
  EXPECT_EQ((*store)->Lookup(b, ka), 0u);
  LoadBuffers dst(kb.size(), b.layout().BytesPerChunk());
  auto n = (*store)->Load(b, ka, dst.dsts);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

// The silent-corruption case of the field: a returning session handed another request's KV. Tenant
// A's chunk file put in the place of tenant B's chunk for the same tokens must be refused.
TEST(TenantIsolation, ChunkFileCopiedIntoAnotherNamespaceIsRejected) {
  for (const std::string scheme : {"file", "fs"}) {
    SCOPED_TRACE(scheme);
    TempDir tmp;
    auto opened = OpenTier(scheme + "://" + tmp.path() + "/t");
    if (!opened.ok()) continue;  // tier not built: the corruption matrix reports the skip
    Tier& tier = **opened;
    const Namespace a = MakeNamespace("tenant-a"), b = MakeNamespace("tenant-b");
    const auto tokens = Tokens(SmallLayout().tokens_per_chunk, 3);
    const ChunkKey ka = ComputeChunkKeys(a, tokens)[0], kb = ComputeChunkKeys(b, tokens)[0];
    ASSERT_TRUE(PutExpected(tier, a, ka).ok());
    ASSERT_TRUE(PutExpected(tier, b, kb).ok());
    auto file_of = [&](const ChunkKey& k) {
      auto f = FilesUnder(tmp.path(), [&](const std::string& n) { return n.rfind(k.Hex(), 0) == 0; });
      return f.size() == 1 ? f[0] : std::string();
    };
    const std::string fa = file_of(ka), fb = file_of(kb);
    ASSERT_FALSE(fa.empty() || fb.empty());
    std::filesystem::copy_file(fa, fb, std::filesystem::copy_options::overwrite_existing);
    const Status s = GetAndVerify(tier, b, kb);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_TRUE(GetAndVerify(tier, a, ka).ok()) << "the original chunk must be untouched";
  }
}

}  // namespace
}  // namespace kvtier::reltest
