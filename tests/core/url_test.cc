#include <gtest/gtest.h>

#include "kvtier/tier.h"

namespace kvtier {
namespace {

TEST(TierUrlTest, ParsesSchemePathAndParams) {
  auto u = TierUrl::Parse("file:///var/lib/kvtier?capacity=200GiB&sync=true");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->scheme, "file");
  EXPECT_EQ(u->path, "/var/lib/kvtier");
  ASSERT_EQ(u->params.size(), 2u);
  EXPECT_EQ(u->params.at("capacity"), "200GiB");
  EXPECT_EQ(*u->GetSize("capacity", 0), 200ull << 30);
  EXPECT_TRUE(*u->GetBool("sync", false));
  EXPECT_EQ(u->ToString(), "file:///var/lib/kvtier?capacity=200GiB&sync=true");
}

TEST(TierUrlTest, EmptyPathAndPercentEscapes) {
  auto m = TierUrl::Parse("mem://?capacity=1MiB");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->scheme, "mem");
  EXPECT_EQ(m->path, "");
  auto e = TierUrl::Parse("fs:///mnt/a%20b?x=%41");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->path, "/mnt/a b");
  EXPECT_EQ(e->params.at("x"), "A");
}

TEST(TierUrlTest, ParseErrors) {
  const char* bad[] = {
      "no-scheme",            // no ://
      "://path",              // empty scheme
      "1mem://",              // scheme must start with a letter
      "me m://",              // bad character in scheme
      "file:///a%zz",         // bad escape
      "file:///a%4",          // truncated escape
      "file:///a%00b",        // NUL in path
      "mem://?=3",            // empty parameter name
      "mem://?a=1&a=2",       // duplicate parameter
  };
  for (const char* url : bad) {
    auto u = TierUrl::Parse(url);
    EXPECT_FALSE(u.ok()) << url;
    if (!u.ok()) {
      EXPECT_EQ(u.status().code(), Code::kInvalidArgument) << url;
    }
  }
}

TEST(TierUrlTest, TypedGetters) {
  auto u = TierUrl::Parse("x://?n=42&b=off&s=1.5GiB&bad=4x&neg=-1&flag");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u->GetUint("n", 0), 42u);
  EXPECT_EQ(*u->GetUint("absent", 9), 9u);
  EXPECT_FALSE(u->GetUint("neg", 0).ok());
  EXPECT_FALSE(*u->GetBool("b", true));
  EXPECT_TRUE(*u->GetBool("flag", false));  // a bare name means true
  EXPECT_FALSE(u->GetBool("n", false).ok());
  EXPECT_EQ(*u->GetSize("s", 0), 3ull << 29);
  EXPECT_FALSE(u->GetSize("bad", 0).ok());
}

TEST(TierUrlTest, CheckKnownNamesTheStrayOption) {
  auto u = TierUrl::Parse("mem://?capacity=1GiB&capcity=2GiB");
  ASSERT_TRUE(u.ok());
  Status s = u->CheckKnown({"capacity", "page"});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("capcity"), std::string::npos);
  EXPECT_TRUE(u->CheckKnown({"capacity", "capcity"}).ok());
}

TEST(ParseSizeTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseSize("512 MiB"), 512ull << 20);
  EXPECT_EQ(*ParseSize("100MB"), 100'000'000u);
  EXPECT_EQ(*ParseSize("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(*ParseSize("64k"), 65536u);
  EXPECT_EQ(*ParseSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseSize("10b"), 10u);
  EXPECT_EQ(*ParseSize("15000000TB"), 15000000000000000000ull);  // above 2^63, below 2^64
  for (const char* bad : {"", "GiB", "1.2.3", "12 parsecs", "-5", "1e30", "99999999TiB"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
}

TEST(TierUrlTest, PathsMustBeEmptyOrAbsolute) {
  EXPECT_TRUE(TierUrl::Parse("file:///abs/dir").ok());
  EXPECT_TRUE(TierUrl::Parse("mem://").ok());
  for (const char* url : {"file://relative/dir", "file://~/kv", "fs://host/pool", "file://./x"}) {
    auto u = TierUrl::Parse(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_EQ(u.status().code(), Code::kInvalidArgument);
    EXPECT_NE(u.status().message().find("must be absolute"), std::string::npos) << u.status().ToString();
    EXPECT_NE(u.status().message().find(":///"), std::string::npos) << u.status().ToString();
  }
}

TEST(ParseSizeTest, ExactWithoutFloatingPoint) {
  EXPECT_EQ(*ParseSize("9007199254740993"), 9007199254740993ull);  // 2^53 + 1
  EXPECT_EQ(*ParseSize("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"18446744073709551616", "16777216TiB", ".", "nan", "inf", "1e30GiB"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
}

TEST(ParseDurationTest, UnitsAndBound) {
  EXPECT_EQ(ParseDuration("90")->count(), 90);
  EXPECT_EQ(ParseDuration("1d")->count(), 86400);
  EXPECT_FALSE(ParseDuration("999999999d").ok());
  EXPECT_FALSE(ParseDuration("1w").ok());
}

TEST(FormatBytesTest, HumanUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB");
}

}  // namespace
}  // namespace kvtier
