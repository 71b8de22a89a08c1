// Event endpoints are checked before libzmq binds them (src/events/event_endpoint.h): an ipc:// path
// never costs a file kvtier did not create (libzmq 4.3.4 unlinks the path before binding), a tcp://
// socket without authentication binds loopback unless asked for explicitly, and ports are range-checked
// (libzmq takes 99999 modulo 2^16). Every test binds loopback or ipc:// in its own folder only.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "events/event_endpoint.h"
#include "kvtier/events.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

class EventEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-ev-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  Code OpenCode(const std::string& endpoint, bool allow_remote = false) {
    EventPublisherOptions o;
    o.endpoint = endpoint;
    o.allow_remote = allow_remote;
    return EventPublisher::Open(o).status().code();
  }

  std::string dir_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A unix socket bound at `path` and closed without unlinking: what a publisher that died leaves.
void MakeDeadSocket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
}

TEST_F(EventEndpointTest, IpcNeverRemovesAFileKvtierDidNotCreate) {
  const std::string file = dir_ + "/notes.txt";
  std::ofstream(file) << "the operator's notes";
  EXPECT_EQ(OpenCode("ipc://" + file), Code::kInvalidArgument);
  EXPECT_EQ(ReadAll(file), "the operator's notes") << "the file at the ipc:// path was removed";

  const std::string link = dir_ + "/link";
  fs::create_symlink(file, link);
  EXPECT_EQ(OpenCode("ipc://" + link), Code::kInvalidArgument);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(ReadAll(file), "the operator's notes");

  const std::string folder = dir_ + "/folder";
  fs::create_directory(folder);
  EXPECT_EQ(OpenCode("ipc://" + folder), Code::kInvalidArgument);
  EXPECT_TRUE(fs::is_directory(folder));
}

TEST_F(EventEndpointTest, IpcNeverTakesOverALiveSocket) {
  const std::string path = dir_ + "/events";
  auto first = EventPublisher::Open({.endpoint = "ipc://" + path});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat before {}, after {};
  ASSERT_EQ(::lstat(path.c_str(), &before), 0);
  EXPECT_EQ(OpenCode("ipc://" + path), Code::kInvalidArgument);
  ASSERT_EQ(::lstat(path.c_str(), &after), 0) << "the live publisher's socket was removed";
  EXPECT_EQ(before.st_ino, after.st_ino) << "the live publisher's socket was replaced";
}

TEST_F(EventEndpointTest, IpcReusesADeadSocketAndANewPath) {
  const std::string dead = dir_ + "/dead";
  MakeDeadSocket(dead);
  auto pub = EventPublisher::Open({.endpoint = "ipc://" + dead});
  EXPECT_TRUE(pub.ok()) << pub.status().ToString();
  auto fresh = EventPublisher::Open({.endpoint = "ipc://" + dir_ + "/fresh"});
  EXPECT_TRUE(fresh.ok()) << fresh.status().ToString();
}

TEST_F(EventEndpointTest, PortsOutsideTheirRangeAreRefused) {
  for (const char* port : {"99999", "65536", "-1", "", "5x", "123456", "+80"}) {
    EXPECT_EQ(OpenCode(std::string("tcp://127.0.0.1:") + port), Code::kInvalidArgument) << port;
  }
  EXPECT_EQ(OpenCode("tcp://127.0.0.1"), Code::kInvalidArgument);
  auto any = EventPublisher::Open({.endpoint = "tcp://127.0.0.1:*"});
  EXPECT_TRUE(any.ok()) << any.status().ToString();
}

TEST_F(EventEndpointTest, AnUnauthenticatedSocketBindsLoopbackUnlessAskedExplicitly) {
  for (const char* ep : {"tcp://0.0.0.0:*", "tcp://*:*", "tcp://[::]:*", "tcp://::0:*", "tcp://eth0:*",
                         "tcp://example.com:*", "tcp://127.evil.example:*"}) {
    EXPECT_EQ(OpenCode(ep), Code::kInvalidArgument) << ep;
    // With the opt-in the check passes (not bound here: the test binds loopback only).
    EXPECT_TRUE(internal::CheckEventEndpoint(ep, /*allow_remote=*/true).ok()) << ep;
  }
  for (const char* ep : {"tcp://127.0.0.1:*", "tcp://localhost:*", "tcp://[::1]:*", "tcp://127.0.0.2:*"}) {
    EXPECT_TRUE(internal::CheckEventEndpoint(ep, false).ok()) << ep;
  }
  for (const char* ep : {"inproc://x", "pgm://eth0;239.192.1.1:5555", "ws://127.0.0.1:80"}) {
    EXPECT_EQ(OpenCode(ep), Code::kInvalidArgument) << ep;
  }
}

}  // namespace
}  // namespace kvtier::testing
