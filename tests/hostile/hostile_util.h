// Shared pieces of the hostile-directory suite: open file:// or fs:// over a real directory (optionally
// through a fault-injecting filesystem), put and read chunks, and fingerprint a whole directory tree
// (names, types, sizes, times, contents and link targets, never following a link) so a test can prove
// that an operation changed nothing, or nothing outside a root.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tiers/file/file_test_util.h"
#include "tiers/file/file_tier.h"
#include "tiers/fs/fs_tier.h"
#include "io/filesystem.h"

namespace kvtier::testing {

enum class Kind { kFile, kFs };

inline std::string KindName(Kind k) { return k == Kind::kFile ? "file" : "fs"; }

struct OpenSpec {
  std::shared_ptr<internal::FileSystem> fs = nullptr;
  bool read_only = false;
  uint64_t capacity = 0;
  bool direct = true;
  bool io_uring = true;
  bool sync = false;
};

inline Result<std::unique_ptr<Tier>> OpenKind(Kind kind, const std::string& root, const OpenSpec& s = {}) {
  if (kind == Kind::kFile) {
    internal::FileTierOptions o;
    o.dir = root;
    o.capacity_bytes = s.capacity;
    o.read_only = s.read_only;
    o.fs = s.fs;
    o.sync = s.sync;
    o.reader.direct_io = s.direct;
    o.reader.use_io_uring = s.io_uring;
    return internal::OpenFileTier(o);
  }
  internal::FsTierOptions o;
  o.root = root;
  o.capacity_bytes = s.capacity;
  o.read_only = s.read_only;
  o.fs = s.fs;
  o.sync = s.sync;
  o.direct = s.direct ? internal::FsDirectMode::kOn : internal::FsDirectMode::kOff;
  o.io_uring = s.io_uring;
  o.neg_ttl = std::chrono::milliseconds(0);
  return internal::OpenFsTierWithOptions(o, "fs://" + root);
}

inline std::string ChunkFile(Kind kind, const std::string& root, const ChunkId& id) {
  return kind == Kind::kFile ? internal::FileChunkPathForTesting(root, id)
                             : internal::PoolChunkPathForTesting(root, id);
}

inline ChunkId IdNo(const Namespace& ns, uint32_t n) { return ChunkId::Of(ns, KeyNo(ns, n)); }

inline Status PutNo(Tier& t, const Namespace& ns, uint32_t n) {
  auto payload = PayloadFor(KeyNo(ns, n), ns.layout().BytesPerChunk());
  OnePiece p(payload);
  return t.Put(IdNo(ns, n), p.src());
}

// Reads chunk n; OK only when the bytes are exactly the ones written.
inline Status GetNo(Tier& t, const Namespace& ns, uint32_t n) {
  std::vector<std::byte> out(ns.layout().BytesPerChunk(), std::byte{0x77});
  OnePiece p(out);
  Status s = t.Get(IdNo(ns, n), p.dst());
  if (s.ok() && out != PayloadFor(KeyNo(ns, n), out.size())) return Status::Internal("wrong bytes served");
  return s;
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// The whole file ("" when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fingerprint of everything under `root`: one line per entry, never following links.
inline std::map<std::string, std::string> TreePrint(const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string path = it->path().string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    std::string line = std::to_string(st.st_mode) + " " + std::to_string(st.st_size) + " " +
                       std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISLNK(st.st_mode)) {
      line += " -> " + std::filesystem::read_symlink(path, ec).string();
    } else if (S_ISREG(st.st_mode) && st.st_size < (64 << 20)) {
      std::ifstream in(path, std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      line += " " + std::to_string(XXH3_64bits(data.data(), data.size()));
    }
    out[path.substr(root.size())] = line;
  }
  return out;
}

inline bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace kvtier::testing
