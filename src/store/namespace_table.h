// NamespaceTable: the per-namespace counters of a Store, bounded. The first
// NamespaceStats::kMaxTrackedNamespaces namespaces seen get their own counters; every later one shares
// one set labelled "other", so a store that sees many namespaces keeps a fixed amount of state.
// Namespaces are told apart by the first 8 bytes of their id (the 16 hex characters of the label).
//
// Thread-safety: For() and Snapshot() may be called from many threads; For() takes a small mutex for the
// lookup only, and the counters it returns are atomics that live as long as the table.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/latency.h"
#include "core/thread_annotations.h"
#include "kvtier/store.h"

namespace kvtier::internal {

struct NamespaceCounters {
  explicit NamespaceCounters(std::string l) : label(std::move(l)) {}
  void FillInto(NamespaceStats& s) const;

  const std::string label;
  std::atomic<uint64_t> lookups{0}, lookup_chunks{0}, lookup_tokens{0}, hit_chunks{0}, hit_tokens{0};
  std::atomic<uint64_t> loads{0}, load_chunks{0}, load_bytes{0}, saves{0}, save_chunks{0};
  LatencyHistogram load_latency, save_latency;
  std::atomic<bool> described{false};  // the namespace's identity was written to the tiers (Store::Save)
};

class NamespaceTable {
 public:
  NamespaceTable() : other_("other") {}
  NamespaceTable(const NamespaceTable&) = delete;
  NamespaceTable& operator=(const NamespaceTable&) = delete;

  NamespaceCounters& For(const Digest& ns) EXCLUDES(mu_);
  // Tracked namespaces in order of first use, then "other" when some namespace fell into it.
  std::vector<NamespaceStats> Snapshot() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::unordered_map<uint64_t, size_t> index_ GUARDED_BY(mu_);  // id prefix -> slots_ index
  std::vector<std::unique_ptr<NamespaceCounters>> slots_ GUARDED_BY(mu_);
  std::atomic<bool> other_used_{false};
  NamespaceCounters other_;
};

}  // namespace kvtier::internal
