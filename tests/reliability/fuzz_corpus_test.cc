// Replays every committed fuzz input (seeds and the inputs of past crashes, fuzz/corpus/<target>/)
// through the fuzz targets' bodies, so a crash once found stays fixed in every ctest run, gcc and
// sanitizer builds included, without needing clang or libFuzzer.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kvtier::fuzz {
int FuzzChunkHeader(const uint8_t* data, size_t size);
int FuzzTierUrl(const uint8_t* data, size_t size);
int FuzzChunkFile(const uint8_t* data, size_t size);
int FuzzTierOptions(const uint8_t* data, size_t size);
int FuzzPoolFiles(const uint8_t* data, size_t size);
int FuzzDirTree(const uint8_t* data, size_t size);
int FuzzRedisRouter(const uint8_t* data, size_t size);
int FuzzShmPool(const uint8_t* data, size_t size);
#ifdef KVTIER_HAVE_REPLAY
int FuzzTraceLine(const uint8_t* data, size_t size);
#endif
}  // namespace kvtier::fuzz

namespace {

namespace fs = std::filesystem;
using FuzzFn = int (*)(const uint8_t*, size_t);

// Runs `fn` over every file of fuzz/corpus/<target>; returns how many inputs it ran.
size_t Replay(const std::string& target, FuzzFn fn) {
  const fs::path dir = fs::path(KVTIER_FUZZ_CORPUS_DIR) / target;
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());  // aborts on a failed property
    ++n;
  }
  return n;
}

TEST(FuzzCorpus, ChunkHeaderInputsHold) { EXPECT_GT(Replay("chunk_header", kvtier::fuzz::FuzzChunkHeader), 0u); }

TEST(FuzzCorpus, TierUrlInputsHold) { EXPECT_GT(Replay("tier_url", kvtier::fuzz::FuzzTierUrl), 0u); }

TEST(FuzzCorpus, ChunkFileInputsHold) { EXPECT_GT(Replay("chunk_file", kvtier::fuzz::FuzzChunkFile), 0u); }

TEST(FuzzCorpus, TierOptionsInputsHold) {
  EXPECT_GT(Replay("tier_options", kvtier::fuzz::FuzzTierOptions), 0u);
}

TEST(FuzzCorpus, PoolFilesInputsHold) { EXPECT_GT(Replay("pool_files", kvtier::fuzz::FuzzPoolFiles), 0u); }

TEST(FuzzCorpus, DirTreeInputsHold) { EXPECT_GT(Replay("dir_tree", kvtier::fuzz::FuzzDirTree), 0u); }

TEST(FuzzCorpus, RedisRouterInputsHold) {
  EXPECT_GT(Replay("redis_router", kvtier::fuzz::FuzzRedisRouter), 0u);
}

TEST(FuzzCorpus, ShmPoolInputsHold) { EXPECT_GT(Replay("shm_pool", kvtier::fuzz::FuzzShmPool), 0u); }

#ifdef KVTIER_HAVE_REPLAY
TEST(FuzzCorpus, TraceLineInputsHold) { EXPECT_GT(Replay("trace_line", kvtier::fuzz::FuzzTraceLine), 0u); }
#endif

}  // namespace
