// `kvtier shm list` / `kvtier shm remove NAME`: the shm:// pools of a directory (/dev/shm by default).
// list opens each pool read-only and changes nothing; remove unlinks one pool after checking that it is
// a kvtier pool of this user (processes that map it keep their mapping and refuse further writes).
#include <cstdio>
#include <memory>
#include <string>

#include "tiers/shm/shm_admin.h"
#include "kvtier/tier.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct ShmArgs {
  std::string dir = "/dev/shm";
  std::string name;
};

int RunList(const ShmArgs& a) {
  auto pools = internal::ListShmPools(a.dir);
  if (!pools.ok()) {
    std::fprintf(stderr, "kvtier shm list: %s\n", pools.status().ToString().c_str());
    return 1;
  }
  if (pools->empty()) std::printf("no shm:// pools in %s\n", a.dir.c_str());
  for (const internal::ShmPoolInfo& p : *pools) {
    if (!p.status.ok()) {
      std::printf("%-24s %s: %s\n", p.name.c_str(), p.temporary ? "temporary" : "refused", p.status.ToString().c_str());
      continue;
    }
    std::printf("%-24s %s used of %s, %llu chunks, pages %s, file %s; repairs %llu, reclaimed %llu, evictions %llu\n",
                p.name.c_str(), FormatBytes(p.usage_bytes).c_str(), FormatBytes(p.capacity_bytes).c_str(),
                static_cast<unsigned long long>(p.chunks), FormatBytes(p.page_bytes).c_str(),
                FormatBytes(p.file_bytes).c_str(), static_cast<unsigned long long>(p.repairs),
                static_cast<unsigned long long>(p.reclaimed), static_cast<unsigned long long>(p.evictions));
  }
  return 0;
}

int RunRemove(const ShmArgs& a) {
  if (Status s = internal::RemoveShmPool(a.dir, a.name); !s.ok()) {
    std::fprintf(stderr, "kvtier shm remove: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("removed shm:// pool %s from %s\n", a.name.c_str(), a.dir.c_str());
  return 0;
}

KVTIER_COMMAND("shm", "list", "List the shm:// pools of a directory (read-only: changes nothing)",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<ShmArgs>();
                 cmd.add_option("--dir", a->dir, "where the pools are (dir= or hugepages= of the URL)")->default_val("/dev/shm");
                 return [a] { return RunList(*a); };
               });

KVTIER_COMMAND("shm", "remove", "Remove one shm:// pool (only a kvtier pool of this user)",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<ShmArgs>();
                 cmd.add_option("name", a->name, "the pool's name (shm://NAME)")->required();
                 cmd.add_option("--dir", a->dir, "where the pool is")->default_val("/dev/shm");
                 return [a] { return RunRemove(*a); };
               });

}  // namespace
}  // namespace kvtier::tools
