// Shared helpers of the reliability suite: temporary directories, small layouts and namespaces,
// payloads whose bytes are a function of their chunk (so a test can tell right bytes from wrong ones,
// not just valid from invalid), a size knob for sanitizer runs, and process memory figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/keys.h"
#include "kvtier/layout.h"
#include "kvtier/tier.h"
#include "support/temp_dir.h"

namespace kvtier::reltest {

using kvtier::testing::TempDir;

// 2 layers x 1 head x 16 dims, fp16, 16 tokens per chunk: 2 KiB chunks, so tests stay fast.
Layout SmallLayout();
Namespace MakeNamespace(std::string_view tenant, const Layout& layout = SmallLayout(),
                        std::string_view model = "kvtier/reltest-model");

// Token ids 0..n-1 shifted by `seed`, and the keys of their full chunks.
std::vector<uint32_t> Tokens(size_t n, uint32_t seed);
std::vector<ChunkKey> Keys(const Namespace& ns, size_t chunks, uint32_t seed);

// The payload every test stores for (ns, key): bytes derived from both, so a chunk served for the wrong
// key or namespace never equals the expected payload.
std::vector<std::byte> PayloadFor(const Namespace& ns, const ChunkKey& key);
std::vector<std::byte> PayloadFor(const ChunkId& id, size_t bytes);

// Stores PayloadFor(ns, key) under ChunkId::Of(ns, key).
Status PutExpected(Tier& tier, const Namespace& ns, const ChunkKey& key);
// Reads the chunk; OK only if it was found AND holds exactly PayloadFor(ns, key). A wrong payload is
// reported as Internal (the test's own code), distinct from every status a tier returns.
Status GetAndVerify(Tier& tier, const Namespace& ns, const ChunkKey& key);

// Destinations for a Store::Load of `n` chunks of `bytes` each, one piece per chunk.
struct LoadBuffers {
  LoadBuffers(size_t n, size_t bytes);
  std::vector<std::vector<std::byte>> data;
  std::vector<std::span<std::byte>> pieces;
  std::vector<ScatterList> dsts;
  // How many of the first `n` buffers hold exactly PayloadFor(ns, keys[i]).
  size_t CountExact(const Namespace& ns, std::span<const ChunkKey> keys, size_t n) const;
};

// Sources for a Store::Save of PayloadFor(ns, keys[i]) for every key.
struct SaveSources {
  SaveSources(const Namespace& ns, std::span<const ChunkKey> keys);
  std::vector<std::vector<std::byte>> data;
  std::vector<std::span<const std::byte>> pieces;
  std::vector<GatherList> srcs;
};

// KVTIER_TEST_SCALE (default 1.0; the sanitizer builds set it lower) times `n`, at least `min`.
size_t Scaled(size_t n, size_t min = 1);
// True under ASan/TSan, where heavy loops shrink and timing is meaningless.
bool UnderSanitizer();

// Resident set size of this process from /proc/self/statm, in bytes.
uint64_t ResidentBytes();

// Regular files below `dir` (recursive) whose name satisfies `pred`.
std::vector<std::string> FilesUnder(const std::string& dir,
                                    const std::function<bool(const std::string& name)>& pred);
// Sum of the sizes of those files.
uint64_t BytesUnder(const std::string& dir);
bool IsTempName(const std::string& name);   // a writer's temporary: contains ".kvtmp." (or ".tmp.")
bool IsChunkName(const std::string& name);  // a published chunk: ends in ".kvc"
std::string FileNameOf(const std::string& path);

}  // namespace kvtier::reltest
