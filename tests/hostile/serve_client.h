// The hostile HTTP tests' side of `kvtier serve` (issue 39): the server as a child process on
// 127.0.0.1 (port 0), its peak RSS, and a raw-socket client that sends and reads at once, so a test
// never deadlocks on full socket buffers. Every wait is bounded (a guard, never a timing assertion).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace kvtier::testing {

// `kvtier serve --target file://ROOT --listen 127.0.0.1:0 [extra...]`, stopped (SIGTERM) on destruction.
class ServeChild {
 public:
  ServeChild(const std::string& root, const std::string& log, std::vector<std::string> extra = {}) : log_(log) {
    std::vector<std::string> args = {KVTIER_CLI_PATH, "serve", "--target", "file://" + root, "--listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
      ::alarm(300);  // a guard: the test stops it long before
      ::execv(KVTIER_CLI_PATH, argv.data());
      ::_exit(127);
    }
  }
  // SIGTERM, then SIGKILL if it has not exited within 20 s (a server that hangs fails its test, not
  // the run).
  ~ServeChild() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;

  // The port from "listening on http://127.0.0.1:PORT"; 0 when it did not come within 60 s.
  int Port() const {
    const std::string mark = "listening on http://127.0.0.1:";
    for (int i = 0; i < 6000; ++i) {
      std::ifstream in(log_);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const size_t at = text.find(mark);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) return std::stoi(text.substr(at + mark.size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
  // A "VmHWM:" (peak) or "VmRSS:" line of /proc/PID/status, in KiB; -1 when unreadable.
  long StatusKiB(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
    }
    return -1;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// A connected socket to 127.0.0.1:port (blocking once connected), or -1 when the connection did not
// complete within 5 s (a full listen backlog drops the handshake: a blocking connect would wait minutes).
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int err = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof(err);
    if (errno != EINPROGRESS || ::poll(&p, 1, 5000) != 1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      ::close(fd);
      return -1;
    }
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

struct Exchanged {
  std::string in;        // what came back
  size_t sent = 0;       // bytes of the request the server took
  bool closed = false;   // the server closed (EOF or reset)
  bool enough = false;   // `enough(in)` held
};

// Sends `out` as the server takes it while reading what comes back, until the server closes, `enough`
// holds for what came back, or `limit` passes. Sending stops at the first refusal (the server closed).
inline Exchanged Exchange(int fd, std::string_view out, const std::function<bool(const std::string&)>& enough,
                          std::chrono::milliseconds limit) {
  Exchanged x;
  const auto until = std::chrono::steady_clock::now() + limit;
  bool can_send = true;
  char buf[65536];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, static_cast<short>(POLLIN | (can_send && x.sent < out.size() ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        x.in.append(buf, static_cast<size_t>(n));
        if (enough(x.in)) {
          x.enough = true;
          return x;
        }
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        x.closed = true;
        return x;
      }
    }
    if ((p.revents & POLLOUT) && can_send) {
      const size_t piece = std::min<size_t>(out.size() - x.sent, 65536);
      const ssize_t n = ::send(fd, out.data() + x.sent, piece, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) x.sent += static_cast<size_t>(n);
      else if (errno != EAGAIN && errno != EINTR) can_send = false;
    }
  }
  return x;
}

// True once `in` holds a whole reply head.
inline bool HasHead(const std::string& in) { return in.find("\r\n\r\n") != std::string::npos; }

inline std::string FirstLine(const std::string& in) { return in.substr(0, in.find("\r\n")); }

}  // namespace kvtier::testing
