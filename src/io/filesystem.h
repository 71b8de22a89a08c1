// The filesystem seam under every persistent tier: each call that touches a tier directory goes through
// a FileSystem rooted at that directory, so one implementation enforces the rules and tests can inject
// faults below the tiers (testing/fault_fs.h).
//
// Rules the POSIX implementation holds, for every call:
//  - paths are relative to the root, made of plain names ("a/b/c"): no "..", no ".", no empty name,
//    no leading '/'; anything else is InvalidArgument;
//  - no symbolic link is followed anywhere below the root: openat2(RESOLVE_BENEATH |
//    RESOLVE_NO_SYMLINKS) where the kernel has it, else a walk of O_NOFOLLOW | O_DIRECTORY opens.
//    A link met on the way is reported as Code::kNotFound with a message saying it is a link;
//  - only regular files are opened, and open never blocks (O_NONBLOCK, checked with fstat); a FIFO,
//    socket or device is reported as Corruption ("not a regular file").
// The root itself is the directory the caller named (a link there is the caller's choice).
//
// Data calls (ReadAt, WriteV, SyncFile, FilterRead, AdmitWrite) take descriptors this FileSystem
// opened. The io_uring reader reads those descriptors itself and passes every completion through
// FilterRead; the chunk writer's io_uring writes (io/async_writes.h) pass every request through
// AdmitWrite before it is submitted. So a fault-injecting FileSystem reaches the io_uring paths as well
// as the synchronous ones.
// Thread-safe: every method may be called from many threads at once.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/fd.h"
#include "kvtier/status.h"

namespace kvtier::internal {

enum class FileType : uint8_t { kRegular, kDirectory, kSymlink, kOther };

struct FileStat {
  FileType type = FileType::kOther;
  uint64_t size = 0;
  uint64_t inode = 0;
  int64_t mtime_ns = 0;
  int64_t atime_ns = 0;
  int64_t btime_ns = 0;  // creation, where the filesystem records it (statx STATX_BTIME); 0: unknown
};

struct DirEntry {
  std::string name;
  FileType type = FileType::kOther;  // from the directory entry, never by following a link
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The root directory, for messages.
  virtual const std::string& root() const = 0;

  // Opens a regular file for reading (O_DIRECT when `direct`). NotFound when absent or a link;
  // Corruption when not a regular file; InvalidArgument (EINVAL) when O_DIRECT is refused.
  virtual Result<Fd> OpenForRead(std::string_view rel, bool direct) = 0;
  // Creates a new file for writing (O_EXCL): IOError (EEXIST) when the name is taken.
  virtual Result<Fd> CreateNew(std::string_view rel, bool direct = false) = 0;
  // Opens (creating when missing) a regular file to hold a flock on; never through a link.
  virtual Result<Fd> OpenLockFile(std::string_view rel) = 0;
  // rename(2) within the root; replaces `to` atomically.
  virtual Status Rename(std::string_view from, std::string_view to) = 0;
  // link(2) within the root: publishes `to` only if absent (EEXIST otherwise).
  virtual Status Link(std::string_view from, std::string_view to) = 0;
  // Removes a name (never what a link points to). NotFound when absent.
  virtual Status Unlink(std::string_view rel) = 0;
  // lstat: never follows a link. NotFound when absent.
  virtual Result<FileStat> Stat(std::string_view rel) = 0;
  // Creates one directory level; OK when a directory is already there, IOError when something else is.
  virtual Status MakeDir(std::string_view rel) = 0;
  // The entries of a directory ("" is the root), without "." and "..". NotFound when absent.
  virtual Result<std::vector<DirEntry>> List(std::string_view rel) = 0;
  // Sets a file's mtime and atime to now (never through a link).
  virtual Status Touch(std::string_view rel) = 0;
  // fsync of a directory ("" is the root).
  virtual Status SyncDir(std::string_view rel) = 0;
  // syncfs(2) of the filesystem holding the root.
  virtual Status SyncAll() = 0;

  // Data calls on descriptors opened above.
  virtual Result<uint64_t> ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) = 0;
  virtual Result<uint64_t> WriteV(int fd, const iovec* iov, int count) = 0;
  virtual Result<uint64_t> WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) = 0;
  virtual Status SyncFile(int fd) = 0;
  // Allocates the first `len` bytes of a file just created (fallocate(2), mode 0: the size becomes
  // `len`), so its blocks are taken together (one extent where free space allows) and the writes that
  // follow fill them instead of extending the file. NotSupported where the filesystem has no fallocate
  // (the caller writes without it); NoSpace when the space is not there.
  virtual Status Preallocate(int fd, uint64_t len) = 0;
  // Every read completion of `fd` (bytes read, or -errno) passes through here before it is used.
  virtual int64_t FilterRead(int fd, uint64_t offset, uint64_t len, int64_t result) {
    (void)fd, (void)offset, (void)len;
    return result;
  }
  // Every io_uring write request of `len` bytes at `offset` of `fd` passes through here before it is
  // submitted: returns the bytes to submit (`len`, or fewer: a short write the writer must resume), or
  // -errno to fail it unsubmitted, as the kernel would. Synchronous writes go through WriteAt instead.
  virtual int64_t AdmitWrite(int fd, uint64_t offset, uint64_t len) {
    (void)fd, (void)offset;
    return static_cast<int64_t>(len);
  }
};

struct PosixFsOptions {
  bool create = false;        // create the root (and its parents) when missing
  bool use_openat2 = true;    // false forces the O_NOFOLLOW walk (tests of the fallback)
};

// A FileSystem rooted at `root` (an absolute path). NotFound when the root is missing and `create` is
// off; InvalidArgument when it is not a directory.
Result<std::shared_ptr<FileSystem>> OpenPosixFileSystem(const std::string& root,
                                                        const PosixFsOptions& options = {});

// "a/b" + "c" -> "a/b/c"; "" + "c" -> "c".
std::string JoinRel(std::string_view dir, std::string_view name);
// The directory part of a relative path ("" for a top-level name) and the last name.
std::string_view RelDir(std::string_view rel);
std::string_view RelBase(std::string_view rel);

}  // namespace kvtier::internal
