// `kvtier bench save`: the run (work folder, checks, the rate search over real steps, fio's write
// reference).
#include "eval/benchlib/save_bench.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/chunk_format.h"
#include "core/host_identity.h"
#include "core/work_dir.h"
#include "eval/benchlib/datapath_io.h"
#include "progress/progress.h"

namespace kvtier::internal {
namespace {

void Note(const SaveBenchConfig& c, const std::string& line) {
  if (c.progress) c.progress->Note(line);
}


std::string StepLine(size_t i, const SaveStep& s) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "step %zu: target %.2f GB/s, offered %.2f GB/s, absorbed %.2f GB/s, %llu dropped, %llu errors, "
                "queue max %s, save p50 %.1f ms p99 %.1f ms max %.1f ms: %s",
                i + 1, s.target_rate / 1e9, s.offered_rate / 1e9, s.absorbed_rate / 1e9,
                static_cast<unsigned long long>(s.dropped), static_cast<unsigned long long>(s.errors),
                FormatBytes(s.queue_max_bytes).c_str(), s.save_latency.p50_us / 1e3, s.save_latency.p99_us / 1e3,
                s.save_latency.max_us / 1e3, s.passed ? "no drops" : "drops or fell behind");
  return buf;
}

// Refuses a step the disk has no room for (default tiers only: --tier URLs may lie elsewhere).
Status CheckStepSpace(const SaveBenchConfig& c, double rate) {
  if (!c.tiers.empty()) return Status::OK();
  const uint64_t need = static_cast<uint64_t>(rate * c.step_seconds * 1.05) + (64ull << 20);
  KVTIER_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytesAt(c.target_dir));
  return CheckEnoughSpace("target directory " + c.target_dir, free_bytes, need,
                          "a step of " + GbpsText(rate) + " for " + std::to_string(c.step_seconds) + " s");
}

void RunFioWrite(const SaveBenchConfig& c, const SavePlan& plan, const std::string& work, SaveBenchResult* r) {
  if (!c.run_fio) {
    r->fio_note = "fio disabled with --no-fio: no write reference";
    return;
  }
  if (!FioAvailable()) {
    r->fio_note = "fio was not found on PATH: no write reference (install fio to get the ratio)";
    return;
  }
  FioJob job;
  job.write = true;
  job.block_size = StoredChunkBytes(plan.chunk_bytes);
  job.write_files = std::max<uint64_t>(1, c.fio_bytes / job.block_size);
  job.iodepth = c.fio_depth;
  job.link_dir = work + "/fio-write";
  job.hugepage_dir = HugePageDirFor(uint64_t{job.iodepth} * job.block_size + (4ull << 20));
  job.output_path = work + "/fio-write.json";
  Note(c, "fio: O_DIRECT sequential writes of " + std::to_string(job.write_files) + " files of " +
              FormatBytes(job.block_size) + ", iodepth " + std::to_string(job.iodepth));
  auto f = RunFioWithFallback(job);
  std::error_code ec;
  std::filesystem::remove_all(job.link_dir, ec);
  if (!f.ok()) {
    r->fio_note = "fio failed: " + f.status().ToString();
    return;
  }
  r->fio_write = *f;
  Note(c, "fio write (" + f->ioengine + ", " + f->memory + "): " + GbpsText(f->bytes_per_second));
}

Status CheckResources(const SaveBenchConfig& c, const SavePlan& plan) {
  if (c.tiers.empty()) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t mem, AvailableMemoryBytes());
    KVTIER_RETURN_IF_ERROR(CheckEnoughSpace("this host's memory", mem, plan.mem_bytes + plan.chunk_bytes,
                                            "the mem:// tier (--mem) and one source chunk"));
  }
  if (!c.run_fio) return Status::OK();
  KVTIER_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytesAt(c.target_dir));
  return CheckEnoughSpace("target directory " + c.target_dir, free_bytes, c.fio_bytes + (64ull << 20),
                          "fio's reference files (--fio-bytes)");
}

}  // namespace

Result<SaveBenchResult> RunSaveBench(const SaveBenchConfig& c) {
  KVTIER_ASSIGN_OR_RETURN(SavePlan plan, PlanSave(c));
  KVTIER_RETURN_IF_ERROR(CheckResources(c, plan));
  KVTIER_ASSIGN_OR_RETURN(WorkDir work, WorkDir::Create(c.target_dir, "kvtier-bench-save"));
  if (c.keep_files) work.Keep();
  SaveBenchResult r;
  r.started_at = UtcNow();
  r.host = HostName();
  r.config = c;
  r.config.progress = nullptr;
  r.plan = plan;
  r.tiers = DefaultSaveTiers(c, plan, work.path());
  Note(c, "saving " + std::to_string(plan.chunks_per_save) + " chunks of " + FormatBytes(plan.chunk_bytes) +
              " per call into " + r.tiers.front() + (r.tiers.size() > 1 ? " ... " + r.tiers.back() : "") +
              "; start " + GbpsText(plan.start_rate));
  KVTIER_ASSIGN_OR_RETURN(SaveSource source, SaveSource::Create(c, plan));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenSaveStore(c, r.tiers));
  KVTIER_RETURN_IF_ERROR(WarmTopTier(*store, source, plan));
  const auto measure = [&](double rate) -> Result<SaveStepOutcome> {
    KVTIER_RETURN_IF_ERROR(CheckStepSpace(c, rate));
    KVTIER_ASSIGN_OR_RETURN(SaveStep step, RunSaveStep(c, plan, *store, source, rate, r.steps.size()));
    step.passed = StepPassed(step.Outcome(), RateSearchOptions{}.keep_up);
    r.steps.push_back(step);
    Note(c, StepLine(r.steps.size() - 1, step));
    return step.Outcome();
  };
  RateSearchOptions o;
  o.start_rate = plan.start_rate;
  o.bisections = c.bisections;
  o.max_seconds = c.max_seconds;
  o.first_step_seconds = c.step_seconds;
  KVTIER_ASSIGN_OR_RETURN(RateSearchResult search, SearchDropFreeRate(o, measure));
  r.best = search.best;
  r.stop_reason = search.stop_reason;
  Note(c, "search ended: " + r.stop_reason);
  store.reset();  // its chunks are removed; the tier folder goes with the work folder
  RunFioWrite(c, plan, work.path(), &r);
  return r;
}

}  // namespace kvtier::internal
