// Issue 23: the invariants an adversarial run found broken, one test (or a few) per invariant, each
// named after it. Each test reproduces the reported failure and fails on the code before the fix.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "core/output_file.h"
#include "core/threads.h"
#include "hostile/cli_runner.h"
#include "hostile/hostile_util.h"
#include "io/dir_names.h"
#include "io/filesystem.h"
#include "kvtier/keys.h"
#include "kvtier/layout.h"
#include "kvtier/store.h"
#include "support/temp_dir.h"
#include "testing/fault_fs.h"
#include "tiers/fs/pool_gc.h"
#include "tiers/fs/pool_layout.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;
using hostile::Describe;
using hostile::RunKvtier;

// ---- Failure 1a: sizes come from verified headers, never from st_size ------------------------------

TEST(SizesComeFromVerifiedHeaders, GcNeverEvictsGoodChunksForAChunkNamedSparseGiant) {
  TempDir dir;
  const Namespace ns = TestNamespace();
  {
    auto t = OpenKind(Kind::kFs, dir.path());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (uint32_t i = 0; i < 20; ++i) ASSERT_TRUE(PutNo(**t, ns, i).ok());
  }
  // A 2 GiB sparse file under a chunk's name, with a modification time in the future.
  const std::string giant = ChunkFile(Kind::kFs, dir.path(), IdNo(ns, 999));
  fs::create_directories(fs::path(giant).parent_path());
  {
    const int fd = ::open(giant.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t{2} << 30), 0);
    const struct timespec future[2] = {{::time(nullptr) + 86400 * 365, 0}, {::time(nullptr) + 86400 * 365, 0}};
    ASSERT_EQ(::futimens(fd, future), 0);
    ::close(fd);
  }
  auto r = internal::CollectPoolGarbage(dir.path(), internal::GcOptions{.max_bytes = 1ull << 30});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_evicted, 0u) << "good chunks evicted to make room for a file that is no chunk";
  EXPECT_EQ(r->corrupt_removed, 1u);
  EXPECT_EQ(r->chunks_scanned, 20u);
  EXPECT_FALSE(Exists(giant));
  auto t = OpenKind(Kind::kFs, dir.path());
  ASSERT_TRUE(t.ok());
  for (uint32_t i = 0; i < 20; ++i) EXPECT_TRUE(GetNo(**t, ns, i).ok()) << "chunk " << i;
}

// ---- Failure 1b: read-side commands never evict; --repair removes only what fails verification -----

TEST(RepairRemovesOnlyWhatFailsVerification, VerifyRepairEvictsNoGoodChunkToMeetACapacity) {
  TempDir dir;
  const Namespace ns = TestNamespace();
  {
    auto t = OpenKind(Kind::kFile, dir.path(), OpenSpec{.capacity = 1ull << 30});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (uint32_t i = 0; i < 8; ++i) ASSERT_TRUE(PutNo(**t, ns, i).ok());
  }
  const std::string bad = ChunkFile(Kind::kFile, dir.path(), IdNo(ns, 3));
  {  // flip one payload byte: corrupt
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(internal::kChunkHeaderSize + 7);
    f.put('\x5a');
  }
  // A capacity that holds two chunks: a repair that applied it would evict five good ones.
  const std::string url = "file://" + dir.path() + "?capacity=" + std::to_string(2 * internal::StoredChunkBytes(2560));
  const auto r = RunKvtier({"verify", "--repair", "--target", url}, dir.path() + "/../verify.log");
  EXPECT_TRUE(r.exited) << Describe(r);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_NE(r.output.find("1 corrupt (removed)"), std::string::npos) << Describe(r);
  EXPECT_FALSE(Exists(bad));
  for (uint32_t i = 0; i < 8; ++i) {
    if (i != 3) {
      EXPECT_TRUE(Exists(ChunkFile(Kind::kFile, dir.path(), IdNo(ns, i)))) << "good chunk " << i << " evicted";
    }
  }
  // And the tier a repair opens has no capacity at all (no hidden 10 GiB default).
  internal::FileTierOptions o;
  o.dir = dir.path();
  o.repair = true;
  auto t = internal::OpenFileTier(o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Stats().capacity_bytes, UINT64_MAX);
}

TEST(ReadSideCommandsNeverEvict, VerifyAndStatsChangeNothing) {
  TempDir dir;
  const Namespace ns = TestNamespace();
  {
    auto t = OpenKind(Kind::kFile, dir.path(), OpenSpec{.capacity = 1ull << 30});
    ASSERT_TRUE(t.ok());
    for (uint32_t i = 0; i < 6; ++i) ASSERT_TRUE(PutNo(**t, ns, i).ok());
  }
  const auto before = TreePrint(dir.path());
  const std::string url = "file://" + dir.path() + "?capacity=" + std::to_string(internal::StoredChunkBytes(2560));
  for (const char* cmd : {"verify", "stats"}) {
    const auto r = RunKvtier({cmd, "--target", url}, dir.path() + "/../ro.log");
    EXPECT_TRUE(r.exited) << cmd << ": " << Describe(r);
  }
  EXPECT_EQ(TreePrint(dir.path()), before);
}

// ---- Failure 3b: resource failures are errors (thread creation) ---------------------------------

TEST(ThreadStartFailuresAreErrors, TierStoreAndPoolReportARefusedThread) {
  TempDir dir;
  internal::SetThreadLimitForTesting(2);
  auto t = OpenTier("file://" + dir.path() + "?verify_threads=64");
  EXPECT_FALSE(t.ok());
  if (!t.ok()) {
    EXPECT_NE(t.status().message().find("cannot start thread"), std::string::npos) << t.status().ToString();
  }
  StoreOptions o;
  o.tiers = {"mem://?capacity=1MiB"};
  o.background_threads = 100;
  auto s = Store::Open(o);
  EXPECT_FALSE(s.ok());
  internal::SetThreadLimitForTesting(0);
  EXPECT_TRUE(Store::Open(o).ok());
}

TEST(ThreadStartFailuresAreErrors, TheCliExitsWithAnErrorUnderARealLimitNeverAborts) {
  if (!hostile::kCanLimitMemory) GTEST_SKIP() << "sanitizer build: no address-space limit";
  TempDir dir;
  {
    auto t = OpenKind(Kind::kFile, dir.path());
    ASSERT_TRUE(t.ok());
  }
  // 64 verification threads need 512 MiB of stacks: under a 256 MiB address-space limit the OS
  // refuses some. Before: std::system_error, abort (signal 6). OpenBLAS (linked for the reference
  // engine) starts its own threads at load; left without memory they hang its exit handler, which is
  // not kvtier's to fix: one BLAS thread here.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  const auto r = RunKvtier({"verify", "--target", "file://" + dir.path() + "?verify_threads=64"},
                           dir.path() + "/../threads.log", rlim_t{256} << 20, 30);
  EXPECT_TRUE(r.exited) << Describe(r);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
}

// ---- Failure 5: one writer for files written for a user --------------------------------------------

TEST(OutputsAreNeverWrittenThroughALink, ReportRefusesALinkedOutputAndLeavesItsTargetAlone) {
  TempDir dir;
  const std::string victim = dir.path() + "/victim";
  const std::string out = dir.path() + "/out";
  fs::create_directories(out);
  { std::ofstream(victim) << "precious\n"; }
  fs::create_symlink(victim, out + "/report.md");
  const auto r = RunKvtier({"report", "--no-plots", "--out", out, KVTIER_SOURCE_DIR "/docs/figures/datapath-file-2MiB.json"},
                           dir.path() + "/report.log");
  EXPECT_TRUE(r.exited) << Describe(r);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadAll(victim), "precious\n");
  EXPECT_TRUE(fs::is_symlink(out + "/report.md"));
}

TEST(OutputsAreNeverWrittenThroughALink, TheWriterReplacesRegularFilesWhole) {
  TempDir dir;
  const std::string path = dir.path() + "/r.json";
  ASSERT_TRUE(internal::WriteOutputFile(path, "one", "results").ok());
  ASSERT_TRUE(internal::WriteOutputFile(path, "two", "results").ok());
  EXPECT_EQ(ReadAll(path), "two");
  ASSERT_EQ(::mkfifo((dir.path() + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(internal::WriteOutputFile(dir.path() + "/fifo", "x", "results").ok());
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2u) << "a temporary was left behind";
}

// ---- Failure 6: length faults are Corruption (removed, counted) --------------------------------------

// Rewrites chunk `path`'s header with another payload length, resealed (its checksum recomputed), and
// gives the file the size that length implies: only the length disagrees with the layout.
void ResealWithLength(const std::string& path, uint64_t payload_bytes) {
  std::string bytes = ReadAll(path);
  ASSERT_GE(bytes.size(), internal::kChunkHeaderSize);
  auto header = internal::DecodeChunkHeader(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), internal::kChunkHeaderSize));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  header->payload_bytes = payload_bytes;
  header->piece_count = 1;
  header->piece_bytes = internal::PieceBytesFor(payload_bytes);
  header->piece_sums.assign(1, 0);
  std::array<std::byte, internal::kChunkHeaderSize> out{};
  internal::EncodeChunkHeader(*header, out);
  std::string file(reinterpret_cast<const char*>(out.data()), out.size());
  file.resize(internal::StoredChunkBytes(payload_bytes), '\0');
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file;
}

TEST(LengthFaultsAreCorruption, AResealedLengthIsRemovedAndTheKeyCanBeSavedAgain) {
  for (Kind kind : {Kind::kFile, Kind::kFs}) {
    SCOPED_TRACE(KindName(kind));
    TempDir dir;
    const Namespace ns = TestNamespace();
    {
      auto t = OpenKind(kind, dir.path());
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(PutNo(**t, ns, 1).ok());
    }
    const std::string path = ChunkFile(kind, dir.path(), IdNo(ns, 1));
    ResealWithLength(path, 8192);
    StoreOptions o;
    o.tiers = {KindName(kind) + "://" + dir.path()};
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const ChunkKey key = KeyNo(ns, 1);
    std::vector<std::byte> buf(ns.layout().BytesPerChunk());
    OnePiece piece(buf);
    const ScatterList dst = piece.dst();
    auto loaded = (*store)->Load(ns, std::span<const ChunkKey>(&key, 1), std::span<const ScatterList>(&dst, 1));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(*loaded, 0u);
    EXPECT_FALSE(Exists(path)) << "the tampered chunk was kept: every later save skips it, it misses forever";
    EXPECT_EQ((*store)->Lookup(ns, std::span<const ChunkKey>(&key, 1)), 0u);
    // Counted: the tier's corrupt count (Prometheus kvtier_tier_corrupt_chunks_total, C API and
    // Python `corrupt`) says one chunk was found corrupt.
    EXPECT_EQ((*store)->Stats().tiers.at(0).corrupt, 1u);
    // Saved again, it loads.
    const std::vector<std::byte> good = PayloadFor(key, buf.size());
    const std::span<const std::byte> src_piece(good);
    const GatherList src(&src_piece, 1);
    ASSERT_TRUE((*store)->Save(ns, std::span<const ChunkKey>(&key, 1), std::span<const GatherList>(&src, 1)).ok());
    ASSERT_TRUE((*store)->Flush().ok());
    loaded = (*store)->Load(ns, std::span<const ChunkKey>(&key, 1), std::span<const ScatterList>(&dst, 1));
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(*loaded, 1u);
    EXPECT_EQ(buf, good);
    EXPECT_EQ((*store)->Stats().tiers.at(0).corrupt, 1u) << "a good load counted as corrupt";
  }
}

// ---- Failure 7: first opens of a directory are race-free; a killed creator's leftovers are cleaned ---

TEST(FirstOpenIsRaceFree, ConcurrentProcessesOpeningANewDirectoryAllSucceed) {
  for (Kind kind : {Kind::kFile, Kind::kFs}) {
    for (int trial = 0; trial < 8; ++trial) {
      TempDir dir;
      const std::string root = dir.path() + "/new";
      std::vector<pid_t> kids;
      for (int p = 0; p < 4; ++p) {
        const pid_t pid = ::fork();
        if (pid == 0) {
          auto t = OpenKind(kind, root);
          ::_exit(t.ok() ? 0 : 1);
        }
        kids.push_back(pid);
      }
      int failed = 0;
      for (pid_t pid : kids) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
      }
      EXPECT_EQ(failed, 0) << KindName(kind) << " trial " << trial;
    }
  }
}

TEST(FirstOpenIsRaceFree, AKilledCreatorsHalfMadeMarkerIsCleanedByTheNextOpener) {
  for (Kind kind : {Kind::kFile, Kind::kFs}) {
    TempDir dir;
    const std::string root = dir.path() + "/new";
    fs::create_directories(root);
    const std::string marker = kind == Kind::kFile ? "KVTIER_DIR" : "KVTIER_POOL";
    const pid_t pid = ::fork();
    if (pid == 0) {  // the creator: writes its marker temporary, then dies before publishing it
      const std::string tmp = root + "/" + internal::MakeTempName(marker);
      std::ofstream(tmp) << "half";
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);
    auto t = OpenKind(kind, root);
    ASSERT_TRUE(t.ok()) << KindName(kind) << ": " << t.status().ToString();
    for (const auto& e : fs::directory_iterator(root)) {
      EXPECT_EQ(e.path().filename().string().find(".kvtmp"), std::string::npos) << e.path();
    }
  }
}

// ---- Failure 8: Layout validation rejects any geometry whose sizes overflow or are zero -------------

TEST(LayoutSizesNeverOverflow, WrappingGeometriesAreRefusedInCxx) {
  const Layout wraps[] = {
      {1u << 31, 1u << 31, 128, DType::kBF16, 256},       // 2^63 * 2 * ... wraps to 0
      {1u << 31, 1u << 31, 1, DType::kFP8, 1},            // exactly 2^63 bytes
      {0xffffffffu, 0xffffffffu, 0xffffffffu, DType::kFP32, 0xffffffffu},
      {1u << 16, 1u << 16, 1u << 16, DType::kFP16, 1u << 16},  // 2^66
  };
  for (const Layout& l : wraps) {
    EXPECT_FALSE(l.Validate().ok()) << l.ToString();
    EXPECT_FALSE(Namespace::Make("m", l, "", "").ok()) << l.ToString();
  }
  EXPECT_TRUE((Layout{1, 1, 1, DType::kFP8, 1}).Validate().ok());
  EXPECT_TRUE((Layout{32, 8, 128, DType::kBF16, 4096}).Validate().ok());  // 1 GiB
}

// ---- Failure 2 (C++ side): identity strings holding NUL are refused -----------------------------------

TEST(IdentityStringsAreWhole, NamespacePartsHoldingNulAreRefused) {
  const Layout l{2, 2, 16, DType::kFP16, 10};
  EXPECT_FALSE(Namespace::Make(std::string_view("m\0x", 3), l, "", "").ok());
  EXPECT_FALSE(Namespace::Make("m", l, std::string_view("t\0x", 3), "").ok());
  EXPECT_FALSE(Namespace::Make("m", l, "t", std::string_view("s\0x", 3)).ok());
  EXPECT_TRUE(Namespace::Make("m", l, "t", "s").ok());
}

// ---- Failure 9: a failed removal is reported as failed, with a non-zero exit --------------------------

TEST(FailedRemovalsAreReportedAsFailed, RepairThatCannotRemoveSaysSo) {
  for (Kind kind : {Kind::kFile, Kind::kFs}) {
    SCOPED_TRACE(KindName(kind));
    TempDir dir;
    const Namespace ns = TestNamespace();
    {
      auto t = OpenKind(kind, dir.path());
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(PutNo(**t, ns, 1).ok());
    }
    const std::string path = ChunkFile(kind, dir.path(), IdNo(ns, 1));
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(internal::kChunkHeaderSize + 1);
      f.put('\x11');
    }
    auto posix = internal::OpenPosixFileSystem(dir.path(), {});
    ASSERT_TRUE(posix.ok());
    auto faults = std::make_shared<FaultFileSystem>(*posix);
    faults->Add({.op = FsOp::kUnlink, .path = ".kvc", .error = EACCES});  // as a non-owner would see it
    auto t = OpenKind(kind, dir.path(), OpenSpec{.fs = faults});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ChunkInfo info;
    info.id = IdNo(ns, 1);
    bool listed = false;
    ASSERT_TRUE((*t)->List([&](const ChunkInfo& i) {
                      if (i.id.key == info.id.key) info = i, listed = true;
                      return true;
                    }).ok());
    if (kind == Kind::kFile) {
      ASSERT_TRUE(listed);
    }
    const Status s = (*t)->Check(info);
    EXPECT_FALSE(s.ok());
    EXPECT_FALSE(s.IsCorruption()) << "reported as removed: " << s.ToString();
    EXPECT_NE(s.message().find("could not be removed"), std::string::npos) << s.ToString();
    EXPECT_TRUE(Exists(path));
  }
}

TEST(FailedRemovalsAreReportedAsFailed, GcCountsARefusedRemoval) {
  TempDir dir;
  const Namespace ns = TestNamespace();
  {
    auto t = OpenKind(Kind::kFs, dir.path());
    ASSERT_TRUE(t.ok());
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(PutNo(**t, ns, i).ok());
  }
  auto posix = internal::OpenPosixFileSystem(dir.path(), {});
  ASSERT_TRUE(posix.ok());
  auto faults = std::make_shared<FaultFileSystem>(*posix);
  faults->Add({.op = FsOp::kUnlink, .path = ".kvc", .error = EPERM});
  auto pool = internal::OpenPool(dir.path(), internal::ChunkDirOptions{.fs = faults});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto r = internal::CollectPoolGarbage(**pool, internal::GcOptions{.max_bytes = 1});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->chunks_evicted, 0u);
  EXPECT_GE(r->remove_failed, 1u);
}

// ---- Failure 4: one opener for every file kvtier reads on a user's behalf -------------------------------

bool RefusedByTheOpener(const std::string& output) {
  for (const char* why : {"symbolic link", "absolute path", "group or others", "a FIFO", "a character device"}) {
    if (output.find(why) != std::string::npos) return true;
  }
  return false;
}

// Every secret-file option, opened through `kvtier stats`: a FIFO, /dev/zero, a link, a relative path
// and a group-readable file are refused with an error (exit 2) before any connection; nothing hangs.
TEST(SecretFilesGoThroughTheOneOpener, FifosDevicesLinksRelativeAndOpenFilesAreRefused) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string open_file = dir.path() + "/open";
  { std::ofstream(open_file) << "[default]\naws_access_key_id = a\naws_secret_access_key = b\n"; }
  ::chmod(open_file.c_str(), 0644);
  const std::string secret = dir.path() + "/secret";
  { std::ofstream(secret) << "[default]\naws_access_key_id = a\naws_secret_access_key = b\n"; }
  ::chmod(secret.c_str(), 0600);
  const std::string link = dir.path() + "/link";
  fs::create_symlink(secret, link);
  const std::vector<std::string> bad = {fifo, "/dev/zero", link, "relative/secret", open_file};
  const std::vector<std::string> urls = {"redis://127.0.0.1:1?password_file=",
                                         "s3://bucket?endpoint=http://127.0.0.1:1&credentials_file=",
                                         "rados://pool?keyring="};
  for (const std::string& base : urls) {
    for (const std::string& path : bad) {
      const auto r = RunKvtier({"stats", "--target", base + path}, dir.path() + "/secret.log", rlim_t{1} << 30, 20);
      EXPECT_TRUE(r.exited) << base << path << ": " << Describe(r);
      EXPECT_EQ(r.exit_code, 2) << base << path << ": " << Describe(r);
      EXPECT_TRUE(RefusedByTheOpener(r.output)) << base << path << ": " << Describe(r);
    }
  }
  // rados conf= is no secret (ceph.conf is commonly world-readable) but gets the other rules.
  for (const std::string& path : {fifo, std::string("/dev/zero"), link}) {
    const auto r = RunKvtier({"stats", "--target", "rados://pool?conf=" + path}, dir.path() + "/conf.log",
                             rlim_t{1} << 30, 20);
    EXPECT_TRUE(r.exited) << path << ": " << Describe(r);
    EXPECT_EQ(r.exit_code, 2) << path << ": " << Describe(r);
    EXPECT_TRUE(RefusedByTheOpener(r.output)) << path << ": " << Describe(r);
  }
}

// ---- Failure 3c: parsing within a stated memory bound (the `ulimit -v 1000000` test) -----------------

constexpr rlim_t kUlimitV = rlim_t{1000000} * 1024;  // `ulimit -v 1000000` (KiB)

// See TheCliExitsWithAnErrorUnderARealLimitNeverAborts: OpenBLAS's own threads under a memory limit.
struct OneBlasThread {
  OneBlasThread() { ::setenv("OPENBLAS_NUM_THREADS", "1", 1); }
};

void ExpectResultOrClearError(const hostile::CliResult& r, const std::string& what) {
  EXPECT_TRUE(r.exited) << what << ": " << Describe(r);  // before: SIGABRT on bad_alloc (exit 134)
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2) << what << ": " << Describe(r);
  EXPECT_LT(r.output.size(), 4096u) << what;
}

TEST(MemoryBoundedParsing, ReportOnA60MBNestedJsonUnderUlimitV) {
  if (!hostile::kCanLimitMemory) GTEST_SKIP() << "sanitizer build: no address-space limit";
  OneBlasThread blas;
  TempDir dir;
  const std::string wide = dir.path() + "/wide.json", deep = dir.path() + "/deep.json";
  {  // 60 MB of tiny values inside one object: a DOM of gigabytes
    std::ofstream out(wide);
    out << "{\"schema\":\"kvtier.bench.datapath/1\",\"x\":[";
    for (size_t i = 0; i < 30'000'000; ++i) out << (i ? ",0" : "0");
    out << "]}";
  }
  {
    std::ofstream out(deep);
    out << "{\"x\":";
    for (size_t i = 0; i < 20'000'000; ++i) out << '[';
    for (size_t i = 0; i < 20'000'000; ++i) out << ']';
    out << "}";
  }
  for (const std::string& in : {wide, deep}) {
    const auto r = RunKvtier({"report", "--no-plots", "--out", dir.path() + "/out", in}, dir.path() + "/r.log", kUlimitV);
    ExpectResultOrClearError(r, in);
    EXPECT_NE(r.exit_code, 0) << Describe(r);
  }
}

TEST(MemoryBoundedParsing, ReplayOnA100MBTraceUnderUlimitV) {
  if (!hostile::kCanLimitMemory) GTEST_SKIP() << "sanitizer build: no address-space limit";
  OneBlasThread blas;
  TempDir dir;
  const std::string trace = dir.path() + "/trace.jsonl";
  {  // 100 MB: lines of many one-token blocks, every id distinct
    std::ofstream out(trace);
    uint64_t bytes = 0, id = 0;
    for (uint64_t ts = 0; bytes < (100ull << 20); ++ts) {
      std::string line = "{\"timestamp\":" + std::to_string(ts) + ",\"input_length\":4096,\"output_length\":1,\"hash_ids\":[";
      for (int b = 0; b < 4096; ++b) line += (b ? "," : "") + std::to_string(id++ % 4000000000u);
      line += "]}\n";
      bytes += line.size();
      out << line;
    }
  }
  const auto r = RunKvtier({"replay", "--trace", trace, "--block-tokens", "1", "--model", "qwen2.5-0.5b"},
                           dir.path() + "/replay.log", kUlimitV, 300);
  ExpectResultOrClearError(r, "replay");
  // Refused while streaming, at the memory bound docs/replay.md states (about 10.9M references here,
  // the bound is 4,194,304), before anything is built from it: not the out-of-memory backstop.
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_NE(r.output.find("block references, the replay's memory bound"), std::string::npos) << Describe(r);
  EXPECT_EQ(r.output.find("out of memory"), std::string::npos) << Describe(r);
}

// ---- The three "also seen" behaviours, decided -------------------------------------------------------

TEST(AlsoSeen, MemCapacityBeyondTheHostIsRefused) {
  auto t = OpenTier("mem://?capacity=1024TiB");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("host's memory"), std::string::npos) << t.status().ToString();
  EXPECT_TRUE(OpenTier("mem://?capacity=1MiB").ok());
}

TEST(AlsoSeen, UrlFragmentsAndSpacesAreRefused) {
  for (const char* url : {"fs:///pool#x", "fs:///pool ", "file:///a b", "mem://?capacity=1MiB#frag",
                          "mem://?capacity=1MiB\t", "file:///dir\n"}) {
    EXPECT_FALSE(TierUrl::Parse(url).ok()) << url;
  }
  auto encoded = TierUrl::Parse("file:///a%20b%23c");
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->path, "/a b#c");
}

// Decided: documented, not refused (docs/security.md). Each file:// writer keeps its own capacity; two
// processes writing one directory can together exceed it. This test pins that documented behaviour.
TEST(AlsoSeen, TwoFileWritersEachKeepOnlyTheirOwnCapacity) {
  TempDir dir;
  const Namespace ns = TestNamespace();
  const uint64_t four = 4 * internal::StoredChunkBytes(2560);
  auto a = OpenKind(Kind::kFile, dir.path(), OpenSpec{.capacity = four});
  auto b = OpenKind(Kind::kFile, dir.path(), OpenSpec{.capacity = four});
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(PutNo(**a, ns, i).ok());
  for (uint32_t i = 10; i < 14; ++i) ASSERT_TRUE(PutNo(**b, ns, i).ok());
  EXPECT_LE((*a)->Stats().usage_bytes, four);
  EXPECT_LE((*b)->Stats().usage_bytes, four);
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) files += e.path().extension() == ".kvc";
  EXPECT_EQ(files, 8u) << "two writers together hold twice the capacity: use fs:// to share a directory";
}

}  // namespace
}  // namespace kvtier::testing
