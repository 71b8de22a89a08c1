#include "eval/benchlib/datapath.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <random>

#include "eval/benchlib/datapath_io.h"
#include "eval/benchlib/datapath_passes.h"
#include "core/chunk_format.h"
#include "core/host_identity.h"
#include "core/work_dir.h"
#include "io/filesystem.h"
#include "kvtier/forwarding_tier.h"
#include "kvtier/tier.h"
#include "eval/benchlib/memcpy_reference.h"
#include "tiers/object/object_reference.h"
#include "tiers/object/object_tier.h"
#include "tiers/rados/rados_reference.h"
#include "tiers/redis/plain_reference.h"
#include "tiers/redis/redis_client.h"
#include "tiers/s3/s3_reference.h"

namespace kvtier::internal {
namespace fs = std::filesystem;

namespace {

bool IsDirectoryScheme(const std::string& scheme) { return scheme == "file" || scheme == "fs"; }
// Object tiers (redis://, rados://, s3://, ...): every scheme but the directory and memory ones.
bool IsObjectScheme(const std::string& scheme) {
  return !IsDirectoryScheme(scheme) && scheme != "mem" && scheme != "shm";
}

// 1, 2, 4, 8, 16 units of `unit_bytes` (a chunk; for object tiers a whole object, header included, so
// that the tier's bound admits exactly that many objects at once), no more than there are chunks.
std::vector<uint64_t> DefaultInflight(uint64_t unit_bytes, uint64_t chunks) {
  std::vector<uint64_t> out;
  for (uint64_t n = 1; n <= 16; n *= 2) {
    if (n > 1 && n > chunks) break;
    out.push_back(n * unit_bytes);
  }
  return out;
}

void Progress(const DatapathConfig& c, const std::string& line) {
  if (c.progress) c.progress(line);
}


DatapathResult Header(const DatapathConfig& c, const DatapathPlan& plan) {
  DatapathResult r;
  r.started_at = UtcNow();
  r.host = HostName();
  r.target.url = c.target;
  r.target.directory = plan.bench_dir;
  r.model_preset = std::string(c.model.name);
  r.model_id = std::string(c.model.model_id);
  r.layout = c.model.layout.ToString();
  r.chunk_tokens = c.model.layout.tokens_per_chunk;
  r.chunk_bytes = plan.chunk_bytes;
  r.bytes_per_token = c.model.layout.BytesPerToken();
  r.context_tokens = c.context_tokens;
  r.gpu = c.gpu;
  r.repeat = std::max<uint32_t>(c.repeat, 1);
  return r;
}

// Runs `job` (its ioengine from *engine); on the first failure with io_uring retries with libaio, and
// after a second failure records why and turns fio off for the rest of the run.
std::optional<FioResult> RunFioJob(const DatapathConfig& c, FioJob job, const std::string& what,
                                   std::string* engine, std::string* note) {
  if (!note->empty()) return std::nullopt;
  for (int attempt = 0; attempt < 2; ++attempt) {
    job.ioengine = *engine;
    auto r = RunFio(job);
    if (r.ok()) {
      note->clear();  // an io_uring failure that libaio made up for is not worth reporting
      Progress(c, "  fio " + what + " iodepth=" + std::to_string(job.iodepth) + " (" + *engine + ", " + r->memory +
                      "): " + GbpsText(r->bytes_per_second));
      return *r;
    }
    *note = r.status().ToString();
    if (*engine != "io_uring") break;
    *engine = "libaio";
  }
  Progress(c, "  fio unavailable: " + *note);
  return std::nullopt;
}

// fio reading (or, with `write`, writing) files of the tier's chunk size at `inflight`'s depth,
// O_DIRECT, into huge pages where a hugetlbfs mount allows.
FioJob FioJobFor(const DatapathPlan& plan, uint64_t inflight, bool write) {
  FioJob job;
  job.write = write;
  job.block_size = StoredChunkBytes(plan.chunk_bytes);
  if (write) {
    job.write_files = plan.chunks;  // as many files as kvtier wrote chunks, in a folder of fio's own
    job.link_dir = plan.bench_dir + "/fio-write";
  } else {
    job.files = FilesOfSize(plan.tier_dir, job.block_size);  // what kvtier just read
    job.link_dir = plan.bench_dir + "/fio-files";
  }
  job.iodepth = IodepthFor(inflight, plan.chunk_bytes);
  job.hugepage_dir = HugePageDirFor(uint64_t{job.iodepth} * job.block_size + (4ull << 20));
  job.output_path = plan.bench_dir + (write ? "/fio-write-" : "/fio-") + std::to_string(inflight) + ".json";
  return job;
}

// The read reference at one point: fio, or dd where fio is missing.
void RunFioPoint(const DatapathConfig& c, const DatapathPlan& plan, SweepPoint* point,
                 std::string* engine, std::string* note) {
  if (*engine == "dd") {  // no fio on PATH: dd with O_DIRECT over the tier's own files, same depth
    auto r = RunDdReference(FilesOfSize(plan.tier_dir, StoredChunkBytes(plan.chunk_bytes)), plan.chunk_bytes,
                            IodepthFor(point->inflight_bytes, plan.chunk_bytes));
    if (r.ok()) point->fio = *r;
    Progress(c, "  dd reference: " + (r.ok() ? GbpsText(r->bytes_per_second) : r.status().ToString()));
    return;
  }
  point->fio = RunFioJob(c, FioJobFor(plan, point->inflight_bytes, /*write=*/false), "read", engine, note);
}

// Waits until the filesystem holding `dir` has committed the removals made so far (syncfs), so the
// blocks freed (and, on a filesystem mounted with `discard`, their trims) are not written back during
// the next pass: each pass starts on a settled disk.
Status CommitRemovals(const std::string& dir) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<FileSystem> fs, OpenPosixFileSystem(dir));
  return fs->SyncAll();
}

// Empties `dir` and commits the removal (CommitRemovals): each write pass starts on a settled disk, as
// fio's does.
Status RecreateDir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "recreate " + dir);
  return CommitRemovals(dir);
}

// Every chunk Put into the tier's emptied folder from depth = inflight / chunk threads, the tier
// (`url`: plain, or with a key_file=) opened with inflight=. The chunks stay for a read.
Result<PhaseResult> WriteIntoEmptiedTier(const DatapathPlan& plan, const TierUrl& url, uint64_t inflight,
                                         const ReadArea& area) {
  bool swept = true;
  KVTIER_RETURN_IF_ERROR(RecreateDir(plan.tier_dir));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, OpenTierForPass(url, inflight, &swept));
  return WritePass(*tier, area, IodepthFor(inflight, plan.chunk_bytes));
}

// `url` with the bench's key file: the tier's encrypted form.
TierUrl Keyed(TierUrl url, const DatapathPlan& plan) {
  url.params["key_file"] = plan.key_file;
  return url;
}

// The write rows of one point: with a key file the encrypted write (first, as the plain chunks must stay
// for the read), or the plain one.
Status MeasureWrite(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url, uint64_t inflight,
                    const ReadArea& area, bool encrypted, SweepPoint* point) {
  std::optional<PhaseResult>& into = encrypted ? point->encrypted_write : point->write;
  KVTIER_ASSIGN_OR_RETURN(into, WriteIntoEmptiedTier(plan, encrypted ? Keyed(url, plan) : url, inflight, area));
  Progress(c, std::string(encrypted ? "  encrypted write, " : "  write, ") + FormatBytes(inflight) + " in flight: " +
                  GbpsText(into->BytesPerSecond()));
  return Status::OK();
}

// The write reference at one point: fio writing as many files of the chunk file's size at the same
// depth with O_DIRECT, removed after.
void RunFioWritePoint(const DatapathConfig& c, const DatapathPlan& plan, SweepPoint* point, std::string* engine,
                      std::string* note) {
  if (*engine == "dd") return;  // dd has no write reference here: reads only
  FioJob job = FioJobFor(plan, point->inflight_bytes, /*write=*/true);
  point->fio_write = RunFioJob(c, job, "write", engine, note);
  std::error_code ec;
  fs::remove_all(job.link_dir, ec);  // fio unlinks its files; this removes what a failed run left
  // Their removal committed now, as RecreateDir does for kvtier's chunks: on a filesystem mounted with
  // `discard` the trims of fio's files would otherwise run under the pass that follows (kvtier's read).
  (void)CommitRemovals(plan.bench_dir);
}

// kvtier's cold read of the chunks just written and, right before or after it (`fio_first`), fio's read
// of the same files; then the per-chunk latency on the same tier, cold again.
Status MeasureRead(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url, uint64_t inflight,
                   bool fio_first, ReadArea* area, DatapathResult* r, bool* swept, std::string* fio_engine,
                   SweepPoint* point) {
  KVTIER_RETURN_IF_ERROR(DropPageCache(plan.tier_dir).status());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, OpenTierForPass(url, inflight, swept));
  const TierCapabilities caps = tier->capabilities();
  r->target.shared = caps.shared;
  r->target.persistent = caps.persistent;
  r->target.direct_io = caps.direct_io;
  r->target.cold = true;
  r->target.cold_method = caps.direct_io ? "O_DIRECT" : "posix_fadvise(DONTNEED)";
  if (c.run_fio && fio_first) RunFioPoint(c, plan, point, fio_engine, &r->fio_note);  // O_DIRECT: caches nothing
  point->kvtier = ReadPass(*tier, area);
  Progress(c, "  read, " + FormatBytes(inflight) + " in flight: " + GbpsText(point->kvtier.BytesPerSecond()) +
                  ", " + std::to_string(point->kvtier.errors) + " errors");
  if (c.run_fio && !fio_first) RunFioPoint(c, plan, point, fio_engine, &r->fio_note);
  KVTIER_RETURN_IF_ERROR(DropPageCache(plan.tier_dir).status());
  const uint32_t depth = IodepthFor(inflight, plan.chunk_bytes);
  LatencyPass(*tier, area, depth, std::max<uint64_t>(16, 4ull * depth), &point->kvtier);
  return Status::OK();
}

// One run of a point. The encrypted write (with a key file) goes first, as the plain chunks must stay
// for the read; then kvtier's plain writes and fio's writes run back to back, then kvtier's cold read and
// fio's read of the same files, and the order inside each pair alternates from run to run (`run`): the
// disk's throughput drifts by several percent within seconds, so each side is measured next to its
// reference and neither always goes first. Then the per-chunk latency, the prefix hit and (file://)
// the unverified read, which have no fio counterpart.
Result<SweepPoint> MeasurePoint(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url,
                                uint64_t inflight, uint32_t run, ReadArea* area, DatapathResult* r, bool* swept,
                                std::string* fio_engine) {
  SweepPoint point;
  point.inflight_bytes = inflight;
  const bool fio_first = run % 2 == 1;
  if (!plan.key_file.empty()) KVTIER_RETURN_IF_ERROR(MeasureWrite(c, plan, url, inflight, *area, true, &point));
  if (c.run_fio && fio_first) RunFioWritePoint(c, plan, &point, fio_engine, &r->fio_note);
  KVTIER_RETURN_IF_ERROR(MeasureWrite(c, plan, url, inflight, *area, false, &point));
  if (c.run_fio && !fio_first) RunFioWritePoint(c, plan, &point, fio_engine, &r->fio_note);
  KVTIER_RETURN_IF_ERROR(MeasureRead(c, plan, url, inflight, fio_first, area, r, swept, fio_engine, &point));
  KVTIER_RETURN_IF_ERROR(DropPageCache(plan.tier_dir).status());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> hit_tier, OpenTierForPass(url, inflight, swept));
  KVTIER_ASSIGN_OR_RETURN(point.hit, HitPass(std::move(hit_tier), area, plan.hit_chunks));
  Progress(c, "  " + HitText(*point.hit));
  if (url.scheme == "file") {  // the unverified row: the same load with payload checksums off
    KVTIER_RETURN_IF_ERROR(DropPageCache(plan.tier_dir).status());
    auto unverified = FileReaderPass(plan.tier_dir, area, inflight, r->target.direct_io, /*verify=*/false);
    if (unverified.ok()) {
      point.unverified = *unverified;
      Progress(c, "  same load, checksums off: " + GbpsText(unverified->BytesPerSecond()));
    }
  }
  return point;
}

// The run of median bandwidth among `runs`' values that are present.
template <typename T, typename Rate>
std::optional<T> MedianOf(const std::vector<std::optional<T>>& runs, Rate rate) {
  std::vector<T> present;
  for (const auto& v : runs) {
    if (v) present.push_back(*v);
  }
  if (present.empty()) return std::nullopt;
  std::sort(present.begin(), present.end(), [&](const T& a, const T& b) { return rate(a) < rate(b); });
  return present[(present.size() - 1) / 2];
}

// The run with the median bandwidth, for kvtier, its writes, fio and the references independently;
// errors of every run count; each run's kvtier/fio ratios, for the paired ratio (SweepPoint).
SweepPoint MedianPoint(std::vector<SweepPoint> runs) {
  uint64_t errors = 0, wrong_bytes = 0;
  std::vector<std::optional<FioResult>> fio, fio_write;
  std::vector<std::optional<PhaseResult>> write, encrypted_write, reference, write_reference;
  std::vector<double> read_ratios, write_ratios;  // per run, where fio ran in it
  for (const SweepPoint& p : runs) {
    if (p.fio) read_ratios.push_back(p.RatioToFio());
    if (p.write && p.fio_write) write_ratios.push_back(p.RatioWriteToFio());
    errors += p.kvtier.errors;
    wrong_bytes += p.kvtier.wrong_bytes;
    fio.push_back(p.fio);
    fio_write.push_back(p.fio_write);
    write.push_back(p.write);
    encrypted_write.push_back(p.encrypted_write);
    reference.push_back(p.reference);
    write_reference.push_back(p.write_reference);
  }
  const auto fio_rate = [](const FioResult& f) { return f.bytes_per_second; };
  std::sort(runs.begin(), runs.end(), [](const SweepPoint& a, const SweepPoint& b) {
    return a.kvtier.BytesPerSecond() < b.kvtier.BytesPerSecond();
  });
  SweepPoint out = runs[(runs.size() - 1) / 2];
  out.kvtier.errors = errors;
  out.kvtier.wrong_bytes = wrong_bytes;
  out.fio = MedianOf(fio, fio_rate);
  out.fio_write = MedianOf(fio_write, fio_rate);
  const auto rate = [](const PhaseResult& p) { return p.BytesPerSecond(); };
  out.write = MedianOf(write, rate);
  out.encrypted_write = MedianOf(encrypted_write, rate);
  out.reference = MedianOf(reference, rate);
  out.write_reference = MedianOf(write_reference, rate);
  // Paired only where every run has its pair: a run without fio (it failed and was turned off) would
  // leave the ratio to a subset of the runs.
  if (read_ratios.size() == runs.size()) out.read_ratios_to_fio = std::move(read_ratios);
  if (write_ratios.size() == runs.size()) out.write_ratios_to_fio = std::move(write_ratios);
  return out;
}

Status RunDirectorySweep(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url,
                         ReadArea* area, DatapathResult* r) {
  std::string fio_engine = "io_uring";
  if (c.run_fio && !FioAvailable()) {
    r->fio_note = "fio was not found on PATH";
    if (DdAvailable()) {
      fio_engine = "dd";
      r->fio_note += ": the reference is dd iflag=direct at the same block size and depth";
    }
  }
  if (!c.run_fio) r->fio_note = "fio disabled with --no-fio";
  for (uint64_t inflight : plan.inflight) {
    std::vector<SweepPoint> runs;
    bool swept = true;
    for (uint32_t i = 0; i < std::max<uint32_t>(c.repeat, 1); ++i) {
      KVTIER_ASSIGN_OR_RETURN(SweepPoint point,
                              MeasurePoint(c, plan, url, inflight, i, area, r, &swept, &fio_engine));
      runs.push_back(std::move(point));
    }
    r->sweep.push_back(MedianPoint(std::move(runs)));
    if (!swept) {
      r->fio_note += (r->fio_note.empty() ? "" : "; ") +
                     std::string("the tier takes no inflight= option: one read pass only");
      break;
    }
  }
  if (c.run_serial) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t dropped, DropPageCache(plan.tier_dir));
    (void)dropped;
    const auto files = FilesOfSize(plan.tier_dir, StoredChunkBytes(plan.chunk_bytes));
    KVTIER_ASSIGN_OR_RETURN(PhaseResult serial, SerialPread(files, plan.chunk_bytes));
    Progress(c, "  serial pread: " + GbpsText(serial.BytesPerSecond()) + " over " +
                    std::to_string(serial.chunks) + " files");
    r->serial_pread = serial;
  }
  return Status::OK();
}

// A key file of 32 random bytes, mode 0600, for the encrypted passes.
Result<std::string> WriteBenchKey(const DatapathPlan& plan) {
  const std::string path = plan.bench_dir + "/bench.key";
  std::random_device rd;
  std::array<unsigned char, 32> key{};
  for (auto& b : key) b = static_cast<unsigned char>(rd());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "create " + path);
  const bool ok = ::write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
  ::close(fd);
  key.fill(0);
  if (!ok) return Status::IOError("write " + path);
  return path;
}

// The encrypted row: the plain chunks make way, the same chunks are written with the key from the
// same threads as the sweep's last point and read cold at its bytes in flight; the plain figures are
// that point's (medians of the sweep's runs).
Status RunEncrypted(const DatapathConfig& c, const DatapathPlan& plan, TierUrl url, ReadArea* area,
                    DatapathResult* r) {
  if (r->sweep.empty() || plan.key_file.empty()) return Status::OK();
  EncryptedRow row;
  row.inflight_bytes = r->sweep.back().inflight_bytes;
  row.plain_write = r->sweep.back().write.value_or(r->write);
  row.plain_read = r->sweep.back().kvtier;
  url = Keyed(std::move(url), plan);
  KVTIER_ASSIGN_OR_RETURN(row.write, WriteIntoEmptiedTier(plan, url, row.inflight_bytes, *area));
  bool swept = true;
  KVTIER_RETURN_IF_ERROR(DropPageCache(plan.tier_dir).status());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, OpenTierForPass(url, row.inflight_bytes, &swept));
  row.read = ReadPass(*tier, area);
  Progress(c, "  encrypted (AES-256-GCM), " + FormatBytes(row.inflight_bytes) + " in flight: write " +
                  GbpsText(row.write.BytesPerSecond()) + ", read " + GbpsText(row.read.BytesPerSecond()) +
                  ", " + std::to_string(row.read.errors) + " errors");
  r->encrypted = row;
  return Status::OK();
}

// `mapped_afresh`: the tier's memory was written by another process and this one has not read it yet:
// a first pass is timed apart (page tables are set up as it reads), then the read pass.
Status RunMemory(const DatapathConfig& c, const DatapathPlan& plan, Tier& tier, ReadArea* area,
                 DatapathResult* r, bool mapped_afresh = false) {
  const TierCapabilities caps = tier.capabilities();
  r->target.shared = caps.shared;
  r->target.persistent = caps.persistent;
  r->target.cold = true;
  r->target.cold_method = "in-memory";
  SweepPoint point;
  if (mapped_afresh) {
    point.first_pass = ReadPass(tier, area);
    Progress(c, "  first pass over the fresh mapping: " + GbpsText(point.first_pass->BytesPerSecond()));
  }
  point.kvtier = ReadPass(tier, area);
  LatencyPass(tier, area, /*depth=*/1, /*sample=*/16, &point.kvtier);
  point.inflight_bytes = r->write.bytes;  // a memory tier has no bound: everything is in flight
  // The Store borrows the tier (it sets no listener on it: no observer), which outlives it.
  KVTIER_ASSIGN_OR_RETURN(point.hit, HitPass(std::make_unique<ForwardingTier>(std::shared_ptr<Tier>(&tier, [](Tier*) {})),
                                             area, plan.hit_chunks));
  r->sweep.push_back(point);
  r->memcpy_ref = MemcpyReference(area->Span(), area->Source(), r->chunk_bytes);
  r->memcpy_parallel = ParallelMemcpyReference(area->Span());  // the reference: N threads, N = cores
  r->sweep.back().write = r->write;  // a Put into memory is a copy: its reference is the same memcpy
  r->sweep.back().write_reference = r->memcpy_parallel;
  r->fio_note = "not applicable to an in-memory tier";
  Progress(c, "  read: " + GbpsText(point.kvtier.BytesPerSecond()) + "; memcpy " +
                  GbpsText(r->memcpy_ref->BytesPerSecond()) + ", " +
                  std::to_string(r->memcpy_parallel->chunks) + " threads " +
                  GbpsText(r->memcpy_parallel->BytesPerSecond()));
  Progress(c, "  " + HitText(*r->sweep.back().hit));
  return Status::OK();
}

constexpr const char* kPlainHiredisReference =
    "raw hiredis, pipelined SETs then GETs of values of the same size, with kvtier's values in flight and "
    "connections per master at each bound, a sliding window per connection (redis/plain_reference.h)";
constexpr const char* kPlainRadosReference =
    "plain librados writes then reads (rados_aio_write_full of whole objects, inflight= bytes of them in "
    "flight, a new write as the oldest completes; rados_aio_read of whole objects, a window of inflight= "
    "bytes at a time; rados/rados_reference.h)";
constexpr const char* kPlainCurlReference =
    "raw libcurl PUTs then GETs (PUTs: one easy handle per object in flight, inflight= bytes of them, a new "
    "PUT as one ends; GETs: one easy handle per object of a window of inflight= bytes; one multi handle, "
    "SigV4, each body from or into a buffer of its own; s3/s3_reference.h)";
constexpr const char* kRawClientReference =
    "the backend's object client without kvtier's framing, verification or copy (object/object_reference.h)";

PhaseResult PhaseOf(uint64_t values, uint64_t bytes, uint64_t errors, double seconds) {
  PhaseResult p;
  p.chunks = values;
  p.bytes = bytes;
  p.errors = errors;
  p.seconds = seconds;
  return p;
}

// The references of one point, writes and reads: redis:// against raw pipelined hiredis (shaped as the
// tier's own traffic at this bound), rados:// against plain librados, s3:// against raw libcurl, each
// with as many objects in flight as the bound admits; other object tiers against their client without
// framing (reads only).
Status RawReferences(const TierUrl& url, object::ObjectTier& tier, const DatapathPlan& plan, SweepPoint* point) {
  const uint64_t value_bytes = internal::kChunkHeaderSize + plan.chunk_bytes;
  const uint64_t bound = tier.options().inflight_bytes;
  const uint64_t streams = std::max<uint64_t>(1, bound / value_bytes);
  object::RawReadResult raw;
  if (url.scheme == "redis") {
    KVTIER_ASSIGN_OR_RETURN(redis::RedisOptions o, redis::ParseRedisOptions(url));
    KVTIER_ASSIGN_OR_RETURN(
        redis::PlainReferenceResult p,
        redis::PlainHiredisReference(url, value_bytes, plan.chunks,
                                     redis::WriteShapeOf(bound, value_bytes, static_cast<uint64_t>(o.conns_per_node)),
                                     redis::ReadShapeOf(bound, value_bytes)));
    point->write_reference = PhaseOf(p.write.values, p.write.bytes, p.write.errors, p.write.seconds);
    raw = object::RawReadResult{p.read.values, p.read.bytes, p.read.errors, p.read.seconds};
  } else if (url.scheme == "rados" || url.scheme == "s3") {
    KVTIER_ASSIGN_OR_RETURN(object::RawRoundTrip p,
                            url.scheme == "rados" ? rados::PlainRadosReference(url, value_bytes, plan.chunks, streams)
                                                  : s3::PlainCurlReference(url, value_bytes, plan.chunks, streams));
    point->write_reference = PhaseOf(p.write.objects, p.write.bytes, p.write.errors, p.write.seconds);
    raw = p.read;
  } else {
    KVTIER_ASSIGN_OR_RETURN(raw, object::RawReadReference(tier, plan.chunk_bytes, plan.chunks));
  }
  point->reference = PhaseOf(raw.objects, raw.bytes, raw.errors, raw.seconds);
  return Status::OK();
}

// Removes the bench's chunks from an object store (a store outlives the bench, unlike mem://).
void RemoveObjectChunks(Tier& tier, const ReadArea& area) {
  for (uint64_t i = 0; i < area.chunks(); ++i) (void)tier.Remove(area.id(i));
}

// Object tiers (object/object_tier.h): per bound on bytes in flight, the tier reopened with inflight=,
// its chunks removed and written again from depth = bound / chunk threads (the write row), a read pass
// right after the writes, a latency pass and the prefix hit; then the chunks are removed and the
// backend's raw client runs at the same object size and bound (RawReferences: its writes, its reads
// right after them, its deletes). So kvtier and the reference each write onto a store that holds none
// of the bench's values, just after the other's were removed, and each reads right after its writes.
Result<SweepPoint> MeasureObjectPoint(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url,
                                      uint64_t inflight, ReadArea* area) {
  bool swept = false;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, OpenTierForPass(url, inflight, &swept));
  auto* object_tier = dynamic_cast<object::ObjectTier*>(tier.get());
  if (object_tier == nullptr) return Status::Internal("an object tier reopened as another kind");
  SweepPoint point;
  point.inflight_bytes = object_tier->options().inflight_bytes;
  const uint32_t depth = IodepthFor(point.inflight_bytes, plan.chunk_bytes);
  RemoveObjectChunks(*tier, *area);  // what an earlier, interrupted run left
  KVTIER_ASSIGN_OR_RETURN(point.write, WritePass(*tier, *area, depth));
  point.kvtier = ReadPass(*tier, area);
  LatencyPass(*tier, area, depth, std::max<uint64_t>(16, 4ull * depth), &point.kvtier);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> hit_tier, OpenTierForPass(url, inflight, &swept));
  KVTIER_ASSIGN_OR_RETURN(point.hit, HitPass(std::move(hit_tier), area, plan.hit_chunks));
  RemoveObjectChunks(*tier, *area);
  KVTIER_RETURN_IF_ERROR(RawReferences(url, *object_tier, plan, &point));
  Progress(c, "  read, " + FormatBytes(point.inflight_bytes) + " in flight: " +
                  GbpsText(point.kvtier.BytesPerSecond()) + ", " + std::to_string(point.kvtier.errors) +
                  " errors; raw client GETs " + GbpsText(point.reference->BytesPerSecond()));
  Progress(c, "  write: " + GbpsText(point.write->BytesPerSecond()) +
                  (point.write_reference ? "; raw client writes " + GbpsText(point.write_reference->BytesPerSecond())
                                         : std::string()));
  Progress(c, "  " + HitText(*point.hit));
  return point;
}

Status RunObjectSweep(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url, Tier& tier,
                      ReadArea* area, DatapathResult* r) {
  const TierCapabilities caps = tier.capabilities();
  r->target.shared = caps.shared;
  r->target.persistent = caps.persistent;
  r->target.cold = true;
  r->target.cold_method = "object store (no local cache)";
  r->fio_note = "not applicable to an object tier: the reference is the backend's raw client";
  r->reference_name = url.scheme == "redis"   ? kPlainHiredisReference
                      : url.scheme == "rados" ? kPlainRadosReference
                      : url.scheme == "s3"    ? kPlainCurlReference
                                              : kRawClientReference;
  for (uint64_t inflight : plan.inflight) {
    std::vector<SweepPoint> runs;
    for (uint32_t i = 0; i < std::max<uint32_t>(c.repeat, 1); ++i) {
      KVTIER_ASSIGN_OR_RETURN(SweepPoint p, MeasureObjectPoint(c, plan, url, inflight, area));
      runs.push_back(std::move(p));
    }
    r->sweep.push_back(MedianPoint(std::move(runs)));
  }
  // Every point removed its chunks before its reference ran: written once more (not timed) to be kept.
  if (c.keep_files) KVTIER_RETURN_IF_ERROR(WritePass(tier, *area).status());
  return Status::OK();
}

// The longest reason a writer process passes back to the bench (its Status text, cut there).
constexpr size_t kWriterReasonMax = 4096;

// Writes (`write`) or reads exactly `n` bytes at `data` through a pipe end; false on an error or a
// short transfer.
bool PipeAll(int fd, void* data, size_t n, bool write) {
  for (char* p = static_cast<char*>(data); n > 0;) {
    const ssize_t k = write ? ::write(fd, p, n) : ::read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// shm:// is shared between processes, so it is measured as it is used: a child process (fork) writes
// the chunks into the pool and exits; this process maps the pool afresh and reads what the child wrote.
// The bench's chunks are removed from the pool afterwards (the pool itself stays; `kvtier shm remove`).
Status RunSharedMemory(const DatapathConfig& c, const DatapathPlan& plan, const TierUrl& url, ReadArea* area,
                       DatapathResult* r) {
  int fds[2];
  if (::pipe(fds) != 0) return Status::FromErrno(errno, "pipe");
  const pid_t child = ::fork();
  if (child < 0) return Status::FromErrno(errno, "fork");
  if (child == 0) {
    ::close(fds[0]);
    PhaseResult out;
    Status why;
    {
      auto tier = OpenTier(url.ToString());
      auto written = tier.ok() ? WritePass(**tier, *area) : Result<PhaseResult>(tier.status());
      if (written.ok()) out = *written;
      why = written.status();
    }
    bool ok = why.ok();
    std::string text = why.ToString().substr(0, kWriterReasonMax);
    uint32_t len = static_cast<uint32_t>(text.size());
    const bool sent = PipeAll(fds[1], &ok, sizeof(ok), true) && PipeAll(fds[1], &out, sizeof(out), true) &&
                      PipeAll(fds[1], &len, sizeof(len), true) && PipeAll(fds[1], text.data(), len, true);
    ::_exit(sent && ok ? 0 : 1);
  }
  ::close(fds[1]);
  bool ok = false;
  PhaseResult written;
  uint32_t len = 0;
  std::string why;
  bool got = PipeAll(fds[0], &ok, sizeof(ok), false) && PipeAll(fds[0], &written, sizeof(written), false) &&
             PipeAll(fds[0], &len, sizeof(len), false) && len <= kWriterReasonMax;
  if (got) {
    why.resize(len);
    got = PipeAll(fds[0], why.data(), len, false);
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!got || !ok) {
    return Status::IOError("the writer process (pid " + std::to_string(child) + ") failed to write " + url.ToString() +
                           ": " + (got ? why : std::string("it ended without saying why")));
  }
  r->write = written;
  Progress(c, "  write (process " + std::to_string(child) + "): " + GbpsText(r->write.BytesPerSecond()));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, OpenTier(url.ToString()));
  Progress(c, "  reading in process " + std::to_string(::getpid()) + ", the pool mapped afresh");
  Status s = RunMemory(c, plan, *tier, area, r, /*mapped_afresh=*/true);
  r->target.cold_method = "in-memory, written by another process";
  RemoveObjectChunks(*tier, *area);
  return s;
}

}  // namespace

Result<DatapathPlan> PlanDatapath(const DatapathConfig& c) {
  KVTIER_RETURN_IF_ERROR(c.model.layout.Validate());
  KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(c.target));
  DatapathPlan p;
  p.chunk_bytes = c.model.layout.BytesPerChunk();
  p.chunks = std::max<uint64_t>(1, c.total_bytes / p.chunk_bytes);
  const uint64_t unit = IsObjectScheme(url.scheme) ? internal::kChunkHeaderSize + p.chunk_bytes : p.chunk_bytes;
  p.inflight = c.inflight.empty() ? DefaultInflight(unit, p.chunks) : c.inflight;
  p.hit_chunks = std::clamp<uint64_t>(c.context_tokens / c.model.layout.tokens_per_chunk, 1, p.chunks);
  for (uint64_t b : p.inflight) {
    if (b == 0) return Status::InvalidArgument("--inflight sizes must be positive");
  }
  const uint64_t payload = p.chunks * p.chunk_bytes;
  p.directory_target = IsDirectoryScheme(url.scheme);
  if (p.directory_target) {
    if (url.path.empty()) return Status::InvalidArgument("target " + c.target + " has no directory");
    p.bench_dir = (fs::path(url.path) / ("kvtier-bench." + std::to_string(getpid()))).string();
    p.tier_dir = p.bench_dir + "/tier";
    const uint64_t files = p.chunks * StoredChunkBytes(p.chunk_bytes);
    // Slack for directories and the tier's index; fio reads these files, then writes as many of its own.
    p.need_bytes = 2 * files + files / 64;
    p.need_breakdown = FormatBytes(files) + " of chunk files + " + FormatBytes(files) + " for fio's writes";
  } else {
    // The tier holds the chunks and the bench holds the destination buffers.
    p.need_bytes = 2 * payload + payload / 16;
    p.need_breakdown = FormatBytes(payload) + " in the tier + " + FormatBytes(payload) +
                       " of destination buffers";
  }
  return p;
}

Status CheckCapacity(const DatapathConfig& c, const DatapathPlan& plan) {
  if (plan.directory_target) {
    auto url = TierUrl::Parse(c.target);
    KVTIER_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytesAt(url->path));
    return CheckEnoughSpace("target directory " + url->path, free_bytes, plan.need_bytes,
                            plan.need_breakdown);
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t free_mem, AvailableMemoryBytes());
  return CheckEnoughSpace("this host's memory", free_mem, plan.need_bytes, plan.need_breakdown);
}

Result<DatapathResult> RunDatapath(const DatapathConfig& c) {
  KVTIER_ASSIGN_OR_RETURN(DatapathPlan plan, PlanDatapath(c));
  KVTIER_RETURN_IF_ERROR(CheckCapacity(c, plan));
  KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(c.target));
  WorkDir work;  // removed when this returns, unless keep_files
  if (plan.directory_target) {
    // Also removes the folders of earlier runs that were killed (core/work_dir.h).
    KVTIER_ASSIGN_OR_RETURN(work, WorkDir::Create(url.path, "kvtier-bench"));
    plan.bench_dir = work.path();
    plan.tier_dir = plan.bench_dir + "/tier";
    if (c.run_encrypted) {
      KVTIER_ASSIGN_OR_RETURN(plan.key_file, WriteBenchKey(plan));
    }
  }
  url = UrlForBench(url, plan);
  DatapathResult r = Header(c, plan);
  r.target.scheme = url.scheme;
  KVTIER_ASSIGN_OR_RETURN(ReadArea area, ReadArea::Create(c.model, plan.chunks));
  Progress(c, "writing " + std::to_string(plan.chunks) + " chunks of " + FormatBytes(plan.chunk_bytes) +
                  " to " + url.ToString());
  std::error_code ec;
  if (plan.directory_target) {
    fs::create_directories(plan.tier_dir, ec);
    if (ec) return Status::FromErrno(ec.value(), "create " + plan.bench_dir);
  }
  Status s;
  if (url.scheme == "shm") {
    s = RunSharedMemory(c, plan, url, &area, &r);
  } else {
    bool swept = true;
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier,
                            OpenTierForPass(url, plan.inflight.front(), &swept));
    auto written = WritePass(*tier, area);
    if (!written.ok()) {
      s = written.status();
    } else if (plan.directory_target) {
      r.write = *written;
      Progress(c, "  write: " + GbpsText(r.write.BytesPerSecond()));
      tier.reset();  // every read pass reopens the tier from what is on storage
      s = RunDirectorySweep(c, plan, url, &area, &r);
      if (s.ok() && c.run_encrypted) s = RunEncrypted(c, plan, url, &area, &r);
    } else if (dynamic_cast<object::ObjectTier*>(tier.get()) != nullptr) {
      r.write = *written;
      Progress(c, "  write: " + GbpsText(r.write.BytesPerSecond()));
      s = RunObjectSweep(c, plan, url, *tier, &area, &r);
      if (!c.keep_files) RemoveObjectChunks(*tier, area);
    } else {
      r.write = *written;
      Progress(c, "  write: " + GbpsText(r.write.BytesPerSecond()));
      s = RunMemory(c, plan, *tier, &area, &r);
    }
  }
  if (s.ok()) {
    // At most 1 GiB: a CPU rate needs no more, and it keeps the run short.
    const uint64_t n =
        std::min<uint64_t>(plan.chunks, std::max<uint64_t>(1, (1ull << 30) / plan.chunk_bytes));
    r.verify_copy = MemcpyReference(area.Span().first(n * plan.chunk_bytes), area.Source(),
                                    plan.chunk_bytes, /*checksum=*/true);
    Progress(c, "  verify + copy (CPU only): " + GbpsText(r.verify_copy->BytesPerSecond()));
    if (!plan.key_file.empty()) {  // the CPU bound of the encrypted writes, next to the disk's figures
      KVTIER_ASSIGN_OR_RETURN(r.seal_cpu, SealReference(area, n));
      Progress(c, "  seal (CPU only, one thread): " + GbpsText(r.seal_cpu->BytesPerSecond()));
    }
  }
  if (c.keep_files) work.Keep();
  if (!s.ok()) return s;
  return r;
}

}  // namespace kvtier::internal
