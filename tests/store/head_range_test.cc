// KV saved at one tensor-parallel degree, loaded at another (docs/models.md): the TP matrix on mem://
// and file://, byte for byte, and the bytes a 1-of-8 head-range read takes from storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <sys/stat.h>
#include <memory>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "io/filesystem.h"
#include "kvtier/keys.h"
#include "kvtier/layout.h"
#include "kvtier/tier.h"
#include "support/temp_dir.h"
#include "tiers/file/file_tier.h"

namespace kvtier {
namespace {

// Every kind of group: window layers 0 and 2, full layers 1 and 3 (K and V dims differ), a latent and
// a state layer; 8 KV heads, so TP 1, 2, 4 and 8 all divide them.
Layout Mixed() {
  return ParseLayoutSpec(
             "layers=6 tokens=16 window:layers=0+2,heads=8,dim=8,window=4,dtype=bf16 "
             "kv:layers=1+3,heads=8,dim=16,v_dim=8,dtype=bf16 latent:layers=4,dim=24,dtype=fp8 "
             "state:layers=5,bytes=100,dtype=fp32")
      .value();
}

Layout GptOss20bSmall() {
  Layout l = FindModelPreset("gpt-oss-20b").value().layout;
  l.tokens_per_chunk = 16;  // 768 KiB chunks keep the matrix quick
  return l;
}

std::vector<std::byte> Truth(uint64_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (auto& b : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

// What heads [a, b) read from `chunk`: its HeadRanges, one after the other.
std::vector<std::byte> Slice(const Layout& l, const std::vector<std::byte>& chunk, uint32_t a, uint32_t b) {
  std::vector<std::byte> out;
  const std::vector<ByteRange> ranges = l.HeadRanges(a, b).value();
  for (const ByteRange& r : ranges) {
    out.insert(out.end(), chunk.begin() + r.offset, chunk.begin() + r.offset + r.bytes);
  }
  return out;
}

ChunkKey KeyOf(const Namespace& ns) {
  std::vector<uint32_t> tokens(ns.layout().tokens_per_chunk);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 7 * i + 1;
  return NextChunkKey(ns, nullptr, tokens);  // the same whatever the TP degree of writer or reader
}

// Opens a fresh tier of `scheme` ("mem", "fs", "file", or "file+key": encrypted) in `dir`.
std::unique_ptr<Tier> Fresh(const std::string& scheme, const std::string& dir) {
  std::string url = scheme == "mem" ? "mem://?capacity=64MiB"
                    : scheme == "fs" ? "fs://" + dir + "?capacity=1GiB"
                                     : "file://" + dir + "?capacity=1GiB";
  if (scheme == "file+key") {
    const std::string key = dir + ".key";
    std::FILE* f = std::fopen(key.c_str(), "wb");
    for (int i = 0; i < 32; ++i) std::fputc(i * 7 + 1, f);
    std::fclose(f);
    ::chmod(key.c_str(), 0600);
    url += "&key_file=" + key;
  }
  auto t = OpenTier(url);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

void RunMatrix(const Layout& layout, const std::string& scheme) {
  const auto ns = Namespace::Make("test/tp", layout, "").value();
  const ChunkId id = ChunkId::Of(ns, KeyOf(ns));
  const uint32_t heads = layout.HeadSplitHeads();
  const std::vector<std::byte> truth = Truth(layout.BytesPerChunk(), heads);
  for (uint32_t save_tp : {1u, 2u, 4u, 8u}) {
    if (heads % save_tp != 0) continue;
    testing::TempDir dir;
    auto tier = Fresh(scheme, dir.path() + "/tier");
    ASSERT_NE(tier, nullptr);
    // Each rank holds its heads (and its copy of the latent and state groups); the chunk is assembled
    // from the ranks' parts without a copy, and written once.
    std::vector<std::vector<std::byte>> parts;
    for (uint32_t r = 0; r < save_tp; ++r) parts.push_back(Slice(layout, truth, r * heads / save_tp, (r + 1) * heads / save_tp));
    std::vector<std::span<const std::byte>> views(parts.begin(), parts.end());
    auto gather = layout.AssembleFromRanks(views);
    ASSERT_TRUE(gather.ok()) << gather.status().ToString();
    ASSERT_TRUE(tier->Put(id, GatherList(*gather)).ok());
    std::vector<std::byte> whole(truth.size());
    const std::span<std::byte> all(whole);
    ASSERT_TRUE(tier->Get(id, ScatterList(&all, 1)).ok());
    ASSERT_EQ(whole, truth) << "saved at TP " << save_tp;
    for (uint32_t load_tp : {1u, 2u, 4u, 8u}) {
      if (heads % load_tp != 0) continue;
      for (uint32_t r = 0; r < load_tp; ++r) {
        const uint32_t a = r * heads / load_tp, b = (r + 1) * heads / load_tp;
        const auto ranges = layout.HeadRanges(a, b).value();
        std::vector<std::byte> got(layout.SliceHeads(a, b)->BytesPerChunk(), std::byte{0x5a});
        const std::span<std::byte> dst(got);
        const Status s = tier->GetRanges(id, layout.BytesPerChunk(), ranges, ScatterList(&dst, 1));
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_EQ(got, Slice(layout, truth, a, b))
            << scheme << ": saved at TP " << save_tp << ", rank " << r << " of TP " << load_tp;
      }
    }
  }
}

TEST(HeadRangeTest, TpMatrixMem) {
  RunMatrix(Mixed(), "mem");
  RunMatrix(GptOss20bSmall(), "mem");
}

TEST(HeadRangeTest, TpMatrixFile) {
  RunMatrix(Mixed(), "file");
  RunMatrix(GptOss20bSmall(), "file");
}

TEST(HeadRangeTest, TpMatrixFileEncrypted) {
  RunMatrix(Mixed(), "file+key");  // listed pieces sealed one by one, each opened alone
}

TEST(HeadRangeTest, TpMatrixSharedPool) {
  RunMatrix(Mixed(), "fs");  // fs:// writes listed pieces too and reads them back through GetRanges' default
}

TEST(HeadRangeTest, RangesAreWholePiecesAndLatentsComeOnce) {
  const Layout l = Mixed();
  const auto pieces = l.PieceLengths();
  std::vector<uint64_t> starts{0};
  for (uint64_t n : pieces) starts.push_back(starts.back() + n);
  EXPECT_EQ(starts.back(), l.BytesPerChunk());
  for (uint32_t a = 0; a < 8; ++a) {
    uint64_t total = 0;
    const std::vector<ByteRange> ranges = l.HeadRanges(a, a + 1).value();
    for (const ByteRange& r : ranges) {
      EXPECT_TRUE(std::count(starts.begin(), starts.end(), r.offset)) << "range starts inside a piece";
      EXPECT_TRUE(std::count(starts.begin(), starts.end(), r.offset + r.bytes)) << "range ends inside a piece";
      total += r.bytes;
    }
    // One head of 8 of each head-split group, the latent and the state whole.
    EXPECT_EQ(total, (l.BytesPerChunk() - 16 * 24 - 100) / 8 + 16 * 24 + 100);
  }
  EXPECT_FALSE(l.HeadRanges(0, 9).ok());
  EXPECT_FALSE(l.HeadRanges(3, 3).ok());
  EXPECT_FALSE((Layout{2, 8, 16}).HeadRanges(0, 1).ok());  // classic: interleaved heads
  const Layout mla = FindModelPreset("deepseek-v3").value().layout;
  auto all = mla.HeadRanges(0, 0);  // no head-split group: every rank reads the one latent copy
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].bytes, mla.BytesPerChunk());
}

// A FileSystem that counts the bytes read through it (the seam every file:// read goes through).
class CountingFs final : public internal::FileSystem {
 public:
  explicit CountingFs(std::shared_ptr<internal::FileSystem> inner) : inner_(std::move(inner)) {}
  const std::string& root() const override { return inner_->root(); }
  Result<internal::Fd> OpenForRead(std::string_view rel, bool direct) override { return inner_->OpenForRead(rel, direct); }
  Result<internal::Fd> CreateNew(std::string_view rel, bool direct) override { return inner_->CreateNew(rel, direct); }
  Result<internal::Fd> OpenLockFile(std::string_view rel) override { return inner_->OpenLockFile(rel); }
  Status Rename(std::string_view from, std::string_view to) override { return inner_->Rename(from, to); }
  Status Link(std::string_view from, std::string_view to) override { return inner_->Link(from, to); }
  Status Unlink(std::string_view rel) override { return inner_->Unlink(rel); }
  Result<internal::FileStat> Stat(std::string_view rel) override { return inner_->Stat(rel); }
  Status MakeDir(std::string_view rel) override { return inner_->MakeDir(rel); }
  Result<std::vector<internal::DirEntry>> List(std::string_view rel) override { return inner_->List(rel); }
  Status Touch(std::string_view rel) override { return inner_->Touch(rel); }
  Status SyncDir(std::string_view rel) override { return inner_->SyncDir(rel); }
  Status SyncAll() override { return inner_->SyncAll(); }
  Result<uint64_t> ReadAt(int fd, std::byte* buf, uint64_t len, uint64_t offset) override {
    auto n = inner_->ReadAt(fd, buf, len, offset);
    if (n.ok()) read_ += *n;
    return n;
  }
  Result<uint64_t> WriteV(int fd, const iovec* iov, int count) override { return inner_->WriteV(fd, iov, count); }
  Result<uint64_t> WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) override {
    return inner_->WriteAt(fd, data, len, offset);
  }
  Status SyncFile(int fd) override { return inner_->SyncFile(fd); }
  Status Preallocate(int fd, uint64_t len) override { return inner_->Preallocate(fd, len); }
  uint64_t read() const { return read_; }

 private:
  std::shared_ptr<internal::FileSystem> inner_;
  std::atomic<uint64_t> read_{0};
};

TEST(HeadRangeTest, OneOfEightRanksReadsAnEighthPlusTheHeader) {
  const Layout l = FindModelPreset("gpt-oss-120b").value().layout;
  const auto ns = Namespace::Make("openai/gpt-oss-120b", l, "").value();
  const ChunkId id = ChunkId::Of(ns, KeyOf(ns));
  testing::TempDir dir;
  internal::PosixFsOptions create;
  create.create = true;
  auto counting = std::make_shared<CountingFs>(internal::OpenPosixFileSystem(dir.path() + "/tier", create).value());
  internal::FileTierOptions o;
  o.dir = dir.path() + "/tier";
  o.fs = counting;
  o.capacity_bytes = 1ull << 30;
  auto tier = internal::OpenFileTier(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const std::vector<std::byte> truth = Truth(l.BytesPerChunk(), 120);
  const std::span<const std::byte> src(truth);
  ASSERT_TRUE((*tier)->Put(id, GatherList(&src, 1)).ok());
  for (uint32_t r = 0; r < 8; ++r) {
    const auto ranges = l.HeadRanges(r, r + 1).value();
    std::vector<std::byte> got(l.SliceHeads(r, r + 1)->BytesPerChunk());
    const std::span<std::byte> dst(got);
    const uint64_t before = counting->read();
    ASSERT_TRUE((*tier)->GetRanges(id, l.BytesPerChunk(), ranges, ScatterList(&dst, 1)).ok());
    const uint64_t read = counting->read() - before;
    ASSERT_EQ(got, Slice(l, truth, r, r + 1));
    std::printf("gpt-oss-120b chunk %llu bytes; rank %u of 8 read %llu bytes from file:// (an eighth: %llu, "
                "header: %zu)\n",
                static_cast<unsigned long long>(l.BytesPerChunk()), r, static_cast<unsigned long long>(read),
                static_cast<unsigned long long>(l.BytesPerChunk() / 8), internal::kChunkHeaderSize);
    EXPECT_LE(read, l.BytesPerChunk() / 8 + internal::kChunkHeaderSize);
  }
}

}  // namespace
}  // namespace kvtier
