#include "progress/progress.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kvtier::internal {
namespace {

struct Fixture {
  double now = 0;
  std::ostringstream out;
  ProgressOptions Options(bool live) {
    ProgressOptions o;
    o.live = live;
    o.now_seconds = [this] { return now; };
    return o;
  }
};

// In a log: the first status at once, then at most one line per 10 s, however often it is updated.
TEST(ProgressTest, LogGetsOneLinePerInterval) {
  Fixture f;
  {
    ProgressReporter p(&f.out, f.Options(false));
    for (int i = 0; i <= 300; ++i) {  // 30 s of updates every 0.1 s
      f.now = i * 0.1;
      p.Update("0/4 requests");
    }
  }
  EXPECT_EQ(f.out.str(), "0/4 requests\n0/4 requests\n0/4 requests\n0/4 requests\n");  // 0, 10, 20, 30 s
}

// On a terminal: one line redrawn in place, ended by a note or Done.
TEST(ProgressTest, TerminalRedrawsOneLine) {
  Fixture f;
  ProgressReporter p(&f.out, f.Options(true));
  p.Update("1/4");
  f.now = 0.1;
  p.Update("2/4");  // under the redraw interval: skipped
  f.now = 0.3;
  p.Update("3/4");
  p.Note("phase done");
  p.Update("0/8");  // a note restarts the count: shown at once
  p.Done();
  EXPECT_EQ(f.out.str(), "\r\x1b[K1/4\r\x1b[K3/4\nphase done\n\r\x1b[K0/8\n");
  EXPECT_EQ(f.out.str().find("2/4"), std::string::npos);
}

TEST(ProgressTest, NullStreamDropsEverything) {
  ProgressReporter p(nullptr, ProgressOptions{});
  p.Update("x");
  p.Note("y");
  p.Done();
  SUCCEED();
}

TEST(ProgressTest, ForAStreamThatIsNotStderrIsNotLive) {
  std::ostringstream out;
  ProgressReporter p = ProgressReporter::For(&out);
  p.Update("a");
  p.Done();
  EXPECT_EQ(out.str(), "a\n");  // a line of its own, no carriage return
}

}  // namespace
}  // namespace kvtier::internal
