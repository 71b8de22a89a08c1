// The io_uring reader. Each ReadMany call borrows a ring from a small pool (one per concurrent caller),
// opens chunk files, splits each read into requests of at most kRequestBytes, keeps the ring full while
// the shared ByteBudget allows, and resubmits short reads.
//
// Memory. Where the caller's pieces allow it (ReaderOptions::read_into_destination; with O_DIRECT,
// pieces aligned to 4 KiB), the payload is read straight into them and verified (or decrypted) there;
// only the 4 KiB header goes to one of the ring's header pages. Otherwise the whole file goes to a
// region of the reader's ReadSlab and is copied (or decrypted) out once verified. Header pages and
// slab segments are registered with the ring as fixed buffers and read with READ_FIXED; nothing is
// allocated per chunk once the slab has grown to the load (a full slab falls back to heap buffers,
// counted as slab misses).
//
// Verification. Once a chunk's header has landed and been checked, each piece of its payload (v2:
// the per-piece checksums of core/chunk_format.h; v1: the whole payload as one piece) is handed to the
// verification pool the moment its last byte lands, so pieces of one chunk verify on several threads
// while the ring keeps reading. A chunk is reported only when every piece is verified; a failed read's
// destination is zeroed before ReadMany returns. Without a pool, pieces verify on the ring thread as
// they land.
//
// A file unlinked after open is still read whole: the descriptor keeps it alive.
#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"
#include "io/byte_budget.h"
#include "io/read_common.h"
#include "io/read_slab.h"
#include "io/readers.h"

namespace kvtier::internal {
namespace {

constexpr unsigned kRingEntries = 128;
constexpr uint64_t kRequestBytes = 1ull << 20;  // large enough for NVMe, small enough to spread a chunk
constexpr size_t kMaxOpenPerCall = 64;           // bounds descriptors (and header pages) of one call
constexpr unsigned kHeaderBuffer = 0;            // fixed-buffer index of a ring's header pages
constexpr unsigned kFirstSlabBuffer = 1;         // slab segment i is fixed buffer 1 + i

struct Ring {
  io_uring ring{};
  bool live = false;
  bool fixed = false;              // the buffer table is registered and holds the header pages
  bool slab_refused = false;       // registering a slab segment failed: plain reads into the slab
  uint32_t slab_segments = 0;      // slab segments registered so far
  AlignedBuffer headers;           // kMaxOpenPerCall header pages
  std::vector<uint32_t> free_headers;
  ~Ring() {
    if (live) io_uring_queue_exit(&ring);
  }
};

bool UpdateBuffer(io_uring* ring, unsigned index, iovec iov) {
  __u64 tag = 0;
  return io_uring_register_buffers_update_tag(ring, index, &iov, &tag, 1) == 1;
}

std::unique_ptr<Ring> NewRing() {
  auto r = std::make_unique<Ring>();
  if (io_uring_queue_init(kRingEntries, &r->ring, 0) < 0) return nullptr;
  r->live = true;
  r->headers = AlignedBuffer::Allocate(kMaxOpenPerCall * kChunkHeaderSize);
  if (r->headers.data() == nullptr) return nullptr;
  for (uint32_t i = kMaxOpenPerCall; i > 0; --i) r->free_headers.push_back(i - 1);
  // Fixed buffers spare the kernel pinning and unpinning the pages of every request. Where the kernel
  // refuses them (e.g. RLIMIT_MEMLOCK), the same memory is read with plain requests.
  if (io_uring_register_buffers_sparse(&r->ring, kFirstSlabBuffer + ReadSlab::kMaxSegments) == 0) {
    r->fixed = UpdateBuffer(&r->ring, kHeaderBuffer, iovec{r->headers.data(), r->headers.size()});
  }
  return r;
}

struct Counters {
  std::atomic<uint64_t> in_place{0}, bounce{0}, fixed{0}, plain{0}, slab_misses{0}, verify_tasks{0};
  std::atomic<uint64_t> chunks_in_flight{0}, max_chunks_in_flight{0};
  void ChunkStarted() {
    const uint64_t now = chunks_in_flight.fetch_add(1) + 1;
    uint64_t seen = max_chunks_in_flight.load();
    while (now > seen && !max_chunks_in_flight.compare_exchange_weak(seen, now)) {
    }
  }
};

class UringReader final : public ChunkReader {
 public:
  explicit UringReader(const ReaderOptions& o)
      : options_(o), budget_(o.max_inflight_bytes), slab_(BounceMemoryCap(o.max_inflight_bytes), o.host_allocator),
        buffers_(BounceMemoryCap(o.max_inflight_bytes)), verify_pool_(MakeVerifyPool(o)) {}

  void ReadMany(std::span<ChunkRead> reads) override;
  std::string_view engine() const override {
    return options_.direct_io ? "io_uring+O_DIRECT" : "io_uring";
  }
  Status status() const override { return verify_pool_ ? verify_pool_->status() : Status::OK(); }
  Stats stats() const override {
    Stats s;
    s.in_place_chunks = counters_.in_place.load();
    s.bounce_chunks = counters_.bounce.load();
    s.fixed_reads = counters_.fixed.load();
    s.plain_reads = counters_.plain.load();
    s.slab_misses = counters_.slab_misses.load();
    s.buffer_allocations = slab_.segments() + buffers_.allocations();
    s.slab_bytes = slab_.bytes();
    s.verify_tasks = counters_.verify_tasks.load();
    s.max_chunks_in_flight = counters_.max_chunks_in_flight.load();
    return s;
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
  ReadSlab slab_;       // bounce memory, reused chunk after chunk
  BufferPool buffers_;  // heap bounce memory when the slab is full, and buffered re-reads
  std::unique_ptr<ThreadPool> verify_pool_;  // verifies pieces as they land; may be null
  Counters counters_;

 private:
  Mutex mu_;
  std::vector<std::unique_ptr<Ring>> rings_ GUARDED_BY(mu_);  // idle rings
};

// One chunk being read. Fields marked "ring" are touched by the ring thread only; "set once" fields
// are written on the ring thread before the first verification task is scheduled, then only read.
struct Job {
  ChunkRead* read = nullptr;
  OpenedChunk chunk;
  uint64_t charge = 0;          // bytes held of the budget
  bool released = false;        // charge given back (ReleaseBudget; ring, or the completing thread)
  uint64_t want = 0;            // payload bytes (the destination's size)
  bool into_dst = false;        // payload read straight into read->dst
  std::vector<std::span<const std::byte>> dst_in;  // read->dst as a source, for in-place checks
  int header_slot = -1;         // the ring's header page holding offset 0 (into_dst)
  std::byte* image = nullptr;   // where file offset 0 lands: a header page, or the whole file
  std::optional<ReadSlab::Region> region;  // bounce memory from the slab
  AlignedBuffer heap;           // bounce memory when the slab had no room
  int fixed_index = -1;         // fixed-buffer index holding `image`; -1: plain requests
  // ring:
  unsigned io_left = 0;
  uint64_t eof_at = UINT64_MAX;  // lowest offset where a read found end of file
  bool retry_buffered = false;   // O_DIRECT refused at read time
  Status error;
  uint64_t header_landed = 0;
  std::vector<std::pair<uint64_t, uint64_t>> early;  // payload ranges that landed before the header
  std::vector<uint64_t> landed;                       // bytes landed per verified piece
  // set once:
  std::unique_ptr<PayloadVerifier> verifier;
  Status header_status;
  // shared with the verification threads:
  std::atomic<int> refs{1};  // the I/O's, plus one per scheduled piece; the last one completes the job
  std::atomic<uint32_t> verified{0};
  Mutex mu;
  Status verify_status GUARDED_BY(mu);  // the first piece that failed
};

// One read request.
struct Request {
  Job* job = nullptr;
  uint64_t offset = 0;  // in the file
  uint64_t len = 0;
  std::byte* dest = nullptr;
  int fixed_index = -1;
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
class UringBatch {
 public:
  UringBatch(UringReader& reader, Ring& ring, std::span<ChunkRead> reads)
      : r_(reader), ring_(ring), reads_(reads) {
    slots_.resize(kRingEntries);
    for (unsigned i = 0; i < kRingEntries; ++i) free_slots_.push_back(i);
  }
  // Returns false when the ring failed; the ring must then be discarded (and leaked when
  // kernel_busy(): the kernel may still write into its header pages).
  bool Run();
  bool kernel_busy() const { return submitted_ > 0; }

 private:
  void StartJobs();
  bool Start(ChunkRead& read, OpenedChunk opened, uint64_t charge);
  bool AttachBounce(Job* job);
  // Queues reads of [offset, offset + len) of the file into `dest`, in requests of at most kRequestBytes.
  void Queue(Job* job, uint64_t offset, uint64_t len, std::byte* dest, int fixed_index);
  void Submit();
  void Reap();
  void OnCompletion(uint64_t slot, int res);
  // Bytes [offset, offset + len) of the job's file have landed.
  void Land(Job* job, uint64_t offset, uint64_t len);
  void OnHeader(Job* job);
  void AddPayload(Job* job, uint64_t begin, uint64_t end);
  void ReleaseLanded(Job* job);
  void ReleaseBudget(Job* job);  // once per job: its charge and its place in chunks_in_flight
  void Schedule(Job* job, uint32_t piece);
  void RunPiece(Job* job, uint32_t piece);
  static void Unref(UringBatch* batch, Job* job);
  void Complete(Job* job);  // any thread, once every reference is gone
  Status RereadBuffered(Job* job);
  void Drain() EXCLUDES(done_mu_);
  void WaitDone() EXCLUDES(done_mu_);
  void FailEverything();

  UringReader& r_;
  Ring& ring_;
  std::span<ChunkRead> reads_;
  size_t next_ = 0;
  std::optional<OpenedChunk> opened_next_;  // opened, waiting for budget
  std::vector<std::unique_ptr<Job>> jobs_;
  size_t active_ = 0;               // jobs started and not yet drained
  std::deque<Request> queued_;      // requests not yet given an SQE
  std::vector<Request> slots_;      // requests owned by the kernel, by SQE user data
  std::vector<unsigned> free_slots_;
  unsigned prepared_ = 0;           // SQEs filled but not yet submitted
  unsigned submitted_ = 0;          // SQEs the kernel has and has not completed
  bool broken_ = false;
  std::atomic<int> verifying_{0};   // scheduled pieces not yet verified

  Mutex done_mu_;
  CondVar done_cv_;
  std::vector<Job*> done_ GUARDED_BY(done_mu_);  // completed, not yet drained by the ring thread
};

bool UringBatch::Run() {
  while (!broken_) {
    Drain();
    StartJobs();
    Submit();
    if (submitted_ == 0 && prepared_ == 0) {
      if (active_ == 0 && next_ >= reads_.size()) return true;
      // Nothing is with the kernel: what is left is being verified (or a job waits for budget that
      // only a completion can free).
      if (active_ > 0) WaitDone();
      continue;
    }
    Reap();
  }
  FailEverything();
  return false;
}

void UringBatch::StartJobs() {
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
    const uint64_t charge = BudgetCharge(*opened_next_);
    if (active_ == 0) {
      r_.budget_.Acquire(charge);  // this call holds no bytes: safe to wait
    } else if (!r_.budget_.TryAcquire(charge)) {
      return;  // finish some of ours first
    }
    OpenedChunk opened = std::move(*opened_next_);
    opened_next_.reset();
    ++next_;
    if (!Start(read, std::move(opened), charge)) r_.budget_.Release(charge);
  }
}

bool UringBatch::Start(ChunkRead& read, OpenedChunk opened, uint64_t charge) {
  auto job = std::make_unique<Job>();
  job->read = &read;
  job->chunk = std::move(opened);
  job->charge = charge;
  job->want = TotalBytes(read.dst);
  job->into_dst = r_.options_.read_into_destination && CanReadIntoDestination(job->chunk, read.dst) &&
                  !ring_.free_headers.empty();
  if (job->into_dst) {
    job->header_slot = static_cast<int>(ring_.free_headers.back());
    ring_.free_headers.pop_back();
    job->image = ring_.headers.data() + static_cast<size_t>(job->header_slot) * kChunkHeaderSize;
    job->fixed_index = ring_.fixed ? static_cast<int>(kHeaderBuffer) : -1;
    job->dst_in.assign(read.dst.begin(), read.dst.end());
    Queue(job.get(), 0, kChunkHeaderSize, job->image, job->fixed_index);
    uint64_t off = kChunkHeaderSize;
    for (const auto& piece : read.dst) {
      Queue(job.get(), off, piece.size(), piece.data(), -1);
      off += piece.size();
    }
    r_.counters_.in_place.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (!AttachBounce(job.get())) {
      read.status = Status::IOError("out of memory for a " + std::to_string(job->chunk.read_len) + " byte read", true);
      return false;
    }
    Queue(job.get(), 0, job->chunk.read_len, job->image, job->fixed_index);
    r_.counters_.bounce.fetch_add(1, std::memory_order_relaxed);
  }
  ++active_;
  jobs_.push_back(std::move(job));
  r_.counters_.ChunkStarted();
  return true;
}

// Gives `job` bounce memory for its whole file: a slab region (registered with this ring when it can
// be), else a heap buffer.
bool UringBatch::AttachBounce(Job* job) {
  job->region = r_.slab_.Allocate(job->chunk.read_len);
  if (job->region) {
    job->image = job->region->data;
    const uint32_t seg = job->region->segment;
    while (ring_.fixed && !ring_.slab_refused && ring_.slab_segments <= seg) {
      if (!UpdateBuffer(&ring_.ring, kFirstSlabBuffer + ring_.slab_segments, r_.slab_.SegmentIovec(ring_.slab_segments))) {
        ring_.slab_refused = true;
        break;
      }
      ++ring_.slab_segments;
    }
    if (ring_.fixed && ring_.slab_segments > seg) job->fixed_index = static_cast<int>(kFirstSlabBuffer + seg);
    return true;
  }
  r_.counters_.slab_misses.fetch_add(1, std::memory_order_relaxed);
  job->heap = r_.buffers_.Get(job->chunk.read_len);
  job->image = job->heap.data();
  return job->image != nullptr;
}

void UringBatch::Queue(Job* job, uint64_t offset, uint64_t len, std::byte* dest, int fixed_index) {
  for (uint64_t done = 0; done < len; done += kRequestBytes) {
    queued_.push_back({job, offset + done, std::min(kRequestBytes, len - done), dest + done, fixed_index});
    ++job->io_left;
  }
}

void UringBatch::Submit() {
  while (!queued_.empty() && !free_slots_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_.ring);
    if (sqe == nullptr) break;
    const unsigned slot = free_slots_.back();
    free_slots_.pop_back();
    const Request p = queued_.front();
    queued_.pop_front();
    slots_[slot] = p;
    const int fd = p.job->chunk.fd.get();
    if (p.fixed_index >= 0) {
      io_uring_prep_read_fixed(sqe, fd, p.dest, static_cast<unsigned>(p.len), p.offset, p.fixed_index);
      r_.counters_.fixed.fetch_add(1, std::memory_order_relaxed);
    } else {
      io_uring_prep_read(sqe, fd, p.dest, static_cast<unsigned>(p.len), p.offset);
      r_.counters_.plain.fetch_add(1, std::memory_order_relaxed);
    }
    io_uring_sqe_set_data64(sqe, slot);
    ++prepared_;
  }
  if (prepared_ == 0) return;
  const int n = io_uring_submit(&ring_.ring);
  if (n >= 0) {
    prepared_ -= static_cast<unsigned>(n);
    submitted_ += static_cast<unsigned>(n);
  } else if (n != -EINTR && n != -EAGAIN && n != -EBUSY) {
    broken_ = true;
  } else if (submitted_ == 0) {
    broken_ = n != -EINTR;  // nothing to reap that could free kernel resources
  }
}

void UringBatch::Reap() {
  if (submitted_ == 0) return;
  io_uring_cqe* cqe = nullptr;
  const int w = io_uring_wait_cqe(&ring_.ring, &cqe);
  if (w == -EINTR) return;
  if (w < 0) {
    broken_ = true;
    return;
  }
  unsigned head;
  unsigned seen = 0;
  io_uring_for_each_cqe(&ring_.ring, head, cqe) {
    OnCompletion(io_uring_cqe_get_data64(cqe), cqe->res);
    ++seen;
  }
  io_uring_cq_advance(&ring_.ring, seen);
}

void UringBatch::OnCompletion(uint64_t slot, int raw) {
  const Request p = slots_[slot];
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
    Land(job, p.offset, static_cast<uint64_t>(res));
    const uint64_t n = static_cast<uint64_t>(res);
    queued_.push_front({job, p.offset + n, p.len - n, p.dest + n, p.fixed_index});  // short read: the rest
    return;
  }
  if (res == 0) {
    job->eof_at = std::min(job->eof_at, p.offset);
  } else if (res == -EINVAL && job->chunk.direct) {
    job->retry_buffered = true;
  } else if (res < 0) {
    if (job->error.ok()) job->error = Status::FromErrno(-res, "read " + job->read->path);
  } else {
    Land(job, p.offset, p.len);
  }
  if (--job->io_left == 0) {
    ReleaseLanded(job);
    Unref(this, job);  // the I/O's reference
  }
}

// A chunk read into its caller's buffers holds no memory of the reader's once its reads have landed,
// so its bytes leave the budget then, not when its verification ends: with one chunk in flight the next
// chunk's reads start while this one is still being verified. A bounce read keeps its budget until its
// bytes are copied out (they live in the reader's slab), as does one that must be re-read buffered.
void UringBatch::ReleaseLanded(Job* job) {
  if (!job->into_dst || job->retry_buffered) return;
  ReleaseBudget(job);
}

void UringBatch::ReleaseBudget(Job* job) {
  if (job->released) return;
  job->released = true;
  r_.counters_.chunks_in_flight.fetch_sub(1);
  r_.budget_.Release(job->charge);
}

void UringBatch::Land(Job* job, uint64_t offset, uint64_t len) {
  if (!job->error.ok() || job->retry_buffered) return;  // the chunk fails or is read again anyway
  const uint64_t end = offset + len;
  if (offset < kChunkHeaderSize) {
    job->header_landed += std::min<uint64_t>(end, kChunkHeaderSize) - offset;
    if (job->header_landed == kChunkHeaderSize) OnHeader(job);
  }
  if (end <= kChunkHeaderSize || !job->header_status.ok()) return;
  const uint64_t begin = std::max<uint64_t>(offset, kChunkHeaderSize) - kChunkHeaderSize;
  const uint64_t stop = std::min(end - kChunkHeaderSize, job->want);  // padding is not verified
  if (begin >= stop) return;
  if (job->verifier == nullptr) {
    job->early.emplace_back(begin, stop);
  } else {
    AddPayload(job, begin, stop);
  }
}

void UringBatch::OnHeader(Job* job) {
  auto header = CheckFileHeader({job->image, kChunkHeaderSize}, job->chunk.file_size, job->read->expected, job->want);
  Result<std::unique_ptr<PayloadVerifier>> verifier =
      header.ok() ? PayloadVerifier::Make(std::move(header).value(), r_.options_.cipher.get(), r_.options_.verify_payload)
                  : Result<std::unique_ptr<PayloadVerifier>>(header.status());
  if (!verifier.ok()) {
    job->header_status = verifier.status();
    job->early.clear();
    return;
  }
  job->verifier = std::move(verifier).value();
  const uint32_t pieces = job->verifier->pieces();
  job->landed.assign(pieces, 0);
  for (uint32_t i = 0; i < pieces; ++i) {
    if (job->verifier->header().PieceLength(i) == 0) Schedule(job, i);  // an empty payload's one piece
  }
  for (const auto& [begin, end] : job->early) AddPayload(job, begin, end);
  job->early.clear();
}

void UringBatch::AddPayload(Job* job, uint64_t begin, uint64_t end) {
  const ChunkHeader& h = job->verifier->header();
  const uint32_t pieces = job->verifier->pieces();
  uint32_t i = h.PieceAt(begin);
  while (begin < end && i < pieces) {
    const uint64_t piece_end = h.PieceOffset(i) + h.PieceLength(i);
    const uint64_t n = std::min(end, piece_end) - begin;
    job->landed[i] += n;
    if (n > 0 && job->landed[i] == h.PieceLength(i)) Schedule(job, i);
    begin += n;
    ++i;
  }
}

void UringBatch::Schedule(Job* job, uint32_t piece) {
  job->refs.fetch_add(1, std::memory_order_relaxed);
  ThreadPool* pool = r_.verify_pool_.get();
  if (pool == nullptr) {
    RunPiece(job, piece);
    Unref(this, job);  // never the last: the I/O still holds its reference
    return;
  }
  verifying_.fetch_add(1, std::memory_order_relaxed);
  pool->Schedule([this, job, piece] {
    RunPiece(job, piece);
    r_.counters_.verify_tasks.fetch_add(1, std::memory_order_relaxed);
    verifying_.fetch_sub(1, std::memory_order_acq_rel);
    Unref(this, job);
  });
}

void UringBatch::RunPiece(Job* job, uint32_t piece) {
  const ScatterList dst = job->read->dst;
  Status s;
  if (job->into_dst) {
    s = job->verifier->Piece(piece, job->dst_in, dst, /*in_place=*/true);
  } else {
    const std::span<const std::byte> payload{job->image + kChunkHeaderSize, job->want};
    s = job->verifier->Piece(piece, GatherList(&payload, 1), dst, /*in_place=*/false);
  }
  if (s.ok()) {
    job->verified.fetch_add(1, std::memory_order_relaxed);
    if (job->read->progress != nullptr) {
      const ChunkHeader& h = job->verifier->header();
      job->read->progress->Verified(h.PieceOffset(piece), h.PieceLength(piece));
    }
    return;
  }
  MutexLock lock(job->mu);
  if (job->verify_status.ok()) job->verify_status = std::move(s);
}

void UringBatch::Unref(UringBatch* batch, Job* job) {
  if (job->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) batch->Complete(job);
}

void UringBatch::Complete(Job* job) {
  ChunkRead& read = *job->read;
  Status s = job->error;
  const uint64_t valid = std::min({job->chunk.read_len, job->eof_at, job->chunk.file_size});
  if (s.ok() && job->retry_buffered) {
    // O_DIRECT refused at read time: read again, buffered, into a whole-file heap buffer. The job's
    // budget is still held, so this takes none (waiting on it here could wait on ourselves).
    s = RereadBuffered(job);
  } else if (s.ok()) {
    if (!job->header_status.ok()) {
      s = job->header_status;
    } else if (job->verifier == nullptr || valid < kChunkHeaderSize + job->want ||
               job->verified.load(std::memory_order_relaxed) != job->verifier->pieces()) {
      MutexLock lock(job->mu);
      s = !job->verify_status.ok() ? job->verify_status : Status::Corruption("chunk truncated while being read: " + read.path);
    }
  }
  read.status = std::move(s);
  if (job->region) r_.slab_.Free(*job->region);
  job->region.reset();
  r_.buffers_.Put(std::move(job->heap));
  job->chunk.fd.Reset();
  ReleaseBudget(job);
  MutexLock lock(done_mu_);
  done_.push_back(job);
  done_cv_.NotifyAll();
}

Status UringBatch::RereadBuffered(Job* job) {
  ChunkRead& read = *job->read;
  AlignedBuffer buf = r_.buffers_.Get(job->chunk.read_len);
  if (buf.data() == nullptr) return Status::IOError("out of memory for a buffered re-read", true);
  Status s = ReopenBuffered(*read.fs, read.path, &job->chunk);
  if (s.ok()) {
    auto got = PreadAll(*read.fs, job->chunk.fd.get(), buf.data(), job->chunk.read_len, read.path);
    s = got.status();
    if (s.ok()) {
      const uint64_t valid = std::min(*got, job->chunk.file_size);
      s = VerifyAndScatter({buf.data(), valid}, job->chunk.file_size, read.expected, read.dst,
                           r_.options_.cipher.get(), nullptr, r_.options_.verify_payload);
    }
  }
  r_.buffers_.Put(std::move(buf));
  return s;
}

void UringBatch::Drain() {
  std::vector<Job*> done;
  {
    MutexLock lock(done_mu_);
    done.swap(done_);
  }
  for (Job* job : done) {
    if (job->header_slot >= 0) ring_.free_headers.push_back(static_cast<uint32_t>(job->header_slot));
    --active_;
    std::erase_if(jobs_, [job](const std::unique_ptr<Job>& j) { return j.get() == job; });
  }
}

void UringBatch::WaitDone() {
  {
    MutexLock lock(done_mu_);
    while (done_.empty()) done_cv_.Wait(done_mu_);
  }
  Drain();
}

// The ring cannot be trusted any more: wait out what the kernel holds, then fail what is left; the
// reads not yet started are done synchronously so the caller still gets answers.
void UringBatch::FailEverything() {
  while (submitted_ > 0) {
    io_uring_cqe* cqe = nullptr;
    const int w = io_uring_wait_cqe(&ring_.ring, &cqe);
    if (w == -EINTR) continue;
    if (w < 0) break;  // the kernel will not answer; buffers are leaked below rather than freed
    --submitted_;
    io_uring_cqe_seen(&ring_.ring, cqe);
  }
  queued_.clear();
  opened_next_.reset();  // that read is retried below
  if (submitted_ == 0) {
    for (auto& job : jobs_) {
      if (job->io_left == 0) continue;  // its I/O is done; it completes on its own
      if (job->error.ok()) job->error = Status::IOError("io_uring failed while reading " + job->read->path, true);
      job->io_left = 0;
      Unref(this, job.get());
    }
    while (active_ > 0) WaitDone();
  } else {
    // The kernel may still write into these buffers: leak them rather than free memory in use. The
    // I/O references are kept, so no verification task completes a job; wait for the tasks to end.
    while (verifying_.load(std::memory_order_acquire) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Drain();
    for (auto& job : jobs_) {
      job->read->status = Status::IOError("io_uring failed while reading " + job->read->path, true);
      ReleaseBudget(job.get());
      (void)job.release();  // NOLINT(bugprone-unused-return-value)
    }
    jobs_.clear();
    active_ = 0;
  }
  for (; next_ < reads_.size(); ++next_) {
    ReadChunkSync(reads_[next_], r_.options_, r_.budget_, r_.buffers_, r_.verify_pool_.get());
  }
}

void UringReader::ReadMany(std::span<ChunkRead> reads) {
  std::unique_ptr<Ring> ring = TakeRing();
  if (ring == nullptr) {  // e.g. out of locked memory for another ring: read on this thread
    for (ChunkRead& r : reads) ReadChunkSync(r, options_, budget_, buffers_, verify_pool_.get());
    ZeroFailedReads(reads);
    return;
  }
  UringBatch batch(*this, *ring, reads);
  if (batch.Run()) {
    PutRing(std::move(ring));
  } else if (batch.kernel_busy()) {
    (void)ring.release();  // NOLINT(bugprone-unused-return-value): its header pages may still be written
  }
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
