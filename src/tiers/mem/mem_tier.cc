#include "tiers/mem/mem_tier.h"

#include "core/xxh3.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/chunk_format.h"
#include "core/latency.h"
#include "core/thread_annotations.h"
#include "core/tier_counters.h"
#include "core/copy_pool.h"
#include "tiers/mem/mem_index.h"
#include "tiers/mem/page_arena.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kDefaultCapacity = 1ull << 30;
constexpr uint64_t kDefaultPage = 64ull << 10;
// The entry pool is sized for one chunk per page, capped so a huge arena of tiny pages does not reserve
// gigabytes of address space for entries; past the cap, the least recently used chunk makes room.
constexpr uint32_t kMaxEntries = 1u << 22;
// A batch is copied in slices of this many bytes, shared out to the copy threads: large enough that
// handing one out costs nothing next to copying it, small enough that one 32 MiB chunk keeps 16 cores
// busy.
constexpr uint64_t kCopySlice = 2ull << 20;

// A chunk pinned for reading: its pages are not reused until unpinned.
struct Pinned {
  uint32_t e = ChunkIndex::kNone;  // kNone: not pinned (the op's status says why)
  uint32_t first_page = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  bool bad = false;  // the copy failed verification
};

class MemTier final : public Tier {
 public:
  MemTier(std::string url, std::unique_ptr<PageArena> arena, bool verify, unsigned copy_threads,
          EvictionPolicy policy)
      : url_(std::move(url)),
        arena_(std::move(arena)),
        verify_(verify),
        copy_threads_(copy_threads),
        policy_(policy) {}

  Status Init() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const uint32_t max_entries = std::min<uint32_t>(arena_->total_pages(), kMaxEntries);
    ghost_.Init(policy_ == EvictionPolicy::kWindow ? max_entries : 0);
    return index_.Init(max_entries);
  }

  const std::string& url() const override { return url_; }
  TierCapabilities capabilities() const override {
    TierCapabilities c;
    c.in_memory = true;
    return c;
  }

  bool Contains(const ChunkId& id) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return index_.Find(id) != ChunkIndex::kNone;
  }

  Status Put(const ChunkId& id, GatherList payload) override EXCLUDES(mu_);
  Status Get(const ChunkId& id, ScatterList dst) override EXCLUDES(mu_);
  void GetMany(std::span<ReadOp> ops) override EXCLUDES(mu_);
  Result<BorrowedChunk> Borrow(const ChunkId& id) override EXCLUDES(mu_);
  Result<BorrowedChunk> Hold(const ChunkId& id) override EXCLUDES(mu_);
  Status Remove(const ChunkId& id) override EXCLUDES(mu_);
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override EXCLUDES(mu_);
  Status Check(const ChunkInfo& info) override EXCLUDES(mu_);
  TierStats Stats() const override EXCLUDES(mu_);

  Status CorruptForTesting(const ChunkId& id) EXCLUDES(mu_);

 private:
  // Makes room for `pages` pages and one entry by evicting unpinned LRU chunks; returns a kWriting
  // entry owning the pages. NoSpace when readers pin too much to make room.
  Result<uint32_t> ReserveLocked(uint32_t pages) REQUIRES(mu_);
  bool EvictOneLocked() REQUIRES(mu_);
  // The least recent unpinned entry of `seg`, or kNone.
  uint32_t VictimLocked(EvictionList seg) REQUIRES(mu_);
  // A chunk referenced again: to the front of its list, or from the window into main.
  void ReferenceLocked(uint32_t e) REQUIRES(mu_);
  void ReleaseLocked(uint32_t e) REQUIRES(mu_);  // frees pages and entry
  void RemoveLocked(uint32_t e) REQUIRES(mu_);   // takes a live entry out; freed now or by its last reader
  void UnpinLocked(uint32_t e) REQUIRES(mu_);
  // xxh3 of the `bytes` stored from `first_page` (a pinned entry's pages: read without the lock).
  uint64_t HashChunk(uint32_t first_page, uint64_t bytes) const;
  // Finds and pins the chunk for a read into `dst` (dst_bytes == UINT64_MAX: any size, for Borrow).
  // Sets `pin` and returns OK, or returns NotFound, InvalidArgument or Corruption (layout mismatch:
  // removed) without pinning.
  Status PinLocked(const ChunkId& id, uint64_t dst_bytes, Pinned* pin) REQUIRES(mu_);
  // Unpins; a chunk whose copy failed verification is taken out of the index first.
  void FinishLocked(const Pinned& pin) REQUIRES(mu_);
  // Copies (and with verify=true checks) every pinned op into its destination, on the copy threads.
  void CopyOut(std::span<ReadOp> ops, std::span<Pinned> pins);
  // Reads a batch: pin all under one lock, copy without it, unpin all under one lock.
  void ReadBatch(std::span<ReadOp> ops) EXCLUDES(mu_);
  CopyPool* Pool();  // created at first use: a tier that only ever sees small reads starts no thread

  const std::string url_;
  // The arena's page lists change only in REQUIRES(mu_) functions (Allocate/Free/free_pages); the
  // bytes of a page are written by the Put that reserved it and read by readers that pin its chunk,
  // without the lock. So the pointer itself is not marked PT_GUARDED_BY.
  const std::unique_ptr<PageArena> arena_;
  const bool verify_;
  const unsigned copy_threads_;  // including the caller's
  const EvictionPolicy policy_;
  std::once_flag pool_once_;
  std::unique_ptr<CopyPool> pool_;  // set once by Pool()
  mutable Mutex mu_;
  ChunkIndex index_ GUARDED_BY(mu_);
  GhostFilter ghost_ GUARDED_BY(mu_);  // keys evicted lately (policy=window)
  uint64_t held_pages_ GUARDED_BY(mu_) = 0;  // pages of the chunks under Hold (at most a quarter)

  TierCounters counters_;
};

Result<uint32_t> MemTier::ReserveLocked(uint32_t pages) {
  while (arena_->free_pages() < pages) {
    if (!EvictOneLocked()) return Status::NoSpace(url_ + ": every chunk is pinned by a reader");
  }
  uint32_t e = index_.AllocEntry();
  while (e == ChunkIndex::kNone) {
    if (!EvictOneLocked()) return Status::NoSpace(url_ + ": every chunk is pinned by a reader");
    e = index_.AllocEntry();
  }
  MemEntry& x = index_.at(e);
  x.pages = pages;
  x.first_page = arena_->Allocate(pages, &x.last_page);
  x.state = EntryState::kWriting;
  return e;
}

uint32_t MemTier::VictimLocked(EvictionList seg) {
  uint32_t e = index_.tail(seg);
  while (e != ChunkIndex::kNone && index_.at(e).pins > 0) e = index_.at(e).prev;
  return e;
}

void MemTier::ReferenceLocked(uint32_t e) {
  if (policy_ == EvictionPolicy::kWindow && index_.at(e).segment == EvictionList::kWindow) {
    index_.Promote(e);
  } else {
    index_.Touch(e);
  }
}

bool MemTier::EvictOneLocked() {
  SegmentState st;
  st.window_used = index_.pages(EvictionList::kWindow);
  st.main_used = index_.pages(EvictionList::kMain);
  st.capacity = arena_->total_pages();
  st.window_tail_age = index_.TailAge(EvictionList::kWindow);
  st.main_tail_age = index_.TailAge(EvictionList::kMain);
  const EvictionList first = SegmentToEvict(policy_, st);
  uint32_t e = VictimLocked(first);
  if (e == ChunkIndex::kNone) {
    e = VictimLocked(first == EvictionList::kMain ? EvictionList::kWindow : EvictionList::kMain);
  }
  if (e == ChunkIndex::kNone) return false;
  NotifyEvicted(index_.at(e).id);
  if (policy_ == EvictionPolicy::kWindow) ghost_.Add(index_.at(e).id.key);
  index_.Erase(e);
  ReleaseLocked(e);
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void MemTier::ReleaseLocked(uint32_t e) {
  const MemEntry& x = index_.at(e);
  arena_->Free(x.first_page, x.last_page, x.pages);
  index_.FreeEntry(e);
}

void MemTier::RemoveLocked(uint32_t e) {
  index_.Erase(e);
  if (index_.at(e).pins > 0) {
    index_.at(e).state = EntryState::kDead;
  } else {
    ReleaseLocked(e);
  }
}

void MemTier::UnpinLocked(uint32_t e) {
  MemEntry& x = index_.at(e);
  if (--x.pins == 0 && x.state == EntryState::kDead) ReleaseLocked(e);
}

uint64_t MemTier::HashChunk(uint32_t first_page, uint64_t bytes) const {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  arena_->ForEachRun(first_page, bytes,
                     [&](std::byte* p, size_t n) { XXH3_64bits_update(&state, p, n); });
  return XXH3_64bits_digest(&state);
}

Status MemTier::Put(const ChunkId& id, GatherList payload) {
  const uint64_t bytes = TotalBytes(payload);
  const uint32_t pages = arena_->PagesFor(bytes);
  if (pages == PageArena::kNoPage) {
    counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
    return Status(Code::kNoSpace, url_ + ": a chunk of " + FormatBytes(bytes) +
                                      " can never fit in capacity " +
                                      FormatBytes(uint64_t{arena_->total_pages()} * arena_->page_bytes()));
  }
  uint32_t e, first_page;
  {
    MutexLock lock(mu_);
    const uint32_t old = index_.Find(id);
    if (old != ChunkIndex::kNone) {  // one copy per key
      ReferenceLocked(old);
      return Status::OK();
    }
    auto r = ReserveLocked(pages);
    if (!r.ok()) {
      counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
      return r.status();
    }
    e = *r;
    first_page = index_.at(e).first_page;
  }
  // The pages belong to this writer alone until published, so the copy runs without the lock.
  arena_->Write(first_page, payload);
  const uint64_t checksum = verify_ ? PayloadChecksum(payload) : 0;
  MutexLock lock(mu_);
  MemEntry& x = index_.at(e);
  if (index_.Find(id) != ChunkIndex::kNone) {  // a concurrent Put of the same chunk won
    ReleaseLocked(e);
    return Status::OK();
  }
  x.id = id;
  x.bytes = bytes;
  x.checksum = checksum;
  index_.Insert(e, SegmentForNewChunk(policy_, ghost_.Contains(id.key)));
  counters_.puts.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_written.fetch_add(bytes, std::memory_order_relaxed);
  return Status::OK();
}

Status MemTier::PinLocked(const ChunkId& id, uint64_t dst_bytes, Pinned* pin) {
  const uint32_t e = index_.Find(id);
  if (e == ChunkIndex::kNone) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::NotFound(url_ + ": no chunk " + id.key.Hex());
  }
  MemEntry& x = index_.at(e);
  if (dst_bytes != UINT64_MAX && dst_bytes != x.bytes) {
    return Status::InvalidArgument(url_ + ": destination holds " + std::to_string(dst_bytes) +
                                   " bytes, chunk has " + std::to_string(x.bytes));
  }
  if (id.layout_fingerprint != 0 && x.id.layout_fingerprint != 0 &&
      id.layout_fingerprint != x.id.layout_fingerprint) {
    RemoveLocked(e);
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(url_ + ": chunk " + id.key.Hex() + " has another layout (removed)");
  }
  ++x.pins;  // its pages are not reused while we copy without the lock
  ReferenceLocked(e);
  *pin = Pinned{e, x.first_page, x.bytes, x.checksum, false};
  return Status::OK();
}

void MemTier::FinishLocked(const Pinned& pin) {
  if (pin.bad && index_.at(pin.e).state == EntryState::kLive) {
    index_.Erase(pin.e);
    index_.at(pin.e).state = EntryState::kDead;  // freed by the last reader, below or elsewhere
  }
  UnpinLocked(pin.e);
}

CopyPool* MemTier::Pool() {
  std::call_once(pool_once_, [this] { pool_ = std::make_unique<CopyPool>(copy_threads_ - 1); });
  return pool_.get();
}

void MemTier::CopyOut(std::span<ReadOp> ops, std::span<Pinned> pins) {
  // Without verification any slice of any chunk can go to any thread. With it, a chunk's hash is one
  // sequential pass over the chunk's bytes in the arena, so a chunk is one task (still in parallel with the
  // batch's other chunks).
  struct Task {
    uint32_t op;
    uint64_t offset, len;
  };
  // Slices go out slice by slice across the chunks (slice 0 of every chunk, then slice 1, ...): a
  // layer-wise reader waits for the first bytes of every chunk (kvtier_op_wait_bytes), which then land
  // first instead of after all but the last chunk.
  std::vector<Task> tasks;
  uint64_t total = 0, largest = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (pins[i].e == ChunkIndex::kNone) continue;
    const uint64_t bytes = pins[i].bytes;
    total += bytes;
    if (verify_ || bytes == 0) {
      tasks.push_back(Task{static_cast<uint32_t>(i), 0, bytes});
    } else {
      largest = std::max(largest, bytes);
    }
  }
  for (uint64_t at = 0; at < largest; at += kCopySlice) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const uint64_t bytes = pins[i].bytes;
      if (pins[i].e == ChunkIndex::kNone || verify_ || bytes <= at) continue;
      tasks.push_back(Task{static_cast<uint32_t>(i), at, std::min(kCopySlice, bytes - at)});
    }
  }
  const std::function<void(size_t)> run = [&](size_t t) {
    const Task& task = tasks[t];
    const Pinned& pin = pins[task.op];
    const ScatterList dst = ops[task.op].dst;
    ReadProgress* progress = ops[task.op].progress;
    if (!verify_) {
      // Nothing to check (the bytes never left this process): a slice is verified once copied.
      arena_->ReadRange(pin.first_page, task.offset, task.len, dst);
      if (progress != nullptr) progress->Verified(task.offset, task.len);
      return;
    }
    // Each block of the arena is hashed right before it is copied, while it is in this core's cache:
    // the check and the copy cost one read of the chunk from DRAM, not two.
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    arena_->ReadRange(pin.first_page, task.offset, task.len, dst,
                      [&state](const std::byte* p, size_t n) { XXH3_64bits_update(&state, p, n); });
    pins[task.op].bad = XXH3_64bits_digest(&state) != pin.checksum;
    if (!pins[task.op].bad && progress != nullptr) progress->Verified(task.offset, task.len);
  };
  if (copy_threads_ <= 1 || tasks.size() < 2 || total < 2 * kCopySlice) {
    for (size_t t = 0; t < tasks.size(); ++t) run(t);
  } else {
    Pool()->Run(tasks.size(), run);
  }
}

void MemTier::ReadBatch(std::span<ReadOp> ops) {
  std::vector<Pinned> pins(ops.size());
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].status = PinLocked(ops[i].id, TotalBytes(ops[i].dst), &pins[i]);
  }
  CopyOut(ops, pins);
  {
    MutexLock lock(mu_);
    for (const Pinned& pin : pins) {
      if (pin.e != ChunkIndex::kNone) FinishLocked(pin);
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (pins[i].e == ChunkIndex::kNone) continue;
    if (pins[i].bad) {
      for (const auto& piece : ops[i].dst) std::memset(piece.data(), 0, piece.size());  // Tier::Get contract
      counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      ops[i].status = Status::Corruption(url_ + ": chunk " + ops[i].id.key.Hex() + " failed its checksum (removed)");
      continue;
    }
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_read.fetch_add(pins[i].bytes, std::memory_order_relaxed);
  }
}

Status MemTier::Get(const ChunkId& id, ScatterList dst) {
  ScopedLatency timer(&counters_.get_latency);
  ReadOp op{id, dst, Status::OK()};
  ReadBatch({&op, 1});
  return op.status;
}

void MemTier::GetMany(std::span<ReadOp> ops) {
  BatchLatency timer(&counters_.get_latency, ops.size());
  ReadBatch(ops);
}

Result<BorrowedChunk> MemTier::Borrow(const ChunkId& id) {
  Pinned pin;
  {
    MutexLock lock(mu_);
    KVTIER_RETURN_IF_ERROR(PinLocked(id, UINT64_MAX, &pin));
  }
  if (verify_) pin.bad = HashChunk(pin.first_page, pin.bytes) != pin.checksum;
  if (pin.bad) {
    {
      MutexLock lock(mu_);
      FinishLocked(pin);
    }
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(url_ + ": chunk " + id.key.Hex() + " failed its checksum (removed)");
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_read.fetch_add(pin.bytes, std::memory_order_relaxed);
  return BorrowedChunk(arena_->Runs(pin.first_page, pin.bytes), [this, pin] {
    MutexLock lock(mu_);
    FinishLocked(pin);
  });
}

Result<BorrowedChunk> MemTier::Hold(const ChunkId& id) {
  Pinned pin;
  uint32_t pages;
  {
    MutexLock lock(mu_);
    const uint32_t e = index_.Find(id);
    if (e == ChunkIndex::kNone) return Status::NotFound(url_ + ": no chunk " + id.key.Hex());
    MemEntry& x = index_.at(e);
    // A quarter at most: the other three keep room for Puts however many copies are queued.
    if ((held_pages_ + x.pages) * 4 > arena_->total_pages()) {
      return Status::NoSpace(url_ + ": a quarter of the capacity is held already");
    }
    ++x.pins;  // no ReferenceLocked, no hit: holding is not a use
    held_pages_ += x.pages;
    pages = x.pages;
    pin = Pinned{e, x.first_page, x.bytes, x.checksum, false};
  }
  // Verified as a Borrow is: what a queued copy writes to a lower tier gets a new checksum there.
  if (verify_) pin.bad = HashChunk(pin.first_page, pin.bytes) != pin.checksum;
  auto release = [this, pin, pages] {
    MutexLock lock(mu_);
    held_pages_ -= pages;
    FinishLocked(pin);  // a bad chunk is removed
  };
  if (pin.bad) {
    release();
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(url_ + ": chunk " + id.key.Hex() + " failed its checksum (removed)");
  }
  return BorrowedChunk(arena_->Runs(pin.first_page, pin.bytes), std::move(release));
}

Status MemTier::Remove(const ChunkId& id) {
  MutexLock lock(mu_);
  const uint32_t e = index_.Find(id);
  if (e != ChunkIndex::kNone) RemoveLocked(e);
  return Status::OK();
}

Status MemTier::List(const std::function<bool(const ChunkInfo&)>& fn) {
  // A snapshot, so `fn` may call back into the tier without deadlocking.
  std::vector<ChunkInfo> infos;
  {
    MutexLock lock(mu_);
    infos.reserve(index_.live());
    for (EvictionList seg : {EvictionList::kMain, EvictionList::kWindow}) {
      for (uint32_t e = index_.head(seg); e != ChunkIndex::kNone; e = index_.at(e).next) {
        const MemEntry& x = index_.at(e);
        infos.push_back(ChunkInfo{x.id, uint64_t{x.pages} * arena_->page_bytes()});
      }
    }
  }
  for (const ChunkInfo& info : infos) {
    if (!fn(info)) break;
  }
  return Status::OK();
}

Status MemTier::Check(const ChunkInfo& info) {
  uint32_t e, first_page;
  uint64_t bytes, checksum;
  {
    MutexLock lock(mu_);
    e = index_.Find(info.id);
    if (e == ChunkIndex::kNone) return Status::NotFound(url_ + ": no chunk " + info.id.key.Hex());
    if (!verify_) return Status::OK();  // no checksum kept: nothing to check against
    MemEntry& x = index_.at(e);
    ++x.pins;
    first_page = x.first_page;
    bytes = x.bytes;
    checksum = x.checksum;
  }
  const bool bad = HashChunk(first_page, bytes) != checksum;
  MutexLock lock(mu_);
  if (bad && index_.at(e).state == EntryState::kLive) {
    index_.Erase(e);
    index_.at(e).state = EntryState::kDead;
  }
  UnpinLocked(e);
  if (!bad) return Status::OK();
  counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
  return Status::Corruption(url_ + ": chunk " + info.id.key.Hex() + " failed its checksum (removed)");
}

TierStats MemTier::Stats() const {
  TierStats s;
  s.url = url_;
  counters_.FillInto(s);
  s.capacity_bytes = uint64_t{arena_->total_pages()} * arena_->page_bytes();
  MutexLock lock(mu_);
  s.chunks = index_.live();
  s.usage_bytes = uint64_t{arena_->total_pages() - arena_->free_pages()} * arena_->page_bytes();
  return s;
}

Status MemTier::CorruptForTesting(const ChunkId& id) {
  MutexLock lock(mu_);
  const uint32_t e = index_.Find(id);
  if (e == ChunkIndex::kNone) return Status::NotFound("no such chunk");
  bool done = false;
  arena_->ForEachRun(index_.at(e).first_page, index_.at(e).bytes, [&](std::byte* p, size_t n) {
    if (!done && n > 0) p[n / 2] ^= std::byte{0x5A};
    done = true;
  });
  return done ? Status::OK() : Status::NotFound("chunk has no payload bytes to corrupt");
}

}  // namespace

Result<std::unique_ptr<Tier>> OpenMemTier(const TierUrl& url, const TierOpenOptions& open) {
  KVTIER_RETURN_IF_ERROR(url.CheckKnown({"capacity", "page", "verify", "threads", "populate", "policy"}));
  if (!url.path.empty() && url.path != "/") {
    return Status::InvalidArgument("mem:// takes no path, got '" + url.path + "'");
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t capacity, url.GetSize("capacity", kDefaultCapacity));
  // A capacity this host cannot hold would be accepted and then fail (or swap, or meet the OOM killer)
  // only once it fills: refused at open instead (issue 23).
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    const uint64_t host = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
    if (capacity > host) {
      return Status::InvalidArgument("mem:// capacity " + FormatBytes(capacity) + " is more than this host's memory (" +
                                     FormatBytes(host) + ")");
    }
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t page, url.GetSize("page", kDefaultPage));
  KVTIER_ASSIGN_OR_RETURN(bool verify, url.GetBool("verify", false));
  KVTIER_ASSIGN_OR_RETURN(uint64_t threads, url.GetUint("threads", 0, 256));
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  KVTIER_ASSIGN_OR_RETURN(const bool populate, url.GetBool("populate", false));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PageArena> arena, PageArena::Create(capacity, page, open.host_allocator));
  // The whole arena committed at open instead of page by page as chunks arrive (opt-in: by default a
  // mem:// tier costs only the memory it holds).
  if (populate) KVTIER_RETURN_IF_ERROR(arena->Populate());
  KVTIER_ASSIGN_OR_RETURN(const EvictionPolicy policy, EvictionPolicyOf(url));
  auto tier = std::make_unique<MemTier>(url.ToString(), std::move(arena), verify,
                                        static_cast<unsigned>(threads), policy);
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<Tier>(std::move(tier));
}

Status CorruptMemChunkForTesting(Tier& tier, const ChunkId& id) {
  auto* mem = dynamic_cast<MemTier*>(&tier);
  if (mem == nullptr) return Status::InvalidArgument(tier.url() + " is not a mem:// tier");
  return mem->CorruptForTesting(id);
}

}  // namespace kvtier::internal
