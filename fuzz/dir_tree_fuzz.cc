// Fuzz target: random directory trees under a tier root, as careless users and hostile co-tenants
// leave them: folders and files with kvtier-like and foreign names, links to inside, outside and
// nowhere, FIFOs, sparse giants, and marker/usage files with random text. On each tree, for file://
// and fs://, it opens the tier (read-only, then for writing), lists and checks every chunk, loads a few,
// runs gc (fs://) and a repairing verify pass. Properties: no crash, no hang (libFuzzer's -timeout),
// and nothing outside the root changes: a sibling folder reachable through links keeps every name,
// size, time and byte.
//
// Input: a sequence of records [op, name, target, length, text...] (see Build).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tiers/file/file_tier.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_gc.h"
#include "fuzz_check.h"

namespace kvtier::fuzz {
namespace {

namespace stdfs = std::filesystem;

const std::string kKey = std::string(64, 'a');
const std::string kNs = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Names the tree is built from: kvtier's own shapes, near misses and foreign names.
const std::vector<std::string> kNames = {
    kNs, "v1", "aa", "KVTIER_DIR", "KVTIER_POOL", "USAGE", "GC.lock", kKey + ".kvc",
    kKey + ".kvc.kvtmp.00000000000000ab.4194311.0000000000000001.3", kKey + ".kvc.tmp.4194311.77.1",
    "thesis.tmp.docx", "kvtier.capacity", "ZZ", kKey.substr(0, 63) + "G.kvc", ".kvc", "x.kvtmp.y", "notes",
    "KVTIER_DIR.kvtmp.00000000000000ab.1.0000000000000001.0"};

const std::vector<std::string> kTexts = {
    "kvtier-file\nversion=1\n", "kvtier-pool\nversion=1\n", "kvtier-pool\nversion=99999999999\n",
    "bytes=99999999999999999999\nchunks=1\nscanned_at=1\n", "bytes=10\nchunks=1\nscanned_at=1\n", "",
    "garbage"};

struct Scratch {
  std::string base;
  Scratch() {
    const char* dir = std::getenv("TMPDIR");
    base = std::string(dir != nullptr ? dir : "/tmp") + "/kvtier-fuzz-tree-" + std::to_string(::getpid());
  }
  ~Scratch() {
    std::error_code ec;
    stdfs::remove_all(base, ec);
  }
  std::string root() const { return base + "/root"; }
  std::string outside() const { return base + "/outside"; }
};

// Everything under `dir`, never following links.
std::map<std::string, std::string> Print(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = stdfs::recursive_directory_iterator(dir, ec); !ec && it != stdfs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    std::string line = std::to_string(st.st_mode) + " " + std::to_string(st.st_size) + " " +
                       std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode)) {
      std::ifstream in(it->path(), std::ios::binary);
      line += " " + std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    out[it->path().string()] = line;
  }
  return out;
}

// Whether `path` (under `root`) can be created without going through a link or replacing anything:
// the harness itself must never write outside the root.
bool SafeToCreate(const std::string& root, const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return false;
  for (size_t at = path.find('/', root.size() + 1); at != std::string::npos; at = path.find('/', at + 1)) {
    if (::lstat(path.substr(0, at).c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) return false;
  }
  return true;
}

// Builds the tree the input describes under scratch.root(). Each record places one entry at a path of
// up to four names (the first byte's low bits pick the depth).
void Build(const Scratch& s, std::string_view data) {
  std::error_code ec;
  stdfs::remove_all(s.root(), ec);
  stdfs::create_directories(s.root(), ec);
  for (size_t i = 0; i + 4 <= data.size() && i < 4096;) {
    const uint8_t op = static_cast<uint8_t>(data[i]);
    std::string path = s.root();
    const int depth = 1 + (op & 3);
    for (int d = 0; d < depth; ++d) {
      path += "/" + kNames[static_cast<uint8_t>(data[i + 1 + (d % 2)]) % kNames.size()];
    }
    const std::string& text = kTexts[static_cast<uint8_t>(data[i + 3]) % kTexts.size()];
    i += 4;
    if (!SafeToCreate(s.root(), path)) continue;
    stdfs::create_directories(stdfs::path(path).parent_path(), ec);
    switch ((op >> 2) % 7) {
      case 0: stdfs::create_directories(path, ec); break;
      case 1: std::ofstream(path, std::ios::binary) << text; break;
      case 2: stdfs::create_symlink(s.outside() + "/precious", path, ec); break;
      case 3: stdfs::create_directory_symlink(s.outside(), path, ec); break;
      case 4: ::mkfifo(path.c_str(), 0644); break;
      case 5: {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
        if (fd >= 0) {
          (void)::ftruncate(fd, (op & 0x80) ? (100ll << 30) : 8192);
          ::close(fd);
        }
        break;
      }
      default: stdfs::create_symlink("../" + kNames[op % kNames.size()], path, ec); break;
    }
  }
}

void Exercise(std::unique_ptr<Tier>& t, const Namespace& ns) {
  std::vector<ChunkInfo> all;
  (void)t->List([&](const ChunkInfo& c) {
    all.push_back(c);
    return all.size() < 64;
  });
  for (const ChunkInfo& c : all) (void)t->Check(c);
  std::vector<std::byte> buf(ns.layout().BytesPerChunk());
  std::span<std::byte> piece(buf);
  for (const ChunkInfo& c : all) (void)t->Get(c.id, {&piece, 1});
  std::vector<uint32_t> tokens(ns.layout().tokens_per_chunk, 1);
  const ChunkKey key = NextChunkKey(ns, nullptr, tokens);
  std::span<const std::byte> src(buf);
  (void)t->Put(ChunkId::Of(ns, key), {&src, 1});
}

void RunOn(const Scratch& s, std::string_view data, bool pool) {
  static const Namespace ns = Namespace::Make("fuzz/model", Layout{1, 1, 8, DType::kFP16, 4}, "t").value();
  Build(s, data);
  const std::string url = (pool ? "fs://" : "file://") + s.root() + "?capacity=64KiB";
  for (bool read_only : {true, false}) {
    auto t = OpenTier(url, TierOpenOptions{.read_only = read_only});
    if (t.ok()) Exercise(*t, ns);
  }
  if (pool) {
    (void)internal::CollectPoolGarbage(s.root(), internal::GcOptions{.max_bytes = 0, .grace = std::chrono::seconds(0)});
  }
}

}  // namespace

int FuzzDirTree(const uint8_t* data, size_t size) {
  static const Scratch s;
  static const bool ready = [] {
    std::error_code ec;
    stdfs::create_directories(s.outside() + "/inner", ec);
    std::ofstream(s.outside() + "/precious") << "a user's file outside the tier";
    std::ofstream(s.outside() + "/inner/" + kKey + ".kvc") << "a chunk-named file outside";
    return true;
  }();
  (void)ready;
  static const auto outside_before = Print(s.outside());
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  RunOn(s, text, /*pool=*/false);
  RunOn(s, text, /*pool=*/true);
  const auto outside_after = Print(s.outside());
  if (outside_after != outside_before) {
    for (const auto& [k, v] : outside_after) {
      auto it = outside_before.find(k);
      if (it == outside_before.end() || it->second != v) std::fprintf(stderr, "changed outside: %s %s\n", k.c_str(), v.c_str());
    }
    for (const auto& [k, v] : outside_before) {
      if (!outside_after.count(k)) std::fprintf(stderr, "gone outside: %s\n", k.c_str());
    }
  }
  KVTIER_FUZZ_CHECK(outside_after == outside_before);
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzDirTree)
