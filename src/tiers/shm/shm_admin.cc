#include "tiers/shm/shm_admin.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tiers/shm/shm_pool.h"

namespace kvtier::internal {
namespace {

// A pool shared with a group (group=) is looked at as that group's pool: mode 0660 is then expected.
long GroupOf(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || (st.st_mode & 0070) == 0) return -1;
  return static_cast<long>(st.st_gid);
}

}  // namespace

Result<std::vector<ShmPoolInfo>> ListShmPools(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::IOError("open " + dir + ": " + std::strerror(errno));
  std::vector<ShmPoolInfo> out;
  const std::string prefix = "kvtier-shm-";
  while (const dirent* e = ::readdir(d)) {
    const std::string file = e->d_name;
    if (file.rfind(prefix, 0) != 0) continue;
    ShmPoolInfo info;
    info.path = dir + "/" + file;
    info.name = file.substr(prefix.size());
    if (const size_t t = info.name.find(".init."); t != std::string::npos) {
      info.temporary = true;
      info.name = info.name.substr(0, t);
      info.status = Status::NotFound("unfinished pool file of a creator (never had the pool's name)");
      out.push_back(info);
      continue;
    }
    shm::PoolSpec spec;
    spec.name = info.name;
    spec.dir = dir;
    spec.read_only = true;
    spec.group = GroupOf(info.path);
    auto pool = shm::ShmPool::Open(spec);
    if (!pool.ok()) {
      info.status = pool.status();
      out.push_back(info);
      continue;
    }
    const shm::PoolHeader& h = (*pool)->header();
    info.file_bytes = h.file_bytes;
    info.page_bytes = h.page_bytes;
    info.capacity_bytes = h.capacity_bytes.load();
    info.usage_bytes = h.used_pages.load() * h.page_bytes;
    info.chunks = h.live_chunks.load();
    info.repairs = h.repairs.load();
    info.reclaimed = h.reclaimed.load();
    info.evictions = h.evictions.load();
    out.push_back(info);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const ShmPoolInfo& a, const ShmPoolInfo& b) { return a.path < b.path; });
  return out;
}

Status RemoveShmPool(const std::string& dir, const std::string& name) {
  shm::PoolSpec spec;
  spec.name = name;
  spec.dir = dir;
  spec.read_only = true;
  KVTIER_ASSIGN_OR_RETURN(const std::string file, shm::PoolFileName(name));
  spec.group = GroupOf(dir + "/" + file);
  KVTIER_ASSIGN_OR_RETURN(auto pool, shm::ShmPool::Open(spec));  // only a kvtier pool of this user
  const std::string path = pool->path();
  pool.reset();
  if (::unlink(path.c_str()) != 0) return Status::IOError("remove " + path + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace kvtier::internal
