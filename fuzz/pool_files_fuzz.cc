// Fuzz target: what the persistent tiers read from a directory that other processes, hosts or people
// also write: the fs:// pool's metadata (KVTIER_POOL) and usage (USAGE) files, and the names of the
// entries file:// and fs:// find when they scan. Properties: no crash; errors are Corruption or
// VersionMismatch (metadata) and Corruption (usage); a name accepted as a chunk is exactly the name
// kvtier writes for that chunk, so two spellings never name one chunk; a name accepted as a temporary
// carries kvtier's marker after a kvtier name.
//
// Input: the text, also split at '/' into (namespace dir, fan-out dir, file name).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "tiers/file/file_tier.h"
#include "tiers/fs/pool_layout.h"
#include "io/chunk_dir.h"
#include "io/dir_names.h"
#include "fuzz_check.h"

namespace kvtier::fuzz {
namespace {

void CheckMeta(std::string_view text) {
  const internal::ChunkDirSpec spec = internal::PoolDirSpec();
  auto v = internal::ParseDirMarker(text, spec, "/fuzz");
  if (v.ok()) {
    KVTIER_FUZZ_CHECK(*v >= 1 && *v <= internal::kPoolFormatVersion);
    auto again = internal::ParseDirMarker(internal::EncodeDirMarker(spec, *v), spec, "/fuzz");
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
    return std::string(dir != nullptr ? dir : "/tmp") + "/kvtier-fuzz-pool-" + std::to_string(getpid());
  }()};
  static const std::unique_ptr<internal::ChunkDir> pool = [] {
    auto p = internal::OpenPool(root.path, internal::ChunkDirOptions{});
    return p.ok() ? std::move(p).value() : nullptr;
  }();
  if (pool == nullptr) return;
  FILE* f = std::fopen((root.path + "/" + std::string(internal::kPoolUsageName)).c_str(), "wb");
  if (f == nullptr) return;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  auto u = internal::ReadPoolUsage(*pool);
  if (!u.ok()) {
    KVTIER_FUZZ_CHECK(u.status().IsCorruption());
    return;
  }
  auto again = internal::ParsePoolUsage(internal::EncodePoolUsage(*u));
  KVTIER_FUZZ_CHECK(again.ok() && again->bytes == u->bytes && again->chunks == u->chunks &&
                    again->scanned_at == u->scanned_at);
}

void CheckNames(std::string_view text) {
  const size_t a = text.find('/');
  const size_t b = a == std::string_view::npos ? a : text.find('/', a + 1);
  if (b == std::string_view::npos) return;
  const std::string_view ns_dir = text.substr(0, a), fan = text.substr(a + 1, b - a - 1),
                         name = text.substr(b + 1);
  auto is_chunk = [](std::string_view n) { return internal::ParseChunkFileName(n).has_value(); };
  auto key = internal::ParseChunkFileName(name);
  if (key) {
    KVTIER_FUZZ_CHECK(name.size() == 68 && name.ends_with(".kvc"));
    KVTIER_FUZZ_CHECK(internal::ChunkFileName(*key) == name);
    KVTIER_FUZZ_CHECK(!internal::ParseTempName(name, is_chunk).has_value());
    // With a namespace directory and the fan-out of its key, it is exactly file://'s path of that chunk.
    if (internal::IsLowerHex(ns_dir, 64) && fan == name.substr(0, 2)) {
      ChunkId id;
      id.ns = DigestFromHex(ns_dir).value();
      id.key = *key;
      KVTIER_FUZZ_CHECK(internal::ChunkRelPath(internal::FileDirSpec(), id) == text);
    }
  }
  if (auto t = internal::ParseTempName(name, is_chunk)) {
    KVTIER_FUZZ_CHECK(is_chunk(t->final_name));
    KVTIER_FUZZ_CHECK(name.starts_with(t->final_name));
    const std::string_view rest = name.substr(t->final_name.size());
    KVTIER_FUZZ_CHECK(rest.starts_with(".kvtmp.") || rest.starts_with(".tmp."));
    KVTIER_FUZZ_CHECK(t->pid > 0);
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
