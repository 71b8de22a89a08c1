// CountingFileSystem: a FileSystem that passes every call to another one and counts the metadata
// round trips among them (stat, open and the fstat that checks what was opened, create, rename, link,
// unlink, mkdir, list, touch). On a network filesystem each is an RPC, so this is what fs://
// reports as TierStats::metadata_ops. Data calls (reads, writes, syncs) are not counted.
//
// Thread-safe, as the FileSystem it wraps; the counters are relaxed atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "io/filesystem.h"

namespace kvtier::internal {

class CountingFileSystem : public FileSystem {
 public:
  // REQUIRES: inner != nullptr.
  explicit CountingFileSystem(std::shared_ptr<FileSystem> inner) : inner_(std::move(inner)) {}

  uint64_t metadata_ops() const { return ops_.load(std::memory_order_relaxed); }
  uint64_t stats() const { return stats_.load(std::memory_order_relaxed); }  // Stat calls alone
  uint64_t opens() const { return opens_.load(std::memory_order_relaxed); }  // OpenForRead calls alone

  const std::string& root() const override { return inner_->root(); }
  Result<Fd> OpenForRead(std::string_view rel, bool direct) override;
  Result<Fd> CreateNew(std::string_view rel, bool direct) override;
  Result<Fd> OpenLockFile(std::string_view rel) override;
  Status Rename(std::string_view from, std::string_view to) override;
  Status Link(std::string_view from, std::string_view to) override;
  Status Unlink(std::string_view rel) override;
  Result<FileStat> Stat(std::string_view rel) override;
  Status MakeDir(std::string_view rel) override;
  Result<std::vector<DirEntry>> List(std::string_view rel) override;
  Status Touch(std::string_view rel) override;
  Status SyncDir(std::string_view rel) override { return inner_->SyncDir(rel); }
  Status SyncAll() override { return inner_->SyncAll(); }
  Result<uint64_t> ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) override {
    return inner_->ReadAt(fd, buf, len, offset);
  }
  Result<uint64_t> WriteV(int fd, const iovec* iov, int count) override { return inner_->WriteV(fd, iov, count); }
  Result<uint64_t> WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) override {
    return inner_->WriteAt(fd, data, len, offset);
  }
  Status SyncFile(int fd) override { return inner_->SyncFile(fd); }
  Status Preallocate(int fd, uint64_t len) override { return inner_->Preallocate(fd, len); }
  int64_t FilterRead(int fd, uint64_t offset, uint64_t len, int64_t result) override {
    return inner_->FilterRead(fd, offset, len, result);
  }
  int64_t AdmitWrite(int fd, uint64_t offset, uint64_t len) override { return inner_->AdmitWrite(fd, offset, len); }

 protected:
  FileSystem& inner() { return *inner_; }

 private:
  void Count(uint64_t n = 1) { ops_.fetch_add(n, std::memory_order_relaxed); }

  const std::shared_ptr<FileSystem> inner_;
  std::atomic<uint64_t> ops_{0}, stats_{0}, opens_{0};
};

}  // namespace kvtier::internal
