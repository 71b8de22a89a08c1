// Issue 39, item 1 (in part): `kvtier serve` refuses request bodies it does not need before reading
// them. A chunked body escaped the 1 MiB limit (256 MiB: 2.2 GB peak) and a gzip body was inflated
// past it (1 MB to 1 GiB); both are now answered from the head alone: 411 for any Transfer-Encoding,
// 415 for a Content-Encoding other than identity, and the connection closed. The server runs as a
// child on 127.0.0.1 (port 0); every wait is bounded (a guard, never a timing assertion).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "hostile/hostile_util.h"
#include "hostile/serve_client.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

// Sends `request` (head and as much body as given) and returns the status line of the reply; "" when
// none came within 30 s.
std::string StatusLine(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    while (reply.find("\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return reply.substr(0, reply.find("\r\n"));
}

TEST(ServeRefusesBodiesItDoesNotNeed, ChunkedAndCompressedBodiesAreRefusedUnread) {
  TempDir dir, logs;
  {
    auto t = OpenKind(Kind::kFile, dir.path());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(PutNo(**t, TestNamespace(), 1).ok());
  }
  ServeChild serve(dir.path(), logs.path() + "/serve.log");
  const int port = serve.Port();
  ASSERT_GT(port, 0) << "kvtier serve did not start";

  // The head and the first 1 MiB chunk of an endless chunked body: answered without waiting for more.
  const std::string chunked = "POST /v1/lookup HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n" +
                              std::string(1 << 20, 'a') + "\r\n";
  EXPECT_EQ(StatusLine(port, chunked), "HTTP/1.1 411 Length Required");

  // A gzip body (it inflates to {"model":"m"}): refused, never inflated.
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xab\x56\xca\xcd\x4f\x49\xcd\x51\xb2\x52\xca\x55\xaa\x05"
                       "\x00\x9b\x6c\xba\xaa\x0d\x00\x00\x00", 33);
  const std::string gzip_request = "POST /v1/lookup HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip\r\nContent-Length: " +
                                   std::to_string(gz.size()) + "\r\n\r\n" + gz;
  EXPECT_EQ(StatusLine(port, gzip_request), "HTTP/1.1 415 Unsupported Media Type");

  // What serve does take still works.
  EXPECT_EQ(StatusLine(port, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"), "HTTP/1.1 200 OK");
}

}  // namespace
}  // namespace kvtier::testing
