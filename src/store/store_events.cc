// Chunk events of StoreImpl (kvtier/events.h): which tier stored, lost or evicted which chunk, told to
// StoreOptions::observer on the thread that did it. Nothing here runs without an observer.
#include <string_view>

#include "store/store_impl.h"

namespace kvtier {

const char* ChunkEventKindName(ChunkEventKind kind) {
  switch (kind) {
    case ChunkEventKind::kStored: return "stored";
    case ChunkEventKind::kRemoved: return "removed";
    case ChunkEventKind::kEvicted: return "evicted";
  }
  return "unknown";
}

namespace internal {

namespace {

// The medium a router sees (vLLM's BlockStored.medium): process or host memory, a local disk, or
// storage shared beyond this host.
const char* MediumOf(std::string_view url) {
  if (url.starts_with("mem://") || url.starts_with("shm://")) return "CPU";
  if (url.starts_with("file://")) return "DISK";
  return "STORAGE";
}

}  // namespace

void StoreImpl::Emit(ChunkEventKind kind, const ChunkId& id, size_t tier, uint32_t tokens_per_chunk) {
  if (!Observing()) return;
  events_.fetch_add(1, std::memory_order_relaxed);
  options_.observer->OnChunkEvent(ChunkEvent{.kind = kind,
                                             .ns = id.ns,
                                             .key = id.key,
                                             .tier = static_cast<uint32_t>(tier),
                                             .medium = mediums_[tier],
                                             .tokens_per_chunk = tokens_per_chunk});
}

Status StoreImpl::PutObserved(size_t t, const ChunkId& id, GatherList payload, uint32_t tokens_per_chunk) {
  // Put keeps one copy per key and says OK for a chunk it already holds: only a new one is an event.
  const bool had = Observing() && tiers_[t]->Contains(id);
  Status s = tiers_[t]->Put(id, payload);
  if (s.ok() && Observing() && !had) Emit(ChunkEventKind::kStored, id, t, tokens_per_chunk);
  return s;
}

void StoreImpl::ListenForEvictions() {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    mediums_.push_back(MediumOf(tiers_[t]->url()));
    if (!Observing()) continue;
    tiers_[t]->SetEvictionListener([this, t](const ChunkId& id) { Emit(ChunkEventKind::kEvicted, id, t); });
  }
}

void StoreImpl::StopListening() {
  if (!Observing()) return;
  for (auto& tier : tiers_) tier->SetEvictionListener(nullptr);
}

void StoreImpl::FillEventStats(StoreStats& s) const {
  if (!Observing()) return;
  const ChunkObserverStats o = options_.observer->Stats();
  s.observed = true;
  s.events = events_.load(std::memory_order_relaxed);
  s.events_published = o.published;
  s.events_dropped = o.dropped;
  s.event_subscribers = o.subscribers;
}

}  // namespace internal
}  // namespace kvtier
