#include "core/work_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "core/host_identity.h"
#include "core/input_file.h"

namespace kvtier::internal {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMarkerHeader = "kvtier work folder v1";
constexpr uint64_t kMaxMarkerBytes = 4096;


// Field 22 of /proc/PID/stat (the start time); 0 when it cannot be read.
uint64_t StartTicks(pid_t pid) {
  auto stat = ReadBoundedFile("/proc/" + std::to_string(pid) + "/stat", kMaxMarkerBytes, "process stat");
  if (!stat.ok()) return 0;
  const size_t paren = stat->rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat->substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

// A plain decimal number without sign, below `max`.
bool ParseNumber(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || __builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v)) {
      return false;
    }
  }
  *out = v;
  return v <= max;
}

bool IsOurDirectory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
}

// The owner named by DIR's marker; NotFound/InvalidArgument when it has none that kvtier wrote.
Result<WorkOwner> ReadMarker(const std::string& dir) {
  const std::string marker = dir + "/" + kWorkMarkerName;
  struct stat st {};
  if (::lstat(marker.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + marker);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(marker + " is not a regular file");
  KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadBoundedFile(marker, kMaxMarkerBytes, "work marker"));
  return WorkOwner::FromMarkerText(text);
}

// Everything but the marker, then the marker, then the folder itself. remove_all never follows a
// symbolic link: a link inside the folder is removed, not what it points to.
Status RemoveWorkDir(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename() == kWorkMarkerName) continue;
    fs::remove_all(it->path(), ec);
    if (ec) break;
  }
  if (!ec) fs::remove(fs::path(dir) / kWorkMarkerName, ec);
  if (!ec) fs::remove(dir, ec);
  return ec ? Status::FromErrno(ec.value(), "remove work folder " + dir) : Status::OK();
}

}  // namespace

WorkOwner WorkOwner::Self() {
  WorkOwner o;
  o.host = HostName();
  o.boot_id = BootId();
  o.pid = ::getpid();
  o.start_ticks = StartTicks(o.pid);
  return o;
}

std::string WorkOwner::ToMarkerText() const {
  return std::string(kMarkerHeader) + "\nhost " + host + "\nboot " + boot_id + "\npid " +
         std::to_string(pid) + "\nstart " + std::to_string(start_ticks) + "\n";
}

Result<WorkOwner> WorkOwner::FromMarkerText(const std::string& text) {
  std::istringstream in(text);
  std::string header, line;
  std::getline(in, header);
  if (header != kMarkerHeader) return Status::InvalidArgument("not a kvtier work marker");
  WorkOwner o;
  uint64_t pid = 0;
  bool has[4] = {false, false, false, false};
  const char* keys[4] = {"host ", "boot ", "pid ", "start "};
  while (std::getline(in, line)) {
    for (int k = 0; k < 4; ++k) {
      if (line.rfind(keys[k], 0) != 0 || has[k]) continue;
      const std::string value = line.substr(std::string(keys[k]).size());
      has[k] = k == 0   ? (o.host = value, !value.empty())
               : k == 1 ? (o.boot_id = value, !value.empty())
               : k == 2 ? ParseNumber(value, INT_MAX, &pid) && pid > 0
                        : ParseNumber(value, UINT64_MAX, &o.start_ticks);
    }
  }
  if (!has[0] || !has[1] || !has[2] || !has[3]) return Status::InvalidArgument("incomplete kvtier work marker");
  o.pid = static_cast<pid_t>(pid);
  return o;
}

bool WorkOwner::MayBeAlive() const {
  const WorkOwner self = Self();
  if (host != self.host) return true;       // another host's process cannot be checked from here
  if (boot_id != self.boot_id) return false;  // this host rebooted since
  if (ProcessIsGone(pid)) return false;
  return StartTicks(pid) == start_ticks;    // else the pid was reused by another process
}

Result<size_t> RemoveDeadWorkDirs(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  std::vector<std::string> candidates;
  const std::string lead = prefix + ".";
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(lead, 0) == 0) candidates.push_back(it->path().string());
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::FromErrno(ec.value(), "list " + parent);
  }
  size_t removed = 0;
  for (const std::string& dir : candidates) {
    if (!IsOurDirectory(dir)) continue;
    auto owner = ReadMarker(dir);
    if (!owner.ok() || owner->MayBeAlive()) continue;
    KVTIER_RETURN_IF_ERROR(RemoveWorkDir(dir));
    ++removed;
  }
  return removed;
}

Result<WorkDir> WorkDir::Create(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Status::FromErrno(ec.value(), "create " + parent);
  KVTIER_RETURN_IF_ERROR(RemoveDeadWorkDirs(parent, prefix).status());
  std::string path = (fs::path(parent) / (prefix + "." + std::to_string(::getpid()) + ".XXXXXX")).string();
  if (::mkdtemp(path.data()) == nullptr) return Status::FromErrno(errno, "create work folder " + path);
  WorkDir dir(path);  // from here on the destructor removes it
  const std::string marker = path + "/" + kWorkMarkerName;
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "create " + marker);
  const std::string text = WorkOwner::Self().ToMarkerText();
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!written) return Status::FromErrno(err == 0 ? EIO : err, "write " + marker);
  return dir;
}

WorkDir::WorkDir(WorkDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}

WorkDir& WorkDir::operator=(WorkDir&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) (void)RemoveWorkDir(path_);
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

WorkDir::~WorkDir() {
  if (!path_.empty()) (void)RemoveWorkDir(path_);
}

void WorkDir::Keep() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove(fs::path(path_) / kWorkMarkerName, ec);
  path_.clear();
}

}  // namespace kvtier::internal
