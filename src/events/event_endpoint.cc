// Checks of an event endpoint before libzmq binds it (event_endpoint.h).
#include "events/event_endpoint.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::internal {
namespace {

Status Refuse(const std::string& endpoint, const std::string& why) {
  return Status::InvalidArgument("event publisher: endpoint '" + endpoint + "' " + why);
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "lo" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

bool IsPort(const std::string& text) {
  if (text == "*") return true;
  if (text.empty() || text.size() > 5) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return std::stoul(text) <= 65535;
}

Status CheckTcp(const std::string& endpoint, const std::string& rest, bool allow_remote) {
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return Refuse(endpoint, "wants tcp://HOST:PORT");
  if (!IsPort(rest.substr(colon + 1))) {
    return Refuse(endpoint, "has no valid port: a whole number from 0 to 65535, or * for a free one");
  }
  const std::string host = rest.substr(0, colon);
  if (!allow_remote && !IsLoopbackHost(host)) {
    return Refuse(endpoint,
                  "is not a loopback address: event sockets carry no authentication, so binding '" + host +
                      "' needs the explicit opt-in (EventPublisherOptions::allow_remote, kvtier serve "
                      "--events-allow-remote)");
  }
  return Status::OK();
}

// True when a unix socket at `path` accepts a connection (someone listens on it).
bool SomeoneListens(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return true;  // cannot tell: treated as alive, refused
  const int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  return r == 0 || err != ECONNREFUSED;
}

Status CheckIpc(const std::string& endpoint, const std::string& path) {
  if (path.empty()) return Refuse(endpoint, "names no path");
  if (path.front() == '@' || path == "*") return Status::OK();  // abstract, or a name libzmq makes up
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) return Refuse(endpoint, "is longer than a unix socket path can be");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Refuse(endpoint, std::string("cannot be checked: ") + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Refuse(endpoint, "names an existing file that is not a socket: binding would remove it; choose another path");
  }
  if (st.st_uid != ::geteuid()) return Refuse(endpoint, "names another user's socket: binding would remove it");
  if (SomeoneListens(path)) return Refuse(endpoint, "names a socket another process listens on: binding would take it over");
  return Status::OK();  // a dead socket of this user: what a publisher that died leaves
}

}  // namespace

Status CheckEventEndpoint(const std::string& endpoint, bool allow_remote) {
  const size_t sep = endpoint.find("://");
  if (endpoint.empty() || sep == std::string::npos) {
    return Refuse(endpoint, "is not a ZeroMQ endpoint (tcp://HOST:PORT, ipc://PATH)");
  }
  const std::string scheme = endpoint.substr(0, sep), rest = endpoint.substr(sep + 3);
  if (scheme == "tcp") return CheckTcp(endpoint, rest, allow_remote);
  if (scheme == "ipc") return CheckIpc(endpoint, rest);
  return Refuse(endpoint, "uses a transport kvtier does not publish on (tcp://HOST:PORT, ipc://PATH)");
}

}  // namespace kvtier::internal
