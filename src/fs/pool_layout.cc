#include "fs/pool_layout.h"
#include "io/chunk_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <random>
#include <string>

namespace kvtier::internal {
namespace {

constexpr std::string_view kMetaMagicLine = "kvtier-pool";

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// "name=value" lines of a small metadata text; returns the value of `name` or an empty view.
std::string_view FindField(std::string_view text, std::string_view name) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.size() > name.size() && line.substr(0, name.size()) == name && line[name.size()] == '=') {
      return line.substr(name.size() + 1);
    }
  }
  return {};
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

Status MakeDirs(const std::string& path) {
  if (path.empty()) return Status::OK();
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty() || prefix == "/") continue;
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "mkdir " + prefix);
    }
  }
  return Status::OK();
}

Status WriteAll(int fd, std::string_view text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write " + path);
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

// Writes `text` into a new temporary file beside `path`; returns the temporary's name.
Result<std::string> WriteTemp(const std::string& path, std::string_view text) {
  std::string tmp = TempPathFor(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  Status s = WriteAll(fd, text, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::FromErrno(errno, "fsync " + tmp);
  ::close(fd);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return tmp;
}

// Publishes the metadata without ever replacing a file another process published first: link()
// fails with EEXIST instead of overwriting, so a racing creator (even of a newer version) wins.
Status PublishMeta(const PoolLayout& layout) {
  KVTIER_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(layout.MetaPath(), EncodePoolMeta(kPoolFormatVersion)));
  const std::string meta = layout.MetaPath();
  Status s;
  if (::link(tmp.c_str(), meta.c_str()) != 0) {
    const int err = errno;
    if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS) {
      // Filesystems without hard links: rename only if still absent (a tiny race, same content).
      struct stat st;
      if (::stat(meta.c_str(), &st) != 0 && ::rename(tmp.c_str(), meta.c_str()) != 0) {
        s = Status::FromErrno(errno, "rename " + tmp);
      }
    } else if (err != EEXIST) {
      s = Status::FromErrno(err, "link " + meta);
    }
  }
  ::unlink(tmp.c_str());
  return s;
}

}  // namespace

PoolLayout::PoolLayout(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string PoolLayout::ChunkPath(const ChunkId& id) const {
  const std::string key = id.key.Hex();
  std::string p = ChunkDir();
  p.reserve(p.size() + 64 + 3 + 3 + 64 + 6);
  p += '/';
  p += DigestHex(id.ns);
  p += '/';
  p.append(key, 0, 2);
  p += '/';
  p.append(key, 2, 2);
  p += '/';
  p += key;
  p += kChunkFileSuffix;
  return p;
}

PoolEntryKind ClassifyPoolEntry(std::string_view name) {
  if (name.find(".tmp.") != std::string_view::npos) return PoolEntryKind::kTemp;
  if (name.size() == 64 + kChunkFileSuffix.size() && name.substr(64) == kChunkFileSuffix &&
      IsLowerHex(name.substr(0, 64))) {
    return PoolEntryKind::kChunk;
  }
  return PoolEntryKind::kOther;
}

std::string EncodePoolMeta(uint32_t version) {
  return std::string(kMetaMagicLine) + "\nversion=" + std::to_string(version) +
         "\nchunks=v1/<namespace>/<key[0:2]>/<key[2:4]>/<key>.kvc\n";
}

Result<uint32_t> ParsePoolMeta(std::string_view text, std::string_view root) {
  const std::string where = "pool " + std::string(root);
  if (text.substr(0, kMetaMagicLine.size()) != kMetaMagicLine) {
    return Status::Corruption(where + ": " + std::string(kPoolMetaName) + " is not a kvtier pool file");
  }
  uint64_t version = 0;
  if (!ParseU64(FindField(text, "version"), &version) || version == 0 || version > UINT32_MAX) {
    return Status::Corruption(where + ": " + std::string(kPoolMetaName) + " has no valid version");
  }
  if (version > kPoolFormatVersion) {
    return Status::VersionMismatch(where + " has format version " + std::to_string(version) +
                                   ", newer than this build of kvtier knows (" +
                                   std::to_string(kPoolFormatVersion) +
                                   "); upgrade kvtier on this host or use another pool directory");
  }
  return static_cast<uint32_t>(version);
}

Status OpenPool(const PoolLayout& layout, bool create) {
  struct stat st;
  if (::stat(layout.root().c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("pool path " + layout.root() + " is not a directory");
  }
  auto text = ReadSmallFile(layout.MetaPath());
  if (!text.ok() && text.status().IsNotFound()) {
    if (!create) {
      return Status::NotFound("no kvtier pool at " + layout.root() + " (missing " +
                              std::string(kPoolMetaName) + ")");
    }
    KVTIER_RETURN_IF_ERROR(MakeDirs(layout.root()));
    KVTIER_RETURN_IF_ERROR(PublishMeta(layout));
    text = ReadSmallFile(layout.MetaPath());
  }
  if (!text.ok()) return text.status();
  KVTIER_ASSIGN_OR_RETURN(uint32_t version, ParsePoolMeta(*text, layout.root()));
  (void)version;  // every version up to kPoolFormatVersion shares the v1 chunk layout
  return MakeDirs(layout.ChunkDir());
}

Status WritePoolUsage(const PoolLayout& layout, const PoolUsage& u) {
  return WriteSmallFileAtomic(layout.UsagePath(), "bytes=" + std::to_string(u.bytes) + "\nchunks=" +
                                                      std::to_string(u.chunks) + "\nscanned_at=" +
                                                      std::to_string(u.scanned_at) + "\n");
}

Result<PoolUsage> ReadPoolUsage(const PoolLayout& layout) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(layout.UsagePath()));
  PoolUsage u;
  uint64_t at = 0;
  if (!ParseU64(FindField(text, "bytes"), &u.bytes) || !ParseU64(FindField(text, "chunks"), &u.chunks) ||
      !ParseU64(FindField(text, "scanned_at"), &at)) {
    return Status::Corruption("malformed " + layout.UsagePath());
  }
  u.scanned_at = static_cast<int64_t>(at);
  return u;
}

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  std::string out;
  char buf[4096];
  Status s;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Status::FromErrno(errno, "read " + path);
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      s = Status::Corruption(path + " is larger than expected");
      break;
    }
  }
  ::close(fd);
  if (!s.ok()) return s;
  return out;
}

Status WriteSmallFileAtomic(const std::string& path, std::string_view text) {
  KVTIER_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(path, text));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = Status::FromErrno(errno, "rename " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::OK();
}

}  // namespace kvtier::internal
