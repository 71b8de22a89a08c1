// `kvtier inspect` on a pool written by two engine configurations shows two namespaces, each with the
// identity kept in its descriptor; a malformed descriptor is reported, never interpreted.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kvtier/engine_identity.h"
#include "kvtier/store.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

std::string Inspect(const std::string& args, int* exit_code) {
  const std::string cmd = std::string(std::getenv("KVTIER_BIN_DIR")) + "/src/tools/kvtier inspect " + args + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

Namespace IdentityNs(const std::string& layout) {
  EngineIdentity id;
  EXPECT_TRUE(id.Set("engine", "sglang").ok());
  EXPECT_TRUE(id.Set("model", "org/model").ok());
  EXPECT_TRUE(id.Set("layout", layout).ok());
  return MakeNamespace(id, Layout{1, 1, 8, DType::kFP8, 1}, "").value();
}

TEST(InspectIdentity, TwoConfigurationsShowTwoNamespacesWithTheirIdentities) {
  if (std::getenv("KVTIER_BIN_DIR") == nullptr) GTEST_SKIP() << "KVTIER_BIN_DIR unset: run via ctest";
  testing::TempDir dir;
  const std::string url = "file://" + dir.path() + "?capacity=1MiB";
  const Namespace a = IdentityNs("page_first"), b = IdentityNs("layer_first");
  {
    StoreOptions o;
    o.tiers = {url};
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<std::byte> bytes(16, std::byte{7});
    for (const Namespace* ns : {&a, &b}) {
      const ChunkKey key = NextChunkKey(*ns, nullptr, std::vector<uint32_t>{1});
      const std::span<const std::byte> piece(bytes);
      const GatherList src(&piece, 1);
      ASSERT_TRUE((*store)->Save(*ns, {&key, 1}, {&src, 1}).ok());
    }
    ASSERT_TRUE((*store)->Flush().ok());
  }
  int rc = -1;
  const std::string text = Inspect("--target '" + url + "'", &rc);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("namespaces  2"), std::string::npos) << text;
  EXPECT_NE(text.find("  " + a.Hex() + "  1 chunks"), std::string::npos) << text;
  EXPECT_NE(text.find("identity: engine=sglang layout=page_first model=org/model"), std::string::npos) << text;
  EXPECT_NE(text.find("identity: engine=sglang layout=layer_first model=org/model"), std::string::npos) << text;
  const std::string json = Inspect("--json --target '" + url + "'", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(json.find("\"layout\": \"layer_first\""), std::string::npos) << json;

  // A descriptor that is not an identity is shown as unreadable, the other namespace still shows.
  { std::ofstream(dir.path() + "/" + a.Hex() + "/NAMESPACE", std::ios::trunc) << "layout=evil\n"; }
  const std::string damaged = Inspect("--target '" + url + "'", &rc);
  EXPECT_EQ(rc, 0) << damaged;
  EXPECT_NE(damaged.find("identity: unreadable"), std::string::npos) << damaged;
  EXPECT_EQ(damaged.find("layout=evil"), std::string::npos) << damaged;
  EXPECT_NE(damaged.find("layout=layer_first"), std::string::npos) << damaged;
}

}  // namespace
}  // namespace kvtier
