#include "eval/e2e/workload.h"

#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

std::vector<uint32_t> Draw(uint64_t seed, uint64_t stream, size_t n, uint32_t vocab) {
  std::vector<uint32_t> out(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (stream + 1) * 0xbf58476d1ce4e5b9ull;
  for (auto& t : out) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    t = static_cast<uint32_t>((z ^ (z >> 31)) % vocab);
  }
  return out;
}

}  // namespace

std::vector<uint32_t> SessionContext(const WorkloadOptions& w, uint32_t session) {
  return Draw(w.seed, uint64_t{session} * 2, w.context_tokens, w.vocab);
}

std::vector<uint32_t> SessionPrompt(const WorkloadOptions& w, uint32_t session) {
  std::vector<uint32_t> p = SessionContext(w, session);
  std::vector<uint32_t> turn = Draw(w.seed, uint64_t{session} * 2 + 1, w.turn_tokens, w.vocab);
  p.insert(p.end(), turn.begin(), turn.end());
  return p;
}

const std::vector<std::string>& AllModeNames() {
  static const std::vector<std::string> names = {"recompute", "mem", "file", "fs", "mem+file"};
  return names;
}

Result<ModeSpec> MakeMode(const std::string& name, const std::string& dir, uint64_t mem_bytes,
                          uint64_t disk_bytes) {
  const std::string mem = "mem://?capacity=" + std::to_string(mem_bytes);
  const std::string file = "file://" + dir + "/file?capacity=" + std::to_string(disk_bytes);
  ModeSpec m{name, {}};
  if (name == "recompute") return m;
  if (name == "mem") {
    m.tiers = {mem};
  } else if (name == "file") {
    m.tiers = {file};
  } else if (name == "fs") {
    m.tiers = {"fs://" + dir + "/fs"};
  } else if (name == "mem+file") {
    m.tiers = {"mem://?capacity=" + std::to_string(mem_bytes / 2), file};
  } else {
    return Status::InvalidArgument("unknown e2e mode '" + name +
                                   "' (known: recompute, mem, file, fs, mem+file)");
  }
  return m;
}

}  // namespace kvtier::internal
