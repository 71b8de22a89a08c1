#include "eval/benchlib/datapath_passes.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "core/chunk_format.h"
#include "core/latency.h"
#include "core/thread_annotations.h"
#include "core/window_ranges.h"
#include "tiers/file/file_tier.h"
#include "io/chunk_io.h"
#include "io/chunk_dir.h"
#include "io/chunk_encode.h"
#include "io/filesystem.h"
#include "kvtier/keys.h"
#include "kvtier/store.h"

namespace kvtier::internal {
namespace {

// The first failure among threads that run side by side.
class FirstError {
 public:
  void Note(Status s) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (status_.ok()) status_ = std::move(s);
  }
  Status Get() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return status_;
  }

 private:
  mutable Mutex mu_;
  Status status_ GUARDED_BY(mu_);
};

// Incompressible, deterministic bytes: a storage layer that compresses or dedups zeros must not look
// faster than it is.
void FillPseudoRandom(std::span<std::byte> out) {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= out.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out.data() + i, &x, 8);
  }
}

}  // namespace

Result<ReadArea> ReadArea::Create(const ModelPreset& model, uint64_t chunks) {
  const Layout& layout = model.layout;
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  ReadArea a;
  a.chunk_bytes_ = layout.BytesPerChunk();
  if (a.chunk_bytes_ < sizeof(uint64_t)) return Status::InvalidArgument("chunk too small to tag");
  // A salt per run keeps the bench's chunks apart from anything already stored at the target.
  const std::string salt = std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, Namespace::Make(model.model_id, layout, "kvtier-bench", salt));
  std::vector<uint32_t> tokens(layout.tokens_per_chunk);
  const ChunkKey* prev = nullptr;
  a.keys_.reserve(chunks);  // `prev` points into it
  for (uint64_t i = 0; i < chunks; ++i) {
    for (uint32_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<uint32_t>(i * 7919 + t);
    a.keys_.push_back(NextChunkKey(ns, prev, tokens));
    prev = &a.keys_.back();
    a.ids_.push_back(ChunkId::Of(ns, a.keys_.back()));
  }
  a.ns_ = std::move(ns);
  a.dst_ = AlignedBuffer::Allocate(a.chunk_bytes_ * chunks, size_t{2} << 20);
  if (a.dst_.data() == nullptr) return Status::NoSpace("cannot allocate " + FormatBytes(a.chunk_bytes_ * chunks));
  std::memset(a.dst_.data(), 0, a.chunk_bytes_ * chunks);  // fault the pages in before timing
  const size_t head = std::min<size_t>(a.chunk_bytes_, kChunkAlign);
  a.source_ = AlignedBuffer::Allocate(a.chunk_bytes_);
  a.heads_ = AlignedBuffer::Allocate(kChunkAlign * chunks);
  if (a.source_.data() == nullptr || a.heads_.data() == nullptr) return Status::NoSpace("cannot allocate the source");
  FillPseudoRandom(a.source_.span());
  constexpr uint64_t kCopyBytes = 256ull << 20;  // at most this much in copies, at most 8 of them
  const uint64_t copies = std::clamp<uint64_t>(kCopyBytes / a.chunk_bytes_, 1, std::min<uint64_t>(8, chunks));
  for (uint64_t k = 0; k < copies; ++k) {
    a.copies_.push_back(AlignedBuffer::Allocate(a.chunk_bytes_));
    if (a.copies_.back().data() == nullptr) return Status::NoSpace("cannot allocate the source");
    std::memcpy(a.copies_.back().data(), a.source_.data(), a.chunk_bytes_);
  }
  a.gather_pieces_.resize(2 * chunks);
  for (uint64_t i = 0; i < chunks; ++i) {
    std::byte* h = a.heads_.data() + i * kChunkAlign;
    std::memcpy(h, a.source_.data(), head);
    std::memcpy(h, &i, sizeof(i));
    a.gather_pieces_[2 * i] = std::span<const std::byte>(h, head);
    a.gather_pieces_[2 * i + 1] = std::span<const std::byte>(a.copies_[i % copies].span()).subspan(head);
    a.gathers_.emplace_back(&a.gather_pieces_[2 * i], 2);
    a.scatters_.emplace_back(a.dst_.data() + i * a.chunk_bytes_, a.chunk_bytes_);
  }
  return a;
}

void ReadArea::ClearTags() {
  const uint64_t poison = ~0ull;
  for (const auto& s : scatters_) std::memcpy(s.data(), &poison, sizeof(poison));
}

bool ReadArea::TagMatches(size_t i) const {
  uint64_t tag = 0;
  std::memcpy(&tag, scatters_[i].data(), sizeof(tag));
  return tag == i && std::memcmp(scatters_[i].data() + sizeof(tag), source_.data() + sizeof(tag),
                                 std::min<size_t>(64, chunk_bytes_ - sizeof(tag))) == 0;
}

namespace {

constexpr uint64_t kCheckedBytes = 64;  // per range: enough to catch bytes of another chunk or none

// Chunk i's payload byte at `offset`: its index as a u64 tag, then the shared source.
std::byte PayloadByte(std::span<const std::byte> source, size_t i, uint64_t offset) {
  if (offset >= sizeof(uint64_t)) return source[offset];
  const uint64_t tag = i;
  std::byte b[sizeof(tag)];
  std::memcpy(b, &tag, sizeof(tag));
  return b[offset];
}

}  // namespace

void ReadArea::Poison(size_t i, uint64_t offset, uint64_t bytes) {
  std::memset(scatters_[i].data() + offset, 0xA5, std::min(bytes, kCheckedBytes));
}

bool ReadArea::Matches(size_t i, uint64_t offset, uint64_t bytes) const {
  for (uint64_t o = offset; o < offset + std::min(bytes, kCheckedBytes); ++o) {
    if (scatters_[i][o] != PayloadByte(source_.span(), i, o)) return false;
  }
  return true;
}

uint64_t MinimumPrefixBytes(const Layout& layout, uint64_t tokens) {
  uint64_t total = 0;
  for (const LayerGroup& g : layout.Groups()) {
    const uint64_t layers = g.layers.size();
    switch (g.kind) {
      case GroupKind::kKV:
      case GroupKind::kLatent: total += tokens * layers * g.BytesPerTokenLayer(); break;
      case GroupKind::kWindowKV: total += std::min<uint64_t>(g.window, tokens) * layers * g.BytesPerTokenLayer(); break;
      case GroupKind::kState: total += layers * g.state_bytes; break;
    }
  }
  return total;
}

Result<HitResult> HitPass(std::unique_ptr<Tier> tier, ReadArea* area, uint64_t chunks) {
  chunks = std::min(chunks, area->chunks());
  const Layout& layout = area->ns().layout();
  StoreOptions o;
  o.promote_on_load = false;
  o.background_threads = 1;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(tier));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(std::move(tiers), o));
  // What the load must deliver: every range but the window groups it may skip; poisoned first.
  std::vector<std::vector<ByteRange>> keep(chunks);
  std::vector<ScatterList> dsts;
  for (size_t i = 0; i < chunks; ++i) {
    keep[i] = ComplementRanges(WindowSkippedRanges(layout, i, chunks), area->chunk_bytes());
    for (const ByteRange& r : keep[i]) area->Poison(i, r.offset, r.bytes);
    dsts.push_back(area->Destination(i));
  }
  HitResult h;
  h.chunks = chunks;
  h.tokens = chunks * layout.tokens_per_chunk;
  h.naive_bytes = chunks * area->chunk_bytes();
  h.minimum_bytes = MinimumPrefixBytes(layout, h.tokens);
  const uint64_t before = store->Stats().tiers[0].bytes_read;
  const auto t0 = std::chrono::steady_clock::now();
  KVTIER_ASSIGN_OR_RETURN(h.loaded_chunks, store->Load(area->ns(), area->keys().first(chunks), dsts));
  h.seconds = SecondsSince(t0);
  const StoreStats s = store->Stats();
  h.bytes_read = s.tiers[0].bytes_read - before;
  h.skipped_bytes = s.load_bytes_skipped;
  h.errors = chunks - h.loaded_chunks;
  for (size_t i = 0; i < h.loaded_chunks; ++i) {
    const bool ok = std::all_of(keep[i].begin(), keep[i].end(),
                                [&](const ByteRange& r) { return area->Matches(i, r.offset, r.bytes); });
    if (!ok) ++h.errors;
  }
  return h;
}

TierUrl UrlForBench(const TierUrl& url, const DatapathPlan& plan) {
  TierUrl out = url;
  const uint64_t payload = plan.chunks * plan.chunk_bytes;
  if (plan.directory_target) {
    out.path = plan.tier_dir;
    if (out.scheme == "file" && !out.params.count("capacity")) {
      const uint64_t stored = plan.chunks * StoredChunkBytes(plan.chunk_bytes);
      out.params["capacity"] = std::to_string(stored + stored / 16 + (64ull << 20));
    }
  } else if (out.scheme == "mem" && !out.params.count("capacity")) {
    out.params["capacity"] = std::to_string(payload + payload / 8 + (64ull << 20));
  }
  return out;
}

Result<std::unique_ptr<Tier>> OpenTierForPass(const TierUrl& url, uint64_t inflight, bool* swept) {
  *swept = false;
  if (url.scheme == "mem") return OpenTier(url.ToString());
  TierUrl with = url;
  with.params["inflight"] = std::to_string(inflight);
  auto tier = OpenTier(with.ToString());
  if (tier.ok()) {
    *swept = true;
    return tier;
  }
  const Status& s = tier.status();
  if (s.code() == Code::kInvalidArgument && s.message().find("inflight") != std::string::npos) {
    return OpenTier(url.ToString());
  }
  return tier;
}

Result<PhaseResult> WritePass(Tier& tier, const ReadArea& area, unsigned writers) {
  writers = static_cast<unsigned>(std::clamp<uint64_t>(writers, 1, std::max<uint64_t>(area.chunks(), 1)));
  std::atomic<uint64_t> next{0};
  FirstError first_error;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < writers; ++w) {
    threads.emplace_back([&] {
      for (uint64_t i = next++; i < area.chunks(); i = next++) {
        Status s = tier.Put(area.id(i), area.Payload(i));
        if (s.ok()) continue;
        first_error.Note(std::move(s));
        next = area.chunks();  // stop the other writers too
      }
    });
  }
  for (auto& t : threads) t.join();
  KVTIER_RETURN_IF_ERROR(first_error.Get());
  PhaseResult r;
  r.seconds = SecondsSince(t0);
  const auto flushed = std::chrono::steady_clock::now();
  KVTIER_RETURN_IF_ERROR(tier.Flush());
  r.flush_seconds = SecondsSince(flushed);
  r.chunks = area.chunks();
  r.bytes = area.chunks() * area.chunk_bytes();
  return r;
}

Result<PhaseResult> SealReference(const ReadArea& area, uint64_t chunks) {
  chunks = std::min<uint64_t>(chunks, area.chunks());
  std::array<std::byte, kCipherKeyBytes> key;
  key.fill(std::byte{0x5a});
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const ChunkCipher> cipher, ChunkCipher::FromKeyMaterial(key));
  AlignedBuffer out = AlignedBuffer::Allocate(std::max<uint64_t>(area.chunk_bytes(), 1));
  if (out.data() == nullptr) return Status::IOError("out of memory for the seal reference", true);
  std::memset(out.data(), 0, out.size());  // faulted in before the clock starts
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t c = 0; c < chunks; ++c) {
    ChunkSealer sealer;
    KVTIER_RETURN_IF_ERROR(sealer.Start(area.id(c), area.chunk_bytes(), *cipher));
    uint64_t at = 0;
    for (uint32_t i = 0; i < sealer.pieces(); ++i) {
      const uint64_t len = sealer.PieceLength(i);
      KVTIER_RETURN_IF_ERROR(sealer.Seal(i, area.Payload(c), out.span().subspan(at, len)));
      at += len;
    }
  }
  PhaseResult r;
  r.seconds = SecondsSince(t0);
  r.chunks = chunks;
  r.bytes = chunks * area.chunk_bytes();
  return r;
}

PhaseResult ReadPass(Tier& tier, ReadArea* area) {
  area->ClearTags();
  std::vector<ReadOp> ops(area->chunks());
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].id = area->id(i);
    ops[i].dst = area->Destination(i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  tier.GetMany(ops);
  PhaseResult r;
  r.seconds = SecondsSince(t0);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].status.ok() && area->TagMatches(i)) {
      ++r.chunks;
      r.bytes += area->chunk_bytes();
    } else {
      ++r.errors;
      r.wrong_bytes += ops[i].status.ok();
    }
  }
  return r;
}

void LatencyPass(Tier& tier, ReadArea* area, uint32_t depth, uint64_t sample, PhaseResult* into) {
  area->ClearTags();
  sample = std::min(sample, area->chunks());
  LatencyHistogram latency;
  std::atomic<uint64_t> next{0}, errors{0}, wrong{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < std::max<uint32_t>(depth, 1); ++t) {
    threads.emplace_back([&] {
      for (uint64_t i = next++; i < sample; i = next++) {
        const auto t0 = std::chrono::steady_clock::now();
        const Status s = tier.Get(area->id(i), area->Destination(i));
        latency.Record(SecondsSince(t0) * 1e6);
        if (!s.ok() || !area->TagMatches(i)) ++errors;
        if (s.ok() && !area->TagMatches(i)) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  into->SetLatency(latency.Summary());
  into->errors += errors.load();
  into->wrong_bytes += wrong.load();
}

Result<PhaseResult> FileReaderPass(const std::string& tier_dir, ReadArea* area, uint64_t inflight,
                                   bool direct, bool verify) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<FileSystem> fs, OpenPosixFileSystem(tier_dir));
  ReaderOptions o;
  o.max_inflight_bytes = inflight;
  o.direct_io = direct;
  o.verify_payload = verify;
  std::unique_ptr<ChunkReader> reader = ChunkReader::Create(o);
  area->ClearTags();
  const ChunkDirSpec spec = FileDirSpec();
  std::vector<ChunkRead> reads(area->chunks());
  for (size_t i = 0; i < reads.size(); ++i) {
    const ChunkId& id = area->id(i);
    reads[i].fs = fs.get();
    reads[i].path = ChunkRelPath(spec, ChunkId{id.ns, id.key, 0});
    reads[i].expected = id;
    reads[i].dst = area->Destination(i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  reader->ReadMany(reads);
  PhaseResult r;
  r.seconds = SecondsSince(t0);
  for (size_t i = 0; i < reads.size(); ++i) {
    if (reads[i].status.ok() && area->TagMatches(i)) {
      ++r.chunks;
      r.bytes += area->chunk_bytes();
    } else {
      ++r.errors;
      r.wrong_bytes += reads[i].status.ok();
    }
  }
  return r;
}

}  // namespace kvtier::internal
