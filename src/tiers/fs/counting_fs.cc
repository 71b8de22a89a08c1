#include "tiers/fs/counting_fs.h"

namespace kvtier::internal {

Result<Fd> CountingFileSystem::OpenForRead(std::string_view rel, bool direct) {
  Count(2);  // the open, and the fstat that checks a regular file was opened
  opens_.fetch_add(1, std::memory_order_relaxed);
  return inner_->OpenForRead(rel, direct);
}

Result<Fd> CountingFileSystem::CreateNew(std::string_view rel, bool direct) {
  Count();
  return inner_->CreateNew(rel, direct);
}

Result<Fd> CountingFileSystem::OpenLockFile(std::string_view rel) {
  Count(2);
  return inner_->OpenLockFile(rel);
}

Status CountingFileSystem::Rename(std::string_view from, std::string_view to) {
  Count();
  return inner_->Rename(from, to);
}

Status CountingFileSystem::Link(std::string_view from, std::string_view to) {
  Count();
  return inner_->Link(from, to);
}

Status CountingFileSystem::Unlink(std::string_view rel) {
  Count();
  return inner_->Unlink(rel);
}

Result<FileStat> CountingFileSystem::Stat(std::string_view rel) {
  Count();
  stats_.fetch_add(1, std::memory_order_relaxed);
  return inner_->Stat(rel);
}

Status CountingFileSystem::MakeDir(std::string_view rel) {
  Count();
  return inner_->MakeDir(rel);
}

Result<std::vector<DirEntry>> CountingFileSystem::List(std::string_view rel) {
  Count();
  return inner_->List(rel);
}

Status CountingFileSystem::Touch(std::string_view rel) {
  Count();
  return inner_->Touch(rel);
}

}  // namespace kvtier::internal
