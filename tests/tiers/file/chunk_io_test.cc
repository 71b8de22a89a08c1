// The io layer: atomic chunk writes, both read engines (io_uring and preadv, with and without
// O_DIRECT), verification of every corruption kind, and the in-flight byte bound.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "tiers/file/file_test_util.h"
#include "io/byte_budget.h"
#include "io/chunk_dir.h"
#include "io/chunk_io.h"
#include "io/filesystem.h"

namespace kvtier::internal {
namespace {

using kvtier::testing::FlipByte;
using kvtier::testing::KeyNo;
using kvtier::testing::OnePiece;
using kvtier::testing::PayloadFor;
using kvtier::testing::TempDir;
using kvtier::testing::TestNamespace;

struct Engine {
  bool uring;
  bool direct;
};

// A FileSystem rooted at `dir` (every path below is relative to it).
std::shared_ptr<FileSystem> RootFs(const TempDir& dir) {
  auto fs = OpenPosixFileSystem(dir.path());
  EXPECT_TRUE(fs.ok()) << fs.status().ToString();
  return fs.ok() ? *fs : nullptr;
}

class ChunkIoTest : public ::testing::TestWithParam<Engine> {
 protected:
  ChunkIoTest() : ns_(TestNamespace()), fs_(RootFs(dir_)) {}

  // The absolute path of `rel` (for damaging files behind the reader's back).
  std::string Abs(const std::string& rel) const { return dir_.path() + "/" + rel; }

  std::unique_ptr<ChunkReader> MakeReader(uint64_t inflight = 256ull << 20) {
    ReaderOptions o;
    o.use_io_uring = GetParam().uring;
    o.direct_io = GetParam().direct;
    o.max_inflight_bytes = inflight;
    o.fallback_threads = 3;
    return ChunkReader::Create(o);
  }

  // Writes chunk `n` and returns its path relative to the fixture's root.
  std::string WriteChunk(uint32_t n, const Namespace* ns = nullptr) {
    const Namespace& use = ns ? *ns : ns_;
    const ChunkKey key = KeyNo(use, n);
    auto payload = PayloadFor(key, use.layout().BytesPerChunk());
    const std::string path = "c" + std::to_string(n) + ".kvc";
    OnePiece p(payload);
    auto r = WriteChunkFileAtomic(*fs_, path, ChunkId::Of(use, key), p.src(), {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return path;
  }

  // Reads chunk `n` from `path` (relative); returns the status and checks the bytes on success.
  Status ReadChunk(ChunkReader& reader, uint32_t n, const std::string& path) {
    const ChunkKey key = KeyNo(ns_, n);
    std::vector<std::byte> out(ns_.layout().BytesPerChunk());
    // Three uneven pieces, as an engine's per-layer buffers would be.
    std::vector<std::span<std::byte>> pieces = {{out.data(), 1000}, {out.data() + 1000, 7},
                                                {out.data() + 1007, out.size() - 1007}};
    ChunkRead read{fs_.get(), path, ChunkId::Of(ns_, key), pieces, Status::OK(), 0};
    reader.ReadMany({&read, 1});
    if (read.status.ok()) {
      EXPECT_EQ(out, PayloadFor(key, out.size()));
    }
    return read.status;
  }

  TempDir dir_;
  Namespace ns_;
  std::shared_ptr<FileSystem> fs_;
};

TEST_P(ChunkIoTest, EngineIsTheOneAskedFor) {
  auto reader = MakeReader();
  const std::string engine(reader->engine());
  if (!GetParam().uring) {
    EXPECT_EQ(engine.rfind("preadv", 0), 0u) << engine;
  }
  if (GetParam().uring && engine.rfind("io_uring", 0) != 0) GTEST_SKIP() << "kernel refuses io_uring";
  EXPECT_EQ(engine.find("O_DIRECT") != std::string::npos, GetParam().direct) << engine;
}

TEST_P(ChunkIoTest, WriteThenReadBack) {
  auto reader = MakeReader();
  const std::string path = WriteChunk(1);
  struct stat st {};
  ASSERT_EQ(::stat(Abs(path).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), StoredChunkBytes(ns_.layout().BytesPerChunk()));
  EXPECT_TRUE(ReadChunk(*reader, 1, path).ok());
  // No temporary file is left beside the chunk.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST_P(ChunkIoTest, MissingFileIsNotFound) {
  auto reader = MakeReader();
  EXPECT_TRUE(ReadChunk(*reader, 1, "absent.kvc").IsNotFound());
}

TEST_P(ChunkIoTest, FlippedPayloadByteIsCorruption) {
  auto reader = MakeReader();
  const std::string path = WriteChunk(1);
  FlipByte(Abs(path), kChunkHeaderSize + 100);
  EXPECT_TRUE(ReadChunk(*reader, 1, path).IsCorruption());
}

TEST_P(ChunkIoTest, FlippedHeaderByteIsCorruption) {
  auto reader = MakeReader();
  const std::string path = WriteChunk(1);
  FlipByte(Abs(path), 90);  // inside the payload length field
  EXPECT_TRUE(ReadChunk(*reader, 1, path).IsCorruption());
}

TEST_P(ChunkIoTest, TruncatedFileIsCorruption) {
  auto reader = MakeReader();
  const std::string a = WriteChunk(1), b = WriteChunk(2);
  ASSERT_EQ(::truncate(Abs(a).c_str(), kChunkHeaderSize + 100), 0);  // unaligned tail
  ASSERT_EQ(::truncate(Abs(b).c_str(), 100), 0);                      // not even a header
  EXPECT_TRUE(ReadChunk(*reader, 1, a).IsCorruption());
  EXPECT_TRUE(ReadChunk(*reader, 2, b).IsCorruption());
}

TEST_P(ChunkIoTest, ChunkOfAnotherNamespaceIsCorruption) {
  auto reader = MakeReader();
  const Namespace other = TestNamespace("tenant-b");
  const std::string path = WriteChunk(1, &other);
  EXPECT_TRUE(ReadChunk(*reader, 1, path).IsCorruption());
}

TEST_P(ChunkIoTest, ChunkOfAnotherLayoutIsCorruption) {
  auto reader = MakeReader();
  const ChunkKey key = KeyNo(ns_, 1);
  auto payload = PayloadFor(key, ns_.layout().BytesPerChunk());
  ChunkId id = ChunkId::Of(ns_, key);
  id.layout_fingerprint ^= 1;  // same names, a header claiming another layout
  const std::string path = "x.kvc";
  OnePiece p(payload);
  ASSERT_TRUE(WriteChunkFileAtomic(*fs_, path, id, p.src(), {}).ok());
  EXPECT_TRUE(ReadChunk(*reader, 1, path).IsCorruption());
}

TEST_P(ChunkIoTest, WrongDestinationSizeIsInvalidArgument) {
  auto reader = MakeReader();
  const std::string path = WriteChunk(1);
  std::vector<std::byte> out(ns_.layout().BytesPerChunk() - 2);
  std::span<std::byte> piece(out);
  ChunkRead read{fs_.get(), path, ChunkId::Of(ns_, KeyNo(ns_, 1)), {&piece, 1}, Status::OK(), 0};
  reader->ReadMany({&read, 1});
  EXPECT_EQ(read.status.code(), Code::kInvalidArgument) << read.status.ToString();
}

TEST_P(ChunkIoTest, BatchUnderATinyInflightBoundReadsEverything) {
  // 4 KiB of budget against 8 KiB chunk files: each exceeds the bound alone, so reads go one by one.
  auto reader = MakeReader(4096);
  constexpr uint32_t kChunks = 20;
  std::vector<std::string> paths;
  for (uint32_t n = 0; n < kChunks; ++n) paths.push_back(WriteChunk(n));
  FlipByte(Abs(paths[7]), kChunkHeaderSize + 1);
  std::vector<std::vector<std::byte>> outs(kChunks, std::vector<std::byte>(ns_.layout().BytesPerChunk()));
  std::vector<std::span<std::byte>> pieces;
  for (auto& o : outs) pieces.emplace_back(o);
  std::vector<ChunkRead> reads;
  for (uint32_t n = 0; n < kChunks; ++n) {
    reads.push_back({fs_.get(), paths[n], ChunkId::Of(ns_, KeyNo(ns_, n)), {&pieces[n], 1}, Status::OK(), 0});
  }
  reads.push_back({fs_.get(), "absent.kvc", ChunkId::Of(ns_, KeyNo(ns_, 99)), {&pieces[0], 1},
                   Status::OK(), 0});
  reader->ReadMany(reads);
  for (uint32_t n = 0; n < kChunks; ++n) {
    if (n == 7) {
      EXPECT_TRUE(reads[n].status.IsCorruption()) << reads[n].status.ToString();
    } else {
      ASSERT_TRUE(reads[n].status.ok()) << n << ": " << reads[n].status.ToString();
      EXPECT_EQ(outs[n], PayloadFor(KeyNo(ns_, n), outs[n].size())) << n;
    }
  }
  EXPECT_TRUE(reads.back().status.IsNotFound());
}

TEST_P(ChunkIoTest, ConcurrentCallersShareOneReader) {
  auto reader = MakeReader(64 << 10);
  constexpr uint32_t kChunks = 16;
  std::vector<std::string> paths;
  for (uint32_t n = 0; n < kChunks; ++n) paths.push_back(WriteChunk(n));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (uint32_t n = static_cast<uint32_t>(t); n < kChunks; n += 2) {
          if (!ReadChunk(*reader, n, paths[n]).ok()) ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// 8 KiB payloads read into two 4 KiB-aligned pieces: the io_uring engine reads these straight into the
// destination (also with O_DIRECT) and must verify them there.
TEST_P(ChunkIoTest, AlignedDestinationsAreVerifiedInPlace) {
  const Namespace ns = TestNamespace("tenant-a", 32);
  ASSERT_EQ(ns.layout().BytesPerChunk(), 8192u);
  auto reader = MakeReader();
  std::vector<std::string> paths;
  for (uint32_t n = 0; n < 4; ++n) paths.push_back(WriteChunk(n, &ns));
  FlipByte(Abs(paths[1]), kChunkHeaderSize + 5000);                    // second piece
  ASSERT_EQ(::truncate(Abs(paths[2]).c_str(), kChunkHeaderSize + 4096), 0);  // second piece missing
  FlipByte(Abs(paths[3]), 20);                                         // header (namespace field)
  std::vector<AlignedBuffer> outs;
  std::vector<std::span<std::byte>> pieces;
  for (uint32_t n = 0; n < 4; ++n) {
    outs.push_back(AlignedBuffer::Allocate(8192));
    ASSERT_NE(outs.back().data(), nullptr);
  }
  for (uint32_t n = 0; n < 4; ++n) {
    pieces.emplace_back(outs[n].data(), 4096);
    pieces.emplace_back(outs[n].data() + 4096, 4096);
  }
  std::vector<ChunkRead> reads;
  for (uint32_t n = 0; n < 4; ++n) {
    reads.push_back({fs_.get(), paths[n], ChunkId::Of(ns, KeyNo(ns, n)), {pieces.data() + 2 * n, 2}, Status::OK(), 0});
  }
  reader->ReadMany(reads);
  ASSERT_TRUE(reads[0].status.ok()) << reads[0].status.ToString();
  const auto want = PayloadFor(KeyNo(ns, 0), 8192);
  EXPECT_EQ(std::memcmp(outs[0].data(), want.data(), 8192), 0);
  for (uint32_t n = 1; n < 4; ++n) EXPECT_TRUE(reads[n].status.IsCorruption()) << n << reads[n].status.ToString();
}

TEST_P(ChunkIoTest, UnlinkedFileIsNotFound) {
  auto reader = MakeReader();
  const std::string path = WriteChunk(1);
  ASSERT_EQ(::unlink(Abs(path).c_str()), 0);
  EXPECT_TRUE(ReadChunk(*reader, 1, path).IsNotFound());
}

INSTANTIATE_TEST_SUITE_P(Engines, ChunkIoTest,
                         ::testing::Values(Engine{true, true}, Engine{true, false}, Engine{false, true},
                                           Engine{false, false}),
                         [](const auto& info) {
                           return std::string(info.param.uring ? "Uring" : "Preadv") +
                                  (info.param.direct ? "Direct" : "Buffered");
                         });

TEST(ChunkWriterTest, TempNameIsRecognisableAndUnique) {
  const std::string a = MakeTempName("x.kvc"), b = MakeTempName("x.kvc");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("x.kvc.kvtmp.", 0), 0u) << a;
  EXPECT_NE(a.find(std::to_string(::getpid())), std::string::npos) << a;
  // The writer's own name parses back to its final name and pid.
  auto parsed = ParseTempName(a, [](std::string_view n) { return n == "x.kvc"; });
  ASSERT_TRUE(parsed.has_value()) << a;
  EXPECT_EQ(parsed->final_name, "x.kvc");
  EXPECT_EQ(parsed->pid, ::getpid());
}

TEST(ChunkWriterTest, FailedWriteLeavesNothing) {
  TempDir dir;
  auto fs = RootFs(dir);
  ASSERT_NE(fs, nullptr);
  const Namespace ns = TestNamespace();
  std::vector<std::byte> payload(100);
  kvtier::testing::OnePiece p(payload);
  // The final name is an existing directory: rename fails, and the temporary must go.
  std::filesystem::create_directories(dir.path() + "/taken/inside");
  auto r = WriteChunkFileAtomic(*fs, "taken", ChunkId::Of(ns, KeyNo(ns, 1)), p.src(), {.sync = true});
  EXPECT_FALSE(r.ok());
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 0u);
}

TEST(ChunkVerifyTest, ScrubFindsFlipsAndAcceptsSoundChunks) {
  TempDir dir;
  auto fs = RootFs(dir);
  ASSERT_NE(fs, nullptr);
  const Namespace ns = TestNamespace();
  const ChunkKey key = KeyNo(ns, 3);
  auto payload = PayloadFor(key, ns.layout().BytesPerChunk());
  kvtier::testing::OnePiece p(payload);
  const std::string path = "c.kvc";
  ASSERT_TRUE(WriteChunkFileAtomic(*fs, path, ChunkId::Of(ns, key), p.src(), {}).ok());
  ChunkId by_name = ChunkId::Of(ns, key);
  by_name.layout_fingerprint = 0;
  auto ok = VerifyChunkFile(*fs, path, by_name);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->payload_bytes, payload.size());
  auto header = ReadChunkHeader(*fs, path, by_name);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->payload_bytes, payload.size());
  FlipByte(dir.path() + "/" + path, kChunkHeaderSize + payload.size() - 1);
  EXPECT_TRUE(VerifyChunkFile(*fs, path, by_name).status().IsCorruption());
  EXPECT_TRUE(VerifyChunkFile(*fs, "none", by_name).status().IsNotFound());
}

TEST(ByteBudgetTest, OversizedRequestWaitsForAnEmptyBudget) {
  ByteBudget budget(100);
  EXPECT_TRUE(budget.TryAcquire(60));
  EXPECT_FALSE(budget.TryAcquire(50));
  EXPECT_FALSE(budget.TryAcquire(500));
  budget.Release(60);
  EXPECT_TRUE(budget.TryAcquire(500));  // alone: admitted rather than stuck forever
  EXPECT_FALSE(budget.TryAcquire(1));
  budget.Release(500);
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace kvtier::internal
