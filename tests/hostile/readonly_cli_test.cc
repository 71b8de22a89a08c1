// Commands that only look change nothing: `kvtier inspect`, `stats`, `verify` (without --repair) and
// `gc --dry-run`, with and without ?capacity=1 in the URL, on a folder holding a user's files next to
// (and inside) a populated tier with a corrupt chunk and a dead writer's temporary. The whole tree's
// fingerprint (names, types, sizes, mtimes, contents, link targets) is identical before and after.
// A mistyped target is an error and creates nothing.
#include <filesystem>

#include "tiers/fs/process_runner.h"
#include "hostile/hostile_util.h"
#include "io/dir_names.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

class ReadOnlyCliTest : public ::testing::TestWithParam<Kind> {
 protected:
  ReadOnlyCliTest() : ns_(TestNamespace()) {
    root_ = base_.path() + "/tier";
    WriteFile(base_.path() + "/thesis.tmp.docx", "a user's thesis");
    WriteFile(base_.path() + "/notes/today.txt", "a user's notes");
    auto t = OpenKind(GetParam(), root_);
    EXPECT_TRUE(t.ok());
    for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(PutNo(**t, ns_, i).ok());
    const std::string chunk = ChunkFile(GetParam(), root_, IdNo(ns_, 3));
    FlipByte(chunk, 4096 + 3);
    const std::string dir = fs::path(chunk).parent_path().string();
    std::string dead = internal::MakeTempName(fs::path(chunk).filename().string());
    const size_t pid_at = dead.find('.', dead.find(".kvtmp.") + 7) + 1;
    dead.replace(pid_at, dead.find('.', pid_at) - pid_at, "4194311");
    WriteFile(dir + "/" + dead, "a dead writer's leftover");
    WriteFile(root_ + "/someone.tmp.else", "a user's file inside the tier");
  }
  std::string Url(const std::string& query = "") const {
    return std::string(GetParam() == Kind::kFile ? "file://" : "fs://") + root_ + query;
  }
  fstest::ChildResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), KVTIER_CLI);
    return fstest::Wait(fstest::Spawn(args, out_.path() + "/cli.out"));
  }

  TempDir base_, out_;
  std::string root_;
  Namespace ns_;
};

TEST_P(ReadOnlyCliTest, LookingChangesNothing) {
  const auto before = TreePrint(base_.path());
  ASSERT_FALSE(before.empty());
  for (const std::string& query : {std::string(), std::string("?capacity=1")}) {
    for (const char* cmd : {"inspect", "stats"}) {
      const auto r = Cli({cmd, "--target", Url(query)});
      EXPECT_EQ(r.exit_code, 0) << cmd << " " << query << ": " << r.output;
      EXPECT_EQ(TreePrint(base_.path()), before) << cmd << " " << query;
    }
    const auto v = Cli({"verify", "--target", Url(query)});
    EXPECT_EQ(v.exit_code, 1) << v.output;  // one corrupt chunk, reported and left in place
    EXPECT_NE(v.output.find("left in place"), std::string::npos) << v.output;
    EXPECT_EQ(TreePrint(base_.path()), before) << "verify " << query;
  }
  if (GetParam() == Kind::kFs) {
    const auto g = Cli({"gc", "--target", Url(), "--max-size", "1", "--grace", "0s", "--dry-run"});
    EXPECT_EQ(g.exit_code, 0) << g.output;
    EXPECT_EQ(TreePrint(base_.path()), before) << "gc --dry-run";
  }
  // --repair is the one that may change things: it removes the corrupt chunk and only that.
  const auto repair = Cli({"verify", "--target", Url(), "--repair"});
  EXPECT_EQ(repair.exit_code, 1) << repair.output;
  EXPECT_FALSE(Exists(ChunkFile(GetParam(), root_, IdNo(ns_, 3))));
  EXPECT_TRUE(Exists(ChunkFile(GetParam(), root_, IdNo(ns_, 0))));
  EXPECT_TRUE(Exists(root_ + "/someone.tmp.else"));
  EXPECT_TRUE(Exists(base_.path() + "/thesis.tmp.docx"));
}

TEST_P(ReadOnlyCliTest, AMistypedTargetIsAnErrorAndCreatesNothing) {
  const auto before = TreePrint(base_.path());
  const std::string scheme = GetParam() == Kind::kFile ? "file://" : "fs://";
  for (const char* cmd : {"inspect", "stats", "verify"}) {
    const auto r = Cli({cmd, "--target", scheme + base_.path() + "/tierr"});
    EXPECT_NE(r.exit_code, 0) << cmd << ": " << r.output;
    // A folder of other files is not a tier either.
    const auto n = Cli({cmd, "--target", scheme + base_.path() + "/notes"});
    EXPECT_NE(n.exit_code, 0) << cmd << ": " << n.output;
  }
  EXPECT_EQ(TreePrint(base_.path()), before);
  EXPECT_FALSE(Exists(base_.path() + "/tierr"));
}

INSTANTIATE_TEST_SUITE_P(Tiers, ReadOnlyCliTest, ::testing::Values(Kind::kFile, Kind::kFs),
                         [](const auto& info) { return KindName(info.param); });

}  // namespace
}  // namespace kvtier::testing
