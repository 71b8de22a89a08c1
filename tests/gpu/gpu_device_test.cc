// The GPU path on a real device: GPU -> Store -> GPU round trips byte for byte for every block size
// and dtype, a miss ending the prefix, and layer-wise loading. Each test skips with the reason when
// the build has no CUDA or the machine no usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "gpu/device_memory.h"
#include "kvtier/gpu.h"
#include "kvtier/store.h"
#include "region_pieces.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using internal::CopyToDevice;
using internal::CopyToHost;

#define SKIP_WITHOUT_GPU()                                                          \
  do {                                                                              \
    if (Status gpu_ = GpuAvailable(0); !gpu_.ok()) GTEST_SKIP() << gpu_.ToString(); \
  } while (0)

// A paged cache in device memory with host mirrors for checking.
class DeviceCache {
 public:
  DeviceCache(const Layout& layout, uint32_t num_blocks, uint32_t block_tokens, int device = 0)
      : device_(device),
        layout_(layout),
        row_(uint64_t{layout.kv_heads} * layout.head_dim * DTypeBytes(layout.dtype)),
        tensor_bytes_(uint64_t{num_blocks} * block_tokens * row_) {
    cache_.device = device;
    cache_.num_blocks = num_blocks;
    cache_.block_tokens = block_tokens;
    for (uint32_t l = 0; l < layout.layers * 2; ++l) {
      auto p = internal::DeviceAlloc(device_, tensor_bytes_);
      if (!p.ok()) {
        status_ = p.status();
        return;
      }
      (l % 2 == 0 ? cache_.k : cache_.v).push_back(*p);
    }
  }
  ~DeviceCache() {
    for (void* p : cache_.k) internal::DeviceFree(device_, p);
    for (void* p : cache_.v) internal::DeviceFree(device_, p);
  }
  const Status& status() const { return status_; }
  const PagedKvCache& cache() const { return cache_; }
  uint64_t tensor_bytes() const { return tensor_bytes_; }

  Status Clear(int byte) {
    for (void* p : cache_.k) KVTIER_RETURN_IF_ERROR(internal::DeviceMemset(device_, p, byte, tensor_bytes_));
    for (void* p : cache_.v) KVTIER_RETURN_IF_ERROR(internal::DeviceMemset(device_, p, byte, tensor_bytes_));
    return Status::OK();
  }

  // Writes request chunks `chunks` (host bytes in the layout's chunk order) into the blocks of `table`,
  // token by token, through host mirrors (the reference scatter, independent of src/gpu's plan).
  Status Put(const std::vector<std::byte>& chunks, const std::vector<uint32_t>& table) {
    return Visit(table, chunks.size() / layout_.BytesPerChunk(), [&](std::byte* row, uint64_t off) {
      std::memcpy(row, chunks.data() + off, row_);
    }, true);
  }
  // Reads request chunks back out of the blocks of `table`, for layers [begin, end) (others zero).
  Result<std::vector<std::byte>> Get(const std::vector<uint32_t>& table, uint64_t n_chunks,
                                     uint32_t layer_begin = 0, uint32_t layer_end = UINT32_MAX) {
    std::vector<std::byte> out(n_chunks * layout_.BytesPerChunk(), std::byte{0});
    KVTIER_RETURN_IF_ERROR(Visit(table, n_chunks, [&](std::byte* row, uint64_t off) {
      std::memcpy(out.data() + off, row, row_);
    }, false, layer_begin, layer_end));
    return out;
  }

 private:
  template <typename Fn>
  Status Visit(const std::vector<uint32_t>& table, uint64_t n_chunks, Fn fn, bool upload,
               uint32_t layer_begin = 0, uint32_t layer_end = UINT32_MAX) {
    std::vector<std::byte> mirror(tensor_bytes_);
    const uint32_t bt = cache_.block_tokens, tpc = layout_.tokens_per_chunk;
    for (uint32_t l = layer_begin; l < std::min(layer_end, layout_.layers); ++l) {
      for (uint32_t kv = 0; kv < 2; ++kv) {
        void* dev = kv == 0 ? cache_.k[l] : cache_.v[l];
        KVTIER_RETURN_IF_ERROR(CopyToHost(device_, mirror.data(), dev, tensor_bytes_));
        for (uint64_t t = 0; t < n_chunks * tpc; ++t) {
          const uint64_t chunk = t / tpc, in_chunk = t % tpc;
          const uint64_t off = chunk * layout_.BytesPerChunk() + ((uint64_t{l} * 2 + kv) * tpc + in_chunk) * row_;
          fn(mirror.data() + (uint64_t{table[t / bt]} * bt + t % bt) * row_, off);
        }
        if (upload) KVTIER_RETURN_IF_ERROR(CopyToDevice(device_, dev, mirror.data(), tensor_bytes_));
      }
    }
    return Status::OK();
  }

  int device_;
  Layout layout_;
  uint64_t row_, tensor_bytes_;
  PagedKvCache cache_;
  Status status_;
};

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(out.data() + i, &x, 8);
  }
  return out;
}

std::vector<ChunkKey> Keys(const Namespace& ns, uint32_t n, uint32_t salt) {
  std::vector<uint32_t> tokens(uint64_t{n} * ns.layout().tokens_per_chunk);
  std::iota(tokens.begin(), tokens.end(), salt);
  return ComputeChunkKeys(ns, tokens);
}

std::vector<uint32_t> ShuffledTable(uint32_t num_blocks, uint64_t need, uint32_t seed) {
  std::vector<uint32_t> t(num_blocks);
  std::iota(t.begin(), t.end(), 0u);
  std::shuffle(t.begin(), t.end(), std::mt19937(seed));
  t.resize(need);
  return t;
}

// Saves host bytes (chunks in the layout's order) for `keys` straight into the store.
Status SaveHost(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, const std::vector<std::byte>& data) {
  const uint64_t chunk = ns.layout().BytesPerChunk();
  std::vector<std::span<const std::byte>> pieces;
  std::vector<GatherList> srcs;
  for (size_t i = 0; i < keys.size(); ++i) pieces.emplace_back(data.data() + i * chunk, chunk);
  for (size_t i = 0; i < keys.size(); ++i) srcs.emplace_back(&pieces[i], 1);
  return store.Save(ns, keys, srcs);
}

// Bytes of layers [begin, end) of every chunk equal `want`'s.
bool LayersEqual(const Layout& layout, const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                 uint32_t begin, uint32_t end) {
  const uint64_t row = uint64_t{layout.kv_heads} * layout.head_dim * DTypeBytes(layout.dtype);
  const uint64_t per_layer = 2 * uint64_t{layout.tokens_per_chunk} * row;
  for (uint64_t at = 0; at < want.size(); at += layout.BytesPerChunk()) {
    const uint64_t a = at + begin * per_layer, b = at + end * per_layer;
    if (!std::equal(got.begin() + a, got.begin() + b, want.begin() + a)) return false;
  }
  return true;
}

struct RoundTripCase {
  DType dtype;
  uint32_t block_tokens;
};

void PrintTo(const RoundTripCase& c, std::ostream* os) {
  *os << DTypeName(c.dtype) << " bt" << c.block_tokens;
}

class GpuRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

// Chunks put into blocks of table A; saved from the GPU; the cache cleared; loaded into the blocks of
// table B: every byte equals the original, and the store holds exactly the original chunks.
TEST_P(GpuRoundTrip, GpuToStoreToGpuIsByteExact) {
  SKIP_WITHOUT_GPU();
  const RoundTripCase c = GetParam();
  // llama-3.1-8b's geometry (32 layers, 8 KV heads of 128), 4 chunks of 256 tokens.
  const Layout layout{32, 8, 128, c.dtype, 256};
  const uint32_t n = 4;
  const uint64_t need = (uint64_t{n} * 256 + c.block_tokens - 1) / c.block_tokens;
  DeviceCache dc(layout, static_cast<uint32_t>(2 * need + 3), c.block_tokens);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=1GiB"};
  auto store = Store::Open(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, c.block_tokens);

  const std::vector<std::byte> original = RandomBytes(n * layout.BytesPerChunk(), c.block_tokens * 7 + 1);
  const auto table_a = ShuffledTable(dc.cache().num_blocks, need, 1);
  const auto table_b = ShuffledTable(dc.cache().num_blocks, need, 2);
  ASSERT_TRUE(dc.Clear(0).ok());
  ASSERT_TRUE(dc.Put(original, table_a).ok());

  GpuTransferOptions opt;
  opt.staging_bytes = 2 * layout.BytesPerChunk();  // two batches of two chunks, read on two threads
  opt.host_threads = 2;
  auto t = GpuTransfer::Open(layout, dc.cache(), opt);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Save(**store, ns, keys, table_a).ok());

  // What the store holds is the original, chunk by chunk.
  std::vector<std::byte> host(n * layout.BytesPerChunk());
  std::vector<std::span<std::byte>> pieces;
  std::vector<ScatterList> dsts;
  for (uint32_t i = 0; i < n; ++i) pieces.emplace_back(host.data() + i * layout.BytesPerChunk(), layout.BytesPerChunk());
  for (uint32_t i = 0; i < n; ++i) dsts.emplace_back(&pieces[i], 1);
  ASSERT_EQ((*store)->Load(ns, keys, dsts).value(), n);
  ASSERT_TRUE(host == original) << "the gather kernel saved other bytes";

  ASSERT_TRUE(dc.Clear(0x5a).ok());
  auto load = (*t)->Load(**store, ns, keys, table_b);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ((*load)->chunks(), n);
  ASSERT_TRUE((*load)->Wait().ok());
  auto done = (*load)->Done();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  auto back = dc.Get(table_b, n);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == original) << "bytes differ after GPU -> store -> GPU";
}

std::vector<RoundTripCase> RoundTripCases() {
  std::vector<RoundTripCase> out;
  for (uint32_t bt : {16u, 32u, 64u, 128u, 256u}) out.push_back({DType::kBF16, bt});
  out.push_back({DType::kFP16, 16});
  out.push_back({DType::kFP8, 16});
  out.push_back({DType::kFP8, 256});
  return out;
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, GpuRoundTrip, ::testing::ValuesIn(RoundTripCases()),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           return std::string(DTypeName(info.param.dtype)) + "_bt" +
                                  std::to_string(info.param.block_tokens);
                         });

// A chunk missing from the store ends the prefix: chunks after it leave their blocks untouched.
TEST(GpuDeviceTest, MissEndsThePrefixAndLeavesLaterBlocksAlone) {
  SKIP_WITHOUT_GPU();
  const Layout layout{4, 2, 64, DType::kBF16, 64};
  const uint32_t n = 4;
  DeviceCache dc(layout, 32, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=64MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 9);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 5);
  std::vector<std::span<const std::byte>> pieces;
  std::vector<GatherList> srcs;
  for (uint32_t i = 0; i < 2; ++i) pieces.emplace_back(data.data() + i * layout.BytesPerChunk(), layout.BytesPerChunk());
  for (uint32_t i = 0; i < 2; ++i) srcs.emplace_back(&pieces[i], 1);
  ASSERT_TRUE(store->Save(ns, std::span(keys).first(2), srcs).ok());  // chunks 2 and 3 never saved

  auto t = GpuTransfer::Open(layout, dc.cache()).value();
  const auto table = ShuffledTable(32, 16, 3);
  ASSERT_TRUE(dc.Clear(0x77).ok());
  auto load = t->Load(*store, ns, keys, table).value();
  EXPECT_EQ(load->chunks(), 2u);
  ASSERT_TRUE(load->Wait().ok());
  auto back = dc.Get(table, n).value();
  const uint64_t half = 2 * layout.BytesPerChunk();
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + half, data.begin()));
  EXPECT_TRUE(std::all_of(back.begin() + half, back.end(), [](std::byte b) { return b == std::byte{0x77}; }));
}

// Layer-wise: with one group per layer, layer 0 can be waited for alone and is complete then; the
// test prints whether the last layer was still in flight at that moment (timing is reported, not
// asserted), and every layer is right after Wait.
TEST(GpuDeviceTest, LayerGroupZeroIsCompleteWhenItsWaitReturns) {
  SKIP_WITHOUT_GPU();
  const Layout layout{32, 8, 128, DType::kBF16, 256};
  const uint32_t n = 16;  // 512 MiB
  DeviceCache dc(layout, 256, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=1GiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 77);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 11);
  std::vector<std::span<const std::byte>> pieces;
  std::vector<GatherList> srcs;
  for (uint32_t i = 0; i < n; ++i) pieces.emplace_back(data.data() + i * layout.BytesPerChunk(), layout.BytesPerChunk());
  for (uint32_t i = 0; i < n; ++i) srcs.emplace_back(&pieces[i], 1);
  ASSERT_TRUE(store->Save(ns, keys, srcs).ok());

  GpuTransferOptions opt;
  opt.layer_groups = layout.layers;
  opt.staging_bytes = 4 * layout.BytesPerChunk();  // 4 batches of 4 chunks, one wave of 4 slots
  opt.host_threads = 3;
  auto t = GpuTransfer::Open(layout, dc.cache(), opt).value();
  const auto table = ShuffledTable(256, 256, 4);
  ASSERT_TRUE(dc.Clear(0).ok());
  auto load = t->Load(*store, ns, keys, table).value();
  ASSERT_EQ(load->layer_groups(), layout.layers);
  ASSERT_TRUE(load->WaitLayerGroup(0).ok());
  const bool all_done_at_layer0 = load->Done().value();
  auto layer0 = dc.Get(table, n, 0, 1).value();  // plain copies: they do not wait for the transfer
  std::printf("layer-wise: when layer 0 was ready the last layer had %s\n",
              all_done_at_layer0 ? "landed too" : "not landed yet");
  ASSERT_TRUE(load->Wait().ok());
  auto all = dc.Get(table, n).value();
  EXPECT_TRUE(all == data);
  // Layer 0's bytes (first 2 pieces of every chunk) were right at WaitLayerGroup(0).
  const uint64_t layer_bytes = 2 * uint64_t{256} * 8 * 128 * 2;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t at = i * layout.BytesPerChunk();
    EXPECT_TRUE(std::equal(layer0.begin() + at, layer0.begin() + at + layer_bytes, data.begin() + at)) << i;
  }
  EXPECT_EQ(load->WaitLayerGroup(layout.layers).code(), Code::kInvalidArgument);
}

// Caller-described places (OpenPieces, SavePieces, LoadPieces) for layouts the block-table plan does not
// address: an MLA latent cache and a head-major K/V cache in device memory, described as the host path
// describes them (tests/gpu/region_pieces.h, checked against kvtier's chunk order in gpu_plan_test).
// Saved from blocks in order (merged pieces), loaded into shuffled blocks: every byte round-trips.
struct PieceDeviceCase {
  const char* name;
  const char* spec;
  bool head_major;
  uint32_t heads;
  uint64_t row;  // one latent, or one head's row, in bytes
  uint32_t groups;
};

void PrintTo(const PieceDeviceCase& c, std::ostream* os) { *os << c.name; }

class GpuPieces : public ::testing::TestWithParam<PieceDeviceCase> {};

TEST_P(GpuPieces, SavedFromSomeBlocksLoadedIntoOthersByteExact) {
  SKIP_WITHOUT_GPU();
  const PieceDeviceCase c = GetParam();
  const Layout layout = ParseLayoutSpec(c.spec).value();
  const uint32_t n = 3, tpc = layout.tokens_per_chunk, bt = 16, per = tpc / bt, nb = 2 * n * per + 5;
  const uint64_t chunk = layout.BytesPerChunk();
  const gpu_test::CacheShape shape{c.head_major, layout.layers, c.heads, bt, nb, 0, c.row};
  struct Tensors {
    std::vector<void*> p;
    ~Tensors() {
      for (void* x : p) internal::DeviceFree(0, x);
    }
  } dev;
  std::vector<std::vector<std::byte>> host(layout.layers, std::vector<std::byte>(shape.tensor()));
  std::vector<uint64_t> dev_addr, host_addr;
  for (uint32_t l = 0; l < layout.layers; ++l) {
    auto p = internal::DeviceAlloc(0, shape.tensor());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    dev.p.push_back(*p);
    dev_addr.push_back(reinterpret_cast<uint64_t>(*p));
    host_addr.push_back(reinterpret_cast<uint64_t>(host[l].data()));
  }
  const gpu_test::Regions on_dev = gpu_test::MakeRegions(shape, dev_addr), on_host = gpu_test::MakeRegions(shape, host_addr);
  // Per chunk the pieces over `table` and, layer-major, each piece's layer group (gpu.h's grouping).
  std::vector<DevicePiece> pieces;
  std::vector<size_t> counts;
  std::vector<uint32_t> groups;
  auto describe = [&](const std::vector<uint32_t>& table) {
    pieces.clear();
    counts.clear();
    groups.clear();
    for (uint32_t ch = 0; ch < n; ++ch) {
      std::vector<uint32_t> layers;
      auto p = gpu_test::ChunkPieces(on_dev, std::span(table).subspan(ch * per, per), true, &layers);
      pieces.insert(pieces.end(), p.begin(), p.end());
      counts.push_back(p.size());
      for (uint32_t l : layers) {
        uint32_t g = 0;
        while (uint64_t{g + 1} * layout.layers / c.groups <= l) ++g;
        groups.push_back(g);
      }
    }
    if (c.groups == 1) groups.clear();
    return DevicePieces{pieces, counts, groups};
  };
  std::vector<uint32_t> table_a(n * per);
  std::iota(table_a.begin(), table_a.end(), 2u);  // consecutive: merged pieces
  const auto table_b = ShuffledTable(nb, n * per, 5);
  std::vector<std::byte> original = RandomBytes(n * chunk, 21);
  for (uint32_t ch = 0; ch < n; ++ch) {
    gpu_test::ReferenceCopy(on_host, table_a, ch, tpc, bt, c.row, original.data() + ch * chunk, true);
  }
  for (uint32_t l = 0; l < layout.layers; ++l) {
    ASSERT_TRUE(CopyToDevice(0, dev.p[l], host[l].data(), shape.tensor()).ok());
  }
  StoreOptions so;
  so.tiers = {"mem://?capacity=256MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu-pieces", layout, "t").value();
  const auto keys = Keys(ns, n, 31);
  GpuTransferOptions opt;
  opt.staging_bytes = 2 * chunk;  // batches of 2 chunks: a partial last batch
  opt.host_threads = 2;
  opt.layer_groups = c.groups;
  auto t = GpuTransfer::OpenPieces(layout, 0, opt).value();
  ASSERT_TRUE(t->SavePieces(*store, ns, keys, describe(table_a)).ok());
  std::vector<std::byte> stored(n * chunk);
  std::vector<std::span<std::byte>> spans;
  std::vector<ScatterList> dsts;
  for (uint32_t i = 0; i < n; ++i) spans.emplace_back(stored.data() + i * chunk, chunk);
  for (uint32_t i = 0; i < n; ++i) dsts.emplace_back(&spans[i], 1);
  ASSERT_EQ(store->Load(ns, keys, dsts).value(), n);
  EXPECT_TRUE(stored == original) << "the gather from pieces saved other bytes";

  for (void* p : dev.p) ASSERT_TRUE(internal::DeviceMemset(0, p, 0x5a, shape.tensor()).ok());
  auto load = t->LoadPieces(*store, ns, keys, describe(table_b));
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ((*load)->chunks(), n);
  ASSERT_TRUE((*load)->Wait().ok());
  for (uint32_t l = 0; l < layout.layers; ++l) {
    ASSERT_TRUE(CopyToHost(0, host[l].data(), dev.p[l], shape.tensor()).ok());
  }
  std::vector<std::byte> back(n * chunk);
  for (uint32_t ch = 0; ch < n; ++ch) {
    gpu_test::ReferenceCopy(on_host, table_b, ch, tpc, bt, c.row, back.data() + ch * chunk, false);
  }
  EXPECT_TRUE(back == original) << "bytes differ after pieces -> store -> pieces";

  // A transfer for pieces has no block table; a bad piece list is refused before anything is queued.
  EXPECT_EQ(t->Load(*store, ns, keys, table_b).status().code(), Code::kInvalidArgument);
  DevicePieces bad = describe(table_b);
  pieces[0].bytes -= 1;
  EXPECT_EQ(t->LoadPieces(*store, ns, keys, bad).status().code(), Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GpuPieces,
    ::testing::Values(PieceDeviceCase{"mla", "layers=4 tokens=256 latent:layers=0-3,dim=576,dtype=bf16", false, 1,
                                      1152, 2},
                      PieceDeviceCase{"head_major", "layers=2 tokens=64 kv:layers=0-1,heads=4,dim=64,dtype=bf16", true,
                                      4, 128, 1}),
    [](const ::testing::TestParamInfo<PieceDeviceCase>& info) { return info.param.name; });

TEST(GpuDeviceTest, RequestChecks) {
  SKIP_WITHOUT_GPU();
  const Layout layout{2, 2, 64, DType::kBF16, 64};
  DeviceCache dc(layout, 8, 16);
  ASSERT_TRUE(dc.status().ok());
  StoreOptions so;
  so.tiers = {"mem://?capacity=16MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  auto other = Namespace::Make("test/gpu", Layout{2, 2, 64, DType::kFP16, 64}, "t").value();
  auto t = GpuTransfer::Open(layout, dc.cache()).value();
  const auto keys = Keys(ns, 3, 1);
  std::vector<uint32_t> short_table = {0, 1, 2};  // 3 chunks of 64 tokens need 12 blocks of 16
  EXPECT_EQ(t->Load(*store, ns, keys, short_table).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t->Save(*store, ns, keys, short_table).code(), Code::kInvalidArgument);
  std::vector<uint32_t> table = {0, 1, 2, 3};
  EXPECT_EQ(t->Load(*store, other, std::span(keys).first(1), table).status().code(), Code::kInvalidArgument);
}

// Loads of more batches than there are staging slots, on several reader threads: 1-chunk batches
// (every slot reused many times) and 3-chunk batches (a partial last batch), with 1 and 4 layer groups
// (4: waves queued group by group). Every byte lands; layer group 0 is complete when its wait returns.
TEST(GpuDeviceTest, MoreBatchesThanSlotsPartialLastBatchAndLayerGroups) {
  SKIP_WITHOUT_GPU();
  const Layout layout{8, 2, 64, DType::kBF16, 64};  // 256 KiB chunks
  const uint32_t n = 40;
  DeviceCache dc(layout, n * 4 + 8, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=64MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 500);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 21);
  ASSERT_TRUE(SaveHost(*store, ns, keys, data).ok());
  uint32_t seed = 10;
  for (uint32_t batch : {1u, 3u}) {
    for (uint32_t groups : {1u, 4u}) {
      SCOPED_TRACE("batch " + std::to_string(batch) + " groups " + std::to_string(groups));
      GpuTransferOptions opt;
      opt.staging_bytes = batch * layout.BytesPerChunk();
      opt.host_threads = 3;  // 4 slots: 40 or 14 batches
      opt.layer_groups = groups;
      auto t = GpuTransfer::Open(layout, dc.cache(), opt);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_EQ((*t)->batch_chunks(), batch);
      const auto table = ShuffledTable(dc.cache().num_blocks, n * 4, ++seed);
      ASSERT_TRUE(dc.Clear(0x33).ok());
      auto load = (*t)->Load(*store, ns, keys, table);
      ASSERT_TRUE(load.ok()) << load.status().ToString();
      EXPECT_EQ((*load)->chunks(), n);
      ASSERT_TRUE((*load)->WaitLayerGroup(0).ok());
      auto first = dc.Get(table, n, 0, layout.layers / groups);
      ASSERT_TRUE(first.ok()) << first.status().ToString();
      EXPECT_TRUE(LayersEqual(layout, *first, data, 0, layout.layers / groups)) << "group 0 incomplete at its wait";
      ASSERT_TRUE((*load)->Wait().ok());
      auto back = dc.Get(table, n);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_TRUE(*back == data) << "bytes differ";
    }
  }
}

// An fp8 shape whose rows (24 bytes) are not 16-byte multiples and whose chunks (40 tokens) start
// mid-block: the kernel's byte path, GPU -> store -> GPU, byte-exact.
TEST(GpuDeviceTest, Fp8RowsNotSixteenByteMultiplesRoundTrip) {
  SKIP_WITHOUT_GPU();
  const Layout layout{2, 1, 24, DType::kFP8, 40};
  const uint32_t n = 7;
  DeviceCache dc(layout, 64, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=16MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 3);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 8);
  const uint64_t need = (uint64_t{n} * 40 + 15) / 16;
  const auto table_a = ShuffledTable(64, need, 5), table_b = ShuffledTable(64, need, 6);
  ASSERT_TRUE(dc.Clear(0).ok());
  ASSERT_TRUE(dc.Put(data, table_a).ok());
  GpuTransferOptions opt;
  opt.staging_bytes = 2 * layout.BytesPerChunk();  // a partial last batch too
  opt.host_threads = 2;
  auto t = GpuTransfer::Open(layout, dc.cache(), opt).value();
  ASSERT_TRUE(t->Save(*store, ns, keys, table_a).ok());
  ASSERT_TRUE(dc.Clear(0x5a).ok());
  auto load = t->Load(*store, ns, keys, table_b);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ((*load)->chunks(), n);
  ASSERT_TRUE((*load)->Wait().ok());
  EXPECT_TRUE(dc.Get(table_b, n).value() == data);
}

// GPU -> file:// -> GPU (O_DIRECT reads straight into the registered staging slots), byte-exact.
TEST(GpuDeviceTest, FileTierRoundTrip) {
  SKIP_WITHOUT_GPU();
  const Layout layout{8, 2, 64, DType::kBF16, 256};  // 1 MiB chunks
  const uint32_t n = 9;
  DeviceCache dc(layout, 160, 32);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  kvtier::testing::TempDir dir;
  StoreOptions so;
  so.tiers = {"file://" + dir.path() + "?capacity=64MiB"};
  so.promote_on_load = false;
  auto store = Store::Open(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 40);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 9);
  const auto table_a = ShuffledTable(160, n * 8, 7), table_b = ShuffledTable(160, n * 8, 8);
  ASSERT_TRUE(dc.Clear(0).ok());
  ASSERT_TRUE(dc.Put(data, table_a).ok());
  GpuTransferOptions opt;
  opt.staging_bytes = 2 * layout.BytesPerChunk();
  opt.host_threads = 2;
  opt.layer_groups = 2;
  auto t = GpuTransfer::Open(layout, dc.cache(), opt).value();
  ASSERT_TRUE(t->Save(**store, ns, keys, table_a).ok());
  ASSERT_TRUE((*store)->Flush().ok());
  ASSERT_TRUE(dc.Clear(0x11).ok());
  auto load = t->Load(**store, ns, keys, table_b);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ((*load)->chunks(), n);
  ASSERT_TRUE((*load)->Wait().ok());
  EXPECT_TRUE(dc.Get(table_b, n).value() == data) << "bytes differ after GPU -> file:// -> GPU";
}

// Zero-copy loads from a shm:// pool pinned once (PinStoreHostMemory): chunks are copied to the GPU
// straight from the arena (StoreStats::borrows counts them, Store::Load does not), byte for byte.
TEST(GpuDeviceTest, ShmPoolPinnedOnceLoadsInPlace) {
  SKIP_WITHOUT_GPU();
  const Layout layout{8, 2, 64, DType::kBF16, 256};  // 1 MiB chunks
  const uint32_t n = 9;
  DeviceCache dc(layout, 160, 32);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  kvtier::testing::TempDir dir;
  StoreOptions so;
  so.tiers = {"shm://gpuzero?dir=" + dir.path() + "&capacity=64MiB"};
  auto store = Store::Open(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto pins = PinStoreHostMemory(**store, 0);
  ASSERT_TRUE(pins.ok()) << pins.status().ToString();
  EXPECT_EQ((*pins)->regions(), 1u);
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 41);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 10);
  const auto table = ShuffledTable(160, n * 8, 9);
  ASSERT_TRUE(SaveHost(**store, ns, keys, data).ok());
  ASSERT_TRUE(dc.Clear(0x22).ok());
  GpuTransferOptions opt;
  opt.staging_bytes = 2 * layout.BytesPerChunk();
  opt.layer_groups = 2;
  auto t = GpuTransfer::Open(layout, dc.cache(), opt).value();
  const StoreStats before = (*store)->Stats();
  {
    auto load = t->Load(**store, ns, keys, table);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    EXPECT_EQ((*load)->chunks(), n);
    ASSERT_TRUE((*load)->Wait().ok());
  }
  const StoreStats after = (*store)->Stats();
  EXPECT_EQ(after.borrows - before.borrows, n) << "chunks were not copied from the arena in place";
  EXPECT_EQ(after.load_chunks, before.load_chunks) << "no chunk went through the staging copy";
  EXPECT_TRUE(dc.Get(table, n).value() == data) << "bytes differ after shm:// (pinned) -> GPU";
}

// Queues on `engine` (nullptr: the legacy default stream) a fill of every K and V tensor with 0xEE that
// is still pending (behind a 300 ms host function) when the call returns.
void QueuePendingFill(DeviceCache& dc, void* engine) {
  bool first = true;
  for (const auto& tensors : {dc.cache().k, dc.cache().v}) {
    for (void* p : tensors) {
      ASSERT_TRUE(internal::QueueDelayedFill(0, engine, first ? 300 : 0, p, 0xEE, dc.tensor_bytes()).ok());
      first = false;
    }
  }
}

// A load given the engine's stream (`engine`; nullptr: the legacy default stream, handle 0) waits for the
// work queued there: a fill of the same blocks that is still pending when Load is called lands first,
// and the load's bytes are what remains. Without the dependency the fill would overwrite the loaded
// blocks. With `stream_wait`, the host never waits: the engine's stream waits for the last layer group
// (StreamWaitLayerGroup on that stream) and the blocks are read back by a copy queued on it.
void CheckLoadWaitsFor(void* engine, bool stream_wait) {
  const Layout layout{4, 2, 64, DType::kBF16, 64};
  const uint32_t n = 6;
  DeviceCache dc(layout, 32, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=16MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, n, 60);
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 13);
  ASSERT_TRUE(SaveHost(*store, ns, keys, data).ok());
  for (uint32_t groups : {1u, 2u}) {
    SCOPED_TRACE("groups " + std::to_string(groups));
    GpuTransferOptions opt;
    opt.staging_bytes = 2 * layout.BytesPerChunk();
    opt.host_threads = 2;
    opt.layer_groups = groups;
    auto t = GpuTransfer::Open(layout, dc.cache(), opt).value();
    ASSERT_TRUE(dc.Clear(0).ok());
    QueuePendingFill(dc, engine);
    const auto table = ShuffledTable(32, n * 4, 20 + groups);
    auto load = t->Load(*store, ns, keys, table, engine);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    if (stream_wait) {
      ASSERT_TRUE((*load)->StreamWaitLayerGroup(groups - 1, engine).ok());
    } else {
      ASSERT_TRUE((*load)->Wait().ok());
    }
    ASSERT_TRUE(internal::StreamSynchronize(0, engine).ok());
    EXPECT_TRUE(dc.Get(table, n).value() == data) << "the engine's pending fill landed after the load";
    ASSERT_TRUE((*load)->Wait().ok());
  }
}

TEST(GpuDeviceTest, LoadWaitsForTheEnginesStream) {
  SKIP_WITHOUT_GPU();
  auto engine = internal::StreamCreate(0);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  CheckLoadWaitsFor(*engine, false);
  internal::StreamDestroy(0, *engine);
}

// after_stream nullptr is the legacy default stream (PyTorch's default stream, handle 0), which the
// transfer's non-blocking stream does not wait for by itself; and StreamWaitLayerGroup(g, nullptr)
// makes that stream wait: the read-back (a cudaMemcpy, on the legacy stream) sees the loaded bytes.
TEST(GpuDeviceTest, LoadWaitsForTheLegacyDefaultStream) {
  SKIP_WITHOUT_GPU();
  CheckLoadWaitsFor(nullptr, true);
}

// A save given the engine's stream (`engine`; nullptr: the legacy default stream) gathers after the work
// queued there: the blocks hold `data` when Save is called and a pending fill (the prefill's last KV
// writes) turns them to 0xEE; the chunks saved are the filled ones. Without the dependency the gather
// would read `data` and the store would hold chunks that verify and are wrong.
void CheckSaveWaitsFor(void* engine) {
  const Layout layout{4, 2, 64, DType::kBF16, 64};
  const uint32_t n = 6;
  DeviceCache dc(layout, 32, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto data = RandomBytes(n * layout.BytesPerChunk(), 17);
  const std::vector<std::byte> filled(n * layout.BytesPerChunk(), std::byte{0xEE});
  for (uint32_t groups : {1u, 2u}) {
    SCOPED_TRACE("groups " + std::to_string(groups));
    StoreOptions so;
    so.tiers = {"mem://?capacity=16MiB"};
    auto store = Store::Open(so).value();
    const auto keys = Keys(ns, n, 160 + groups);
    GpuTransferOptions opt;
    opt.staging_bytes = 2 * layout.BytesPerChunk();
    opt.host_threads = 2;
    opt.layer_groups = groups;
    auto t = GpuTransfer::Open(layout, dc.cache(), opt).value();
    const auto table = ShuffledTable(32, n * 4, 40 + groups);
    ASSERT_TRUE(dc.Put(data, table).ok());
    QueuePendingFill(dc, engine);
    ASSERT_TRUE(t->Save(*store, ns, keys, table, engine).ok());
    ASSERT_TRUE(internal::StreamSynchronize(0, engine).ok());
    std::vector<std::byte> got(filled.size());
    std::vector<std::span<std::byte>> pieces;
    std::vector<ScatterList> dsts;
    for (uint32_t i = 0; i < n; ++i) pieces.emplace_back(got.data() + i * layout.BytesPerChunk(), layout.BytesPerChunk());
    for (uint32_t i = 0; i < n; ++i) dsts.emplace_back(&pieces[i], 1);
    auto loaded = store->Load(ns, keys, dsts);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(*loaded, n);
    EXPECT_TRUE(got == filled) << "the save gathered the blocks before the engine's pending writes";
  }
}

TEST(GpuDeviceTest, SaveWaitsForTheEnginesStream) {
  SKIP_WITHOUT_GPU();
  auto engine = internal::StreamCreate(0);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  CheckSaveWaitsFor(*engine);
  internal::StreamDestroy(0, *engine);
}

TEST(GpuDeviceTest, SaveWaitsForTheLegacyDefaultStream) {
  SKIP_WITHOUT_GPU();
  CheckSaveWaitsFor(nullptr);
}

// A stream being captured into a CUDA graph is refused with a clear error, and nothing is queued.
TEST(GpuDeviceTest, CapturingStreamsAreRefused) {
  SKIP_WITHOUT_GPU();
  const Layout layout{2, 2, 64, DType::kBF16, 64};
  DeviceCache dc(layout, 16, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=16MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, 2, 70);
  ASSERT_TRUE(SaveHost(*store, ns, keys, RandomBytes(2 * layout.BytesPerChunk(), 2)).ok());
  auto t = GpuTransfer::Open(layout, dc.cache()).value();
  const std::vector<uint32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  auto before = t->Load(*store, ns, keys, table).value();
  auto engine = internal::StreamCreate(0).value();
  ASSERT_TRUE(internal::CaptureBegin(0, engine).ok());
  auto load = t->Load(*store, ns, keys, table, engine);
  const Status wait = before->StreamWaitLayerGroup(0, engine);
  const Status save = t->Save(*store, ns, keys, table, engine);
  ASSERT_TRUE(internal::CaptureEnd(0, engine).ok());
  EXPECT_EQ(load.status().code(), Code::kInvalidArgument) << load.status().ToString();
  EXPECT_NE(load.status().ToString().find("CUDA graph"), std::string::npos) << load.status().ToString();
  EXPECT_EQ(wait.code(), Code::kInvalidArgument) << wait.ToString();
  EXPECT_EQ(save.code(), Code::kInvalidArgument) << save.ToString();
  EXPECT_TRUE(before->Wait().ok());
  internal::StreamDestroy(0, engine);
}

// Every call sets the cache's device and gives the caller's back: with the caller on device 1 and the
// cache on device 0, Open, Save, Load, the waits and Done leave device 1 current. Needs two GPUs.
TEST(GpuDeviceTest, CallsRestoreTheCallersDevice) {
  SKIP_WITHOUT_GPU();
  if (auto n = internal::DeviceCount(); !n.ok() || *n < 2 || !GpuAvailable(1).ok()) {
    GTEST_SKIP() << "needs two usable GPUs";
  }
  const Layout layout{2, 2, 64, DType::kBF16, 64};
  DeviceCache dc(layout, 16, 16);
  ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
  StoreOptions so;
  so.tiers = {"mem://?capacity=16MiB"};
  auto store = Store::Open(so).value();
  auto ns = Namespace::Make("test/gpu", layout, "t").value();
  const auto keys = Keys(ns, 2, 90);
  const std::vector<uint32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(internal::SetCurrentDevice(1).ok());
  GpuTransferOptions opt;
  opt.layer_groups = 2;
  auto t = GpuTransfer::Open(layout, dc.cache(), opt);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(internal::CurrentDevice().value(), 1) << "Open";
  ASSERT_TRUE((*t)->Save(*store, ns, keys, table).ok());
  EXPECT_EQ(internal::CurrentDevice().value(), 1) << "Save";
  auto load = (*t)->Load(*store, ns, keys, table);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(internal::CurrentDevice().value(), 1) << "Load";
  ASSERT_TRUE((*load)->WaitLayerGroup(0).ok());
  ASSERT_TRUE((*load)->Wait().ok());
  ASSERT_TRUE((*load)->Done().ok());
  EXPECT_EQ(internal::CurrentDevice().value(), 1) << "waits";
  t->reset();
  EXPECT_EQ(internal::CurrentDevice().value(), 1) << "close";
  ASSERT_TRUE(internal::SetCurrentDevice(0).ok());
}

// Every call of a transfer on `device`, made from a thread that has no CUDA context (as a fresh kvtier
// reader thread, or an engine thread that never touched CUDA): each leaves the thread without one, and
// in the whole process no device but `device` gets a context (a context on GPU 0 costs every worker of
// a multi-GPU engine hundreds of MiB there). Runs only in the child process that
// GpuDeviceTest.NoContextOnADeviceItWasNotGiven starts (nothing there touched CUDA before).
TEST(GpuDeviceChild, TouchesOnlyTheDeviceItIsGiven) {
  const char* env = std::getenv("KVTIER_GPU_CHILD_DEVICE");
  if (env == nullptr) GTEST_SKIP() << "runs in the child process of GpuDeviceTest.NoContextOnADeviceItWasNotGiven";
  const int device = std::atoi(env);
  const int count = internal::DeviceCount().value();
  std::thread caller([&] {
    auto none = [](const char* after) {
      auto current = internal::ContextCurrent();
      ASSERT_TRUE(current.ok()) << current.status().ToString();
      EXPECT_FALSE(*current) << "a CUDA context is left current on the caller's thread after " << after;
    };
    none("nothing");
    const Layout layout{4, 2, 64, DType::kBF16, 64};
    const uint32_t n = 12;
    DeviceCache dc(layout, 64, 16, device);
    ASSERT_TRUE(dc.status().ok()) << dc.status().ToString();
    StoreOptions so;
    so.tiers = {"mem://?capacity=16MiB"};
    so.host_allocator = PinnedHostAllocator(device);  // pinned pages: reader threads ask for pointer attributes
    ASSERT_NE(so.host_allocator, nullptr);
    auto store = Store::Open(so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    none("Store::Open with the pinned allocator");
    auto ns = Namespace::Make("test/gpu", layout, "t").value();
    const auto keys = Keys(ns, n, 300);
    const auto data = RandomBytes(n * layout.BytesPerChunk(), 31);
    const auto table = ShuffledTable(64, n * 4, 9);
    ASSERT_TRUE(dc.Put(data, table).ok());
    GpuTransferOptions opt;
    opt.staging_bytes = 2 * layout.BytesPerChunk();  // 6 batches on 4 reader threads, in 2 waves
    opt.host_threads = 4;
    opt.layer_groups = 2;
    auto t = GpuTransfer::Open(layout, dc.cache(), opt);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    none("Open");
    ASSERT_TRUE((*t)->Save(**store, ns, keys, table).ok());
    none("Save");
    ASSERT_TRUE(dc.Clear(0).ok());
    auto engine = internal::StreamCreate(device);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto load = (*t)->Load(**store, ns, keys, table, *engine);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    EXPECT_EQ((*load)->chunks(), n);
    none("Load");
    ASSERT_TRUE((*load)->StreamWaitLayerGroup(0, *engine).ok());
    ASSERT_TRUE((*load)->WaitLayerGroup(1).ok());
    ASSERT_TRUE((*load)->Done().ok());
    ASSERT_TRUE((*load)->Wait().ok());
    none("the waits");
    EXPECT_TRUE(dc.Get(table, n).value() == data);
    internal::StreamDestroy(device, *engine);
    load->reset();
    t->reset();
    store->reset();
    none("closing the transfer and the store (pinned memory unregistered)");
  });
  caller.join();
  EXPECT_TRUE(internal::PrimaryContextActive(device).value()) << "the check saw no context at all";
  for (int d = 0; d < count; ++d) {
  if (env == nullptr) {
    GTEST_SKIP() << "runs in the child process of GpuDeviceTest.NoContextOnADeviceItWasNotGiven";
  }
  }
}

// Starts GpuDeviceChild.TouchesOnlyTheDeviceItIsGiven in a process of its own, with the cache on the last
// GPU: on a host of two or more, GPU 0 must stay without a context; on one GPU, every calling thread
// must be left without a context (a transfer's reader threads set the device before any CUDA call).
TEST(GpuDeviceTest, NoContextOnADeviceItWasNotGiven) {
  SKIP_WITHOUT_GPU();
  const int device = internal::DeviceCount().value() - 1;
  char self[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  const std::string cmd = "KVTIER_GPU_CHILD_DEVICE=" + std::to_string(device) + " '" + std::string(self, len) +
                          "' --gtest_filter=GpuDeviceChild.TouchesOnlyTheDeviceItIsGiven 2>&1";
  FILE* child = popen(cmd.c_str(), "r");
  ASSERT_NE(child, nullptr);
  std::string out;
  char buf[4096];
  for (size_t got; (got = fread(buf, 1, sizeof(buf), child)) > 0;) out.append(buf, got);
  const int status = pclose(child);
  std::printf("child (cache on GPU %d):\n%s", device, out.c_str());
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << "the child did not run its test:\n" << out;
}

}  // namespace
}  // namespace kvtier
