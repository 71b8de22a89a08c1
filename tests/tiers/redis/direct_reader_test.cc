// DirectReader over a socket pair: replies split anywhere, bulk strings landing in scattered pieces,
// strings too large for the destination dropped without losing the stream, and broken streams.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "tiers/redis/direct_reader.h"

namespace kvtier::redis {
namespace {

class DirectReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    if (writer_.joinable()) writer_.join();
    CloseWriter();
    ::close(fds_[0]);
  }
  void CloseWriter() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }
  // Sends `bytes` from another thread in pieces of `step` bytes (1: one byte per write), then closes
  // the writing end when `close` is set.
  void Send(std::string bytes, size_t step, bool close = false) {
    writer_ = std::thread([this, bytes = std::move(bytes), step, close] {
      for (size_t i = 0; i < bytes.size(); i += step) {
        const size_t n = std::min(step, bytes.size() - i);
        ASSERT_EQ(::write(fds_[1], bytes.data() + i, n), static_cast<ssize_t>(n));
      }
      if (close) CloseWriter();
    });
  }
  static std::string Bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }
  static std::string Pattern(size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 31 + seed);
    return s;
  }
  int fds_[2] = {-1, -1};
  DirectReader reader_;
  std::thread writer_;
};

TEST_F(DirectReaderTest, PipelineOfEveryKindSplitAtEveryByte) {
  const std::string big = Pattern(300000, 7);  // larger than the reader's buffer: read straight in
  Send("+OK\r\n" + Bulk(big) + "$-1\r\n-MOVED 3999 127.0.0.1:7001\r\n:42\r\n" + Bulk("abc"), 1);
  auto ok = reader_.Next(fds_[0], {}, {}, nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->kind, DirectReply::Kind::kStatus);
  EXPECT_EQ(ok->text, "OK");

  std::vector<std::byte> head(1000), a(99999), b(300000 - 1000 - 99999);
  const std::span<std::byte> rest[] = {a, b};
  bool wrote = false;
  auto bulk = reader_.Next(fds_[0], head, rest, &wrote);
  ASSERT_TRUE(bulk.ok()) << bulk.status().ToString();
  EXPECT_EQ(bulk->kind, DirectReply::Kind::kBulk);
  EXPECT_TRUE(bulk->landed);
  EXPECT_TRUE(wrote);
  std::string got(reinterpret_cast<const char*>(head.data()), head.size());
  got.append(reinterpret_cast<const char*>(a.data()), a.size());
  got.append(reinterpret_cast<const char*>(b.data()), b.size());
  EXPECT_EQ(got, big);

  EXPECT_EQ(reader_.Next(fds_[0], head, {}, nullptr)->kind, DirectReply::Kind::kNil);
  auto moved = reader_.Next(fds_[0], head, {}, nullptr);
  EXPECT_EQ(moved->kind, DirectReply::Kind::kError);
  EXPECT_EQ(moved->text, "MOVED 3999 127.0.0.1:7001");
  auto n = reader_.Next(fds_[0], head, {}, nullptr);
  EXPECT_EQ(n->kind, DirectReply::Kind::kInteger);
  EXPECT_EQ(n->integer, 42);
  std::vector<std::byte> small(3);
  auto abc = reader_.Next(fds_[0], small, {}, nullptr);
  ASSERT_TRUE(abc.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(small.data()), 3), "abc");
  EXPECT_EQ(reader_.buffered(), 0u);
}

TEST_F(DirectReaderTest, ManyRepliesInOneWriteLandWhereTheyBelong) {
  std::string all;
  std::vector<std::string> values;
  for (int i = 0; i < 20; ++i) {
    values.push_back(Pattern(1000 + i * 5000, i));
    all += Bulk(values.back());
  }
  Send(all, all.size());
  for (int i = 0; i < 20; ++i) {
    std::vector<std::byte> dst(values[i].size() + 10, std::byte{0xEE});  // room to spare
    auto r = reader_.Next(fds_[0], dst, {}, nullptr);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    ASSERT_EQ(r->len, values[i].size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(dst.data()), r->len), values[i]) << i;
    EXPECT_EQ(dst[r->len], std::byte{0xEE}) << "wrote past the string";
  }
}

TEST_F(DirectReaderTest, StringTooLargeIsDroppedAndTheNextReplyStillReads) {
  Send(Bulk(Pattern(200000, 3)) + Bulk("next"), 4096);
  std::vector<std::byte> dst(1000, std::byte{0xEE});
  bool wrote = false;
  auto r = reader_.Next(fds_[0], dst, {}, &wrote);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->len, 200000u);
  EXPECT_FALSE(r->landed);
  EXPECT_FALSE(wrote);
  EXPECT_EQ(dst, std::vector<std::byte>(1000, std::byte{0xEE}));
  auto next = reader_.Next(fds_[0], dst, {}, nullptr);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(dst.data()), 4), "next");
}

TEST_F(DirectReaderTest, ConnectionClosedHalfWayIsARetryableErrorAndSaysItWrote) {
  const std::string value = Pattern(100000, 1);
  Send("$100000\r\n" + value.substr(0, 50000), 7000, /*close=*/true);
  std::vector<std::byte> dst(100000);
  bool wrote = false;
  auto r = reader_.Next(fds_[0], dst, {}, &wrote);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIOError);
  EXPECT_TRUE(r.status().retryable());
  EXPECT_TRUE(wrote);
}

TEST_F(DirectReaderTest, MalformedRepliesAreErrors) {
  for (const std::string bad : {"$12x\r\n", "?what\r\n", "$3\r\nabcXY", "+OK\n", "$-5\r\n"}) {
    DirectReader reader;
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    ASSERT_EQ(::write(fds[1], bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
    ::close(fds[1]);
    std::vector<std::byte> dst(16);
    auto r = reader.Next(fds[0], dst, {}, nullptr);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kIOError) << bad;
    ::close(fds[0]);
  }
}

TEST_F(DirectReaderTest, SilentServerTimesOut) {
  timeval tv{0, 20000};  // 20 ms: only how the timeout is reported is checked
  ASSERT_EQ(::setsockopt(fds_[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  std::vector<std::byte> dst(16);
  auto r = reader_.Next(fds_[0], dst, {}, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(r.status().retryable());
}

}  // namespace
}  // namespace kvtier::redis
