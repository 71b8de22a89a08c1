// Results of `kvtier bench datapath` and their JSON form (schema "kvtier.bench.datapath/1").
//
// The JSON layout is a contract with `kvtier report` and with users' scripts: add fields freely, but
// never rename or remove one without bumping the schema version (tests/eval/benchlib checks the key set).
// Bandwidths are in bytes per second in the structs and in decimal GB/s (1e9 bytes/s) in the JSON.
// Plain values; thread-compatible.
#pragma once

#include "kvtier/tier.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/benchlib/fio_runner.h"
#include "eval/gpuprofile/gpu_profile.h"

namespace kvtier::internal {

inline constexpr const char* kDatapathSchema = "kvtier.bench.datapath/1";

// One measured read (or write) pass.
struct PhaseResult {
  uint64_t chunks = 0;
  uint64_t bytes = 0;    // payload bytes delivered (or written)
  double seconds = 0;
  uint64_t errors = 0;   // chunks that failed or came back with the wrong bytes
  double p50_us = 0, p99_us = 0;  // per chunk; 0 when the path does not measure it
  // Writes: the tier's Flush after the last Put returned (file://: one syncfs, which makes the chunks
  // durable), not in `seconds`: a Put returns once its chunk is published, as fio's writes return
  // without an fsync; an engine does not wait for Flush.
  double flush_seconds = 0;
  // Of `errors`: chunks read without an error whose bytes were wrong. Last, so that the positional
  // initialisers {chunks, bytes, seconds, errors, p50_us, p99_us} keep their meaning.
  uint64_t wrong_bytes = 0;
  double BytesPerSecond() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0; }
  void SetLatency(const LatencySummary& s) {
    p50_us = s.p50_us;
    p99_us = s.p99_us;
  }
};

// One prefix hit (benchlib HitPass): a Store::Load of the first `chunks` chunks, cold where the target
// allows, measured at the tier. For a layout with sliding-window groups the Store leaves the window
// groups of chunks outside every window unread where the tier reads ranges (file://), so bytes_read
// drops below naive_bytes towards minimum_bytes (docs/models.md, "Sliding-window loads").
struct HitResult {
  uint64_t tokens = 0, chunks = 0;  // the prefix asked for
  uint64_t loaded_chunks = 0;       // Store::Load's return
  uint64_t bytes_read = 0;          // the tier's TierStats::bytes_read over the Load (payload bytes)
  uint64_t skipped_bytes = 0;       // StoreStats::load_bytes_skipped of the Load
  uint64_t minimum_bytes = 0;       // what the model needs for the prefix (MinimumPrefixBytes)
  uint64_t naive_bytes = 0;         // every byte of every chunk of the prefix
  double seconds = 0;
  uint64_t errors = 0;  // chunks not loaded, or whose delivered bytes were wrong
  static double Ratio(uint64_t a, uint64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0; }
  double RatioToMinimum() const { return Ratio(bytes_read, minimum_bytes); }
  double RatioToNaive() const { return Ratio(bytes_read, naive_bytes); }
};

// The median of `ratios` (the mean of the middle two for an even count); 0 when empty.
double MedianRatio(std::vector<double> ratios);

// kvtier and fio (directory targets) or the backend's raw client (object tiers, `reference`) at one
// bound on bytes in flight.
struct SweepPoint {
  uint64_t inflight_bytes = 0;
  PhaseResult kvtier;
  std::optional<FioResult> fio;
  std::optional<PhaseResult> reference;  // object tiers: raw client GETs, same object size and bound
  double RatioToReference() const {
    return reference && reference->BytesPerSecond() > 0 ? kvtier.BytesPerSecond() / reference->BytesPerSecond() : 0;
  }
  // Each run's kvtier/fio ratio, reads and writes (directory targets, fio in every run), the two passes of
  // a run taken back to back (datapath.cc MeasurePoint). Where present, RatioToFio and RatioWriteToFio are
  // their median, not the ratio of the median bandwidths: the disk's throughput drifts by several percent
  // from one run to the next, and a paired ratio compares passes seconds apart.
  std::vector<double> read_ratios_to_fio, write_ratios_to_fio;
  double RatioToFio() const {
    if (!read_ratios_to_fio.empty()) return MedianRatio(read_ratios_to_fio);
    return fio && fio->bytes_per_second > 0 ? kvtier.BytesPerSecond() / fio->bytes_per_second : 0;
  }
  // The write row at this bound: kvtier's Puts into an empty tier from depth = inflight / chunk
  // threads, then its reference: fio's O_DIRECT sequential writes of files of the same size at the same
  // depth (directory targets), or a memcpy of the same bytes (mem://, `write_reference`), or the
  // backend's raw client writing objects of the same size at the same bound (redis://, rados://, s3://,
  // `write_reference`).
  std::optional<PhaseResult> write;
  std::optional<FioResult> fio_write;
  std::optional<PhaseResult> write_reference;
  // Directory targets (without --no-encrypted): the same chunks Put with key_file= (AES-256-GCM) from the
  // same threads into an emptied folder, right before `write`.
  std::optional<PhaseResult> encrypted_write;
  double RatioEncryptedWriteToPlain() const {
    return write && encrypted_write && write->BytesPerSecond() > 0
               ? encrypted_write->BytesPerSecond() / write->BytesPerSecond()
               : 0;
  }
  double RatioWriteToFio() const {
    if (!write_ratios_to_fio.empty()) return MedianRatio(write_ratios_to_fio);
    return write && fio_write && fio_write->bytes_per_second > 0
               ? write->BytesPerSecond() / fio_write->bytes_per_second
               : 0;
  }
  double RatioWriteToReference() const {
    return write && write_reference && write_reference->BytesPerSecond() > 0
               ? write->BytesPerSecond() / write_reference->BytesPerSecond()
               : 0;
  }
  // file:// only: the same chunks read by the same reader with payload checksums off, right after.
  std::optional<PhaseResult> unverified;
  // shm:// only: the first read of every chunk by a process that mapped the pool afresh, before `kvtier`
  // (the next pass, in the same process). The first pass pays the mapping's page-table set-up, once per
  // process and page: on a virtual machine that shadows page tables it is several times slower.
  std::optional<PhaseResult> first_pass;
  // A hit on the --context-tokens prefix through a Store over the tier at this bound.
  std::optional<HitResult> hit;
  double RatioVerifiedToUnverified() const {
    return unverified && unverified->BytesPerSecond() > 0 ? kvtier.BytesPerSecond() / unverified->BytesPerSecond() : 0;
  }
};

struct TargetInfo {
  std::string url;        // as the user gave it
  std::string scheme;
  std::string directory;  // where the bench wrote, for directory tiers
  bool shared = false, persistent = false, direct_io = false;
  bool cold = false;       // reads bypassed or dropped the page cache
  std::string cold_method;  // "O_DIRECT", "posix_fadvise(DONTNEED)" or "in-memory"
};

// The same target, chunks and bytes in flight with encrypted chunks (key_file=), next to the plain
// figures of that run.
struct EncryptedRow {
  uint64_t inflight_bytes = 0;
  PhaseResult write, read;              // encrypted
  PhaseResult plain_write, plain_read;  // plain, same sizes, same run
  static double Ratio(const PhaseResult& a, const PhaseResult& b) {
    return b.BytesPerSecond() > 0 ? a.BytesPerSecond() / b.BytesPerSecond() : 0;
  }
};

struct DatapathResult {
  std::string started_at;  // UTC, ISO 8601
  std::string host;
  TargetInfo target;
  std::string model_preset, model_id, layout;
  uint32_t chunk_tokens = 0;
  uint64_t chunk_bytes = 0, bytes_per_token = 0;
  PhaseResult write;
  uint32_t repeat = 1;  // runs per sweep point; each point is the median run
  std::vector<SweepPoint> sweep;
  std::optional<PhaseResult> serial_pread;  // one chunk at a time, buffered pread, cold
  std::optional<PhaseResult> memcpy_ref;    // mem:// only
  std::optional<PhaseResult> memcpy_parallel;  // mem:// only: N-thread memcpy, N = chunks (cores)
  std::optional<PhaseResult> verify_copy;   // one thread: checksum + copy per chunk, no I/O
  std::optional<PhaseResult> seal_cpu;      // with encrypted writes: one thread sealing chunks, no I/O
  std::optional<EncryptedRow> encrypted;    // directory targets, unless disabled
  uint64_t context_tokens = 0;
  std::optional<GpuProfile> gpu;
  std::string fio_note;  // why fio is missing, when it is
  std::string reference_name;  // object tiers: which same-run reference ran

  // The sweep point with the highest kvtier bandwidth; nullptr when the sweep is empty.
  const SweepPoint* Best() const;
};

nlohmann::json ToJson(const DatapathResult& r);

// Human-readable summary (the table a user reads), with estimates labelled as such.
std::string FormatSummary(const DatapathResult& r);
// "N chunk reads failed, M returned wrong bytes" for `errors` chunks in error, `wrong_bytes` of them
// read without an error but with the wrong bytes (issue 39: the two were one figure).
std::string DatapathErrorLine(uint64_t errors, uint64_t wrong_bytes);

// One line: "32768-token hit (128 chunks): read 1.13 GiB (1217396736 bytes) = 100.4% of the minimum ...".
std::string HitText(const HitResult& hit);

}  // namespace kvtier::internal
