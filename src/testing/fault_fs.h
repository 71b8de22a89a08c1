// FaultFileSystem: a FileSystem that passes every call to another one and injects failures on
// request, below the tiers (tests only). Each rule names an operation, a path substring and what to do;
// a rule may skip its first matches and fire a bounded number of times. Counters say how often each
// rule fired, so a test can prove it reached the path it meant to.
//
//   auto fs = std::make_shared<FaultFileSystem>(posix);
//   fs->Add({.op = FsOp::kRename, .path = ".kvc", .error = EIO});              // every publish fails
//   fs->Add({.op = FsOp::kRead, .short_read = true, .times = 3});              // three short reads
//   fs->Add({.op = FsOp::kRename, .error = EIO, .after_effect = true});        // renamed, then "failed"
//   fs->Add({.op = FsOp::kWrite, .error = EIO, .offset = 0});                   // chunk headers fail
//
// Writes are matched whichever way they go: WriteV, WriteAt, and the io_uring writes' AdmitWrite.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/filesystem.h"
#include "core/thread_annotations.h"

namespace kvtier::testing {

enum class FsOp : uint8_t {
  kOpenRead, kCreate, kOpenLock, kRename, kLink, kUnlink, kStat, kMkdir, kList, kTouch, kSyncDir, kSyncAll,
  kRead, kWrite, kSyncFile, kPreallocate,
};

struct FsFault {
  FsOp op = FsOp::kRead;
  std::string path = "";     // fires only where the (relative) path contains this; "" matches all
  int error = 0;             // errno to fail with (0 with short_read: only shorten)
  bool short_read = false;   // kRead: return half the bytes asked for (and let the caller resume)
  bool short_write = false;  // kWrite: write half of the first piece (io_uring writes: half, cut to whole
                             // 4 KiB blocks where that leaves any, so an O_DIRECT write stays valid)
  int64_t offset = -1;       // kWrite: fires only for writes that start at this file offset (-1: any)
  bool after_effect = false; // perform the operation, then report `error` (a rename that "fails" late)
  int skip = 0;              // let this many matches through first
  int times = -1;            // fire at most this often (-1: always)
};

class FaultFileSystem final : public internal::FileSystem {
 public:
  explicit FaultFileSystem(std::shared_ptr<internal::FileSystem> inner) : inner_(std::move(inner)) {}

  // Adds a rule; returns its index for Fired().
  size_t Add(FsFault fault);
  void Clear();
  // How often rule `index` fired.
  uint64_t Fired(size_t index) const;

  const std::string& root() const override { return inner_->root(); }
  Result<internal::Fd> OpenForRead(std::string_view rel, bool direct) override;
  Result<internal::Fd> CreateNew(std::string_view rel, bool direct) override;
  Result<internal::Fd> OpenLockFile(std::string_view rel) override;
  Status Rename(std::string_view from, std::string_view to) override;
  Status Link(std::string_view from, std::string_view to) override;
  Status Unlink(std::string_view rel) override;
  Result<internal::FileStat> Stat(std::string_view rel) override;
  Status MakeDir(std::string_view rel) override;
  Result<std::vector<internal::DirEntry>> List(std::string_view rel) override;
  Status Touch(std::string_view rel) override;
  Status SyncDir(std::string_view rel) override;
  Status SyncAll() override;
  Result<uint64_t> ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) override;
  Result<uint64_t> WriteV(int fd, const iovec* iov, int count) override;
  Result<uint64_t> WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) override;
  Status SyncFile(int fd) override;
  Status Preallocate(int fd, uint64_t len) override;
  int64_t FilterRead(int fd, uint64_t offset, uint64_t len, int64_t result) override;
  int64_t AdmitWrite(int fd, uint64_t offset, uint64_t len) override;

 private:
  struct Rule {
    FsFault fault;
    uint64_t matches = 0;
    uint64_t fired = 0;
  };
  // The rule that fires for (op, path, write offset) now, if any (counts the match); a copy, so rules may be added
  // while calls are in flight.
  std::optional<FsFault> Match(FsOp op, std::string_view path, int64_t offset = -1) EXCLUDES(mu_);
  std::string PathOf(int fd);
  void Remember(int fd, std::string_view rel);
  Status Injected(const FsFault& f, FsOp op, std::string_view path) const;

  const std::shared_ptr<internal::FileSystem> inner_;
  mutable internal::Mutex mu_;
  std::vector<Rule> rules_ GUARDED_BY(mu_);
  std::unordered_map<int, std::string> fd_path_ GUARDED_BY(mu_);  // what each descriptor opened
};

}  // namespace kvtier::testing
