// `kvtier bench datapath`: how fast a tier moves model-sized KV chunks, next to the hardware limit
// measured in the same run.
//
// Workloads, in the order they run:
//   write    Put `total_bytes` of chunks (the model layout fixes their size) from 4 threads, then Flush.
//   read     for each bound on bytes in flight: drop the page cache, reopen the tier with
//            `inflight=SIZE`, GetMany every chunk cold into caller buffers, check each chunk's bytes.
//   latency  then, cold again, depth = inflight / chunk threads each Get one chunk at a time over a
//            sample of chunks: per-chunk p50/p99 at that depth (a batch call has no per-chunk time).
//   hit      then, cold again, a Store over the tier (reopened) Loads the first context_tokens of the
//            chunks as one prefix hit (HitPass): the bytes the tier read, next to the minimum the model
//            needs for that prefix and the naive figure (every byte of every chunk). Sliding-window
//            layouts read less where the tier reads ranges (docs/models.md, "Sliding-window loads").
//   fio      right before or after each read (the order alternating from run to run): fio reading the
//            same chunk files, one request per file, O_DIRECT, matching depth, into huge pages where a
//            hugetlbfs mount allows (benchlib/fio_runner.h); likewise next to each point's write, fio
//            writing as many files of the same size. A point's kvtier/fio ratios are the median of its
//            runs' ratios (results.h, SweepPoint::read_ratios_to_fio).
//   serial   one chunk file at a time with a buffered pread after dropping the page cache.
//   memcpy   (mem:// only) a plain memcpy of the same bytes, on one thread and on one per core.
//   reference (object tiers: redis://, rados://, s3://, ...) instead of fio: for each bound on bytes in
//            flight (by default 1, 2, 4, 8, 16 whole objects, header included), the tier's chunks are
//            removed and written again from depth = bound / chunk threads (the point's write row) and
//            read right after (the read row); the latency and hit passes follow and the chunks are
//            removed again. Only then the backend's raw client writes objects of the same size with the
//            same bound, its own without kvtier's header (object/object_reference.h; redis:// instead:
//            raw hiredis, pipelined SETs then GETs with kvtier's values in flight and connections per
//            master, redis/plain_reference.h; rados:// plain librados aio writes then reads,
//            rados/rados_reference.h; s3:// raw libcurl PUTs then GETs, s3/s3_reference.h; these three
//            are also the write reference, with as many objects in flight as the bound admits), and
//            reads them right after. So each writes onto a store holding none of the other's values
//            and reads right after its own writes. JSON `ratio_to_reference`,
//            `ratio_write_to_reference`. The bench's chunks are removed from the store at the end
//            unless keep_files (then written once more after the sweep).
//   encrypted (directory targets) at each bound on bytes in flight, before the point's plain write, the
//            same chunks are Put with a fresh random key_file= (AES-256-GCM) from the same threads into
//            an emptied folder (`encrypted_write`, `ratio_encrypted_write_to_plain`); after the sweep
//            they are written so once more at the largest bound and read cold: one row next to the
//            plain figures at that point. At the end, one thread seals chunks without I/O (`seal_cpu`):
//            the CPU bound of those writes.
// Directory targets (file://, fs://) get a work folder DIR/kvtier-bench.<pid>.XXXXXX/ holding tier/,
// removed at the end unless keep_files. It carries a marker naming its process, so the next
// run removes the folder of a run that was killed (core/work_dir.h).
//
// Thread-compatible: run one bench at a time per target directory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "eval/gpuprofile/gpu_profile.h"
#include "eval/benchlib/results.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct DatapathConfig {
  std::string target;                  // tier URL, e.g. file:///nvme/kv?direct=true or mem://
  ModelPreset model;                   // model.layout.tokens_per_chunk fixes the chunk size
  uint64_t total_bytes = 4ull << 30;   // payload written and read back (rounded down to chunks, >= 1)
  std::vector<uint64_t> inflight;      // bytes in flight to sweep; empty: 1, 2, 4, 8, 16 chunks
  uint32_t repeat = 1;                 // runs per sweep point; the median is kept (noisy hosts)
  bool run_fio = true;
  bool run_serial = true;
  bool run_encrypted = true;           // directory targets: the encrypted writes and row
  bool keep_files = false;
  uint64_t context_tokens = 32768;     // the context of the prefix hit, its load time and the verdict
  std::optional<GpuProfile> gpu;       // for the verdict against recompute
  std::function<void(const std::string&)> progress;  // progress lines; may be empty
};

// Where and how much the bench will write, worked out before anything touches storage.
struct DatapathPlan {
  uint64_t chunk_bytes = 0;
  uint64_t chunks = 0;
  bool directory_target = false;
  std::string bench_dir, tier_dir;  // directory targets only; RunDatapath adds a suffix
  std::string key_file;             // the encrypted passes' key (RunDatapath makes it), or empty
  uint64_t need_bytes = 0;                   // on the target filesystem, or in memory for mem://
  std::string need_breakdown;                // e.g. "4.00 GiB of chunk files + 4.00 GiB for fio"
  std::vector<uint64_t> inflight;
  // Chunks of the prefix hit measured at each point: context_tokens / tokens_per_chunk (at least 1),
  // at most `chunks` (a smaller --total holds a shorter prefix).
  uint64_t hit_chunks = 0;
};

// InvalidArgument for a bad URL, layout or size.
Result<DatapathPlan> PlanDatapath(const DatapathConfig& config);

// NoSpace with a clear message when the target has less free space (memory for mem://) than
// plan.need_bytes.
Status CheckCapacity(const DatapathConfig& config, const DatapathPlan& plan);

// Runs every workload. Fails before writing anything when the target lacks space; fails when the
// tier cannot be opened or a Put fails. Read errors are counted in the result, not returned.
Result<DatapathResult> RunDatapath(const DatapathConfig& config);

}  // namespace kvtier::internal
