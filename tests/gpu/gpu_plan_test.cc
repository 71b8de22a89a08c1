// The GPU path's planning (src/gpu/gpu_plan), on the CPU: the runs it plans are executed with memcpy
// between host buffers shaped like the engine's paged cache and compared with a token-by-token
// reference scatter, for every block size the API takes and every dtype size.
#include "gpu/gpu_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

namespace kvtier::internal {
namespace {

struct HostCache {
  std::vector<std::vector<std::byte>> k, v;  // per layer [num_blocks][block_tokens][row]
  std::vector<uint64_t> k_addr, v_addr;
  HostCache(uint32_t layers, uint64_t bytes) : k(layers), v(layers) {
    for (uint32_t l = 0; l < layers; ++l) {
      k[l].assign(bytes, std::byte{0});
      v[l].assign(bytes, std::byte{0});
      k_addr.push_back(reinterpret_cast<uint64_t>(k[l].data()));
      v_addr.push_back(reinterpret_cast<uint64_t>(v[l].data()));
    }
  }
};

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

void Execute(std::span<const DeviceRun> runs) {
  for (const DeviceRun& r : runs) {
    std::memcpy(reinterpret_cast<void*>(r.dst), reinterpret_cast<const void*>(r.src), r.bytes);
  }
}

struct Case {
  DType dtype;
  uint32_t block_tokens;
  uint32_t tokens_per_chunk;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << DTypeName(c.dtype) << " bt" << c.block_tokens << " tpc" << c.tokens_per_chunk;
}

class PlanTest : public ::testing::TestWithParam<Case> {};

// Load direction: chunks -> blocks, against the reference; then save direction: blocks -> chunks gives
// the chunks back byte for byte.
TEST_P(PlanTest, RunsMatchReferenceScatterAndGatherBack) {
  const Case c = GetParam();
  const Layout layout{3, 2, 8, c.dtype, c.tokens_per_chunk};
  const ChunkGeometry geo(layout);
  const uint32_t chunks = 3;
  const uint64_t blocks_needed = BlocksNeeded(layout, c.block_tokens, chunks);
  const PagedGeometry paged{static_cast<uint32_t>(blocks_needed + 5), c.block_tokens};
  // A shuffled block table: the request's blocks are scattered over the cache.
  std::vector<uint32_t> table(paged.num_blocks);
  std::iota(table.begin(), table.end(), 0u);
  std::shuffle(table.begin(), table.end(), std::mt19937(c.block_tokens * 31 + c.tokens_per_chunk));
  table.resize(blocks_needed);
  ASSERT_TRUE(CheckBlockTable(layout, paged, chunks, table).ok());

  const uint64_t tensor_bytes = uint64_t{paged.num_blocks} * paged.block_tokens * geo.row_bytes;
  const uint64_t chunk_bytes = layout.BytesPerChunk();
  std::vector<std::byte> staging = RandomBytes(chunks * chunk_bytes, c.block_tokens + c.tokens_per_chunk);

  HostCache planned(layout.layers, tensor_bytes), reference(layout.layers, tensor_bytes);
  std::vector<CopyRun> plan;
  std::vector<DeviceRun> runs;
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    plan.clear();
    PlanChunkRuns(geo, paged, table, ch, 0, layout.layers, plan);
    ToDeviceRuns(plan, geo, paged, reinterpret_cast<uint64_t>(staging.data() + ch * chunk_bytes),
                 planned.k_addr, planned.v_addr, RunDirection::kToBlocks, runs);
  }
  Execute(runs);

  // Reference: token by token, offsets written out from the definitions in the headers' comments.
  const uint64_t row = uint64_t{layout.kv_heads} * layout.head_dim * DTypeBytes(layout.dtype);
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    for (uint32_t l = 0; l < layout.layers; ++l) {
      for (uint32_t kv = 0; kv < 2; ++kv) {
        for (uint32_t t = 0; t < layout.tokens_per_chunk; ++t) {
          const uint64_t request_token = uint64_t{ch} * layout.tokens_per_chunk + t;
          const uint64_t src = ch * chunk_bytes + ((uint64_t{l} * 2 + kv) * layout.tokens_per_chunk + t) * row;
          const uint64_t dst = (uint64_t{table[request_token / c.block_tokens]} * c.block_tokens +
                                request_token % c.block_tokens) * row;
          auto& tensor = kv == 0 ? reference.k[l] : reference.v[l];
          std::memcpy(tensor.data() + dst, staging.data() + src, row);
        }
      }
    }
  }
  for (uint32_t l = 0; l < layout.layers; ++l) {
    EXPECT_TRUE(planned.k[l] == reference.k[l]) << "layer " << l << " K";
    EXPECT_TRUE(planned.v[l] == reference.v[l]) << "layer " << l << " V";
  }

  // Every run stays inside one block and inside the chunk.
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    plan.clear();
    PlanChunkRuns(geo, paged, table, ch, 0, layout.layers, plan);
    for (const CopyRun& r : plan) {
      EXPECT_LE(r.row + r.tokens, c.block_tokens);
      EXPECT_LE(r.chunk_offset + r.tokens * geo.row_bytes, chunk_bytes);
    }
  }

  // Gather back into fresh chunk buffers.
  std::vector<std::byte> back(chunks * chunk_bytes, std::byte{0});
  runs.clear();
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    plan.clear();
    PlanChunkRuns(geo, paged, table, ch, 0, layout.layers, plan);
    ToDeviceRuns(plan, geo, paged, reinterpret_cast<uint64_t>(back.data() + ch * chunk_bytes), planned.k_addr,
                 planned.v_addr, RunDirection::kFromBlocks, runs);
  }
  Execute(runs);
  EXPECT_TRUE(back == staging);
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (DType d : {DType::kFP8, DType::kFP16, DType::kBF16, DType::kFP32}) {
    for (uint32_t bt : {16u, 32u, 64u, 128u, 256u}) {
      // 256: chunks of whole blocks (or a part of one); 48 and 100: chunks that start mid-block.
      for (uint32_t tpc : {256u, 48u, 100u}) out.push_back({d, bt, tpc});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBlockSizesAndDtypes, PlanTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(DTypeName(info.param.dtype)) + "_bt" +
                                  std::to_string(info.param.block_tokens) + "_tpc" +
                                  std::to_string(info.param.tokens_per_chunk);
                         });

TEST(PlanTest, WholeBlocksGiveOneRunPerBlockAndPiece) {
  const Layout layout{32, 8, 128, DType::kBF16, 256};
  const ChunkGeometry geo(layout);
  const PagedGeometry paged{64, 16};
  std::vector<uint32_t> table(32);
  std::iota(table.begin(), table.end(), 0u);
  std::vector<CopyRun> plan;
  PlanChunkRuns(geo, paged, table, 1, 0, layout.layers, plan);
  ASSERT_EQ(plan.size(), 64u * 16u);  // 2 x 32 pieces x 16 blocks of 16 tokens
  EXPECT_EQ(plan.front().block, 16u);  // chunk 1 starts at token 256 = block 16
  EXPECT_EQ(plan.front().tokens, 16u);
  EXPECT_EQ(plan.back().chunk_offset, layout.BytesPerChunk() - 16 * geo.row_bytes);
}

TEST(PlanTest, LayerGroupsCoverEveryLayerOnceInOrder) {
  for (uint32_t layers : {1u, 7u, 32u, 80u}) {
    for (uint32_t groups = 1; groups <= layers; ++groups) {
      uint32_t next = 0;
      for (uint32_t g = 0; g < groups; ++g) {
        const LayerRange r = LayerGroup(layers, groups, g);
        ASSERT_EQ(r.begin, next);
        ASSERT_GT(r.end, r.begin);
        next = r.end;
      }
      ASSERT_EQ(next, layers);
    }
  }
}

TEST(PlanTest, LayerGroupRunsAreTheGroupsByteRangeOfTheChunk) {
  const Layout layout{6, 2, 8, DType::kBF16, 64};
  const ChunkGeometry geo(layout);
  const PagedGeometry paged{8, 16};
  std::vector<uint32_t> table = {3, 1, 4, 0};
  const LayerRange r = LayerGroup(layout.layers, 3, 1);  // layers 2 and 3
  std::vector<CopyRun> plan;
  PlanChunkRuns(geo, paged, table, 0, r.begin, r.end, plan);
  ASSERT_FALSE(plan.empty());
  for (const CopyRun& run : plan) {
    EXPECT_GE(run.chunk_offset, geo.LayersOffset(r.begin));
    EXPECT_LE(run.chunk_offset + run.tokens * geo.row_bytes,
              geo.LayersOffset(r.begin) + geo.LayersBytes(r.begin, r.end));
  }
}

TEST(PlanTest, BlockTableChecks) {
  const Layout layout{2, 1, 8, DType::kBF16, 256};
  const PagedGeometry paged{10, 64};
  std::vector<uint32_t> table = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_EQ(BlocksNeeded(layout, 64, 2), 8u);
  Status s = CheckBlockTable(layout, paged, 2, table);  // 2 chunks = 512 tokens = 8 blocks
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("need 8"), std::string::npos) << s.ToString();
  table.push_back(10);  // block 10 of a 10-block cache
  s = CheckBlockTable(layout, paged, 2, table);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("names block 10"), std::string::npos) << s.ToString();
  table.back() = 9;
  EXPECT_TRUE(CheckBlockTable(layout, paged, 2, table).ok());
  EXPECT_TRUE(CheckBlockTable(layout, paged, 0, {}).ok());
}

TEST(PlanTest, CacheChecks) {
  const Layout layout{2, 1, 8, DType::kBF16, 256};
  int dummy[4];
  PagedKvCache cache;
  cache.num_blocks = 4;
  cache.block_tokens = 16;
  cache.k = {&dummy[0], &dummy[1]};
  cache.v = {&dummy[2], &dummy[3]};
  EXPECT_TRUE(ValidateCache(layout, cache).ok());
  for (uint32_t bt : {0u, 8u, 15u, 257u, 512u}) {
    PagedKvCache bad = cache;
    bad.block_tokens = bt;
    EXPECT_EQ(ValidateCache(layout, bad).code(), Code::kInvalidArgument) << bt;
  }
  PagedKvCache bad = cache;
  bad.num_blocks = 0;
  EXPECT_EQ(ValidateCache(layout, bad).code(), Code::kInvalidArgument);
  bad = cache;
  bad.v.pop_back();
  EXPECT_EQ(ValidateCache(layout, bad).code(), Code::kInvalidArgument);
  bad = cache;
  bad.k[1] = nullptr;
  EXPECT_EQ(ValidateCache(layout, bad).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::internal
