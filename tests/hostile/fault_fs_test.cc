// Faults injected below file:// and fs:// (testing/fault_fs.h) reach every error path of the chunk
// directory and the readers: failed create, write (EIO, ENOSPC, short), fsync, mkdir, rename (before
// and after it took effect), marker publication, open, read (EIO, short, O_DIRECT refused at read
// time), list and stat. After each, nothing half-written is visible, no temporary is left, and the
// tier goes on serving. Each case checks that its fault actually fired.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/chunk_cipher.h"
#include "hostile/hostile_util.h"
#include "io/chunk_dir.h"
#include "io/chunk_io.h"
#include "support/key_file.h"
#include "testing/fault_fs.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

struct Param {
  Kind kind;
  bool uring;
};

// Names of kvtier temporaries anywhere under `root`.
std::vector<std::string> Temporaries(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().find(".kvtmp.") != std::string::npos) out.push_back(it->path().string());
  }
  return out;
}

// Chunk n with its payload on 4 KiB boundaries, as the Store worker's copy is: saved with O_DIRECT, the
// payload's blocks through the writing thread's io_uring (when the tier uses it) while the checksums are
// computed, then the header.
Status PutAligned(Tier& t, const Namespace& ns, uint32_t n) {
  const auto payload = PayloadFor(KeyNo(ns, n), ns.layout().BytesPerChunk());
  internal::AlignedBuffer buf = internal::AlignedBuffer::Allocate(payload.size());
  std::memcpy(buf.data(), payload.data(), payload.size());
  const std::span<const std::byte> src[] = {std::span<const std::byte>(buf.data(), payload.size())};
  return t.Put(IdNo(ns, n), src);
}

// 2 x 2 x 16 fp16 x 100 tokens = 25,600 bytes: six whole 4 KiB blocks and a partial one.
constexpr uint32_t kDirectTokens = 100;
constexpr int64_t kPayloadAt = internal::kChunkHeaderSize;

class FaultFsTest : public ::testing::TestWithParam<Param> {
 protected:
  FaultFsTest() : ns_(TestNamespace()) {
    root_ = base_.path() + "/tier";
    auto posix = internal::OpenPosixFileSystem(root_, internal::PosixFsOptions{.create = true});
    EXPECT_TRUE(posix.ok());
    faults_ = std::make_shared<FaultFileSystem>(*posix);
  }
  Kind kind() const { return GetParam().kind; }
  std::unique_ptr<Tier> Open(bool sync = false) {
    auto t = OpenKind(kind(), root_,
                      OpenSpec{.fs = faults_, .io_uring = GetParam().uring, .sync = sync});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  // A failed Put leaves nothing: no chunk visible, no temporary on disk.
  void ExpectPutFailsCleanly(Tier& t, uint32_t n, size_t rule, bool aligned = false) {
    const auto put = [&] { return aligned ? PutAligned(t, ns_, n) : PutNo(t, ns_, n); };
    const Status s = put();
    EXPECT_FALSE(s.ok());
    EXPECT_GE(faults_->Fired(rule), 1u) << "the fault never fired";
    faults_->Clear();
    EXPECT_TRUE(Temporaries(root_).empty()) << Temporaries(root_).front();
    EXPECT_FALSE(t.Contains(IdNo(ns_, n)));
    EXPECT_TRUE(GetNo(t, ns_, n).IsNotFound());
    EXPECT_TRUE(put().ok()) << "the tier serves on after the fault";
    EXPECT_TRUE(GetNo(t, ns_, n).ok());
  }

  TempDir base_;
  std::string root_;
  Namespace ns_;
  std::shared_ptr<FaultFileSystem> faults_;
};

TEST_P(FaultFsTest, CreateFails) {
  auto t = Open();
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());  // the directories exist
  ExpectPutFailsCleanly(*t, 1, faults_->Add({.op = FsOp::kCreate, .path = ".kvtmp.", .error = EIO}));
}

TEST_P(FaultFsTest, WriteFailsWithEioOrEnospcAtAnyWrite) {
  auto t = Open();
  uint32_t n = 10;
  for (int err : {EIO, ENOSPC}) {
    // At the first write of a chunk.
    ExpectPutFailsCleanly(*t, n++, faults_->Add({.op = FsOp::kWrite, .error = err}));
    // At a later one: the first write is cut short, the resumed one fails.
    faults_->Add({.op = FsOp::kWrite, .short_write = true, .times = 1});
    ExpectPutFailsCleanly(*t, n++, faults_->Add({.op = FsOp::kWrite, .error = err}));
  }
}

// The chunk file's space is taken before its writes: a full disk there fails the Put as a write would,
// with NoSpace and nothing left; a filesystem without fallocate has its chunks written all the same.
TEST_P(FaultFsTest, PreallocationNoSpaceFailsAndNoFallocateWritesAnyway) {
  auto t = Open();
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());  // the directories exist
  faults_->Add({.op = FsOp::kPreallocate, .path = ".kvtmp.", .error = ENOSPC});
  EXPECT_EQ(PutNo(*t, ns_, 1).code(), Code::kNoSpace);
  faults_->Clear();
  ExpectPutFailsCleanly(*t, 1, faults_->Add({.op = FsOp::kPreallocate, .path = ".kvtmp.", .error = ENOSPC}));
  const size_t none = faults_->Add({.op = FsOp::kPreallocate, .path = ".kvtmp.", .error = EOPNOTSUPP});
  ASSERT_TRUE(PutNo(*t, ns_, 2).ok());
  EXPECT_EQ(faults_->Fired(none), 1u);
  EXPECT_TRUE(GetNo(*t, ns_, 2).ok());
}

// A payload over the format's 4 GiB is refused as such before the file takes any space: no preallocation
// is tried (a full disk would otherwise answer NoSpace for a chunk that can never be written), and
// nothing is left. The 4 GiB and 1 MiB are the same 1 MiB buffer listed over and over.
TEST_P(FaultFsTest, APayloadOverTheFormatsLimitIsRefusedBeforeAnySpaceIsTaken) {
  const std::vector<std::byte> mib(1 << 20);
  const std::vector<std::span<const std::byte>> src(4097, std::span<const std::byte>(mib));
  const size_t rule = faults_->Add({.op = FsOp::kPreallocate, .error = ENOSPC});
  const Status s = internal::WriteChunkFileAtomic(*faults_, "big.kvc", IdNo(ns_, 8), src, {}).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(faults_->Fired(rule), 0u);
  EXPECT_TRUE(Temporaries(root_).empty());
  EXPECT_FALSE(fs::exists(root_ + "/big.kvc"));
}

TEST_P(FaultFsTest, ShortWritesAreResumed) {
  auto t = Open();
  const size_t rule = faults_->Add({.op = FsOp::kWrite, .short_write = true, .times = 3});
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());
  EXPECT_EQ(faults_->Fired(rule), 3u);
  EXPECT_TRUE(GetNo(*t, ns_, 0).ok());
}

// O_DIRECT saves: the payload's write (asynchronous with io_uring) failing, and the header's, written
// after the checksums. Either way the Put fails and nothing is published.
TEST_P(FaultFsTest, DirectPayloadOrHeaderWriteFails) {
  ns_ = TestNamespace("tenant-a", kDirectTokens);
  auto t = Open();
  if (!t->capabilities().direct_io) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  ASSERT_TRUE(PutAligned(*t, ns_, 0).ok());  // the directories exist
  uint32_t n = 1;
  for (int64_t offset : {kPayloadAt, int64_t{0}}) {
    const size_t rule = faults_->Add({.op = FsOp::kWrite, .path = ".kvtmp.", .error = EIO, .offset = offset});
    ExpectPutFailsCleanly(*t, n++, rule, /*aligned=*/true);
  }
}

// A short O_DIRECT payload write is resumed where it stopped (were it not, half the payload would be a
// hole and the read would fail its checksum).
TEST_P(FaultFsTest, ShortDirectPayloadWriteIsResumed) {
  ns_ = TestNamespace("tenant-a", kDirectTokens);
  auto t = Open();
  if (!t->capabilities().direct_io) GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  const size_t rule =
      faults_->Add({.op = FsOp::kWrite, .path = ".kvtmp.", .short_write = true, .offset = kPayloadAt, .times = 1});
  ASSERT_TRUE(PutAligned(*t, ns_, 0).ok());
  EXPECT_EQ(faults_->Fired(rule), 1u);
  const Status s = GetNo(*t, ns_, 0);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Encrypted chunks, with O_DIRECT and through the page cache alike: 9.5 MiB of 1 MiB pieces are five
// seal windows (four of 2 MiB, each written while the next is sealed, then 1.5 MiB) and the header. The
// first, second and header writes failing publish nothing and leave no temporary; a short first window is
// resumed and the chunk authenticates.
TEST_P(FaultFsTest, EncryptedWindowWritesFailCleanlyOrResume) {
  if (kind() != Kind::kFile) GTEST_SKIP() << "the same chunk writer is below fs://";
  const auto cipher = KeyFileCipher(base_.path(), 'c');
  ASSERT_NE(cipher, nullptr);
  const ChunkId id = IdNo(ns_, 7);
  const std::vector<std::byte> payload = PayloadFor(id.key, (19u << 20) / 2);
  const std::span<const std::byte> src[] = {payload};
  const int probe = ::open((root_ + "/probe").c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  const bool direct_allowed = probe >= 0;
  if (probe >= 0) ::close(probe);
  ::unlink((root_ + "/probe").c_str());
  for (bool direct : {true, false}) {
    if (direct && !direct_allowed) continue;  // this filesystem refuses O_DIRECT: the page cache half only
    SCOPED_TRACE(direct ? "O_DIRECT" : "page cache");
    const internal::WriteOptions o{.direct = direct, .io_uring = GetParam().uring, .cipher = cipher};
    for (int64_t offset : {kPayloadAt, kPayloadAt + (2 << 20), int64_t{0}}) {
      const size_t rule = faults_->Add({.op = FsOp::kWrite, .error = EIO, .offset = offset});
      EXPECT_FALSE(internal::WriteChunkFileAtomic(*faults_, "e.kvc", id, src, o).ok()) << offset;
      EXPECT_EQ(faults_->Fired(rule), 1u) << offset;
      faults_->Clear();
      EXPECT_TRUE(Temporaries(root_).empty()) << offset;
      EXPECT_FALSE(fs::exists(root_ + "/e.kvc")) << offset;
    }
    const size_t rule = faults_->Add({.op = FsOp::kWrite, .short_write = true, .offset = kPayloadAt, .times = 1});
    ASSERT_TRUE(internal::WriteChunkFileAtomic(*faults_, "e.kvc", id, src, o).ok());
    EXPECT_EQ(faults_->Fired(rule), 1u);
    faults_->Clear();
    auto header = internal::VerifyChunkFile(*faults_, "e.kvc", id, cipher.get());
    EXPECT_TRUE(header.ok()) << header.status().ToString();
    ASSERT_TRUE(faults_->Unlink("e.kvc").ok());
  }
}

TEST_P(FaultFsTest, FsyncFails) {
  auto t = Open(/*sync=*/true);
  ExpectPutFailsCleanly(*t, 0, faults_->Add({.op = FsOp::kSyncFile, .error = EIO}));
}

TEST_P(FaultFsTest, MkdirFails) {
  auto t = Open();
  ExpectPutFailsCleanly(*t, 0, faults_->Add({.op = FsOp::kMkdir, .error = EIO}));
}

// The publishing call: rename for file://, link for fs:// (it never replaces a published name).
FsOp PublishOp(Kind k) { return k == Kind::kFs ? FsOp::kLink : FsOp::kRename; }

TEST_P(FaultFsTest, RenameFails) {
  auto t = Open();
  ExpectPutFailsCleanly(*t, 0, faults_->Add({.op = PublishOp(kind()), .path = ".kvc", .error = EIO}));
}

TEST_P(FaultFsTest, RenameFailsAfterTheDataIsWrittenAndRenamed) {
  auto t = Open();
  const size_t rule = faults_->Add({.op = PublishOp(kind()), .path = ".kvc", .error = EIO, .after_effect = true});
  // file:// reports the failed rename; fs:// finds its own file under the name and reports success.
  const Status put = PutNo(*t, ns_, 0);
  EXPECT_EQ(put.ok(), kind() == Kind::kFs) << put.ToString();
  EXPECT_EQ(faults_->Fired(rule), 1u);
  faults_->Clear();
  EXPECT_TRUE(Temporaries(root_).empty());
  // The rename did happen: what is visible is the whole chunk, or nothing.
  const Status s = GetNo(*t, ns_, 0);
  EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
  auto reopened = Open();
  const Status after = GetNo(*reopened, ns_, 0);
  EXPECT_TRUE(after.ok()) << after.ToString();
}

TEST_P(FaultFsTest, MarkerPublicationFailsAndLeavesNothing) {
  const std::string fresh = base_.path() + "/fresh";
  auto posix = internal::OpenPosixFileSystem(fresh, internal::PosixFsOptions{.create = true});
  ASSERT_TRUE(posix.ok());
  auto faults = std::make_shared<FaultFileSystem>(*posix);
  const size_t rule = faults->Add({.op = FsOp::kLink, .error = EIO});
  const size_t rule2 = faults->Add({.op = FsOp::kRename, .error = EIO});
  auto t = OpenKind(kind(), fresh, OpenSpec{.fs = faults});
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(faults->Fired(rule), 1u);
  (void)rule2;
  EXPECT_TRUE(fs::is_empty(fresh)) << "no marker, no temporary";
}

TEST_P(FaultFsTest, OpenAndReadErrorsAreMissesAndKeepTheChunk) {
  auto t = Open();
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());
  for (FsOp op : {FsOp::kOpenRead, FsOp::kRead}) {
    const size_t rule = faults_->Add({.op = op, .path = ".kvc", .error = EIO});
    const Status s = GetNo(*t, ns_, 0);
    EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
    EXPECT_GE(faults_->Fired(rule), 1u);
    faults_->Clear();
    EXPECT_TRUE(GetNo(*t, ns_, 0).ok()) << "an I/O error is not corruption: the chunk stays";
  }
}

TEST_P(FaultFsTest, ShortReadsAreResubmitted) {
  auto t = Open();
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());
  ASSERT_TRUE(PutNo(*t, ns_, 1).ok());
  const size_t rule = faults_->Add({.op = FsOp::kRead, .path = ".kvc", .short_read = true, .times = 6});
  std::vector<std::byte> a(ns_.layout().BytesPerChunk()), b(a.size());
  OnePiece pa(a), pb(b);
  ReadOp ops[2] = {{IdNo(ns_, 0), pa.dst(), Status::OK()}, {IdNo(ns_, 1), pb.dst(), Status::OK()}};
  t->GetMany(ops);
  EXPECT_TRUE(ops[0].status.ok()) << ops[0].status.ToString();
  EXPECT_TRUE(ops[1].status.ok()) << ops[1].status.ToString();
  EXPECT_EQ(a, PayloadFor(KeyNo(ns_, 0), a.size()));
  EXPECT_EQ(b, PayloadFor(KeyNo(ns_, 1), b.size()));
  EXPECT_GE(faults_->Fired(rule), 1u);
}

TEST_P(FaultFsTest, DirectReadsRefusedAtReadTimeAreRereadBuffered) {
  auto t = Open();
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());
  const size_t rule = faults_->Add({.op = FsOp::kRead, .path = ".kvc", .error = EINVAL, .times = 1});
  const Status s = GetNo(*t, ns_, 0);
  EXPECT_EQ(faults_->Fired(rule), 1u);
  if (t->capabilities().direct_io) {
    EXPECT_TRUE(s.ok()) << "EINVAL under O_DIRECT must fall back to a buffered read: " << s.ToString();
  } else {
    EXPECT_FALSE(s.ok());  // without O_DIRECT, EINVAL is a plain error
    EXPECT_TRUE(GetNo(*t, ns_, 0).ok());
  }
}

TEST_P(FaultFsTest, ListAndStatFailuresAreErrorsNotLosses) {
  {
    auto t = Open();
    ASSERT_TRUE(PutNo(*t, ns_, 0).ok());
  }
  const size_t list = faults_->Add({.op = FsOp::kList, .error = EIO});
  auto t = OpenKind(kind(), root_, OpenSpec{.fs = faults_, .io_uring = GetParam().uring});
  if (kind() == Kind::kFile) {
    EXPECT_FALSE(t.ok()) << "file:// cannot build its index without listing";
  } else {
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE((*t)->List([](const ChunkInfo&) { return true; }).ok());
  }
  EXPECT_GE(faults_->Fired(list), 1u);
  faults_->Clear();
  auto again = Open();
  const size_t stat = faults_->Add({.op = FsOp::kStat, .path = ".kvc", .error = EIO});
  if (kind() == Kind::kFs) {
    EXPECT_FALSE(again->Contains(IdNo(ns_, 0)));
    EXPECT_GE(faults_->Fired(stat), 1u);
  }
  faults_->Clear();
  EXPECT_TRUE(GetNo(*again, ns_, 0).ok());
}

TEST_P(FaultFsTest, UnlinkFailuresLeaveTheTierConsistent) {
  auto t = Open();
  ASSERT_TRUE(PutNo(*t, ns_, 0).ok());
  ASSERT_TRUE(internal::CorruptFileChunkForTesting(root_, IdNo(ns_, 0)).ok() ||
              internal::CorruptPoolChunkForTesting(root_, IdNo(ns_, 0)).ok());
  const size_t rule = faults_->Add({.op = FsOp::kUnlink, .error = EIO});
  EXPECT_TRUE(GetNo(*t, ns_, 0).IsCorruption());
  EXPECT_GE(faults_->Fired(rule), 1u);
  faults_->Clear();
  EXPECT_FALSE(GetNo(*t, ns_, 0).ok()) << "corrupt bytes are never served";
}

INSTANTIATE_TEST_SUITE_P(Tiers, FaultFsTest,
                         ::testing::Values(Param{Kind::kFile, true}, Param{Kind::kFile, false},
                                           Param{Kind::kFs, true}, Param{Kind::kFs, false}),
                         [](const auto& info) {
                           return KindName(info.param.kind) + (info.param.uring ? "_uring" : "_preadv");
                         });

}  // namespace
}  // namespace kvtier::testing
