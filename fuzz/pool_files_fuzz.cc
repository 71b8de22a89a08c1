// Fuzz target: what the persistent tiers read from a directory that other processes, hosts or people
// also write: the fs:// pool's metadata (KVTIER_POOL) and usage (USAGE) files, and the names of the
// entries file:// and fs:// find when they scan. Properties: no crash; errors are Corruption or
// VersionMismatch (metadata) and Corruption (usage); a name accepted as a chunk is exactly the name
// kvtier writes for that chunk, so two spellings never name one chunk.
//
// Input: the text, also split at '/' into (namespace dir, fan-out dir, file name).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "file/file_layout.h"
#include "fs/pool_layout.h"
#include "fuzz_check.h"

namespace kvtier::fuzz {
namespace {

void CheckMeta(std::string_view text) {
  auto v = internal::ParsePoolMeta(text, "/fuzz");
  if (v.ok()) {
    KVTIER_FUZZ_CHECK(*v >= 1 && *v <= internal::kPoolFormatVersion);
    auto again = internal::ParsePoolMeta(internal::EncodePoolMeta(*v), "/fuzz");
    KVTIER_FUZZ_CHECK(again.ok() && *again == *v);
  } else {
    const Code c = v.status().code();
    KVTIER_FUZZ_CHECK(c == Code::kCorruption || c == Code::kVersionMismatch);
  }
}

void CheckUsage(std::string_view text) {
  // One scratch pool directory per process, removed at exit.
  struct ScratchDir {
    std::string path;
    ~ScratchDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const ScratchDir root{[] {
    const char* dir = std::getenv("TMPDIR");
    std::string r = std::string(dir != nullptr ? dir : "/tmp") + "/kvtier-fuzz-pool-" + std::to_string(getpid());
    std::error_code ec;
    std::filesystem::create_directories(r, ec);
    return r;
  }()};
  const internal::PoolLayout layout(root.path);
  FILE* f = std::fopen(layout.UsagePath().c_str(), "wb");
  if (f == nullptr) return;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  auto u = internal::ReadPoolUsage(layout);
  if (!u.ok()) KVTIER_FUZZ_CHECK(u.status().IsCorruption());
}

void CheckNames(std::string_view text) {
  const size_t a = text.find('/');
  const size_t b = a == std::string_view::npos ? a : text.find('/', a + 1);
  if (b == std::string_view::npos) return;
  const std::string_view ns_dir = text.substr(0, a), fan = text.substr(a + 1, b - a - 1),
                         name = text.substr(b + 1);
  if (auto id = internal::ParseChunkPath(ns_dir, fan, name)) {
    const std::string path = internal::ChunkFilePath("/d", id->ns, id->key);
    KVTIER_FUZZ_CHECK(path == "/d/" + std::string(text));
    KVTIER_FUZZ_CHECK(!internal::IsTempName(name));
  }
  if (internal::ClassifyPoolEntry(name) == internal::PoolEntryKind::kChunk) {
    KVTIER_FUZZ_CHECK(name.size() == 68 && name.ends_with(".kvc"));
    KVTIER_FUZZ_CHECK(DigestFromHex(name.substr(0, 64)).ok());
    KVTIER_FUZZ_CHECK(DigestHex(DigestFromHex(name.substr(0, 64)).value()) == name.substr(0, 64));
  }
}

}  // namespace

int FuzzPoolFiles(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckMeta(text);
  CheckUsage(text);
  CheckNames(text);
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzPoolFiles)
