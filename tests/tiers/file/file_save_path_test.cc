// The save path of file://: plain chunks written with O_DIRECT from the Store worker's aligned buffer
// (one hash pass, while the payload's writes are in flight), byte-exact and verified when read back; eviction unlinks files with the tier's lock
// released.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "tiers/file/file_test_util.h"
#include "tiers/file/file_tier.h"
#include "tiers/fs/counting_fs.h"
#include "core/chunk_cipher.h"
#include "io/chunk_io.h"
#include "io/seal_spread.h"
#include "kvtier/store.h"
#include "support/key_file.h"

namespace kvtier::testing {
namespace {

using internal::CountingFileSystem;
using internal::kChunkHeaderSize;
using internal::StoredChunkBytes;

// Records how chunk bodies were written: with O_DIRECT or through the page cache.
class WatchingFs final : public CountingFileSystem {
 public:
  using CountingFileSystem::CountingFileSystem;
  Result<uint64_t> WriteV(int fd, const iovec* iov, int count) override {
    const int flags = fcntl(fd, F_GETFL);
    (flags >= 0 && (flags & O_DIRECT) != 0 ? direct_writes : buffered_writes)++;
    return CountingFileSystem::WriteV(fd, iov, count);
  }
  Result<uint64_t> WriteAt(int fd, const std::byte* data, uint64_t len, uint64_t offset) override {
    const int flags = fcntl(fd, F_GETFL);
    (flags >= 0 && (flags & O_DIRECT) != 0 ? direct_at : buffered_at)++;
    return CountingFileSystem::WriteAt(fd, data, len, offset);
  }
  // io_uring writes (io/async_writes.h): positioned too; each one passes here or through WriteAt.
  int64_t AdmitWrite(int fd, uint64_t offset, uint64_t len) override {
    const int flags = fcntl(fd, F_GETFL);
    (flags >= 0 && (flags & O_DIRECT) != 0 ? direct_at : buffered_at)++;
    return CountingFileSystem::AdmitWrite(fd, offset, len);
  }
  std::atomic<uint64_t> direct_writes{0}, buffered_writes{0};
  std::atomic<uint64_t> direct_at{0}, buffered_at{0};  // positioned writes (direct and encrypted chunks)
};

std::shared_ptr<internal::FileSystem> Posix(const std::string& dir) {
  auto fs = internal::OpenPosixFileSystem(dir, internal::PosixFsOptions{.create = true});
  EXPECT_TRUE(fs.ok()) << fs.status().ToString();
  return fs.ok() ? *fs : nullptr;
}

// 250,000 bytes a chunk: not a multiple of 4 KiB, so the last block is partial.
Namespace BigNamespace() { return Namespace::Make("test/model", Layout{2, 2, 16, DType::kFP16, 977}, "t").value(); }

TEST(FileSavePathTest, SavesGoDownWithODirectAndReadBackVerified) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/f";
  auto watching = std::make_shared<WatchingFs>(Posix(dir));
  internal::FileTierOptions fo;
  fo.dir = dir;
  fo.capacity_bytes = 64ull << 20;
  fo.fs = watching;
  auto file = internal::OpenFileTier(fo);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  if (!(*file)->capabilities().direct_io) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  const uint64_t buffered0 = watching->buffered_writes.load();  // the directory's marker, at open
  const Namespace ns = BigNamespace();
  const size_t bytes = ns.layout().BytesPerChunk();
  ASSERT_NE(bytes % 4096, 0u);
  std::vector<ChunkKey> keys;
  for (uint32_t i = 0; i < 5; ++i) keys.push_back(KeyNo(ns, i));
  {
    std::vector<std::unique_ptr<Tier>> tiers;
    auto mem = OpenTier("mem://?capacity=16MiB");  // 64 KiB pages: aligned runs
    ASSERT_TRUE(mem.ok());
    tiers.push_back(std::move(mem).value());
    tiers.push_back(std::move(file).value());
    auto store = Store::Open(std::move(tiers), StoreOptions{});
    ASSERT_TRUE(store.ok());
    std::vector<std::vector<std::byte>> data;
    for (const auto& k : keys) data.push_back(PayloadFor(k, bytes));
    std::vector<std::span<const std::byte>> spans(data.begin(), data.end());
    std::vector<GatherList> srcs;
    for (const auto& s : spans) srcs.emplace_back(&s, 1);
    ASSERT_TRUE((*store)->Save(ns, keys, srcs).ok());
    ASSERT_TRUE((*store)->Flush().ok());
    EXPECT_EQ((*store)->Stats().queued_saves, keys.size());
  }
  // Per chunk: the payload's whole blocks, its zero-padded last block, then the header with the sums.
  EXPECT_EQ(watching->direct_at.load(), 3 * keys.size()) << "chunk bodies went through the page cache";
  EXPECT_EQ(watching->buffered_writes.load(), buffered0);
  EXPECT_EQ(watching->buffered_at.load(), 0u);
  // A fresh tier reads and verifies every chunk, and each file has exactly the stored size.
  fo.fs = nullptr;
  auto reread = internal::OpenFileTier(fo);
  ASSERT_TRUE(reread.ok());
  for (const auto& k : keys) {
    const ChunkId id = ChunkId::Of(ns, k);
    std::vector<std::byte> out(bytes);
    ASSERT_TRUE((*reread)->Get(id, OnePiece(out).dst()).ok());
    EXPECT_TRUE(out == PayloadFor(k, bytes));
    EXPECT_TRUE((*reread)->Check(ChunkInfo{id, 0}).ok());
    EXPECT_EQ(std::filesystem::file_size(internal::FileChunkPathForTesting(dir, id)), StoredChunkBytes(bytes));
  }
  // A flipped payload byte in the last, padded block is caught on read.
  const ChunkId last = ChunkId::Of(ns, keys.back());
  FlipByte(internal::FileChunkPathForTesting(dir, last), kChunkHeaderSize + bytes - 1);
  std::vector<std::byte> out(bytes);
  EXPECT_TRUE((*reread)->Get(last, OnePiece(out).dst()).IsCorruption());
}

TEST(FileSavePathTest, UnalignedSourcesAreWrittenThroughThePageCache) {
  TempDir tmp;
  auto watching = std::make_shared<WatchingFs>(Posix(tmp.path()));
  const Namespace ns = BigNamespace();
  const size_t bytes = ns.layout().BytesPerChunk();
  const ChunkKey key = KeyNo(ns, 1);
  const auto payload = PayloadFor(key, bytes);
  std::vector<std::byte> shifted(bytes + 1);
  std::copy(payload.begin(), payload.end(), shifted.begin() + 1);
  const std::span<const std::byte> src[] = {std::span<const std::byte>(shifted).subspan(1)};
  if (reinterpret_cast<uintptr_t>(src[0].data()) % 4096 == 0) GTEST_SKIP() << "happened to be aligned";
  auto fd = watching->CreateNew("c.kvc", false);
  ASSERT_TRUE(fd.ok());
  const ChunkId id = ChunkId::Of(ns, key);
  auto written = internal::WriteChunkBody(*watching, fd->get(), "c.kvc", id, src,
                                          internal::WriteOptions{.direct = true});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, StoredChunkBytes(bytes));
  EXPECT_EQ(watching->direct_writes.load(), 0u);
  EXPECT_EQ(watching->direct_at.load(), 0u);
  EXPECT_GE(watching->buffered_writes.load(), 1u);
  EXPECT_TRUE(internal::VerifyChunkFile(*watching, "c.kvc", id).ok());
}

// Encrypted chunks are sealed into aligned 2 MiB windows and written with O_DIRECT: 9.5 MiB is ten 1 MiB
// pieces, so five windows (four of 2 MiB, then the rest with its zero padding) and the header block, none
// through the page cache; the file authenticates under the key and has the stored size.
TEST(FileSavePathTest, EncryptedChunksAreWrittenWithODirect) {
  TempDir tmp;
  auto watching = std::make_shared<WatchingFs>(Posix(tmp.path()));
  const auto cipher = KeyFileCipher(tmp.path(), 'a');
  ASSERT_NE(cipher, nullptr);
  const Namespace ns = BigNamespace();
  const size_t bytes = (19u << 20) / 2;
  const ChunkId id = ChunkId::Of(ns, KeyNo(ns, 3));
  const std::vector<std::byte> payload = PayloadFor(KeyNo(ns, 3), bytes);
  const std::span<const std::byte> src[] = {payload};
  auto fd = watching->CreateNew("e.kvc", false);
  ASSERT_TRUE(fd.ok());
  auto written = internal::WriteChunkBody(*watching, fd->get(), "e.kvc", id, src,
                                          internal::WriteOptions{.direct = true, .cipher = cipher});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, StoredChunkBytes(bytes));
  EXPECT_EQ(std::filesystem::file_size(tmp.path() + "/e.kvc"), StoredChunkBytes(bytes));
  const int probe = ::open((tmp.path() + "/probe").c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (probe < 0) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  ::close(probe);
  EXPECT_EQ(watching->buffered_at.load(), 0u) << "encrypted bytes went through the page cache";
  EXPECT_EQ(watching->direct_at.load(), 6u);  // five windows and the header
  EXPECT_TRUE(internal::VerifyChunkFile(*watching, "e.kvc", id, cipher.get()).ok());
  EXPECT_TRUE(internal::VerifyChunkFile(*watching, "e.kvc", id).status().IsCorruption());  // no key: refused
}

// With fewer threads sealing than cores, one writer's windows are sealed on idle cores too: each window
// of two or more pieces hands at least one piece to a helper thread (io/seal_spread.h), and the chunk
// still authenticates piece by piece at its offsets (a piece sealed into another's place fails its tag).
TEST(FileSavePathTest, OneWritersPiecesAreSealedOnIdleCoresToo) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: nothing to spread over";
  TempDir tmp;
  auto posix = Posix(tmp.path());
  const auto cipher = KeyFileCipher(tmp.path(), 'd');
  ASSERT_NE(cipher, nullptr);
  const Namespace ns = BigNamespace();
  const size_t bytes = (19u << 20) / 2;  // ten pieces: five windows of two
  const ChunkId id = ChunkId::Of(ns, KeyNo(ns, 5));
  const std::vector<std::byte> payload = PayloadFor(KeyNo(ns, 5), bytes);
  const std::span<const std::byte> src[] = {payload};
  for (bool direct : {true, false}) {
    const std::string name = direct ? "d.kvc" : "b.kvc";
    auto fd = posix->CreateNew(name, false);
    ASSERT_TRUE(fd.ok());
    const uint64_t before = internal::PiecesSealedByHelpers();
    auto written = internal::WriteChunkBody(*posix, fd->get(), name, id, src,
                                            internal::WriteOptions{.direct = direct, .cipher = cipher});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    if (direct) {
      EXPECT_GE(internal::PiecesSealedByHelpers() - before, 3u);
    }
    auto header = internal::VerifyChunkFile(*posix, name, id, cipher.get());
    ASSERT_TRUE(header.ok()) << name << ": " << header.status().ToString();
    std::vector<std::byte> back(bytes);
    const std::span<std::byte> dst[] = {back};
    const ByteRange whole[] = {{0, bytes}};
    auto read = internal::ReadChunkRanges(*posix, name, id, bytes, cipher.get(), whole, dst);
    ASSERT_TRUE(read.ok()) << name << ": " << read.status().ToString();
    EXPECT_TRUE(back == payload) << name;
  }
}

// A spread returns only once its helpers have left the count of sealing threads, so one writer's next
// window (the next spread) finds the same idle core and takes a helper again, every time.
TEST(FileSavePathTest, ASpreadReturnsWithItsHelpersGone) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: no helpers";
  constexpr int kSpreads = 200;
  std::atomic<int> sealed{0};
  const uint64_t before = internal::PiecesSealedByHelpers();
  for (int k = 0; k < kSpreads; ++k) {
    ASSERT_TRUE(internal::SealSpread(2, [&](size_t) {
                  sealed.fetch_add(1);
                  return Status::OK();
                }).ok());
  }
  EXPECT_EQ(sealed.load(), 2 * kSpreads);
  EXPECT_EQ(internal::PiecesSealedByHelpers() - before, uint64_t{kSpreads}) << "a spread sealed alone";
}

// A child forked after the helper pool was made has none of its threads: its encrypted writes seal
// alone instead of waiting for helpers that never come, and the chunk authenticates.
TEST(FileSavePathTest, AForkedChildSealsWithoutTheParentsHelpers) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: no helpers to lose";
  TempDir tmp;
  auto posix = Posix(tmp.path());
  const auto cipher = KeyFileCipher(tmp.path(), 'e');
  ASSERT_NE(cipher, nullptr);
  const Namespace ns = BigNamespace();
  const size_t bytes = (19u << 20) / 2;
  const ChunkId id = ChunkId::Of(ns, KeyNo(ns, 6));
  const std::vector<std::byte> payload = PayloadFor(KeyNo(ns, 6), bytes);
  const std::span<const std::byte> src[] = {payload};
  const internal::WriteOptions o{.direct = false, .io_uring = false, .cipher = cipher};
  auto write = [&](const std::string& name) {
    auto fd = posix->CreateNew(name, false);
    return fd.ok() && internal::WriteChunkBody(*posix, fd->get(), name, id, src, o).ok();
  };
  const uint64_t before = internal::PiecesSealedByHelpers();
  ASSERT_TRUE(write("parent.kvc"));
  ASSERT_GT(internal::PiecesSealedByHelpers(), before);  // the pool exists and helped
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(write("child.kvc") ? 0 : 1);
  int status = -1;
  for (int waited_ms = 0; waited_ms < 60000; waited_ms += 10) {
    if (::waitpid(child, &status, WNOHANG) == child) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!WIFEXITED(status)) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    FAIL() << "the forked child's encrypted write did not finish";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(internal::VerifyChunkFile(*posix, "child.kvc", id, cipher.get()).ok());
}

// Listed pieces (grouped layouts) need not end on a 4 KiB block: the window writes its whole blocks and
// keeps the partial one, so every write is still O_DIRECT at a block offset, and the chunk authenticates.
TEST(FileSavePathTest, EncryptedListedPiecesOfOddLengthsAreWrittenWithODirect) {
  TempDir tmp;
  auto watching = std::make_shared<WatchingFs>(Posix(tmp.path()));
  const auto cipher = KeyFileCipher(tmp.path(), 'b');
  ASSERT_NE(cipher, nullptr);
  static const std::vector<uint64_t> kLengths = {3000001, 3000001, 3000001, 1000000};
  const size_t bytes = 10000003;
  const Namespace ns = BigNamespace();
  ChunkId id = ChunkId::Of(ns, KeyNo(ns, 4));
  id.piece_lengths = &kLengths;
  const std::vector<std::byte> payload = PayloadFor(KeyNo(ns, 4), bytes);
  const std::span<const std::byte> src[] = {payload};
  auto fd = watching->CreateNew("l.kvc", false);
  ASSERT_TRUE(fd.ok());
  auto written = internal::WriteChunkBody(*watching, fd->get(), "l.kvc", id, src,
                                          internal::WriteOptions{.direct = true, .cipher = cipher});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(tmp.path() + "/l.kvc"), StoredChunkBytes(bytes));
  const int probe = ::open((tmp.path() + "/probe").c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (probe < 0) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  ::close(probe);
  EXPECT_EQ(watching->buffered_at.load(), 0u) << "encrypted bytes went through the page cache";
  // Windows widened to the largest piece hold one piece each here: the whole blocks of the first three
  // windows (each carries its partial block on), the rest, the header.
  EXPECT_EQ(watching->direct_at.load(), 5u);
  auto header = internal::VerifyChunkFile(*watching, "l.kvc", id, cipher.get());
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_TRUE(header->listed());
  EXPECT_EQ(header->pieces(), kLengths.size());
}

// The first unlink of a chunk file waits until Release(): a disk (or an NFS server) that is slow to
// remove files.
class SlowUnlinkFs final : public CountingFileSystem {
 public:
  using CountingFileSystem::CountingFileSystem;
  Status Unlink(std::string_view rel) override {
    if (rel.find(".kvc") != std::string_view::npos && !rel.ends_with(".tmp") && !blocked_once_.exchange(true)) {
      std::unique_lock<std::mutex> lock(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    return CountingFileSystem::Unlink(rel);
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return entered_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::atomic<bool> blocked_once_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, released_ = false;
};

TEST(FileSavePathTest, EvictionUnlinksOutsideTheTierLock) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/f";
  auto slow = std::make_shared<SlowUnlinkFs>(Posix(dir));
  const Namespace ns = TestNamespace();
  const size_t bytes = ns.layout().BytesPerChunk();
  internal::FileTierOptions fo;
  fo.dir = dir;
  fo.capacity_bytes = 3 * StoredChunkBytes(bytes);
  fo.fs = slow;
  auto opened = internal::OpenFileTier(fo);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Tier& tier = **opened;
  auto put = [&](uint32_t n) {
    auto p = PayloadFor(KeyNo(ns, n), bytes);
    return tier.Put(ChunkId::Of(ns, KeyNo(ns, n)), OnePiece(p).src());
  };
  for (uint32_t n = 0; n < 3; ++n) ASSERT_TRUE(put(n).ok());  // full
  auto evicting = std::async(std::launch::async, [&] { return put(3); });  // evicts 0: its unlink stalls
  ASSERT_TRUE(slow->WaitEntered());
  // Meanwhile the tier serves reads and takes other writes.
  auto others = std::async(std::launch::async, [&] {
    std::vector<std::byte> out(bytes);
    const bool read = tier.Get(ChunkId::Of(ns, KeyNo(ns, 2)), OnePiece(out).dst()).ok() &&
                      out == PayloadFor(KeyNo(ns, 2), bytes);
    return read && put(4).ok();  // evicts 1, whose unlink is not held up
  });
  const bool done = others.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(done) << "the tier was locked during an unlink";
  EXPECT_FALSE(tier.Contains(ChunkId::Of(ns, KeyNo(ns, 0))));  // out of the index before its file is gone
  EXPECT_LE(tier.Stats().usage_bytes, fo.capacity_bytes);
  slow->Release();
  EXPECT_TRUE(others.get());
  ASSERT_TRUE(evicting.get().ok());
  const TierStats s = tier.Stats();
  EXPECT_LE(s.usage_bytes, fo.capacity_bytes);
  EXPECT_EQ(s.chunks, 3u);  // 2, 3 and 4
  for (uint32_t n : {2u, 3u, 4u}) EXPECT_TRUE(tier.Contains(ChunkId::Of(ns, KeyNo(ns, n)))) << n;
  EXPECT_FALSE(std::filesystem::exists(internal::FileChunkPathForTesting(dir, ChunkId::Of(ns, KeyNo(ns, 0)))));
}

}  // namespace
}  // namespace kvtier::testing
