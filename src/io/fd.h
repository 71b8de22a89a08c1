// A file descriptor owner: closes on destruction. Not thread-safe; move-only.
#pragma once

#include <unistd.h>

#include <utility>

namespace kvtier::internal {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { Reset(); }

  bool valid() const { return fd_ >= 0; }
  int get() const { return fd_; }
  // Closes now and returns close()'s result, so writers can see a deferred write error.
  int Close() { return fd_ < 0 ? 0 : ::close(std::exchange(fd_, -1)); }
  void Reset() { (void)Close(); }

 private:
  int fd_ = -1;
};

}  // namespace kvtier::internal
