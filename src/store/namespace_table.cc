#include "store/namespace_table.h"

#include <cstring>

namespace kvtier::internal {
namespace {

uint64_t Prefix(const Digest& ns) {
  uint64_t p;
  std::memcpy(&p, ns.data(), sizeof(p));
  return p;
}

}  // namespace

void NamespaceCounters::FillInto(NamespaceStats& s) const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  s.label = label;
  s.lookups = lookups.load(kRelaxed);
  s.lookup_chunks = lookup_chunks.load(kRelaxed);
  s.lookup_tokens = lookup_tokens.load(kRelaxed);
  s.hit_chunks = hit_chunks.load(kRelaxed);
  s.hit_tokens = hit_tokens.load(kRelaxed);
  s.loads = loads.load(kRelaxed);
  s.load_chunks = load_chunks.load(kRelaxed);
  s.load_bytes = load_bytes.load(kRelaxed);
  s.saves = saves.load(kRelaxed);
  s.save_chunks = save_chunks.load(kRelaxed);
  s.load_latency = load_latency.Buckets();
  s.save_latency = save_latency.Buckets();
}

NamespaceCounters& NamespaceTable::For(const Digest& ns) {
  const uint64_t prefix = Prefix(ns);
  MutexLock lock(mu_);
  if (auto it = index_.find(prefix); it != index_.end()) return *slots_[it->second];
  if (slots_.size() >= NamespaceStats::kMaxTrackedNamespaces) {
    other_used_.store(true, std::memory_order_relaxed);
    return other_;
  }
  index_.emplace(prefix, slots_.size());
  slots_.push_back(std::make_unique<NamespaceCounters>(DigestHex(ns).substr(0, 16)));
  return *slots_.back();
}

std::vector<NamespaceStats> NamespaceTable::Snapshot() const {
  std::vector<NamespaceStats> out;
  {
    MutexLock lock(mu_);
    out.resize(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i]->FillInto(out[i]);
  }
  if (other_used_.load(std::memory_order_relaxed)) other_.FillInto(out.emplace_back());
  return out;
}

}  // namespace kvtier::internal
