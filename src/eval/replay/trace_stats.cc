#include "eval/replay/trace_stats.h"

#include <unordered_set>

namespace kvtier::internal {

TraceSummary SummarizeTrace(const Trace& trace) {
  TraceSummary s;
  s.requests = trace.requests.size();
  s.duration_ms = trace.DurationMs();
  std::unordered_set<uint32_t> seen;
  seen.reserve(trace.block_refs);
  for (const TraceRequest& r : trace.requests) {
    s.input_tokens += r.input_length;
    s.output_tokens += r.output_length;
    s.block_refs += r.hash_ids.size();
    uint64_t k = 0;
    while (k < r.hash_ids.size() && seen.count(r.hash_ids[k])) ++k;
    s.unlimited_hit_blocks += k;
    s.unlimited_hit_tokens += HitTokens(r, k, trace.block_tokens);
    seen.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  s.unique_blocks = seen.size();
  return s;
}

}  // namespace kvtier::internal
