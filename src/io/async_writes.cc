#include "io/async_writes.h"

#include <liburing.h>

#include <algorithm>
#include <cerrno>

namespace kvtier::internal {
namespace {

constexpr unsigned kWriteRingEntries = 32;  // requests one file has in flight (a chunk needs a few)
// io_uring lengths are 32-bit and the kernel stops one write near 2 GiB: longer writes are split.
constexpr uint64_t kMaxWriteRequest = 1ull << 30;

// A thread's ring. A ring whose state became unknown (a failed submit or wait) is never used again and
// never closed: the kernel may still be writing from memory its requests named.
struct WriteRing {
  io_uring ring{};
  bool tried = false;
  bool live = false;
  bool taken = false;
  ~WriteRing() {
    if (live) io_uring_queue_exit(&ring);
  }
};

WriteRing& ThisThreadsWriteRing() {
  thread_local WriteRing r;
  if (!r.tried) {
    r.tried = true;
    r.live = io_uring_queue_init(kWriteRingEntries, &r.ring, 0) == 0;
  }
  return r;
}

}  // namespace

Status WriteAllAt(FileSystem& fs, int fd, const std::byte* data, uint64_t len, uint64_t offset,
                  const std::string& path) {
  for (uint64_t done = 0; done < len;) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, fs.WriteAt(fd, data + done, len - done, offset + done));
    if (n == 0) return Status::IOError("write " + path + " made no progress");
    done += n;
  }
  return Status::OK();
}

AsyncWrites::AsyncWrites(FileSystem& fs, int fd, const std::string& path, bool use_ring)
    : fs_(fs), fd_(fd), path_(path) {
  if (!use_ring) return;
  WriteRing& r = ThisThreadsWriteRing();
  if (!r.live || r.taken) return;
  r.taken = true;
  ring_ = &r.ring;
  slots_.resize(kWriteRingEntries);
  for (uint32_t i = kWriteRingEntries; i > 0; --i) free_.push_back(i - 1);
}

AsyncWrites::~AsyncWrites() {
  (void)WaitAll();
  if (ring_ != nullptr) ThisThreadsWriteRing().taken = false;
}

Status AsyncWrites::Write(const std::byte* data, uint64_t len, uint64_t offset, int group) {
  if (!error_.ok()) return error_;
  if (ring_ == nullptr) {
    Status s = WriteAllAt(fs_, fd_, data, len, offset, path_);
    if (!s.ok()) Fail(s);
    return error_;
  }
  for (uint64_t done = 0; done < len && error_.ok();) {
    const uint64_t n = std::min(len - done, kMaxWriteRequest);
    Submit(Pending{data + done, n, offset + done, group});
    done += n;
  }
  return error_;
}

Status AsyncWrites::WaitGroup(int group) {
  while (ring_ != nullptr && in_flight_[group] > 0) ReapOne();
  return error_;
}

Status AsyncWrites::WaitAll() {
  while (ring_ != nullptr && in_flight_total_ > 0) ReapOne();
  return error_;
}

void AsyncWrites::Fail(Status s) {
  if (error_.ok()) error_ = std::move(s);
}

// The ring can no longer be trusted: this thread stops using it (see WriteRing) and nothing more is
// waited for.
void AsyncWrites::Broken(int err, const char* what) {
  Fail(Status::FromErrno(err, std::string(what) + " for " + path_));
  WriteRing& r = ThisThreadsWriteRing();
  r.live = false;
  r.taken = false;
  ring_ = nullptr;
  in_flight_ = {};
  in_flight_total_ = 0;
}

// Submits what the FileSystem admits of `p`: all of it, the first part (the rest is resumed when the
// part completes), or nothing (an injected error, handled as the kernel's own would be).
void AsyncWrites::Submit(const Pending& p) {
  const int64_t admitted = fs_.AdmitWrite(fd_, p.offset, p.len);
  if (admitted <= 0) return Complete(p, admitted);
  while (ring_ != nullptr && free_.empty()) ReapOne();
  if (ring_ == nullptr) return;
  const uint32_t slot = free_.back();
  free_.pop_back();
  slots_[slot] = p;
  io_uring_sqe* sqe = io_uring_get_sqe(ring_);  // never null: each SQE is submitted right away
  io_uring_prep_write(sqe, fd_, p.data, static_cast<unsigned>(std::min<uint64_t>(admitted, p.len)), p.offset);
  io_uring_sqe_set_data64(sqe, slot);
  ++in_flight_[p.group];
  ++in_flight_total_;
  int n;
  do {
    n = io_uring_submit(ring_);
  } while (n == -EINTR || n == -EAGAIN);
  if (n < 0) Broken(-n, "io_uring submit");
}

void AsyncWrites::ReapOne() {
  io_uring_cqe* cqe = nullptr;
  int w;
  do {
    w = io_uring_wait_cqe(ring_, &cqe);
  } while (w == -EINTR || w == -EAGAIN);
  if (w < 0) return Broken(-w, "io_uring wait");
  const uint64_t slot = io_uring_cqe_get_data64(cqe);
  const int64_t result = cqe->res;
  io_uring_cqe_seen(ring_, cqe);
  const Pending p = slots_[slot];
  free_.push_back(static_cast<uint32_t>(slot));
  --in_flight_[p.group];
  --in_flight_total_;
  Complete(p, result);
}

// What became of request `p`: bytes written from its start, or -errno.
void AsyncWrites::Complete(const Pending& p, int64_t result) {
  if (result == -EINTR || result == -EAGAIN) {
    if (error_.ok()) Submit(p);
    return;
  }
  if (result < 0) return Fail(Status::FromErrno(static_cast<int>(-result), "write " + path_));
  if (result == 0) return Fail(Status::IOError("write " + path_ + " made no progress"));
  const uint64_t n = static_cast<uint64_t>(result);
  if (n < p.len && error_.ok()) Submit(Pending{p.data + n, p.len - n, p.offset + n, p.group});
}

}  // namespace kvtier::internal
