// The io_uring reader. Each ReadMany call borrows a ring from a small pool (one per concurrent caller),
// opens chunk files, splits each read into pieces of at most kPieceBytes, keeps the ring full while the
// shared ByteBudget allows, resubmits short reads, and verifies each chunk as soon as its last piece
// lands. A file unlinked after open is still read whole: the descriptor keeps it alive.
//
// Where the caller's pieces allow it (ReaderOptions::read_into_destination; with O_DIRECT, pieces
// aligned to 4 KiB), the payload is read straight into them and verified (or decrypted) there, saving a
// copy of every byte; the chunk is reported only once verified, and a failed read's destination is
// zeroed before ReadMany returns. Otherwise it goes through an aligned bounce buffer and is copied (or
// decrypted) out after verification.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <optional>
#include <vector>

#include "core/thread_annotations.h"
#include "io/byte_budget.h"
#include "io/read_common.h"
#include "io/readers.h"

namespace kvtier::internal {
namespace {

constexpr unsigned kRingEntries = 128;
constexpr uint64_t kPieceBytes = 1ull << 20;  // large enough for NVMe, small enough to spread a chunk
constexpr size_t kMaxOpenPerCall = 64;         // bounds descriptors held by one call

struct Ring {
  io_uring ring{};
  bool live = false;
  ~Ring() {
    if (live) io_uring_queue_exit(&ring);
  }
};

std::unique_ptr<Ring> NewRing() {
  auto r = std::make_unique<Ring>();
  if (io_uring_queue_init(kRingEntries, &r->ring, 0) < 0) return nullptr;
  r->live = true;
  return r;
}

class UringReader final : public ChunkReader {
 public:
  explicit UringReader(const ReaderOptions& o)
      : options_(o), budget_(o.max_inflight_bytes), buffers_(o.max_inflight_bytes),
        verify_pool_(MakeVerifyPool(o)) {}

  void ReadMany(std::span<ChunkRead> reads) override;
  std::string_view engine() const override {
    return options_.direct_io ? "io_uring+O_DIRECT" : "io_uring";
  }

  void PutRing(std::unique_ptr<Ring> ring) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    rings_.push_back(std::move(ring));
  }
  std::unique_ptr<Ring> TakeRing() EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (!rings_.empty()) {
        auto r = std::move(rings_.back());
        rings_.pop_back();
        return r;
      }
    }
    return NewRing();
  }

  const ReaderOptions options_;
  ByteBudget budget_;
  BufferPool buffers_;
  std::unique_ptr<ThreadPool> verify_pool_;  // pieces of one chunk verified in parallel; may be null

 private:
  Mutex mu_;
  std::vector<std::unique_ptr<Ring>> rings_ GUARDED_BY(mu_);  // idle rings
};

// One chunk being read.
struct Job {
  ChunkRead* read = nullptr;
  OpenedChunk chunk;
  AlignedBuffer buf;
  uint64_t eof_at = UINT64_MAX;  // lowest offset where a read found end of file
  bool into_dst = false;         // payload read straight into read->dst; buf holds the header only
  unsigned pieces_left = 0;
  bool retry_buffered = false;  // O_DIRECT refused at read time
  Status error;
};

struct Piece {
  Job* job = nullptr;
  uint64_t offset = 0;  // in the file
  uint64_t len = 0;
  std::byte* dest = nullptr;
};

// Whether chunk `c` can be read straight into `dst`: the file has the size a chunk of that payload has,
// and for O_DIRECT every piece starts and ends on a 4 KiB boundary.
bool CanReadIntoDestination(const OpenedChunk& c, ScatterList dst) {
  const uint64_t payload = TotalBytes(dst);
  if (payload == 0 || c.file_size != StoredChunkBytes(payload)) return false;
  if (!c.direct) return true;
  for (const auto& piece : dst) {
    if (reinterpret_cast<uintptr_t>(piece.data()) % kChunkAlign != 0 || piece.size() % kChunkAlign != 0) {
      return false;
    }
  }
  return true;
}

// The state of one ReadMany call on one ring.
class Batch {
 public:
  Batch(UringReader& reader, io_uring* ring, std::span<ChunkRead> reads)
      : r_(reader), ring_(ring), reads_(reads) {
    slots_.resize(kRingEntries);
    for (unsigned i = 0; i < kRingEntries; ++i) free_slots_.push_back(i);
  }
  // Returns false when the ring failed; the ring must then be discarded.
  bool Run();

 private:
  void StartJobs();
  bool Start(ChunkRead& read, OpenedChunk opened);
  // Queues reads of [offset, offset + len) of the file into `dest`, in pieces of at most kPieceBytes.
  void Queue(Job* job, uint64_t offset, uint64_t len, std::byte* dest);
  void Submit();
  void Reap();
  void OnCompletion(uint64_t slot, int res);
  void Finish(Job* job);
  Status RereadBuffered(Job* job);
  void Done(Job* job);
  void FailEverything();

  UringReader& r_;
  io_uring* ring_;
  std::span<ChunkRead> reads_;
  size_t next_ = 0;
  std::optional<OpenedChunk> opened_next_;  // opened, waiting for budget
  std::vector<std::unique_ptr<Job>> jobs_;
  size_t active_ = 0;
  std::deque<Piece> queued_;       // pieces not yet given an SQE
  std::vector<Piece> slots_;       // pieces owned by the kernel, by SQE user data
  std::vector<unsigned> free_slots_;
  unsigned prepared_ = 0;          // SQEs filled but not yet submitted
  unsigned submitted_ = 0;         // SQEs the kernel has and has not completed
  bool broken_ = false;
};

bool Batch::Run() {
  while (!broken_) {
    StartJobs();
    Submit();
    if (submitted_ == 0 && prepared_ == 0) {
      if (next_ >= reads_.size() && queued_.empty() && active_ == 0) return true;
      continue;
    }
    Reap();
  }
  FailEverything();
  return false;
}

void Batch::StartJobs() {
  while (next_ < reads_.size() && active_ < kMaxOpenPerCall) {
    ChunkRead& read = reads_[next_];
    if (!opened_next_) {
      read.stored_bytes = 0;
      auto opened = OpenChunk(*read.fs, read.path, TotalBytes(read.dst), r_.options_.direct_io);
      if (!opened.ok()) {
        read.status = opened.status();
        ++next_;
        continue;
      }
      read.stored_bytes = opened->file_size;
      opened_next_ = std::move(opened).value();
    }
    const uint64_t len = opened_next_->read_len;
    if (active_ == 0) {
      r_.budget_.Acquire(len);  // this call holds no bytes: safe to wait
    } else if (!r_.budget_.TryAcquire(len)) {
      return;  // finish some of ours first
    }
    OpenedChunk opened = std::move(*opened_next_);
    opened_next_.reset();
    ++next_;
    if (!Start(read, std::move(opened))) r_.budget_.Release(len);
  }
}

bool Batch::Start(ChunkRead& read, OpenedChunk opened) {
  auto job = std::make_unique<Job>();
  job->read = &read;
  job->chunk = std::move(opened);
  job->into_dst = r_.options_.read_into_destination && CanReadIntoDestination(job->chunk, read.dst);
  const uint64_t buf_len = job->into_dst ? kChunkHeaderSize : job->chunk.read_len;
  job->buf = r_.buffers_.Get(buf_len);
  if (job->buf.data() == nullptr) {
    read.status = Status::IOError("out of memory for a " + std::to_string(buf_len) + " byte read", true);
    return false;
  }
  if (job->into_dst) {
    Queue(job.get(), 0, kChunkHeaderSize, job->buf.data());
    uint64_t off = kChunkHeaderSize;
    for (const auto& piece : read.dst) {
      Queue(job.get(), off, piece.size(), piece.data());
      off += piece.size();
    }
  } else {
    Queue(job.get(), 0, buf_len, job->buf.data());
  }
  ++active_;
  jobs_.push_back(std::move(job));
  return true;
}

void Batch::Queue(Job* job, uint64_t offset, uint64_t len, std::byte* dest) {
  for (uint64_t done = 0; done < len; done += kPieceBytes) {
    queued_.push_back({job, offset + done, std::min(kPieceBytes, len - done), dest + done});
    ++job->pieces_left;
  }
}

void Batch::Submit() {
  while (!queued_.empty() && !free_slots_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_);
    if (sqe == nullptr) break;
    const unsigned slot = free_slots_.back();
    free_slots_.pop_back();
    const Piece p = queued_.front();
    queued_.pop_front();
    slots_[slot] = p;
    io_uring_prep_read(sqe, p.job->chunk.fd.get(), p.dest, static_cast<unsigned>(p.len), p.offset);
    io_uring_sqe_set_data64(sqe, slot);
    ++prepared_;
  }
  if (prepared_ == 0) return;
  const int n = io_uring_submit(ring_);
  if (n >= 0) {
    prepared_ -= static_cast<unsigned>(n);
    submitted_ += static_cast<unsigned>(n);
  } else if (n != -EINTR && n != -EAGAIN && n != -EBUSY) {
    broken_ = true;
  } else if (submitted_ == 0) {
    broken_ = n != -EINTR;  // nothing to reap that could free kernel resources
  }
}

void Batch::Reap() {
  if (submitted_ == 0) return;
  io_uring_cqe* cqe = nullptr;
  const int w = io_uring_wait_cqe(ring_, &cqe);
  if (w == -EINTR) return;
  if (w < 0) {
    broken_ = true;
    return;
  }
  unsigned head;
  unsigned seen = 0;
  io_uring_for_each_cqe(ring_, head, cqe) {
    OnCompletion(io_uring_cqe_get_data64(cqe), cqe->res);
    ++seen;
  }
  io_uring_cq_advance(ring_, seen);
}

void Batch::OnCompletion(uint64_t slot, int raw) {
  const Piece p = slots_[slot];
  free_slots_.push_back(static_cast<unsigned>(slot));
  --submitted_;
  Job* job = p.job;
  // The filesystem seam sees every completion (fault injection reaches this path too).
  const int res = static_cast<int>(job->read->fs->FilterRead(job->chunk.fd.get(), p.offset, p.len, raw));
  if (res == -EINTR || res == -EAGAIN) {
    queued_.push_front(p);
    return;
  }
  if (res > 0 && static_cast<uint64_t>(res) < p.len) {
    queued_.push_front({job, p.offset + res, p.len - res, p.dest + res});  // short read: the rest
    return;
  }
  if (res == 0) {
    job->eof_at = std::min(job->eof_at, p.offset);
  } else if (res == -EINVAL && job->chunk.direct) {
    job->retry_buffered = true;
  } else if (res < 0 && job->error.ok()) {
    job->error = Status::FromErrno(-res, "read " + job->read->path);
  }
  if (--job->pieces_left == 0) Finish(job);
}

void Batch::Finish(Job* job) {
  ChunkRead& read = *job->read;
  Status s = job->error;
  const uint64_t valid = std::min({job->chunk.read_len, job->eof_at, job->chunk.file_size});
  if (s.ok() && job->retry_buffered) {
    // O_DIRECT refused at read time: read again, buffered, into a whole-file bounce buffer. The job's
    // budget is still held, so this takes none (waiting on it here could wait on ourselves).
    s = RereadBuffered(job);
    read.status = std::move(s);
    r_.budget_.Release(job->chunk.read_len);
    Done(job);
    return;
  }
  if (s.ok() && job->into_dst) {
    s = VerifyInPlace({job->buf.data(), kChunkHeaderSize}, job->chunk.file_size, valid, read.expected,
                      read.dst, r_.options_.cipher.get(), r_.verify_pool_.get());
  } else if (s.ok()) {
    s = VerifyAndScatter({job->buf.data(), valid}, job->chunk.file_size, read.expected, read.dst,
                         r_.options_.cipher.get(), r_.verify_pool_.get());
  }
  read.status = std::move(s);
  r_.buffers_.Put(std::move(job->buf));
  r_.budget_.Release(job->chunk.read_len);
  Done(job);
}

Status Batch::RereadBuffered(Job* job) {
  ChunkRead& read = *job->read;
  r_.buffers_.Put(std::move(job->buf));
  job->buf = r_.buffers_.Get(job->chunk.read_len);
  if (job->buf.data() == nullptr) return Status::IOError("out of memory for a buffered re-read", true);
  Status s = ReopenBuffered(*read.fs, read.path, &job->chunk);
  if (s.ok()) {
    auto got = PreadAll(*read.fs, job->chunk.fd.get(), job->buf.data(), job->chunk.read_len, read.path);
    s = got.status();
    if (s.ok()) {
      const uint64_t valid = std::min(*got, job->chunk.file_size);
      s = VerifyAndScatter({job->buf.data(), valid}, job->chunk.file_size, read.expected, read.dst,
                         r_.options_.cipher.get(), r_.verify_pool_.get());
    }
  }
  r_.buffers_.Put(std::move(job->buf));
  return s;
}

void Batch::Done(Job* job) {
  job->chunk.fd.Reset();
  --active_;
  std::erase_if(jobs_, [job](const std::unique_ptr<Job>& j) { return j.get() == job; });
}

// The ring cannot be trusted any more: wait out what the kernel holds, then fail what is left; the
// reads not yet started are done synchronously so the caller still gets answers.
void Batch::FailEverything() {
  while (submitted_ > 0) {
    io_uring_cqe* cqe = nullptr;
    const int w = io_uring_wait_cqe(ring_, &cqe);
    if (w == -EINTR) continue;
    if (w < 0) break;  // the kernel will not answer; buffers are leaked below rather than freed
    --submitted_;
    io_uring_cqe_seen(ring_, cqe);
  }
  for (auto& job : jobs_) {
    job->read->status = Status::IOError("io_uring failed while reading " + job->read->path, true);
    r_.budget_.Release(job->chunk.read_len);
  }
  if (submitted_ > 0) {
    // The kernel may still write into these buffers: leak them rather than free memory in use.
    for (auto& job : jobs_) (void)job.release();  // NOLINT(bugprone-unused-return-value)
  }
  jobs_.clear();
  active_ = 0;
  queued_.clear();
  opened_next_.reset();  // that read is retried below
  for (; next_ < reads_.size(); ++next_) {
    ReadChunkSync(reads_[next_], r_.options_.direct_io, r_.budget_, r_.buffers_, r_.options_.cipher.get(), r_.verify_pool_.get());
  }
}

void UringReader::ReadMany(std::span<ChunkRead> reads) {
  std::unique_ptr<Ring> ring = TakeRing();
  if (ring == nullptr) {  // e.g. out of locked memory for another ring: read on this thread
    for (ChunkRead& r : reads) {
      ReadChunkSync(r, options_.direct_io, budget_, buffers_, options_.cipher.get(), verify_pool_.get());
    }
    ZeroFailedReads(reads);
    return;
  }
  Batch batch(*this, &ring->ring, reads);
  if (batch.Run()) PutRing(std::move(ring));
  ZeroFailedReads(reads);
}

}  // namespace

std::unique_ptr<ChunkReader> MakeUringReader(const ReaderOptions& options) {
  auto ring = NewRing();
  if (ring == nullptr) return nullptr;
  auto reader = std::make_unique<UringReader>(options);
  reader->PutRing(std::move(ring));
  return reader;
}

}  // namespace kvtier::internal
