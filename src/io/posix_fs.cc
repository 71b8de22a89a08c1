// The POSIX FileSystem: every name is resolved beneath one root directory descriptor, never through a
// symbolic link (see io/filesystem.h for the rules).
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>

#include "io/filesystem.h"

namespace kvtier::internal {
namespace {

constexpr int kLinkErrno = ELOOP;

bool ValidRel(std::string_view rel, bool allow_empty) {
  if (rel.empty()) return allow_empty;
  if (rel.front() == '/' || rel.back() == '/' || rel.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= rel.size()) {
    const size_t slash = rel.find('/', start);
    const std::string_view name = rel.substr(start, slash == std::string_view::npos ? rel.npos : slash - start);
    if (name.empty() || name == "." || name == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kRegular;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
}

int64_t Ns(const struct timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

FileStat ToStat(const struct stat& st) {
  return FileStat{TypeOf(st.st_mode), static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_ino),
                  Ns(st.st_mtim), Ns(st.st_atim)};
}

int64_t Ns(const struct statx_timestamp& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

// fstat's fields plus the creation time where the filesystem keeps one (gc's policy=window reads it).
FileStat ToStat(const struct statx& st) {
  FileStat out{TypeOf(st.stx_mode), st.stx_size, st.stx_ino, Ns(st.stx_mtime), Ns(st.stx_atime)};
  if (st.stx_mask & STATX_BTIME) out.btime_ns = Ns(st.stx_btime);
  return out;
}

class PosixFs final : public FileSystem {
 public:
  PosixFs(std::string root, Fd root_fd, bool use_openat2)
      : root_(std::move(root)), root_fd_(std::move(root_fd)), openat2_(use_openat2) {}

  const std::string& root() const override { return root_; }
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
  Status SyncDir(std::string_view rel) override;
  Status SyncAll() override;
  Result<uint64_t> ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) override;
  Result<uint64_t> WriteV(int fd, const iovec* iov, int count) override;
  Result<uint64_t> WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) override;
  Status SyncFile(int fd) override;
  Status Preallocate(int fd, uint64_t len) override;

 private:
  std::string Where(std::string_view rel) const { return root_ + "/" + std::string(rel); }
  // Opens `rel` (which must be valid) beneath the root; -errno on failure.
  int OpenBeneath(std::string_view rel, int flags, mode_t mode);
  int OpenByWalk(std::string_view rel, int flags, mode_t mode);
  // The directory holding `rel`, opened O_PATH beneath the root.
  Result<Fd> OpenParent(std::string_view rel);
  Status Fail(int err, std::string_view what, std::string_view rel) const;
  // What was opened is a regular file (a name can be swapped between a look and an open).
  Status CheckOpenedRegular(int fd, std::string_view rel) const;
  Status BetweenNames(std::string_view from, std::string_view to, std::string_view what,
                      int (*op)(int, const char*, int, const char*));
  Status CheckRel(std::string_view rel, bool allow_empty = false) const {
    if (ValidRel(rel, allow_empty)) return Status::OK();
    return Status::InvalidArgument("path '" + std::string(rel) + "' is not a plain relative name under " + root_);
  }

  const std::string root_;
  const Fd root_fd_;  // O_PATH | O_DIRECTORY
  std::atomic<bool> openat2_;
};

Status PosixFs::Fail(int err, std::string_view what, std::string_view rel) const {
  if (err == ELOOP || err == EXDEV) {
    return Status::NotFound(std::string(what) + " " + Where(rel) +
                            ": a symbolic link is on the way (kvtier never follows links in its directories)");
  }
  if (err == ENOTDIR) {
    return Status::NotFound(std::string(what) + " " + Where(rel) + ": a component is not a directory");
  }
  return Status::FromErrno(err, std::string(what) + " " + Where(rel));
}

Status PosixFs::CheckOpenedRegular(int fd, std::string_view rel) const {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat " + Where(rel));
  if (!S_ISREG(st.st_mode)) return Status::Corruption(Where(rel) + " is not a regular file");
  return Status::OK();
}

int PosixFs::OpenByWalk(std::string_view rel, int flags, mode_t mode) {
  Fd dir(::fcntl(root_fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return -errno;
  size_t start = 0;
  for (size_t slash; (slash = rel.find('/', start)) != std::string_view::npos; start = slash + 1) {
    const std::string name(rel.substr(start, slash - start));
    Fd next(::openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return -(errno == ENOTDIR ? kLinkErrno : errno);
    dir = std::move(next);
  }
  const std::string leaf(rel.substr(start));
  const int fd = ::openat(dir.get(), leaf.c_str(), flags | O_NOFOLLOW, mode);
  return fd >= 0 ? fd : -errno;
}

int PosixFs::OpenBeneath(std::string_view rel, int flags, mode_t mode) {
  if (rel.empty()) {
    const int fd = ::openat(root_fd_.get(), ".", flags, mode);
    return fd >= 0 ? fd : -errno;
  }
  const std::string path(rel);
  if (openat2_.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_NOFOLLOW);
    how.mode = (flags & O_CREAT) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd;
    do {
      fd = ::syscall(SYS_openat2, root_fd_.get(), path.c_str(), &how, sizeof(how));
    } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != ENOSYS && errno != EPERM) return -errno;  // EPERM: a seccomp policy refusing openat2
    openat2_.store(false, std::memory_order_relaxed);
  }
  return OpenByWalk(rel, flags, mode);
}

Result<Fd> PosixFs::OpenParent(std::string_view rel) {
  const std::string_view dir = RelDir(rel);
  const int fd = OpenBeneath(dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return Fail(-fd, "open directory of", rel);
  return Fd(fd);
}

Result<Fd> PosixFs::OpenForRead(std::string_view rel, bool direct) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel));
  // Look before opening, so a device or FIFO is never opened at all; then check what was opened.
  KVTIER_ASSIGN_OR_RETURN(FileStat before, Stat(rel));
  if (before.type == FileType::kSymlink) return Fail(kLinkErrno, "open", rel);
  if (before.type != FileType::kRegular) return Status::Corruption(Where(rel) + " is not a regular file");
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (direct ? O_DIRECT : 0);
  const int fd = OpenBeneath(rel, flags, 0);
  if (fd < 0) return Fail(-fd, "open", rel);
  Fd out(fd);
  KVTIER_RETURN_IF_ERROR(CheckOpenedRegular(fd, rel));
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return Status::FromErrno(errno, "fcntl " + Where(rel));
  return out;
}

Result<Fd> PosixFs::CreateNew(std::string_view rel, bool direct) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel));
  const int fd = OpenBeneath(rel, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return Fail(-fd, "create", rel);
  return Fd(fd);
}

Result<Fd> PosixFs::OpenLockFile(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel));
  auto before = Stat(rel);
  if (before.ok() && before->type != FileType::kRegular) return Status::Corruption(Where(rel) + " is not a regular file");
  const int fd = OpenBeneath(rel, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(-fd, "open", rel);
  Fd out(fd);
  KVTIER_RETURN_IF_ERROR(CheckOpenedRegular(fd, rel));
  return out;
}

Status PosixFs::BetweenNames(std::string_view from, std::string_view to, std::string_view what,
                             int (*op)(int, const char*, int, const char*)) {
  KVTIER_RETURN_IF_ERROR(CheckRel(from));
  KVTIER_RETURN_IF_ERROR(CheckRel(to));
  KVTIER_ASSIGN_OR_RETURN(Fd a, OpenParent(from));
  KVTIER_ASSIGN_OR_RETURN(Fd b, OpenParent(to));
  const std::string fa(RelBase(from)), fb(RelBase(to));
  if (op(a.get(), fa.c_str(), b.get(), fb.c_str()) != 0) {
    return Fail(errno, std::string(what) + " " + std::string(from) + " to", to);
  }
  return Status::OK();
}

Status PosixFs::Rename(std::string_view from, std::string_view to) {
  return BetweenNames(from, to, "rename", [](int a, const char* x, int b, const char* y) { return ::renameat(a, x, b, y); });
}

Status PosixFs::Link(std::string_view from, std::string_view to) {
  // No AT_SYMLINK_FOLLOW: a link names the file itself, never what a link points to.
  return BetweenNames(from, to, "link", [](int a, const char* x, int b, const char* y) { return ::linkat(a, x, b, y, 0); });
}

Status PosixFs::Unlink(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel));
  KVTIER_ASSIGN_OR_RETURN(Fd dir, OpenParent(rel));
  const std::string leaf(RelBase(rel));
  if (::unlinkat(dir.get(), leaf.c_str(), 0) != 0) return Fail(errno, "unlink", rel);
  return Status::OK();
}

Result<FileStat> PosixFs::Stat(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel, /*allow_empty=*/true));
  struct stat st {};
  if (rel.empty()) {
    if (::fstat(root_fd_.get(), &st) != 0) return Status::FromErrno(errno, "stat " + root_);
    return ToStat(st);
  }
  // One O_PATH open of the name itself beneath the root, then fstat: O_PATH opens nothing (no device
  // or FIFO is opened, nothing blocks), and with O_NOFOLLOW a link as the last name is the link
  // itself (reported as kSymlink, as lstat would); a link on the way is refused like everywhere else.
  const int fd = OpenBeneath(rel, O_PATH | O_CLOEXEC, 0);
  if (fd < 0) return Fail(-fd, "stat", rel);
  Fd file(fd);
  struct statx stx {};
  if (::statx(file.get(), "", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_BTIME, &stx) != 0) {
    return Fail(errno, "stat", rel);
  }
  return ToStat(stx);
}

Status PosixFs::MakeDir(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel));
  KVTIER_ASSIGN_OR_RETURN(Fd dir, OpenParent(rel));
  const std::string leaf(RelBase(rel));
  if (::mkdirat(dir.get(), leaf.c_str(), 0777) == 0) return Status::OK();
  if (errno != EEXIST) return Fail(errno, "mkdir", rel);
  struct stat st {};
  if (::fstatat(dir.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) return Status::OK();
  return Status::IOError("mkdir " + Where(rel) + ": the name is taken by something that is not a directory " +
                         "(kvtier never follows links in its directories)");
}

Result<std::vector<DirEntry>> PosixFs::List(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel, /*allow_empty=*/true));
  const int fd = OpenBeneath(rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return Fail(-fd, "list", rel);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return Fail(err, "list", rel);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(d, ::closedir);
  std::vector<DirEntry> out;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry entry{std::string(name), FileType::kOther};
    switch (e->d_type) {
      case DT_REG: entry.type = FileType::kRegular; break;
      case DT_DIR: entry.type = FileType::kDirectory; break;
      case DT_LNK: entry.type = FileType::kSymlink; break;
      case DT_UNKNOWN: {
        struct stat st {};
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
        entry.type = TypeOf(st.st_mode);
        break;
      }
      default: break;
    }
    out.push_back(std::move(entry));
    errno = 0;
  }
  if (errno != 0) return Fail(errno, "read directory", rel);
  return out;
}

Status PosixFs::Touch(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel));
  KVTIER_ASSIGN_OR_RETURN(Fd dir, OpenParent(rel));
  const std::string leaf(RelBase(rel));
  if (::utimensat(dir.get(), leaf.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) != 0) return Fail(errno, "touch", rel);
  return Status::OK();
}

Status PosixFs::SyncDir(std::string_view rel) {
  KVTIER_RETURN_IF_ERROR(CheckRel(rel, /*allow_empty=*/true));
  const int fd = OpenBeneath(rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return Fail(-fd, "open directory", rel);
  Fd dir(fd);
  if (::fsync(dir.get()) != 0) return Fail(errno, "fsync directory", rel);
  return Status::OK();
}

Status PosixFs::SyncAll() {
  const int fd = OpenBeneath("", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(-fd, "open " + root_);
  Fd dir(fd);
  if (::syncfs(dir.get()) != 0) return Status::FromErrno(errno, "syncfs " + root_);
  return Status::OK();
}

Result<uint64_t> PosixFs::ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) {
  while (true) {
    const ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(offset));
    if (n >= 0) return static_cast<uint64_t>(n);
    if (errno != EINTR) return Status::FromErrno(errno, "read under " + root_);
  }
}

Result<uint64_t> PosixFs::WriteV(int fd, const iovec* iov, int count) {
  while (true) {
    const ssize_t n = ::writev(fd, iov, count);
    if (n >= 0) return static_cast<uint64_t>(n);
    if (errno != EINTR) return Status::FromErrno(errno, "write under " + root_);
  }
}

Result<uint64_t> PosixFs::WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) {
  while (true) {
    const ssize_t n = ::pwrite(fd, data, len, static_cast<off_t>(offset));
    if (n >= 0) return static_cast<uint64_t>(n);
    if (errno != EINTR) return Status::FromErrno(errno, "write under " + root_);
  }
}

Status PosixFs::SyncFile(int fd) {
  if (::fdatasync(fd) != 0) return Status::FromErrno(errno, "fsync under " + root_);
  return Status::OK();
}

Status PosixFs::Preallocate(int fd, uint64_t len) {
  int r;
  do {
    r = ::fallocate(fd, 0, 0, static_cast<off_t>(len));
  } while (r != 0 && errno == EINTR);
  return r == 0 ? Status::OK() : Status::FromErrno(errno, "fallocate under " + root_);  // NotSupported: none here
}

// mkdir -p of an absolute path (the caller's own path: links in it are the caller's choice).
Status MakeRootDirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + prefix);
  }
  return Status::OK();
}

}  // namespace

std::string JoinRel(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  out += '/';
  out += name;
  return out;
}

std::string_view RelDir(std::string_view rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
}

std::string_view RelBase(std::string_view rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? rel : rel.substr(slash + 1);
}

Result<std::shared_ptr<FileSystem>> OpenPosixFileSystem(const std::string& root_in, const PosixFsOptions& options) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root.empty() || root.front() != '/') {
    return Status::InvalidArgument("directory '" + root_in + "' must be an absolute path");
  }
  int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && options.create) {
    KVTIER_RETURN_IF_ERROR(MakeRootDirs(root));
    fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("directory " + root + " does not exist");
    if (errno == ENOTDIR) return Status::InvalidArgument(root + " is not a directory");
    return Status::FromErrno(errno, "open " + root);
  }
  return std::shared_ptr<FileSystem>(std::make_shared<PosixFs>(root, Fd(fd), options.use_openat2));
}

}  // namespace kvtier::internal
