#include "testing/fault_fs.h"

#include <unistd.h>

#include <cerrno>

namespace kvtier::testing {

using internal::DirEntry;
using internal::Fd;
using internal::FileStat;

size_t FaultFileSystem::Add(FsFault fault) {
  internal::MutexLock lock(mu_);
  rules_.push_back(Rule{std::move(fault)});
  return rules_.size() - 1;
}

void FaultFileSystem::Clear() {
  internal::MutexLock lock(mu_);
  rules_.clear();
}

uint64_t FaultFileSystem::Fired(size_t index) const {
  internal::MutexLock lock(mu_);
  return index < rules_.size() ? rules_[index].fired : 0;
}

std::optional<FsFault> FaultFileSystem::Match(FsOp op, std::string_view path, int64_t offset) {
  internal::MutexLock lock(mu_);
  for (Rule& r : rules_) {
    if (r.fault.op != op || path.find(r.fault.path) == std::string_view::npos) continue;
    if (r.fault.offset >= 0 && r.fault.offset != offset) continue;
    if (r.matches++ < static_cast<uint64_t>(r.fault.skip)) continue;
    if (r.fault.times >= 0 && r.fired >= static_cast<uint64_t>(r.fault.times)) continue;
    ++r.fired;
    return r.fault;
  }
  return std::nullopt;
}

std::string FaultFileSystem::PathOf(int fd) {
  internal::MutexLock lock(mu_);
  auto it = fd_path_.find(fd);
  return it == fd_path_.end() ? std::string() : it->second;
}

void FaultFileSystem::Remember(int fd, std::string_view rel) {
  internal::MutexLock lock(mu_);
  fd_path_[fd] = std::string(rel);
}

Status FaultFileSystem::Injected(const FsFault& f, FsOp op, std::string_view path) const {
  return Status::FromErrno(f.error == 0 ? EIO : f.error,
                           "injected fault (op " + std::to_string(static_cast<int>(op)) + ") at " + root() + "/" +
                               std::string(path));
}

// An operation on one path: fail before, or perform and then fail.
#define KVTIER_FAULT_OP(op, path, call)                          \
  do {                                                           \
    const std::optional<FsFault> f = Match(op, path);                          \
    if (f && !f->after_effect) return Injected(*f, op, path); \
    auto r = (call);                                             \
    if (f) return Injected(*f, op, path);             \
    return r;                                                    \
  } while (0)

Result<Fd> FaultFileSystem::OpenForRead(std::string_view rel, bool direct) {
  if (const std::optional<FsFault> f = Match(FsOp::kOpenRead, rel)) return Injected(*f, FsOp::kOpenRead, rel);
  auto fd = inner_->OpenForRead(rel, direct);
  if (fd.ok()) Remember(fd->get(), rel);
  return fd;
}

Result<Fd> FaultFileSystem::CreateNew(std::string_view rel, bool direct) {
  if (const std::optional<FsFault> f = Match(FsOp::kCreate, rel)) return Injected(*f, FsOp::kCreate, rel);
  auto fd = inner_->CreateNew(rel, direct);
  if (fd.ok()) Remember(fd->get(), rel);
  return fd;
}

Result<Fd> FaultFileSystem::OpenLockFile(std::string_view rel) {
  if (const std::optional<FsFault> f = Match(FsOp::kOpenLock, rel)) return Injected(*f, FsOp::kOpenLock, rel);
  return inner_->OpenLockFile(rel);
}

Status FaultFileSystem::Rename(std::string_view from, std::string_view to) {
  KVTIER_FAULT_OP(FsOp::kRename, to, inner_->Rename(from, to));
}
Status FaultFileSystem::Link(std::string_view from, std::string_view to) {
  KVTIER_FAULT_OP(FsOp::kLink, to, inner_->Link(from, to));
}
Status FaultFileSystem::Unlink(std::string_view rel) { KVTIER_FAULT_OP(FsOp::kUnlink, rel, inner_->Unlink(rel)); }
Status FaultFileSystem::MakeDir(std::string_view rel) { KVTIER_FAULT_OP(FsOp::kMkdir, rel, inner_->MakeDir(rel)); }
Status FaultFileSystem::Touch(std::string_view rel) { KVTIER_FAULT_OP(FsOp::kTouch, rel, inner_->Touch(rel)); }
Status FaultFileSystem::SyncDir(std::string_view rel) { KVTIER_FAULT_OP(FsOp::kSyncDir, rel, inner_->SyncDir(rel)); }
Status FaultFileSystem::SyncAll() { KVTIER_FAULT_OP(FsOp::kSyncAll, "", inner_->SyncAll()); }

Result<FileStat> FaultFileSystem::Stat(std::string_view rel) {
  if (const std::optional<FsFault> f = Match(FsOp::kStat, rel)) return Injected(*f, FsOp::kStat, rel);
  return inner_->Stat(rel);
}

Result<std::vector<DirEntry>> FaultFileSystem::List(std::string_view rel) {
  if (const std::optional<FsFault> f = Match(FsOp::kList, rel)) return Injected(*f, FsOp::kList, rel);
  return inner_->List(rel);
}

Result<uint64_t> FaultFileSystem::ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) {
  const std::string path = PathOf(fd);
  if (const std::optional<FsFault> f = Match(FsOp::kRead, path)) {
    if (!f->short_read) return Injected(*f, FsOp::kRead, path);
    return inner_->ReadAt(fd, buf, len > 1 ? len / 2 : len, offset);
  }
  return inner_->ReadAt(fd, buf, len, offset);
}

int64_t FaultFileSystem::FilterRead(int fd, uint64_t offset, uint64_t len, int64_t result) {
  const std::string path = PathOf(fd);
  const std::optional<FsFault> f = Match(FsOp::kRead, path);
  if (!f || result <= 0) return inner_->FilterRead(fd, offset, len, result);
  // A short read: the caller must resubmit the rest (the bytes past the cut are read again).
  if (f->short_read) return result > 1 ? result / 2 : result;
  return -(f->error == 0 ? EIO : f->error);
}

Result<uint64_t> FaultFileSystem::WriteV(int fd, const iovec* iov, int count) {
  const std::string path = PathOf(fd);
  if (const std::optional<FsFault> f = Match(FsOp::kWrite, path, ::lseek(fd, 0, SEEK_CUR))) {
    if (!f->short_write || count == 0 || iov[0].iov_len < 2) return Injected(*f, FsOp::kWrite, path);
    iovec half{iov[0].iov_base, iov[0].iov_len / 2};
    return inner_->WriteV(fd, &half, 1);
  }
  return inner_->WriteV(fd, iov, count);
}

Result<uint64_t> FaultFileSystem::WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) {
  const std::string path = PathOf(fd);
  if (const std::optional<FsFault> f = Match(FsOp::kWrite, path, static_cast<int64_t>(offset))) {
    if (!f->short_write || len < 2) return Injected(*f, FsOp::kWrite, path);
    return inner_->WriteAt(fd, data, len / 2, offset);
  }
  return inner_->WriteAt(fd, data, len, offset);
}

int64_t FaultFileSystem::AdmitWrite(int fd, uint64_t offset, uint64_t len) {
  const std::string path = PathOf(fd);
  const std::optional<FsFault> f = Match(FsOp::kWrite, path, static_cast<int64_t>(offset));
  if (!f) return inner_->AdmitWrite(fd, offset, len);
  if (!f->short_write || len < 2) return -(f->error == 0 ? EIO : f->error);
  const uint64_t half = len / 2, blocks = half / 4096 * 4096;
  return static_cast<int64_t>(blocks > 0 ? blocks : half);
}

Status FaultFileSystem::SyncFile(int fd) {
  const std::string path = PathOf(fd);
  if (const std::optional<FsFault> f = Match(FsOp::kSyncFile, path)) return Injected(*f, FsOp::kSyncFile, path);
  return inner_->SyncFile(fd);
}

Status FaultFileSystem::Preallocate(int fd, uint64_t len) {
  const std::string path = PathOf(fd);
  if (const std::optional<FsFault> f = Match(FsOp::kPreallocate, path)) return Injected(*f, FsOp::kPreallocate, path);
  return inner_->Preallocate(fd, len);
}

}  // namespace kvtier::testing
