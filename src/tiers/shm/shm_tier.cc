#include "tiers/shm/shm_tier.h"

#include <grp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/chunk_cipher.h"
#include "core/chunk_format.h"
#include "core/copy_pool.h"
#include "core/latency.h"
#include "core/stream_copy.h"
#include "core/tier_counters.h"
#include "core/xxh3.h"
#include "tiers/shm/shm_pool.h"

namespace kvtier::internal {
namespace {

using shm::kNone;
using shm::kPieceBytes;
using shm::ShmPool;
using shm::Slot;

constexpr uint64_t kHashBlock = 256ull << 10;  // hashed, then copied while still in this core's cache

// Orders a lock-free reader's copy before its re-check of the slot's state word (a seqlock's read side).
// GCC's TSan does not support thread fences; it gets a compiler barrier (x86 keeps loads in order).
inline void ReadFence() {
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

uint64_t PiecesOf(uint64_t bytes) { return std::max<uint64_t>(1, (bytes + kPieceBytes - 1) / kPieceBytes); }
// A chunk's table, before its payload: the pieces' xxh3-64 sums; in an encrypted pool then the nonce
// base (12 bytes, padded to 16) and the pieces' GCM tags. Rounded up to 64 bytes.
uint64_t SumsBytes(uint64_t bytes) { return PiecesOf(bytes) * 8; }
uint64_t TableUsed(uint64_t bytes, bool sealed) {
  return SumsBytes(bytes) + (sealed ? 16 + PiecesOf(bytes) * internal::kTagBytes : 0);
}
uint64_t TableBytes(uint64_t bytes, bool sealed) { return (TableUsed(bytes, sealed) + 63) / 64 * 64; }

// Copies between a contiguous buffer and the runs of a chunk's pages.
void FromRuns(std::span<const std::span<std::byte>> runs, std::byte* to) {
  for (const auto& run : runs) {
    std::memcpy(to, run.data(), run.size());
    to += run.size();
  }
}
void ToRuns(std::span<const std::span<std::byte>> runs, const std::byte* from) {
  for (const auto& run : runs) {
    std::memcpy(run.data(), from, run.size());
    from += run.size();
  }
}

// What each sealed piece authenticates besides its bytes: the chunk's identity, its length and the
// piece's index, so no piece can be moved to another chunk, another length or another place.
std::array<std::byte, 84> PieceAad(const ChunkId& id, uint64_t bytes, uint32_t piece) {
  std::array<std::byte, 84> aad{};
  std::memcpy(aad.data(), id.ns.data(), 32);
  std::memcpy(aad.data() + 32, id.key.bytes.data(), 32);
  std::memcpy(aad.data() + 64, &id.layout_fingerprint, 8);
  std::memcpy(aad.data() + 72, &bytes, 8);
  std::memcpy(aad.data() + 80, &piece, 4);
  return aad;
}

// The pool's key check: 64 bits of xxh3 over a key derived (HKDF) for a fixed pseudo-namespace, so
// openers with another key are refused without the key being guessable from it. Never 0.
Result<uint64_t> KeyCheck(const internal::ChunkCipher& cipher) {
  Digest label{};
  const char tag[] = "kvtier shm:// pool key check";
  std::memcpy(label.data(), tag, sizeof(tag) - 1);
  internal::NamespaceKey key;
  KVTIER_RETURN_IF_ERROR(cipher.DeriveKey(label, &key));
  const uint64_t sum = XXH3_64bits(key.data(), internal::kCipherKeyBytes);
  return sum == 0 ? 1 : sum;
}

// The RAII form of the pool lock; ok() false when the lock is unusable.
class PoolLock {
 public:
  explicit PoolLock(ShmPool& p) : pool_(p), status_(p.Lock()) {}
  ~PoolLock() {
    if (status_.ok()) pool_.Unlock();
  }
  const Status& status() const { return status_; }
  PoolLock(const PoolLock&) = delete;
  PoolLock& operator=(const PoolLock&) = delete;

 private:
  ShmPool& pool_;
  Status status_;
};

// A chunk held for reading: pinned (read-write openers) or observed at `word` (lock-free readers).
struct Held {
  uint32_t s = kNone;
  uint64_t word = 0;
  uint32_t first = 0;
  uint64_t pages = 0, bytes = 0, table_sum = 0;
  std::vector<uint64_t> sums;
  bool bad = false;
  // Encrypted pools: the chunk's identity, nonce base, tags and its namespace's key.
  ChunkId id;
  Nonce nonce{};
  std::vector<Tag> tags;
  std::unique_ptr<NamespaceKey> key;
};

class ShmTier final : public Tier {
 public:
  ShmTier(std::string url, std::unique_ptr<ShmPool> pool, unsigned threads, bool verify,
          std::shared_ptr<const ChunkCipher> cipher)
      : url_(std::move(url)), pool_(std::move(pool)), threads_(threads), verify_(verify), cipher_(std::move(cipher)) {
    pool_->SetChainCheck([this](uint32_t s) { return ChunkIntact(s); });
  }

  const std::string& url() const override { return url_; }
  TierCapabilities capabilities() const override {
    TierCapabilities c;
    c.in_memory = true;
    c.persistent = true;  // the pool outlives this process (not a reboot)
    c.shared = true;
    c.read_only = pool_->read_only();
    return c;
  }

  bool Contains(const ChunkId& id) override {
    if (pool_->read_only()) return FindLockFree(id) != kNone;
    if (!pool_->CheckFile(false).ok()) return false;
    PoolLock lock(*pool_);
    return lock.status().ok() && pool_->FindLocked(id) != kNone;
  }
  Status Put(const ChunkId& id, GatherList payload) override;
  Status Get(const ChunkId& id, ScatterList dst) override {
    ScopedLatency timer(&counters_.get_latency);
    ReadOp op{id, dst, Status::OK()};
    ReadBatch({&op, 1});
    return op.status;
  }
  void GetMany(std::span<ReadOp> ops) override {
    BatchLatency timer(&counters_.get_latency, ops.size());
    ReadBatch(ops);
  }
  // A verified view straight out of the arena, pinned until released. An encrypted pool holds only
  // ciphertext there: its chunks are lent as a private copy, opened and authenticated (BorrowOpened).
  Result<BorrowedChunk> Borrow(const ChunkId& id) override;
  std::vector<std::span<std::byte>> HostRegions() override {
    if (pool_->read_only() || sealed()) return {};
    return {pool_->mapping()};
  }
  Status Remove(const ChunkId& id) override;
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override;
  Status Check(const ChunkInfo& info) override;
  TierStats Stats() const override;
  void SetEvictionListener(EvictionListener listener) override { pool_->SetEvictionListener(std::move(listener)); }

  ShmPool& pool() { return *pool_; }
  bool sealed() const { return cipher_ != nullptr; }

 private:
  uint32_t FindLockFree(const ChunkId& id) const;
  Result<BorrowedChunk> BorrowOpened(const ChunkId& id);
  // Pins (or, read-only, observes) the chunk for a read of `dst_bytes` (UINT64_MAX: any size).
  Status HoldLocked(const ChunkId& id, uint64_t dst_bytes, Held* h);
  Status HoldLockFree(const ChunkId& id, uint64_t dst_bytes, Held* h);
  // Reads and checks the piece-checksum table; false when it fails its own checksum.
  bool LoadTable(Held* h) const;
  // Hashes piece `i` of a held chunk and, with `copy`, copies it into `dst` (and opens it there in an
  // encrypted pool); true when it matches its sum (and authenticates).
  bool Piece(const Held& h, uint64_t i, ScatterList dst, bool copy) const;
  // Slot s's table and every piece match their checksums (the pool's repair asks, lock held).
  bool ChunkIntact(uint32_t s) const;
  // Verifies every piece of the held chunks (copying into the ops' destinations when given) on the copy threads.
  void VerifyAll(std::span<Held> held, std::span<ReadOp> ops);
  void Release(std::span<Held> held);  // unpins; removes chunks that failed verification
  void ReadBatch(std::span<ReadOp> ops);
  CopyPool* Pool() {
    std::call_once(pool_once_, [this] { copy_pool_ = std::make_unique<CopyPool>(threads_ - 1); });
    return copy_pool_.get();
  }

  const std::string url_;
  const std::unique_ptr<ShmPool> pool_;
  const unsigned threads_;
  const bool verify_;  // false (verify=false): reads copy without checking the piece checksums
  const std::shared_ptr<const ChunkCipher> cipher_;  // key_file=: every chunk sealed (AES-256-GCM per piece)
  std::once_flag pool_once_;
  std::unique_ptr<CopyPool> copy_pool_;
  TierCounters counters_;
};

Status ShmTier::Put(const ChunkId& id, GatherList payload) {
  if (pool_->read_only()) return Status::NotSupported(url_ + " is open read-only");
  const uint64_t bytes = TotalBytes(payload);
  const bool sealed = cipher_ != nullptr;
  const uint64_t table = TableBytes(bytes, sealed), pb = pool_->page_bytes();
  const uint64_t pages = (table + bytes + pb - 1) / pb;
  if (bytes > kMaxChunkPayload || pages * pb > pool_->header().capacity_bytes.load(std::memory_order_relaxed)) {
    counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
    return Status::NoSpace(url_ + ": a chunk of " + FormatBytes(bytes) + " can never fit in capacity " +
                           FormatBytes(pool_->header().capacity_bytes.load(std::memory_order_relaxed)));
  }
  KVTIER_RETURN_IF_ERROR(pool_->CheckFile(true));
  NamespaceKey key;
  Nonce nonce{};
  if (sealed) {
    KVTIER_RETURN_IF_ERROR(cipher_->DeriveKey(id.ns, &key));
    KVTIER_ASSIGN_OR_RETURN(nonce, ChunkCipher::RandomNonceBase());
  }
  uint32_t s;
  {
    PoolLock lock(*pool_);
    KVTIER_RETURN_IF_ERROR(lock.status());
    if (const uint32_t old = pool_->FindLocked(id); old != kNone) {  // one copy per key
      pool_->slot(old).ref.store(1, std::memory_order_relaxed);
      return Status::OK();
    }
    auto r = pool_->ReserveLocked(pages);
    if (!r.ok()) {
      counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
      return r.status();
    }
    s = *r;
  }
  // The pages are this writer's alone until published: the bytes and checksums go in without the lock.
  Slot& x = pool_->slot(s);
  const uint64_t pg = x.pages.load(std::memory_order_relaxed);
  const uint32_t first = static_cast<uint32_t>(pg);
  std::vector<uint64_t> sums(PiecesOf(bytes));
  // The table as stored: sums, then (sealed) the nonce base and the tags.
  std::vector<std::byte> tbl(TableUsed(bytes, sealed));
  if (sealed) std::memcpy(tbl.data() + SumsBytes(bytes), nonce.data(), nonce.size());
  std::vector<std::byte> sealed_piece;
  std::vector<std::span<const std::byte>> sub;
  for (uint64_t i = 0; i < sums.size(); ++i) {
    const uint64_t off = i * kPieceBytes, len = std::min(kPieceBytes, bytes - std::min(bytes, off));
    SubList(payload, off, len, sub);
    if (sealed) {  // the piece is sealed into a buffer; the arena gets (and the sum covers) the ciphertext
      sealed_piece.resize(len);
      Tag tag;
      const auto aad = PieceAad(id, bytes, static_cast<uint32_t>(i));
      if (Status st = ChunkCipher::Seal(key, ChunkCipher::PieceNonce(nonce, static_cast<uint32_t>(i)), aad,
                                        GatherList(sub), sealed_piece, &tag);
          !st.ok()) {
        PoolLock lock(*pool_);
        if (lock.status().ok()) pool_->FreeLocked(s);  // the reservation goes back; nothing was published
        counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
        return st;
      }
      std::memcpy(tbl.data() + SumsBytes(bytes) + 16 + i * kTagBytes, tag.data(), kTagBytes);
      sub.assign(1, std::span<const std::byte>(sealed_piece));
    }
    sums[i] = PayloadChecksum(GatherList(sub));
    uint64_t at = 0;
    for (const auto& run : pool_->Runs(first, pages, table + off, len)) {
      std::vector<std::span<const std::byte>> part;
      SubList(GatherList(sub), at, run.size(), part);
      std::byte* to = run.data();
      for (const auto& p : part) {
        StreamCopy(to, p.data(), p.size());
        to += p.size();
      }
      at += run.size();
    }
  }
  std::memcpy(tbl.data(), sums.data(), sums.size() * 8);
  ToRuns(pool_->Runs(first, pages, 0, tbl.size()), tbl.data());
  const uint64_t table_sum = XXH3_64bits(tbl.data(), tbl.size());
  PoolLock lock(*pool_);
  KVTIER_RETURN_IF_ERROR(lock.status());
  ShmPool::SetId(x, id);
  x.bytes.store(bytes, std::memory_order_relaxed);
  x.table_sum.store(table_sum, std::memory_order_relaxed);
  if (pool_->PublishLocked(s)) {  // one store makes it visible: bytes, sums and identity are in place
    counters_.puts.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_written.fetch_add(bytes, std::memory_order_relaxed);
  }
  return Status::OK();
}

uint32_t ShmTier::FindLockFree(const ChunkId& id) const {
  for (uint64_t i = 0; i < pool_->slot_count(); ++i) {
    const Slot& x = pool_->slot(static_cast<uint32_t>(i));
    if (shm::StateOf(x.word.load(std::memory_order_acquire)) == shm::kPublished && ShmPool::SameId(x, id)) {
      return static_cast<uint32_t>(i);
    }
  }
  return kNone;
}

namespace {

// InvalidArgument unless the caller's destination (UINT64_MAX: none) holds exactly the chunk's bytes.
Status CheckDestination(const std::string& url, uint64_t dst_bytes, uint64_t bytes) {
  if (dst_bytes == UINT64_MAX || dst_bytes == bytes) return Status::OK();
  return Status::InvalidArgument(url + ": destination holds " + std::to_string(dst_bytes) + " bytes, chunk has " +
                                 std::to_string(bytes));
}

// What a reader keeps of slot `s` (read with state word `word`) while it holds the chunk; `bytes` is the
// length the caller read once and checked (never read again: a lock-free reader's slot may change).
void Describe(const Slot& x, uint32_t s, uint64_t word, uint64_t bytes, const ChunkId& id, Held* h) {
  const uint64_t pg = x.pages.load(std::memory_order_relaxed);
  h->s = s;
  h->word = word;
  h->first = static_cast<uint32_t>(pg);
  h->pages = pg >> 32;
  h->bytes = bytes;
  h->table_sum = x.table_sum.load(std::memory_order_relaxed);
  h->id = id;
}

}  // namespace

Status ShmTier::HoldLocked(const ChunkId& id, uint64_t dst_bytes, Held* h) {
  const uint32_t s = pool_->FindLocked(id);
  if (s == kNone) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::NotFound(url_ + ": no chunk " + id.key.Hex());
  }
  Slot& x = pool_->slot(s);
  const uint64_t bytes = x.bytes.load(std::memory_order_relaxed);
  KVTIER_RETURN_IF_ERROR(CheckDestination(url_, dst_bytes, bytes));
  const uint64_t layout = x.layout.load(std::memory_order_relaxed);
  if (id.layout_fingerprint != 0 && layout != 0 && id.layout_fingerprint != layout) {
    pool_->RemoveLocked(s);
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(url_ + ": chunk " + id.key.Hex() + " has another layout (removed)");
  }
  if (!pool_->PinLocked(s)) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::NotFound(url_ + ": chunk " + id.key.Hex() + " not readable now (every pin record is taken)");
  }
  x.ref.store(1, std::memory_order_relaxed);
  Describe(x, s, x.word.load(std::memory_order_relaxed), bytes, id, h);
  return Status::OK();
}

Status ShmTier::HoldLockFree(const ChunkId& id, uint64_t dst_bytes, Held* h) {
  const uint32_t s = FindLockFree(id);
  const Slot& x = pool_->slot(s == kNone ? 0 : s);
  const uint64_t word = s == kNone ? 0 : x.word.load(std::memory_order_acquire);
  if (s == kNone || shm::StateOf(word) != shm::kPublished) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::NotFound(url_ + ": no chunk " + id.key.Hex());
  }
  const uint64_t bytes = x.bytes.load(std::memory_order_relaxed);
  KVTIER_RETURN_IF_ERROR(CheckDestination(url_, dst_bytes, bytes));
  *h = Held{};
  Describe(x, s, word, bytes, id, h);
  return Status::OK();
}

bool ShmTier::LoadTable(Held* h) const {
  // A slot whose length does not fit its own pages (a damaged pool) is corrupt, never sized from.
  const bool sealed = cipher_ != nullptr;
  if (h->bytes > kMaxChunkPayload || h->pages > pool_->page_count() ||
      TableBytes(h->bytes, sealed) + h->bytes > h->pages * pool_->page_bytes()) {
    return false;
  }
  std::vector<std::byte> tbl(TableUsed(h->bytes, sealed));
  const auto runs = pool_->Runs(h->first, h->pages, 0, tbl.size());
  if (runs.empty()) return false;
  FromRuns(runs, tbl.data());
  if (XXH3_64bits(tbl.data(), tbl.size()) != h->table_sum) return false;
  const uint64_t pieces = PiecesOf(h->bytes);
  h->sums.assign(pieces, 0);
  std::memcpy(h->sums.data(), tbl.data(), pieces * 8);
  if (!sealed) return true;
  std::memcpy(h->nonce.data(), tbl.data() + pieces * 8, h->nonce.size());
  h->tags.assign(pieces, Tag{});
  for (uint64_t i = 0; i < pieces; ++i) std::memcpy(h->tags[i].data(), tbl.data() + pieces * 8 + 16 + i * kTagBytes, kTagBytes);
  h->key = std::make_unique<NamespaceKey>();
  return cipher_->DeriveKey(h->id.ns, h->key.get()).ok();
}

bool ShmTier::ChunkIntact(uint32_t s) const {
  const Slot& x = pool_->slot(s);
  Held h;
  Describe(x, s, x.word.load(std::memory_order_relaxed), x.bytes.load(std::memory_order_relaxed), ShmPool::IdOf(x), &h);
  if (!LoadTable(&h)) return false;
  for (uint64_t i = 0; i < h.sums.size(); ++i) {
    if (!Piece(h, i, ScatterList{}, /*copy=*/false)) return false;
  }
  return true;
}

bool ShmTier::Piece(const Held& h, uint64_t i, ScatterList dst, bool copy) const {
  const uint64_t off = i * kPieceBytes, len = std::min(kPieceBytes, h.bytes - std::min(h.bytes, off));
  const auto runs = pool_->Runs(h.first, h.pages, TableBytes(h.bytes, cipher_ != nullptr) + off, len);
  if (runs.empty() && len > 0) return false;
  std::vector<std::span<std::byte>> out;
  if (copy) SubList(dst, off, len, out);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  size_t oi = 0, oat = 0;
  for (const auto& run : runs) {
    for (uint64_t at = 0; at < run.size();) {
      const uint64_t n = std::min<uint64_t>(kHashBlock, run.size() - at);
      const std::byte* src = run.data() + at;
      if (verify_ || out.empty()) XXH3_64bits_update(&state, src, n);
      for (uint64_t done = 0; done < n && oi < out.size();) {  // the same block into the destination pieces
        const uint64_t m = std::min<uint64_t>(n - done, out[oi].size() - oat);
        StreamCopyPiece(out[oi].data() + oat, src + done, m);  // fenced once, below
        done += m;
        oat += m;
        if (oat == out[oi].size()) {
          ++oi;
          oat = 0;
        }
      }
      at += n;
    }
  }
  if (!out.empty()) StreamFence();  // one fence per piece, not one per block: a fence waits for every store
  const bool sum_ok = (!verify_ && !out.empty()) || XXH3_64bits_digest(&state) == h.sums[i];
  if (!sum_ok || cipher_ == nullptr || !copy) return sum_ok;
  // Sealed: the ciphertext now in the destination is opened there, and must authenticate.
  std::vector<std::span<const std::byte>> in(out.begin(), out.end());
  const auto aad = PieceAad(h.id, h.bytes, static_cast<uint32_t>(i));
  return ChunkCipher::Open(*h.key, ChunkCipher::PieceNonce(h.nonce, static_cast<uint32_t>(i)), aad, GatherList(in),
                           ScatterList(out), h.tags[i])
      .ok();
}

void ShmTier::VerifyAll(std::span<Held> held, std::span<ReadOp> ops) {
  struct Task {
    uint32_t h;
    uint64_t piece;
  };
  std::vector<Task> tasks;
  uint64_t total = 0;
  for (size_t k = 0; k < held.size(); ++k) {
    if (held[k].s == kNone) continue;
    if (!LoadTable(&held[k])) {
      held[k].bad = true;
      continue;
    }
    total += held[k].bytes;
    for (uint64_t i = 0; i < held[k].sums.size(); ++i) tasks.push_back(Task{static_cast<uint32_t>(k), i});
  }
  std::vector<char> bad(tasks.size(), 0);
  // A writable opener's pin keeps the chunk's pages from reuse, so a piece verified in the destination
  // stays valid: it is reported at once (a lock-free reader learns only at the end whether it read a
  // chunk that stayed put, so it reports nothing and the Store reports the chunk whole).
  const bool report = !ops.empty() && !pool_->read_only();
  const std::function<void(size_t)> run = [&](size_t t) {
    const Held& h = held[tasks[t].h];
    bad[t] = !Piece(h, tasks[t].piece, ops.empty() ? ScatterList{} : ops[tasks[t].h].dst, !ops.empty());
    ReadProgress* progress = report ? ops[tasks[t].h].progress : nullptr;
    if (!bad[t] && progress != nullptr) {
      const uint64_t at = tasks[t].piece * kPieceBytes;
      progress->Verified(at, std::min<uint64_t>(kPieceBytes, h.bytes - at));
    }
  };
  if (threads_ <= 1 || tasks.size() < 2 || total < 4 * kPieceBytes) {
    for (size_t t = 0; t < tasks.size(); ++t) run(t);
  } else {
    Pool()->Run(tasks.size(), run);
  }
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (bad[t]) held[tasks[t].h].bad = true;
  }
}

void ShmTier::Release(std::span<Held> held) {
  PoolLock lock(*pool_);
  if (!lock.status().ok()) return;
  for (const Held& h : held) {
    if (h.s == kNone) continue;
    Slot& x = pool_->slot(h.s);
    if (h.bad && x.word.load(std::memory_order_relaxed) == h.word) pool_->RemoveLocked(h.s);
    pool_->UnpinLocked(h.s);
  }
}

void ShmTier::ReadBatch(std::span<ReadOp> ops) {
  std::vector<Held> held(ops.size());
  auto zero = [](ScatterList dst) {
    for (const auto& piece : dst) std::memset(piece.data(), 0, piece.size());
  };
  if (Status s = pool_->CheckFile(false); !s.ok()) {
    for (ReadOp& op : ops) {
      zero(op.dst);
      op.status = s;
    }
    return;
  }
  const bool ro = pool_->read_only();
  if (ro) {
    for (size_t i = 0; i < ops.size(); ++i) ops[i].status = HoldLockFree(ops[i].id, TotalBytes(ops[i].dst), &held[i]);
  } else {
    PoolLock lock(*pool_);
    for (size_t i = 0; i < ops.size(); ++i) {
      ops[i].status = lock.status().ok() ? HoldLocked(ops[i].id, TotalBytes(ops[i].dst), &held[i]) : lock.status();
    }
  }
  VerifyAll(held, ops);
  if (ro) {
    ReadFence();
  } else {
    Release(held);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const Held& h = held[i];
    if (h.s == kNone) {
      if (!ops[i].status.ok() && !ops[i].status.IsNotFound()) zero(ops[i].dst);
      continue;
    }
    // A lock-free reader whose chunk changed state while it copied read bytes that may be reused: a miss.
    if (ro && pool_->slot(h.s).word.load(std::memory_order_acquire) != h.word) {
      zero(ops[i].dst);
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      ops[i].status = Status::NotFound(url_ + ": chunk " + ops[i].id.key.Hex() + " went away while read");
      continue;
    }
    if (h.bad) {
      zero(ops[i].dst);
      counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      ops[i].status = Status::Corruption(url_ + ": chunk " + ops[i].id.key.Hex() + " failed its checksum" +
                                         (ro ? std::string(" (left in place: read-only)") : std::string(" (removed)")));
      continue;
    }
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_read.fetch_add(h.bytes, std::memory_order_relaxed);
  }
}

Result<BorrowedChunk> ShmTier::Borrow(const ChunkId& id) {
  if (pool_->read_only()) return Status::NotSupported(url_ + ": a read-only opener cannot pin chunks");
  KVTIER_RETURN_IF_ERROR(pool_->CheckFile(false));
  if (cipher_ != nullptr) return BorrowOpened(id);
  Held h;
  {
    PoolLock lock(*pool_);
    KVTIER_RETURN_IF_ERROR(lock.status());
    KVTIER_RETURN_IF_ERROR(HoldLocked(id, UINT64_MAX, &h));
  }
  VerifyAll({&h, 1}, {});
  if (h.bad) {
    Release({&h, 1});
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(url_ + ": chunk " + id.key.Hex() + " failed its checksum (removed)");
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_read.fetch_add(h.bytes, std::memory_order_relaxed);
  std::vector<std::span<const std::byte>> view;
  for (const auto& run : pool_->Runs(h.first, h.pages, TableBytes(h.bytes, false), h.bytes)) view.emplace_back(run);
  const uint32_t s = h.s;
  return BorrowedChunk(std::move(view), [this, s] {
    PoolLock lock(*pool_);
    if (lock.status().ok()) pool_->UnpinLocked(s);
  });
}

Result<BorrowedChunk> ShmTier::BorrowOpened(const ChunkId& id) {
  uint64_t bytes = 0;
  {
    std::optional<PoolLock> lock;  // a read-only opener looks without it
    if (!pool_->read_only()) {
      lock.emplace(*pool_);
      KVTIER_RETURN_IF_ERROR(lock->status());
    }
    const uint32_t s = pool_->read_only() ? FindLockFree(id) : pool_->FindLocked(id);
    if (s == kNone) {
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      return Status::NotFound(url_ + ": no chunk " + id.key.Hex());
    }
    bytes = pool_->slot(s).bytes.load(std::memory_order_relaxed);
    if (bytes > kMaxChunkPayload) bytes = 0;  // a damaged length: the read below reports it
  }
  auto copy = std::make_shared<std::vector<std::byte>>(bytes);
  const std::span<std::byte> piece(*copy);
  ReadOp op{id, ScatterList(&piece, 1), Status::OK()};
  ReadBatch({&op, 1});
  if (!op.status.ok()) return op.status;
  std::vector<std::span<const std::byte>> view;
  if (bytes > 0) view.emplace_back(*copy);
  return BorrowedChunk(std::move(view), [copy] {});  // the copy goes with the last reference to it
}

Status ShmTier::Remove(const ChunkId& id) {
  if (pool_->read_only()) return Status::NotSupported(url_ + " is open read-only");
  KVTIER_RETURN_IF_ERROR(pool_->CheckFile(true));
  PoolLock lock(*pool_);
  KVTIER_RETURN_IF_ERROR(lock.status());
  if (const uint32_t s = pool_->FindLocked(id); s != kNone) pool_->RemoveLocked(s);
  return Status::OK();
}

Status ShmTier::List(const std::function<bool(const ChunkInfo&)>& fn) {
  KVTIER_RETURN_IF_ERROR(pool_->CheckFile(false));
  std::vector<ChunkInfo> infos;  // a snapshot, so `fn` may call back into the tier
  auto collect = [&] {
    for (uint64_t i = 0; i < pool_->slot_count(); ++i) {
      const Slot& x = pool_->slot(static_cast<uint32_t>(i));
      if (shm::StateOf(x.word.load(std::memory_order_acquire)) != shm::kPublished) continue;
      infos.push_back(ChunkInfo{ShmPool::IdOf(x), (x.pages.load(std::memory_order_relaxed) >> 32) * pool_->page_bytes()});
    }
  };
  if (pool_->read_only()) {
    collect();
  } else {
    PoolLock lock(*pool_);
    KVTIER_RETURN_IF_ERROR(lock.status());
    collect();
  }
  for (const ChunkInfo& info : infos) {
    if (!fn(info)) break;
  }
  return Status::OK();
}

Status ShmTier::Check(const ChunkInfo& info) {
  KVTIER_RETURN_IF_ERROR(pool_->CheckFile(false));
  if (cipher_ != nullptr) {  // sealed: the tags are checked too, by opening a scratch copy
    auto b = BorrowOpened(info.id);
    return b.ok() ? Status::OK() : b.status();
  }
  Held h;
  const bool ro = pool_->read_only();
  if (ro) {
    KVTIER_RETURN_IF_ERROR(HoldLockFree(info.id, UINT64_MAX, &h));
  } else {
    PoolLock lock(*pool_);
    KVTIER_RETURN_IF_ERROR(lock.status());
    const uint32_t s = pool_->FindLocked(info.id);
    if (s == kNone) return Status::NotFound(url_ + ": no chunk " + info.id.key.Hex());
    KVTIER_RETURN_IF_ERROR(HoldLocked(info.id, UINT64_MAX, &h));
  }
  VerifyAll({&h, 1}, {});
  if (ro) {
    ReadFence();
    if (pool_->slot(h.s).word.load(std::memory_order_acquire) != h.word) {
      return Status::NotFound(url_ + ": chunk " + info.id.key.Hex() + " went away");
    }
  } else {
    Release({&h, 1});
  }
  if (!h.bad) return Status::OK();
  counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
  return Status::Corruption(url_ + ": chunk " + info.id.key.Hex() + " failed its checksum" +
                            (ro ? std::string(" (left in place: read-only)") : std::string(" (removed)")));
}

TierStats ShmTier::Stats() const {
  TierStats s;
  s.url = url_;
  counters_.FillInto(s);
  const shm::PoolHeader& h = pool_->header();
  s.chunks = h.live_chunks.load(std::memory_order_relaxed);
  s.usage_bytes = h.used_pages.load(std::memory_order_relaxed) * h.page_bytes;
  s.capacity_bytes = h.capacity_bytes.load(std::memory_order_relaxed);
  s.evictions = h.evictions.load(std::memory_order_relaxed);  // by every process: the pool's eviction count
  return s;
}

// A pool is encrypted or not from its creation on, under one key: an opener with another key, or
// with none for an encrypted pool (or one for a plain pool), is refused before it reads or writes a chunk.
Status CheckKey(const ShmPool& pool, uint64_t key_check) {
  const uint64_t made = pool.header().key_check;
  if (made == key_check) return Status::OK();
  if (made == 0) return Status::InvalidArgument(pool.path() + " holds plain chunks; key_file= is refused for it (use another pool)");
  if (key_check == 0) return Status::InvalidArgument(pool.path() + " is encrypted; open it with its key_file=");
  return Status::InvalidArgument(pool.path() + " is encrypted under another key than key_file=; refused");
}

Result<long> ParseGroup(const std::string& g) {
  if (!g.empty() && std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return static_cast<long>(std::stoul(g));
  }
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(g.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return Status::InvalidArgument("shm:// group=" + g + " is not a known group");
  }
  return static_cast<long>(found->gr_gid);
}

}  // namespace

Result<std::unique_ptr<Tier>> OpenShmTier(const TierUrl& url, const TierOpenOptions& open) {
  KVTIER_RETURN_IF_ERROR(
      url.CheckKnown({"capacity", "page", "hugepages", "dir", "group", "threads", "populate", "verify", "key_file", "resize"}));
  shm::PoolSpec spec;
  spec.name = !url.path.empty() && url.path[0] == '/' ? url.path.substr(1) : url.path;
  if (spec.name.empty()) return Status::InvalidArgument("shm:// needs a pool name, e.g. shm://engines?capacity=64GiB");
  KVTIER_ASSIGN_OR_RETURN(spec.capacity, url.GetSize("capacity", 0));
  if (url.params.count("capacity") != 0 && spec.capacity == 0) return Status::InvalidArgument("shm:// capacity must be positive");
  KVTIER_ASSIGN_OR_RETURN(spec.page_bytes, url.GetSize("page", 64ull << 10, 1ull << 30));
  if (spec.page_bytes < 256 || spec.page_bytes % 64 != 0) {
    return Status::InvalidArgument("shm:// page must be a multiple of 64 bytes, at least 256");
  }
  const auto huge = url.params.find("hugepages"), dir = url.params.find("dir");
  if (huge != url.params.end() && dir != url.params.end()) return Status::InvalidArgument("shm:// takes hugepages= or dir=, not both");
  if (huge != url.params.end()) {
    spec.dir = huge->second;
    spec.hugetlbfs = true;
  } else if (dir != url.params.end()) {
    spec.dir = dir->second;
  }
  if (spec.dir.empty() || spec.dir[0] != '/') return Status::InvalidArgument("shm:// directory must be absolute: " + spec.dir);
  if (auto g = url.params.find("group"); g != url.params.end()) {
    KVTIER_ASSIGN_OR_RETURN(spec.group, ParseGroup(g->second));
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t threads, url.GetUint("threads", 0, 256));
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  spec.read_only = open.read_only;
  if (url.params.count("populate") != 0) {
    KVTIER_ASSIGN_OR_RETURN(const bool populate, url.GetBool("populate", false));
    spec.populate = populate ? shm::PoolSpec::Populate::kRequired : shm::PoolSpec::Populate::kLazy;
  } else {
    spec.populate = spec.read_only ? shm::PoolSpec::Populate::kLazy : shm::PoolSpec::Populate::kBestEffort;
  }
  spec.populate_threads = static_cast<unsigned>(threads);
  KVTIER_ASSIGN_OR_RETURN(const bool verify, url.GetBool("verify", true));
  std::shared_ptr<const ChunkCipher> cipher;
  if (auto k = url.params.find("key_file"); k != url.params.end()) {
    KVTIER_ASSIGN_OR_RETURN(cipher, ChunkCipher::FromKeyFile(k->second));
    KVTIER_ASSIGN_OR_RETURN(spec.key_check, KeyCheck(*cipher));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<ShmPool> pool, ShmPool::Open(spec));
  KVTIER_RETURN_IF_ERROR(CheckKey(*pool, spec.key_check));
  if (url.params.count("page") != 0 && pool->page_bytes() != spec.page_bytes) {
    return Status::InvalidArgument(pool->path() + " has pages of " + std::to_string(pool->page_bytes()) +
                                   " bytes, the URL says page=" + std::to_string(spec.page_bytes) + "; refused");
  }
  const uint64_t arena = pool->page_count() * pool->page_bytes();
  if (spec.capacity / pool->page_bytes() * pool->page_bytes() > arena) {
    return Status::InvalidArgument(pool->path() + " was made with room for " + FormatBytes(arena) + "; capacity=" +
                                   FormatBytes(spec.capacity) + " does not fit (remove the pool to make it larger)");
  }
  KVTIER_ASSIGN_OR_RETURN(const bool resize, url.GetBool("resize", false));
  // The tier first: a repair at open checks overlapping page chains through it (ShmPool::SetChainCheck).
  auto tier = std::make_unique<ShmTier>(url.ToString(), std::move(pool), static_cast<unsigned>(threads), verify,
                                        std::move(cipher));
  if (!spec.read_only) {
    ShmPool& p = tier->pool();
    PoolLock lock(p);
    KVTIER_RETURN_IF_ERROR(lock.status());
    p.ReclaimDeadLocked();   // what dead writers and readers held comes back at every open
    p.CheckCountersLocked();  // and counters scribbled within the geometry are rebuilt before they evict
    // A lower bound evicts every process's chunks down to it: a careless second opener's smaller
    // capacity= is refused unless it asks for exactly that (resize=1).
    const uint64_t pb = p.page_bytes();
    const uint64_t now = p.header().capacity_bytes.load(std::memory_order_relaxed) / pb * pb;
    if (spec.capacity != 0 && spec.capacity / pb * pb < now && !resize) {
      return Status::InvalidArgument(p.path() + " is bounded at " + FormatBytes(now) + "; capacity=" +
                                     FormatBytes(spec.capacity) + " would evict every process's chunks down to it: "
                                     "add resize=1 to lower the bound, or leave capacity= out to use the pool's own");
    }
    if (spec.capacity != 0) p.SetCapacityLocked(spec.capacity);
  }
  return std::unique_ptr<Tier>(std::move(tier));
}

Status CorruptShmChunkForTesting(Tier& tier, const ChunkId& id, bool forge_sums) {
  auto* t = dynamic_cast<ShmTier*>(&tier);
  if (t == nullptr) return Status::InvalidArgument(tier.url() + " is not a shm:// tier");
  ShmPool& pool = t->pool();
  PoolLock lock(pool);
  KVTIER_RETURN_IF_ERROR(lock.status());
  const uint32_t s = pool.FindLocked(id);
  if (s == kNone) return Status::NotFound("no such chunk");
  const Slot& x = pool.slot(s);
  const uint64_t bytes = x.bytes.load(), pg = x.pages.load();
  if (bytes == 0) return Status::NotFound("chunk has no payload bytes to corrupt");
  const auto runs = pool.Runs(static_cast<uint32_t>(pg), pg >> 32, TableBytes(bytes, t->sealed()) + bytes / 2, 1);
  if (runs.empty()) return Status::Internal("chunk pages out of range");
  runs[0][0] ^= std::byte{0x5A};
  if (!forge_sums) return Status::OK();
  // As an attacker with write access would: the changed piece's sum, then the table's, rewritten to match.
  const uint32_t first = static_cast<uint32_t>(pg);
  const uint64_t piece = bytes / 2 / kPieceBytes, off = piece * kPieceBytes;
  const uint64_t len = std::min(kPieceBytes, bytes - off), table = TableBytes(bytes, t->sealed());
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& run : pool.Runs(first, pg >> 32, table + off, len)) XXH3_64bits_update(&state, run.data(), run.size());
  const uint64_t sum = XXH3_64bits_digest(&state);
  std::vector<std::byte> tbl(TableUsed(bytes, t->sealed()));
  FromRuns(pool.Runs(first, pg >> 32, 0, tbl.size()), tbl.data());
  std::memcpy(tbl.data() + piece * 8, &sum, 8);
  ToRuns(pool.Runs(first, pg >> 32, 0, tbl.size()), tbl.data());
  pool.slot(s).table_sum.store(XXH3_64bits(tbl.data(), tbl.size()));
  return Status::OK();
}

Result<std::vector<NamespaceUsage>> ShmNamespaceUsage(Tier& tier) {
  auto* t = dynamic_cast<ShmTier*>(&tier);
  if (t == nullptr) return Status::InvalidArgument(tier.url() + " is not a shm:// tier");
  ShmPool& pool = t->pool();
  KVTIER_RETURN_IF_ERROR(pool.CheckFile(false));
  std::map<Digest, NamespaceUsage> by_ns;
  auto collect = [&] {
    for (uint64_t i = 0; i < pool.slot_count(); ++i) {
      const Slot& x = pool.slot(static_cast<uint32_t>(i));
      const uint64_t word = x.word.load(std::memory_order_acquire);
      if (shm::StateOf(word) != shm::kPublished) continue;
      const ChunkId id = ShmPool::IdOf(x);
      const uint64_t pages = x.pages.load(std::memory_order_relaxed) >> 32;
      ReadFence();
      if (x.word.load(std::memory_order_acquire) != word) continue;  // changed while read (lock-free only)
      NamespaceUsage& u = by_ns[id.ns];
      u.ns = id.ns;
      ++u.chunks;
      u.bytes += pages * pool.page_bytes();
    }
  };
  if (pool.read_only()) {
    collect();
  } else {
    PoolLock lock(pool);
    KVTIER_RETURN_IF_ERROR(lock.status());
    collect();
  }
  std::vector<NamespaceUsage> out;
  for (const auto& [ns, u] : by_ns) out.push_back(u);
  return out;
}

Result<ShmAudit> AuditShmTier(Tier& tier, bool reclaim) {
  auto* t = dynamic_cast<ShmTier*>(&tier);
  if (t == nullptr) return Status::InvalidArgument(tier.url() + " is not a shm:// tier");
  ShmPool& pool = t->pool();
  if (pool.read_only()) return Status::NotSupported("audit needs a read-write opener");
  PoolLock lock(pool);
  KVTIER_RETURN_IF_ERROR(lock.status());
  if (reclaim) pool.ReclaimDeadLocked();
  const shm::PoolHeader& h = pool.header();
  ShmAudit a;
  a.used_pages = h.used_pages.load();
  a.live_chunks = h.live_chunks.load();
  a.capacity_bytes = h.capacity_bytes.load();
  a.page_bytes = h.page_bytes;
  a.page_count = h.page_count;
  a.repairs = h.repairs.load();
  a.reclaimed = h.reclaimed.load();
  a.evictions = h.evictions.load();
  const uint64_t bits = h.page_count;
  for (uint64_t p = 0; p < bits; ++p) {
    const auto* bm = reinterpret_cast<const std::atomic<uint64_t>*>(reinterpret_cast<const std::byte*>(&h) + h.bitmap_off);
    if ((bm[p / 64].load() >> (p % 64)) & 1) ++a.bitmap_pages;
  }
  for (uint64_t i = 0; i < pool.slot_count(); ++i) {
    const Slot& x = pool.slot(static_cast<uint32_t>(i));
    const uint64_t st = shm::StateOf(x.word.load()), n = x.pages.load() >> 32;
    if (st == shm::kFree) continue;
    a.slot_pages += n;
    if (x.pins.load() > 0) ++a.pinned_slots;
    if (st == shm::kReserved) ++a.reserved_slots;
    if (st == shm::kDead) ++a.dead_slots;
    if (st == shm::kPublished) {
      ++a.published_slots;
      a.published_pages += n;
      if (pool.FindLocked(ShmPool::IdOf(x)) == i) ++a.indexed;
    }
  }
  return a;
}

}  // namespace kvtier::internal
