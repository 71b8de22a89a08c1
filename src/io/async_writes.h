// Positioned writes to one open file that proceed while the calling thread goes on (hashing a chunk's
// payload, sealing its next window): the chunk writer's way of keeping the device busy between its
// own steps (io/chunk_writer.cc). Each thread keeps one io_uring for them, made at its first use and
// closed when the thread ends. Every request passes through FileSystem::AdmitWrite before it is
// submitted (so a fault-injecting FileSystem can fail it or cut it short), a short write is resumed
// from where it stopped, and the first error is kept and returned. Where io_uring is not wanted
// (`use_ring` false), the kernel refuses it, or the thread's ring is in use by another AsyncWrites,
// every Write is made at once, synchronously, through FileSystem::WriteAt.
//
// One thread; not thread-safe. The memory given to Write is read by the kernel until its group has
// been waited for (WaitGroup, WaitAll or the destructor): it must stay alive and unchanged until then.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/filesystem.h"
#include "kvtier/status.h"

struct io_uring;

namespace kvtier::internal {

// Writes `len` bytes of `data` at `offset` of `fd` through fs.WriteAt, resuming after short writes;
// `path` names the file in messages.
Status WriteAllAt(FileSystem& fs, int fd, const std::byte* data, uint64_t len, uint64_t offset,
                  const std::string& path);

class AsyncWrites {
 public:
  static constexpr int kGroups = 4;

  AsyncWrites(FileSystem& fs, int fd, const std::string& path, bool use_ring);
  // Waits for every write still in flight.
  ~AsyncWrites();
  AsyncWrites(const AsyncWrites&) = delete;
  AsyncWrites& operator=(const AsyncWrites&) = delete;

  // Writes `len` bytes of `data` at `offset` as part of `group` (0 <= group < kGroups); with a ring the
  // write is usually still in flight when this returns. Returns the first error so far: after one,
  // nothing more is started.
  Status Write(const std::byte* data, uint64_t len, uint64_t offset, int group = 0);
  // Waits until no write of `group` is in flight; the first error so far.
  Status WaitGroup(int group);
  // Waits until no write is in flight; the first error so far.
  Status WaitAll();
  // True when writes go through this thread's io_uring.
  bool async() const { return ring_ != nullptr; }

 private:
  struct Pending {
    const std::byte* data = nullptr;
    uint64_t len = 0;  // bytes still to write, from `data` to `offset`
    uint64_t offset = 0;
    int group = 0;
  };
  void Submit(const Pending& p);
  void ReapOne();
  void Complete(const Pending& p, int64_t result);
  void Fail(Status s);
  void Broken(int err, const char* what);

  FileSystem& fs_;
  const int fd_;
  const std::string& path_;
  io_uring* ring_ = nullptr;        // this thread's ring, held until destruction; null: synchronous
  std::vector<Pending> slots_;      // requests the kernel holds, by SQE user data
  std::vector<uint32_t> free_;      // free slots
  std::array<uint32_t, kGroups> in_flight_{};
  uint32_t in_flight_total_ = 0;
  Status error_;
};

}  // namespace kvtier::internal
