#include "fs/pool_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string_view>
#include <vector>

namespace kvtier::internal {
namespace {

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

// Names of the entries of `dir` that pass `keep`; a vanished directory has none.
Result<std::vector<std::string>> ListDir(const std::string& dir,
                                         const std::function<bool(std::string_view)>& keep) {
  DirPtr d(::opendir(dir.c_str()));
  if (!d) {
    if (errno == ENOENT || errno == ENOTDIR) return std::vector<std::string>{};
    return Status::FromErrno(errno, "opendir " + dir);
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string_view name = e->d_name;
    if (name != "." && name != ".." && keep(name)) names.emplace_back(name);
  }
  if (errno != 0) return Status::FromErrno(errno, "readdir " + dir);
  return names;
}

bool IsHexName(std::string_view name, size_t len) {
  if (name.size() != len) return false;
  for (char c : name) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Visits the files of one leaf directory; false when `fn` asked to stop.
Result<bool> WalkLeaf(const std::string& dir, const Digest& ns,
                      const std::function<bool(const PoolEntry&)>& fn) {
  KVTIER_ASSIGN_OR_RETURN(auto names, ListDir(dir, [](std::string_view) { return true; }));
  for (const std::string& name : names) {
    PoolEntry e;
    e.path = dir + "/" + name;
    if (::lstat(e.path.c_str(), &e.st) != 0 || !S_ISREG(e.st.st_mode)) continue;
    e.kind = ClassifyPoolEntry(name);
    if (e.kind == PoolEntryKind::kChunk) {
      auto key = DigestFromHex(std::string_view(name).substr(0, 64));
      if (!key.ok()) continue;
      e.id.ns = ns;
      e.id.key.bytes = *key;
    }
    if (!fn(e)) return false;
  }
  return true;
}

}  // namespace

Status WalkPool(const PoolLayout& layout, const std::function<bool(const PoolEntry&)>& fn) {
  const std::string top = layout.ChunkDir();
  auto hex2 = [](std::string_view n) { return IsHexName(n, 2); };
  KVTIER_ASSIGN_OR_RETURN(auto namespaces, ListDir(top, [](std::string_view n) { return IsHexName(n, 64); }));
  for (const std::string& ns_hex : namespaces) {
    KVTIER_ASSIGN_OR_RETURN(Digest ns, DigestFromHex(ns_hex));
    const std::string ns_dir = top + "/" + ns_hex;
    KVTIER_ASSIGN_OR_RETURN(auto level1, ListDir(ns_dir, hex2));
    for (const std::string& a : level1) {
      KVTIER_ASSIGN_OR_RETURN(auto level2, ListDir(ns_dir + "/" + a, hex2));
      for (const std::string& b : level2) {
        KVTIER_ASSIGN_OR_RETURN(bool more, WalkLeaf(ns_dir + "/" + a + "/" + b, ns, fn));
        if (!more) return Status::OK();
      }
    }
  }
  return Status::OK();
}

}  // namespace kvtier::internal
