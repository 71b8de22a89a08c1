// One step of `kvtier bench save`: a fresh Store fed at one rate by paced feeder threads, sampled,
// flushed, measured, and emptied of the step's chunks.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "core/threads.h"
#include "eval/benchlib/save_bench.h"
#include "io/chunk_io.h"
#include "kvtier/store.h"
#include "progress/progress.h"

namespace kvtier::internal {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A key no other save of this process uses: a random run tag, the step, the feeder and a counter.
ChunkKey FreshKey(uint64_t step, uint64_t feeder, uint64_t n) {
  static const uint64_t run_tag = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  ChunkKey k;
  const uint64_t words[4] = {run_tag, step, feeder, n};
  std::memcpy(k.bytes.data(), words, sizeof(words));
  return k;
}

struct FeederLog {
  std::vector<double> latency_us;
  uint64_t saves = 0, bytes = 0, errors = 0;
  double scheduled_end = 0;  // seconds: where this feeder's saves end on the schedule
  Status first_error;
};

// What all feeders of a step share (read-only while they run).
struct Feed {
  Store* store;
  const Namespace* ns;
  std::vector<GatherList> srcs;  // one prefix: every chunk gathers the same source bytes
  uint64_t step, chunks_per_save, prefix_bytes;
  uint32_t feeders;
  double interval;  // seconds between two saves of one feeder
  double seconds;
  Clock::time_point start;
};

// Feeder f issues save k at start + (k + f / feeders) x interval, for as long as that is inside the step;
// a feeder that falls behind issues the next save at once (and the offered rate shows it).
void RunFeeder(const Feed& feed, uint32_t f, FeederLog* log) {
  const double offset = feed.interval * f / feed.feeders;
  std::vector<ChunkKey> keys(feed.chunks_per_save);
  for (uint64_t k = 0;; ++k) {
    const double at = offset + static_cast<double>(k) * feed.interval;
    if (at >= feed.seconds) break;
    std::this_thread::sleep_until(feed.start + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(at)));
    for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = FreshKey(feed.step, f, k * keys.size() + i);
    const auto t0 = Clock::now();
    const Status s = feed.store->Save(*feed.ns, keys, feed.srcs);
    log->latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    ++log->saves;
    log->bytes += feed.prefix_bytes;
    if (!s.ok() && log->errors++ == 0) log->first_error = s;
    log->scheduled_end = at + feed.interval;
  }
}

std::string StatusLine(uint64_t step, double target, double t, double seconds, const StoreStats& s) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "save step %llu: %.2f GB/s offered, %.1f/%.1f s, queue %s / %llu chunks, %llu dropped",
                static_cast<unsigned long long>(step + 1), target / 1e9, t, seconds,
                FormatBytes(s.queue_bytes_now).c_str(), static_cast<unsigned long long>(s.queue_chunks_now),
                static_cast<unsigned long long>(s.dropped_saves));
  return buf;
}

// Samples the queue until `done`, every sample_seconds.
void RunSampler(const SaveBenchConfig& c, const Feed& feed, double target, const std::atomic<bool>& done,
                std::vector<QueueSample>* out) {
  while (!done.load(std::memory_order_acquire)) {
    const StoreStats s = feed.store->Stats();
    const double t = Since(feed.start);
    out->push_back({t, s.queue_bytes_now, s.queue_chunks_now});
    if (c.progress) c.progress->Update(StatusLine(feed.step, target, t, feed.seconds, s));
    std::this_thread::sleep_for(std::chrono::duration<double>(c.sample_seconds));
  }
}

// Starts the feeders and the sampler, waits for the feeders, then stops the sampler.
Status Drive(const SaveBenchConfig& c, const Feed& feed, double target, std::vector<FeederLog>* logs,
             std::vector<QueueSample>* samples) {
  std::atomic<bool> done{false};
  std::vector<std::thread> sampler, feeders;
  Status started = StartThreads(&sampler, 1, [&] { RunSampler(c, feed, target, done, samples); }, "the queue sampler");
  std::atomic<uint32_t> next{0};
  if (started.ok()) {
    started = StartThreads(&feeders, feed.feeders, [&] {
      const uint32_t f = next.fetch_add(1);
      RunFeeder(feed, f, &(*logs)[f]);
    }, "the save feeders");
  }
  for (auto& t : feeders) t.join();
  done.store(true, std::memory_order_release);
  for (auto& t : sampler) t.join();
  return started;
}

void Summarize(const Feed& feed, std::vector<FeederLog>& logs, double feed_seconds, SaveStep* step) {
  std::vector<double> all;
  double window = feed_seconds;
  for (FeederLog& l : logs) {
    all.insert(all.end(), l.latency_us.begin(), l.latency_us.end());
    step->saves += l.saves;
    step->bytes_offered += l.bytes;
    step->errors += l.errors;
    window = std::max(window, l.scheduled_end);
  }
  step->chunks = step->saves * feed.chunks_per_save;
  step->offered_rate = window > 0 ? static_cast<double>(step->bytes_offered) / window : 0;
  step->save_latency = SummarizeLatencies(all);
}

}  // namespace

LatencySummary SummarizeLatencies(std::vector<double>& us) {
  LatencySummary s;
  s.count = us.size();
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  const auto rank = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))]; };
  s.p50_us = rank(0.50);
  s.p90_us = rank(0.90);
  s.p99_us = rank(0.99);
  s.max_us = us.back();
  return s;
}

SaveStepOutcome SaveStep::Outcome() const {
  return {target_rate, offered_rate, dropped, errors, feed_seconds + flush_seconds};
}

Result<SaveSource> SaveSource::Create(const SaveBenchConfig& c, const SavePlan& plan) {
  SaveSource src;
  src.buffer_ = AlignedBuffer::Allocate(plan.chunk_bytes);
  if (src.buffer_.data() == nullptr) {
    return Status::NoSpace("no memory for a source chunk of " + FormatBytes(plan.chunk_bytes));
  }
  for (size_t i = 0; i < plan.chunk_bytes; ++i) src.buffer_.data()[i] = static_cast<std::byte>(i * 131 + (i >> 12));
  src.piece_[0] = std::span<const std::byte>(src.buffer_.data(), plan.chunk_bytes);
  KVTIER_ASSIGN_OR_RETURN(src.ns_, Namespace::Make(c.model.model_id, c.model.layout, "kvtier-bench-save"));
  return src;
}

Result<std::unique_ptr<Store>> OpenSaveStore(const SaveBenchConfig& c, const std::vector<std::string>& tiers) {
  StoreOptions opt;
  opt.tiers = tiers;
  opt.promote_on_load = false;
  opt.save_queue_bytes = c.queue_bytes;
  opt.save_queue_chunks = c.queue_chunks;
  opt.background_threads = c.background_threads;
  return Store::Open(opt);
}

Status WarmTopTier(Store& store, const SaveSource& src, const SavePlan& plan) {
  Tier& top = store.tier(0);
  if (!top.capabilities().in_memory) return Status::OK();
  // All of them first, then the removals: a chunk removed at once would hand its pages to the next.
  const uint64_t n = plan.mem_bytes / plan.chunk_bytes;
  Status s;
  for (uint64_t i = 0; i < n && s.ok(); ++i) s = top.Put(ChunkId::Of(*src.ns(), FreshKey(UINT64_MAX, 0, i)), src.Gather());
  for (uint64_t i = 0; i < n; ++i) (void)top.Remove(ChunkId::Of(*src.ns(), FreshKey(UINT64_MAX, 0, i)));
  return s;
}

Result<SaveStep> RunSaveStep(const SaveBenchConfig& c, const SavePlan& plan, Store& store, const SaveSource& src,
                             double target_rate, uint64_t step_index) {
  if (!(target_rate > 0)) return Status::InvalidArgument("a save step needs a positive rate");
  const StoreStats before = store.Stats();
  Feed feed{&store, src.ns(), std::vector<GatherList>(plan.chunks_per_save, src.Gather()),
            step_index, plan.chunks_per_save, plan.prefix_bytes, c.feeders,
            static_cast<double>(plan.prefix_bytes) * c.feeders / target_rate, c.step_seconds, Clock::now()};
  SaveStep step;
  step.target_rate = target_rate;
  std::vector<FeederLog> logs(c.feeders);
  const Status driven = Drive(c, feed, target_rate, &logs, &step.queue);
  step.feed_seconds = Since(feed.start);
  const Status flushed = store.Flush();
  const double total = Since(feed.start);
  step.flush_seconds = total - step.feed_seconds;
  Summarize(feed, logs, step.feed_seconds, &step);
  const StoreStats after = store.Stats();
  step.dropped = after.dropped_saves - before.dropped_saves;
  step.bytes_absorbed = (after.tiers.back().puts - before.tiers.back().puts) * plan.chunk_bytes;
  step.absorbed_rate = total > 0 ? static_cast<double>(step.bytes_absorbed) / total : 0;
  for (const QueueSample& q : step.queue) step.queue_max_bytes = std::max(step.queue_max_bytes, q.bytes);
  // The step's chunks leave the store (and the disk) before the next step.
  std::vector<ChunkKey> keys(plan.chunks_per_save);
  for (uint32_t f = 0; f < c.feeders; ++f) {
    for (uint64_t k = 0; k < logs[f].saves; ++k) {
      for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = FreshKey(step_index, f, k * keys.size() + i);
      (void)store.Remove(*src.ns(), keys);
    }
  }
  KVTIER_RETURN_IF_ERROR(driven);
  KVTIER_RETURN_IF_ERROR(flushed);
  for (const FeederLog& l : logs) {
    if (!l.first_error.ok() && l.saves == l.errors) return l.first_error;  // nothing saved at all: a setup error
  }
  return step;
}

}  // namespace kvtier::internal
