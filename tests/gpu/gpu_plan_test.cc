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

#include "region_pieces.h"

namespace kvtier::internal {
namespace {

using gpu_test::ChunkPieces;
using gpu_test::Regions;

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

// ---- caller-described places (DevicePieces) ----

void ExpectSameRuns(std::span<const DeviceRun> got, std::span<const DeviceRun> want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].src, want[i].src) << "run " << i;
    EXPECT_EQ(got[i].dst, want[i].dst) << "run " << i;
    EXPECT_EQ(got[i].bytes, want[i].bytes) << "run " << i;
  }
}

// The classic cache described as the host path describes it gives, chunk by chunk and layer group by
// layer group, exactly the classic planner's runs and byte ranges, both ways: the two plans cannot drift.
TEST(PiecePlanTest, PiecesOfAClassicCacheAreTheClassicPlannersRuns) {
  const Layout layout{5, 2, 8, DType::kBF16, 64};
  const ChunkGeometry geo(layout);
  const PagedGeometry paged{40, 16};
  const uint32_t chunks = 3, per_chunk = 4;
  // Even block ids only, shuffled: no two blocks of a chunk follow each other in memory, so the host
  // path's pieces are one per (region, block), as the classic planner's runs are.
  std::vector<uint32_t> table;
  for (uint32_t b = 0; b < paged.num_blocks; b += 2) table.push_back(b);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  table.resize(chunks * per_chunk);
  HostCache cache(layout.layers, uint64_t{paged.num_blocks} * paged.block_tokens * geo.row_bytes);
  Regions regions;
  regions.region_bytes = paged.block_tokens * geo.row_bytes;
  for (uint32_t l = 0; l < layout.layers; ++l) {
    for (uint64_t base : {cache.k_addr[l], cache.v_addr[l]}) {
      regions.bases.push_back(base);
      regions.strides.push_back(regions.region_bytes);
      regions.layer.push_back(l);
    }
  }
  std::vector<std::byte> staging(layout.BytesPerChunk());
  const uint64_t at = reinterpret_cast<uint64_t>(staging.data());
  for (uint32_t groups : {1u, 2u, 5u}) {
    for (uint32_t ch = 0; ch < chunks; ++ch) {
      std::vector<uint32_t> layers;
      const auto pieces = ChunkPieces(regions, std::span(table).subspan(ch * per_chunk, per_chunk), true, &layers);
      std::vector<uint32_t> ids;  // gpu.h's grouping: the group whose layer range holds the piece's layer
      for (uint32_t l : layers) {
        uint32_t g = 0;
        while (LayerGroup(layout.layers, groups, g).end <= l) ++g;
        ids.push_back(g);
      }
      for (uint32_t g = 0; g < groups; ++g) {
        for (RunDirection dir : {RunDirection::kToBlocks, RunDirection::kFromBlocks}) {
          const LayerRange r = LayerGroup(layout.layers, groups, g);
          std::vector<CopyRun> plan;
          std::vector<DeviceRun> classic, from_pieces;
          PlanChunkRuns(geo, paged, table, ch, r.begin, r.end, plan);
          ToDeviceRuns(plan, geo, paged, at, cache.k_addr, cache.v_addr, dir, classic);
          const std::span<const uint32_t> piece_groups = groups == 1 ? std::span<const uint32_t>() : ids;
          const ByteRange range = PieceRuns(pieces, piece_groups, g, at, dir, from_pieces);
          ExpectSameRuns(from_pieces, classic);
          EXPECT_EQ(range, (ByteRange{geo.LayersOffset(r.begin), geo.LayersBytes(r.begin, r.end)}));
        }
      }
    }
  }
}

struct PieceCase {
  const char* name;
  bool head_major;  // vLLM's CPU backend's HND blocks (a grouped kv chunk); else MLA latents
  uint32_t pad;     // rows between MLA blocks (vLLM's padded pages)
  bool merges;      // whether consecutive blocks make one piece (MLA blocks back to back)
};

void PrintTo(const PieceCase& c, std::ostream* os) { *os << c.name; }

class PieceScatterTest : public ::testing::TestWithParam<PieceCase> {};

// An MLA latent cache (padded blocks) and a head-major K/V cache described as the host path describes
// them, blocks partly consecutive (merged pieces): runs from the piece lists, executed with memcpy, put
// every byte where a token-by-token reference scatter of kvtier's chunk order puts it, and gather it back.
TEST_P(PieceScatterTest, RunsLandWhereTheReferencePutsThem) {
  const bool hnd = GetParam().head_major;
  const uint32_t layers = 3, heads = 2, tpc = 64, bt = 16, nb = 20, es = 2, per_chunk = tpc / bt, chunks = 2;
  const uint64_t row = hnd ? 8 * es : 40 * es;  // one head's row (HND) or one latent (MLA)
  const Layout layout = *ParseLayoutSpec(hnd ? "layers=3 tokens=64 kv:layers=0-2,heads=2,dim=8,dtype=bf16"
                                             : "layers=3 tokens=64 latent:layers=0-2,dim=40,dtype=bf16");
  const uint64_t chunk_bytes = layout.BytesPerChunk();
  // Per layer one tensor: HND [2, nb, heads, bt, dim]; MLA [nb, bt + pad rows, latent].
  const uint64_t block = hnd ? heads * bt * row : (bt + GetParam().pad) * row;
  const uint64_t tensor = hnd ? 2 * nb * block : nb * block;
  std::vector<std::vector<std::byte>> planned(layers, std::vector<std::byte>(tensor)), reference = planned;
  const gpu_test::CacheShape shape{hnd, layers, hnd ? heads : 1, bt, nb, GetParam().pad, row};
  ASSERT_EQ(shape.block(), block);
  auto regions_of = [&](std::vector<std::vector<std::byte>>& t) {
    std::vector<uint64_t> bases;
    for (auto& v : t) bases.push_back(reinterpret_cast<uint64_t>(v.data()));
    return gpu_test::MakeRegions(shape, bases);
  };
  const std::vector<uint32_t> table = {7, 8, 9, 2, 15, 11, 12, 0};  // 7-9 and 11-12 follow each other
  const std::vector<std::byte> staging = RandomBytes(chunks * chunk_bytes, hnd ? 3 : 4);
  std::vector<DeviceRun> runs;
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    const auto pieces = ChunkPieces(regions_of(planned), std::span(table).subspan(ch * per_chunk, per_chunk), true);
    const size_t regions = (hnd ? 2 * heads : 1) * layers * per_chunk;
    if (GetParam().merges) {
      EXPECT_LT(pieces.size(), regions) << "no piece was merged";
    } else {
      EXPECT_EQ(pieces.size(), regions) << "regions apart in memory were merged";
    }
    PieceRuns(pieces, {}, 0, reinterpret_cast<uint64_t>(staging.data() + ch * chunk_bytes), RunDirection::kToBlocks,
              runs);
  }
  Execute(runs);
  // Reference: kvtier's chunk order (docs/models.md): MLA layer-major latents; a grouped kv group
  // head-major, head h's layers' K and V (Layout::HeadRanges pins where head h starts).
  if (hnd) {
    EXPECT_EQ(layout.HeadRanges(1, 2)->front().offset, uint64_t{layers} * 2 * tpc * row);
  }
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    for (uint32_t h = 0; h < (hnd ? heads : 1); ++h) {
      for (uint32_t l = 0; l < layers; ++l) {
        for (uint32_t kv = 0; kv < (hnd ? 2u : 1u); ++kv) {
          for (uint32_t t = 0; t < tpc; ++t) {
            const uint64_t piece = hnd ? (uint64_t{h} * layers + l) * 2 + kv : l;
            const uint64_t src = ch * chunk_bytes + (piece * tpc + t) * row;
            const uint64_t req = uint64_t{ch} * tpc + t;
            const uint64_t dst = kv * nb * block + table[req / bt] * block + h * bt * row + (req % bt) * row;
            std::memcpy(reference[l].data() + dst, staging.data() + src, row);
          }
        }
      }
    }
  }
  for (uint32_t l = 0; l < layers; ++l) EXPECT_TRUE(planned[l] == reference[l]) << "layer " << l;
  std::vector<std::byte> back(staging.size());
  runs.clear();
  for (uint32_t ch = 0; ch < chunks; ++ch) {
    const auto pieces = ChunkPieces(regions_of(planned), std::span(table).subspan(ch * per_chunk, per_chunk), true);
    PieceRuns(pieces, {}, 0, reinterpret_cast<uint64_t>(back.data() + ch * chunk_bytes), RunDirection::kFromBlocks,
              runs);
  }
  Execute(runs);
  EXPECT_TRUE(back == staging);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PieceScatterTest,
                         ::testing::Values(PieceCase{"mla", false, 0, true}, PieceCase{"mla_padded", false, 3, false},
                                           PieceCase{"head_major", true, 0, false}),
                         [](const ::testing::TestParamInfo<PieceCase>& info) { return info.param.name; });

TEST(PiecePlanTest, BadPieceListsAreRefused) {
  int mem[4];
  void* a = &mem[0];
  const std::vector<DevicePiece> good = {{a, 6}, {a, 10}, {a, 16}};  // two chunks of 16 bytes
  const std::vector<size_t> counts = {2, 1};
  const std::vector<uint32_t> groups = {0, 1, 1};
  std::vector<size_t> starts;
  ASSERT_TRUE(ValidatePieces({good, counts, groups}, 2, 16, 2, starts).ok());
  EXPECT_EQ(starts, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(MaxPiecesPerChunk(starts), 2u);
  EXPECT_TRUE(ValidatePieces({good, counts, {}}, 2, 16, 1, starts).ok());
  auto refused = [&](const DevicePieces& p, size_t chunks, uint32_t g, const char* why) {
    const Status s = ValidatePieces(p, chunks, 16, g, starts);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << why;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.ToString();
  };
  refused({good, counts, groups}, 3, 2, "2 piece counts for 3 chunks");
  const std::vector<size_t> too_many = {2, 2}, too_few = {1, 1};
  refused({good, too_many, {}}, 2, 1, "more than the 3 pieces");
  refused({good, too_few, {}}, 2, 1, "add up to 2 pieces, 3 given");
  std::vector<DevicePiece> bad = good;
  bad[1].bytes = 0;
  refused({bad, counts, {}}, 2, 1, "piece 1 of chunk 0 has 0 bytes");
  bad = good;
  bad[2].address = nullptr;
  refused({bad, counts, {}}, 2, 1, "piece 0 of chunk 1 has a null address");
  bad = good;
  bad[1].bytes = 9;
  refused({bad, counts, {}}, 2, 1, "add up to 15 bytes, not 16");
  bad[1].bytes = 11;
  refused({bad, counts, {}}, 2, 1, "add up to more than 16");
  bad[1].bytes = UINT64_MAX;  // no overflow past the check
  refused({bad, counts, {}}, 2, 1, "add up to more than 16");
  const std::vector<uint32_t> short_groups = {0, 1};
  refused({good, counts, short_groups}, 2, 2, "2 layer groups for 3 pieces");
  refused({good, counts, groups}, 2, 1, "layer group 1 of 1");
  const std::vector<uint32_t> down = {1, 0, 0};
  refused({good, counts, down}, 2, 2, "after group 1");
  const std::vector<uint32_t> across = {1, 1, 0};  // non-decreasing is per chunk: chunk 1 starts again
  EXPECT_TRUE(ValidatePieces({good, counts, across}, 2, 16, 2, starts).ok());
}

TEST(PiecePlanTest, GroupRunsCoverTheirPiecesOnly) {
  std::vector<std::byte> dst(32);
  auto at = [&](size_t off) { return static_cast<void*>(dst.data() + off); };
  const std::vector<DevicePiece> pieces = {{at(20), 4}, {at(0), 8}, {at(12), 4}, {at(8), 4}};
  const std::vector<uint32_t> groups = {0, 1, 1, 3};
  std::vector<DeviceRun> runs;
  EXPECT_EQ(PieceRuns(pieces, groups, 1, 1000, RunDirection::kToBlocks, runs), (ByteRange{4, 12}));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].src, 1004u);
  EXPECT_EQ(runs[0].dst, reinterpret_cast<uint64_t>(at(0)));
  EXPECT_EQ(runs[1].src, 1012u);
  EXPECT_EQ(runs[1].bytes, 4u);
  runs.clear();
  EXPECT_EQ(PieceRuns(pieces, groups, 2, 1000, RunDirection::kToBlocks, runs), (ByteRange{0, 0}));
  EXPECT_TRUE(runs.empty());
  EXPECT_EQ(PieceRuns(pieces, groups, 3, 1000, RunDirection::kFromBlocks, runs), (ByteRange{16, 4}));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].dst, 1016u);
  EXPECT_EQ(runs[0].src, reinterpret_cast<uint64_t>(at(8)));
}

}  // namespace
}  // namespace kvtier::internal
