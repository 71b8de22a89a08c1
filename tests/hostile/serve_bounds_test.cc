// Issue 39, items 1-2 (the HTTP server): `kvtier serve` holds under load and abuse.
//   1. A request head is bounded: 64 MiB of small header lines grew the server by 900 MiB (kept); now
//      more than 100 fields or 16 KiB of head is refused (431) and the peak RSS stays bounded, as for
//      an oversized or chunked body.
//   2. Idle and slow connections no longer starve /healthz: 300 idle and 8 trickling connections held
//      every worker (84 s for /healthz); a trickle never tripped the per-read stall limit; 2,000
//      pipelined requests got one answer; past the listen backlog connections queued unanswered.
// The server runs as a child on 127.0.0.1 (port 0) with its default bounds; loops are bounded, and the
// one timing bound (/healthz within 1 s) is the issue's.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <iostream>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hostile/hostile_util.h"
#include "hostile/serve_client.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The peak RSS an oversized request may add to the server (docs/serve.md, "Bounds").
constexpr long kRssGrowthBoundKiB = 32 * 1024;

class ServeBounds : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = OpenKind(Kind::kFile, dir_.path());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(PutNo(**t, TestNamespace(), 1).ok());
  }
  void Start(std::vector<std::string> extra = {}) {
    serve_ = std::make_unique<ServeChild>(dir_.path(), logs_.path() + "/serve.log", std::move(extra));
    port_ = serve_->Port();
    ASSERT_GT(port_, 0) << "kvtier serve did not start";
  }
  // The status line of the reply to `request` sent alone on a new connection; "" when none in 30 s.
  std::string Ask(const std::string& request, milliseconds limit = milliseconds(30000)) const {
    const int fd = ConnectLoopback(port_);
    if (fd < 0) return "";
    const Exchanged x = Exchange(fd, request, HasHead, limit);
    ::close(fd);
    return FirstLine(x.in);
  }

  TempDir dir_, logs_;
  std::unique_ptr<ServeChild> serve_;
  int port_ = 0;
};

const std::string kHealth = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";

// Raises this process's soft RLIMIT_NOFILE to at least `n` (the hard limit allowing).
bool AllowDescriptors(rlim_t n) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return false;
  if (lim.rlim_cur >= n) return true;
  if (lim.rlim_max < n) return false;
  lim.rlim_cur = n;
  return ::setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

// Milliseconds a /healthz takes on a new connection (connect included); -1 when no 200 came in 30 s.
long HealthMillis(int port) {
  const auto t0 = steady_clock::now();
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  const Exchanged x = Exchange(fd, kHealth, HasHead, milliseconds(30000));
  ::close(fd);
  if (FirstLine(x.in) != "HTTP/1.1 200 OK") return -1;
  return std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0).count();
}

TEST_F(ServeBounds, OversizedHeadsAndBodiesAreRefusedWithRssBounded) {
  Start();
  ASSERT_EQ(Ask(kHealth), "HTTP/1.1 200 OK");
  const long base = serve_->StatusKiB("VmHWM:");
  ASSERT_GT(base, 0);

  // 101 small fields (well under 16 KiB): refused by count.
  std::string fields = "GET /healthz HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 100; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(Ask(fields + "\r\n"), "HTTP/1.1 431 Request Header Fields Too Large");

  // 64 MiB of small header lines, and one 64 MiB header line: refused by size, long before the end.
  std::string lines = "GET /healthz HTTP/1.1\r\nHost: t\r\n";
  while (lines.size() < (64u << 20)) lines += "X-a: b\r\n";
  EXPECT_EQ(Ask(lines), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(Ask("GET /healthz HTTP/1.1\r\nX-long: " + std::string(64u << 20, 'a')),
            "HTTP/1.1 431 Request Header Fields Too Large");
  lines = {};

  // A 64 MiB body with its length, and an endless chunked body: refused from the head.
  const std::string body(16u << 20, '{');
  EXPECT_EQ(Ask("POST /v1/lookup HTTP/1.1\r\nHost: t\r\nContent-Length: 67108864\r\n\r\n" + body),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(Ask("POST /v1/lookup HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1000000\r\n" + body),
            "HTTP/1.1 411 Length Required");

  const long peak = serve_->StatusKiB("VmHWM:");
  std::cout << "kvtier serve peak RSS: " << base << " KiB before, " << peak << " KiB after the oversized requests\n";
  EXPECT_LT(peak - base, kRssGrowthBoundKiB) << "peak RSS " << base << " KiB -> " << peak << " KiB";
  EXPECT_EQ(Ask(kHealth), "HTTP/1.1 200 OK");
}

TEST_F(ServeBounds, HealthzAnswersWithinASecondUnder300IdleAnd8SlowConnections) {
  ASSERT_TRUE(AllowDescriptors(400)) << "this test needs 400 descriptors";
  Start();
  std::vector<int> idle, slow;
  for (int i = 0; i < 300; ++i) {
    const int fd = ConnectLoopback(port_);
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  // 8 clients sending a request one byte every 2 s (a background thread, 20 bytes at most each).
  for (int i = 0; i < 8; ++i) {
    const int fd = ConnectLoopback(port_);
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    const std::string text = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    for (size_t b = 0; b < 20 && !done.load(); ++b) {
      for (int fd : slow) (void)::send(fd, &text[b], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int w = 0; w < 20 && !done.load(); ++w) std::this_thread::sleep_for(milliseconds(100));
    }
  });
  std::this_thread::sleep_for(milliseconds(500));  // every connection accepted and trickling
  long ms = HealthMillis(port_);
  if (ms < 0 || ms > 1000) ms = HealthMillis(port_);  // one retry, for a loaded test machine
  done.store(true);
  trickle.join();
  std::cout << "/healthz under 300 idle + 8 trickling connections: " << ms << " ms\n";
  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);
  EXPECT_GE(ms, 0) << "no answer to /healthz in 30 s";
  EXPECT_LE(ms, 1000) << "/healthz took " << ms << " ms";
}

TEST_F(ServeBounds, ATrickleIsDroppedAtTheRequestDeadlineAndAnIdleConnectionAtTheIdleTimeout) {
  Start();
  const int trickle = ConnectLoopback(port_), idle = ConnectLoopback(port_);
  ASSERT_GE(trickle, 0);
  ASSERT_GE(idle, 0);
  // One byte a second of an endless header value: within the per-read limit, never a whole head.
  const std::string head = "GET /healthz HTTP/1.1\r\nX-slow: ";
  ASSERT_EQ(::send(trickle, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  bool trickle_closed = false, idle_closed = false;
  for (int s = 0; s < 40 && !(trickle_closed && idle_closed); ++s) {  // the bounds are 10 s and 15 s
    std::this_thread::sleep_for(milliseconds(1000));
    if (!trickle_closed && ::send(trickle, "a", 1, MSG_NOSIGNAL) < 0) trickle_closed = true;
    char c;
    if (!trickle_closed && ::recv(trickle, &c, 1, MSG_DONTWAIT) == 0) trickle_closed = true;
    const ssize_t n = ::recv(idle, &c, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) idle_closed = true;
  }
  ::close(trickle);
  ::close(idle);
  EXPECT_TRUE(trickle_closed) << "a client sending a byte a second was kept 40 s";
  EXPECT_TRUE(idle_closed) << "a client sending nothing was kept 40 s";
  EXPECT_EQ(Ask(kHealth), "HTTP/1.1 200 OK");
}

// Splits back-to-back replies: each one's status code and body.
std::vector<std::pair<int, std::string>> SplitReplies(const std::string& in) {
  std::vector<std::pair<int, std::string>> out;
  size_t at = 0;
  for (;;) {
    const size_t end = in.find("\r\n\r\n", at);
    if (end == std::string::npos || in.compare(at, 9, "HTTP/1.1 ") != 0) return out;
    const std::string head = in.substr(at, end - at);
    const size_t cl = head.find("Content-Length: ");
    const size_t len = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
    if (in.size() < end + 4 + len) return out;
    out.emplace_back(std::stoi(head.substr(9, 3)), in.substr(end + 4, len));
    at = end + 4 + len;
  }
}

TEST_F(ServeBounds, TwoThousandPipelinedRequestsAreAnsweredInOrder) {
  Start();
  // /healthz (answered on the reading thread), a missing path, /readyz (a worker thread), in turn.
  const char* kinds[] = {"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", "GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n",
                         "GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n"};
  std::string batch;
  for (int i = 0; i < 2000; ++i) batch += kinds[i % 3];
  const int fd = ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const Exchanged x = Exchange(fd, batch, [](const std::string& in) { return SplitReplies(in).size() >= 2000; },
                               milliseconds(60000));
  ::close(fd);
  const auto replies = SplitReplies(x.in);
  ASSERT_EQ(replies.size(), 2000u) << "closed: " << x.closed;
  for (size_t i = 0; i < replies.size(); ++i) {
    const int want = i % 3 == 1 ? 404 : 200;
    const char* body = i % 3 == 0 ? "\"ok\"" : i % 3 == 1 ? "\"error\"" : "\"ready\"";
    ASSERT_EQ(replies[i].first, want) << "reply " << i;
    ASSERT_NE(replies[i].second.find(body), std::string::npos) << "reply " << i << ": " << replies[i].second;
  }
}

TEST_F(ServeBounds, PastTheConnectionLimitANewConnectionIsRefusedAtOnceNotQueued) {
  ASSERT_TRUE(AllowDescriptors(600)) << "this test needs 600 descriptors";
  Start();
  std::vector<int> held;
  for (int i = 0; i < 512; ++i) {  // the default --max-connections
    const int fd = ConnectLoopback(port_);
    ASSERT_GE(fd, 0) << "connection " << i;
    held.push_back(fd);
  }
  // Each held connection's first request is answered, so every one is accepted before the next.
  for (size_t i = 0; i < held.size(); i += 64) {
    ASSERT_EQ(FirstLine(Exchange(held[i], kHealth, HasHead, milliseconds(30000)).in), "HTTP/1.1 200 OK") << i;
  }
  const int extra = ConnectLoopback(port_);
  ASSERT_GE(extra, 0);
  const Exchanged x = Exchange(extra, kHealth, HasHead, milliseconds(10000));
  ::close(extra);
  std::cout << "connection 513: " << (x.closed && x.in.empty() ? "closed" : FirstLine(x.in)) << "\n";
  EXPECT_TRUE(x.closed || FirstLine(x.in) == "HTTP/1.1 503 Service Unavailable")
      << "the connection past the limit got neither a 503 nor a close in 10 s: '" << FirstLine(x.in) << "'";
  for (int i = 0; i < 8; ++i) ::close(held[static_cast<size_t>(i)]);
  // Room again once some close (the server sees the closes within a moment: bounded retries).
  std::string line;
  for (int tries = 0; tries < 50 && line != "HTTP/1.1 200 OK"; ++tries) {
    std::this_thread::sleep_for(milliseconds(100));
    line = Ask(kHealth);
  }
  EXPECT_EQ(line, "HTTP/1.1 200 OK");
  for (size_t i = 8; i < held.size(); ++i) ::close(held[i]);
}

}  // namespace
}  // namespace kvtier::testing
