#include "eval/benchlib/results.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

double Gbps(double bytes_per_second) { return bytes_per_second / 1e9; }

nlohmann::json PhaseJson(const PhaseResult& p) {
  return {{"chunks", p.chunks},   {"bytes", p.bytes},   {"seconds", p.seconds},
          {"gbps", Gbps(p.BytesPerSecond())}, {"errors", p.errors}, {"wrong_bytes", p.wrong_bytes}, {"p50_us", p.p50_us},
          {"p99_us", p.p99_us}};
}

// A write phase: the phase, and the Flush after it (not in its seconds).
nlohmann::json WritePhaseJson(const PhaseResult& p) {
  nlohmann::json j = PhaseJson(p);
  j["flush_seconds"] = p.flush_seconds;
  return j;
}

nlohmann::json OptionalPhase(const std::optional<PhaseResult>& p) {
  return p ? PhaseJson(*p) : nlohmann::json(nullptr);
}

nlohmann::json FioJson(const std::optional<FioResult>& f) {
  if (!f) return nullptr;
  return {{"gbps", Gbps(f->bytes_per_second)}, {"bytes", f->bytes},   {"seconds", f->seconds},
          {"p50_us", f->p50_us},  {"p99_us", f->p99_us}, {"ioengine", f->ioengine},
          {"iodepth", f->iodepth}, {"memory", f->memory},   {"command", f->command}};
}

nlohmann::json HitJson(const std::optional<HitResult>& h) {
  if (!h) return nullptr;
  return {{"tokens", h->tokens},
          {"chunks", h->chunks},
          {"loaded_chunks", h->loaded_chunks},
          {"bytes_read", h->bytes_read},
          {"skipped_bytes", h->skipped_bytes},
          {"minimum_bytes", h->minimum_bytes},
          {"naive_bytes", h->naive_bytes},
          {"ratio_to_minimum", h->RatioToMinimum()},
          {"ratio_to_naive", h->RatioToNaive()},
          {"seconds", h->seconds},
          {"errors", h->errors}};
}

// Says where fio's buffers were, and what that means when they were 4 KiB pages.
std::string FioMemoryLine(const DatapathResult& r) {
  for (const SweepPoint& p : r.sweep) {
    if (!p.fio || p.fio->memory.empty() || p.fio->memory == "dd") continue;
    if (p.fio->memory != "4 KiB pages") return "fio buffers: " + p.fio->memory + "\n";
    return "fio buffers: 4 KiB pages, where kvtier reads into huge pages; on a device with a segment limit "
           "this understates the disk (mount hugetlbfs with free huge pages for a fair reference: "
           "docs/qualification.md)\n";
  }
  return "";
}

double BestFio(const DatapathResult& r) {
  double best = 0;
  for (const SweepPoint& p : r.sweep) {
    if (p.fio) best = std::max(best, p.fio->bytes_per_second);
  }
  return best;
}

// The lowest ratio over the sweep points that have one (`ratio` < 0: none); null when none has.
template <typename F>
nlohmann::json MinRatio(const DatapathResult& r, F ratio) {
  double low = -1;
  for (const SweepPoint& p : r.sweep) {
    const double x = ratio(p);
    if (x >= 0 && (low < 0 || x < low)) low = x;
  }
  return low < 0 ? nlohmann::json(nullptr) : nlohmann::json(low);
}

nlohmann::json SummaryJson(const DatapathResult& r) {
  const SweepPoint* best = r.Best();
  if (best == nullptr) return nullptr;
  const double bw = best->kvtier.BytesPerSecond();
  const double best_fio = BestFio(r);
  const double serial = r.serial_pread ? r.serial_pread->BytesPerSecond() : 0;
  return {{"best_inflight_bytes", best->inflight_bytes},
          {"gbps", Gbps(bw)},
          {"p50_us", best->kvtier.p50_us},
          {"p99_us", best->kvtier.p99_us},
          {"fio_gbps", best->fio ? nlohmann::json(Gbps(best->fio->bytes_per_second)) : nullptr},
          {"ratio_to_fio", best->fio ? nlohmann::json(best->RatioToFio()) : nullptr},
          {"best_fio_gbps", best_fio > 0 ? nlohmann::json(Gbps(best_fio)) : nullptr},
          {"ratio_to_best_fio", best_fio > 0 ? nlohmann::json(bw / best_fio) : nullptr},
          {"serial_gbps", serial > 0 ? nlohmann::json(Gbps(serial)) : nullptr},
          {"speedup_over_serial", serial > 0 ? nlohmann::json(bw / serial) : nullptr},
          {"reference_gbps", best->reference ? nlohmann::json(Gbps(best->reference->BytesPerSecond())) : nullptr},
          {"ratio_to_reference", best->reference ? nlohmann::json(best->RatioToReference()) : nullptr},
          {"min_ratio_to_fio", MinRatio(r, [](const SweepPoint& p) { return p.fio ? p.RatioToFio() : -1; })},
          {"min_ratio_to_reference",
           MinRatio(r, [](const SweepPoint& p) { return p.reference ? p.RatioToReference() : -1; })},
          {"min_ratio_write_to_fio",
           MinRatio(r, [](const SweepPoint& p) { return p.write && p.fio_write ? p.RatioWriteToFio() : -1; })},
          {"min_ratio_encrypted_write_to_plain",
           MinRatio(r, [](const SweepPoint& p) { return p.write && p.encrypted_write ? p.RatioEncryptedWriteToPlain() : -1; })},
          {"min_ratio_write_to_reference",
           MinRatio(r, [](const SweepPoint& p) { return p.write && p.write_reference ? p.RatioWriteToReference() : -1; })},
          {"min_ratio_verified_to_unverified",
           MinRatio(r, [](const SweepPoint& p) { return p.unverified ? p.RatioVerifiedToUnverified() : -1; })},
          {"ratio_to_memcpy", r.memcpy_parallel && r.memcpy_parallel->BytesPerSecond() > 0
                                  ? nlohmann::json(bw / r.memcpy_parallel->BytesPerSecond())
                                  : nullptr}};
}

ModelPreset PresetOf(const DatapathResult& r) {
  auto m = FindModelPreset(r.model_preset);
  return m.ok() ? *m : ModelPreset{};
}

nlohmann::json VerdictJson(const DatapathResult& r) {
  const SweepPoint* best = r.Best();
  if (!r.gpu || best == nullptr) return nullptr;
  ModelPreset m = PresetOf(r);
  if (m.active_params == 0) return nullptr;
  m.layout.tokens_per_chunk = r.chunk_tokens;
  const double bw = best->kvtier.BytesPerSecond();
  const RecomputeVerdict v = CompareLoadToRecompute(m, *r.gpu, r.context_tokens, bw);
  const uint64_t even = BreakEvenTokens(m, *r.gpu, bw);
  return {{"estimate", !r.gpu->measured},
          {"profile_kind", std::string(r.gpu->Kind())},
          {"profile", r.gpu->Label()},
          {"gpu", r.gpu->name},
          {"description", r.gpu->description},
          {"peak_tflops", r.gpu->peak_flops / 1e12},
          {"mfu", r.gpu->mfu},
          {"source", r.gpu->source},
          {"context_tokens", r.context_tokens},
          {"recompute_seconds", v.recompute_s},
          {"load_seconds", v.load_s},
          {"ttft_saved_seconds", v.saved_s},
          {"speedup", v.speedup},
          {"break_even_tokens", even == std::numeric_limits<uint64_t>::max()
                                    ? nlohmann::json(nullptr)
                                    : nlohmann::json(even)}};
}

std::string Fmt(const char* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, a);
  return buf;
}

}  // namespace

std::string HitText(const HitResult& h) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "%llu-token hit (%llu chunks): read %s (%llu bytes) = %.1f%% of the minimum the model needs, "
                "%s (%llu); naive %s (%llu), read = %.1f%% of it; %.3f s",
                static_cast<unsigned long long>(h.tokens), static_cast<unsigned long long>(h.chunks),
                FormatBytes(h.bytes_read).c_str(), static_cast<unsigned long long>(h.bytes_read),
                100 * h.RatioToMinimum(), FormatBytes(h.minimum_bytes).c_str(),
                static_cast<unsigned long long>(h.minimum_bytes), FormatBytes(h.naive_bytes).c_str(),
                static_cast<unsigned long long>(h.naive_bytes), 100 * h.RatioToNaive(), h.seconds);
  std::string out = line;
  if (h.loaded_chunks != h.chunks) out += "; loaded " + std::to_string(h.loaded_chunks) + " chunks";
  if (h.errors) out += "  (" + std::to_string(h.errors) + " errors)";
  return out;
}

const SweepPoint* DatapathResult::Best() const {
  const SweepPoint* best = nullptr;
  for (const SweepPoint& p : sweep) {
    if (best == nullptr || p.kvtier.BytesPerSecond() > best->kvtier.BytesPerSecond()) best = &p;
  }
  return best;
}

namespace {

// " (runs 92, 99, 79%)" for two runs' ratios or more; empty for fewer.
std::string PerRunText(const std::vector<double>& ratios) {
  if (ratios.size() < 2) return "";
  std::string out = " (runs ";
  for (size_t i = 0; i < ratios.size(); ++i) out += (i ? ", " : "") + Fmt("%.0f", 100 * ratios[i]);
  return out + "%)";
}

}  // namespace

double MedianRatio(std::vector<double> ratios) {
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  return n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
}

nlohmann::json ToJson(const DatapathResult& r) {
  nlohmann::json sweep = nlohmann::json::array();
  for (const SweepPoint& p : r.sweep) {
    sweep.push_back({{"inflight_bytes", p.inflight_bytes},
                     {"kvtier", PhaseJson(p.kvtier)},
                     {"fio", FioJson(p.fio)},
                     {"ratio_to_fio", p.fio ? nlohmann::json(p.RatioToFio()) : nullptr},
                     {"read_ratios_to_fio", p.read_ratios_to_fio},
                     {"reference", OptionalPhase(p.reference)},
                     {"ratio_to_reference", p.reference ? nlohmann::json(p.RatioToReference()) : nullptr},
                     {"write", p.write ? WritePhaseJson(*p.write) : nlohmann::json(nullptr)},
                     {"fio_write", FioJson(p.fio_write)},
                     {"ratio_write_to_fio", p.write && p.fio_write ? nlohmann::json(p.RatioWriteToFio()) : nullptr},
                     {"write_ratios_to_fio", p.write_ratios_to_fio},
                     {"encrypted_write", OptionalPhase(p.encrypted_write)},
                     {"ratio_encrypted_write_to_plain",
                      p.write && p.encrypted_write ? nlohmann::json(p.RatioEncryptedWriteToPlain()) : nullptr},
                     {"write_reference", OptionalPhase(p.write_reference)},
                     {"ratio_write_to_reference",
                      p.write && p.write_reference ? nlohmann::json(p.RatioWriteToReference()) : nullptr},
                     {"unverified", OptionalPhase(p.unverified)},
                     {"first_pass", OptionalPhase(p.first_pass)},
                     {"ratio_verified_to_unverified",
                      p.unverified ? nlohmann::json(p.RatioVerifiedToUnverified()) : nullptr},
                     {"hit", HitJson(p.hit)}});
  }
  const SweepPoint* best = r.Best();
  const uint64_t context_bytes = r.context_tokens * r.bytes_per_token;
  const double best_bw = best ? best->kvtier.BytesPerSecond() : 0;
  return {
      {"schema", kDatapathSchema},
      {"started_at", r.started_at},
      {"host", r.host},
      {"target",
       {{"url", r.target.url}, {"scheme", r.target.scheme}, {"directory", r.target.directory},
        {"shared", r.target.shared}, {"persistent", r.target.persistent},
        {"direct_io", r.target.direct_io}, {"cold", r.target.cold},
        {"cold_method", r.target.cold_method}}},
      {"model",
       {{"preset", r.model_preset}, {"model_id", r.model_id}, {"layout", r.layout},
        {"chunk_tokens", r.chunk_tokens}, {"chunk_bytes", r.chunk_bytes},
        {"bytes_per_token", r.bytes_per_token}}},
      {"write", WritePhaseJson(r.write)},
      {"repeat", r.repeat},
      {"sweep", sweep},
      {"serial_pread", OptionalPhase(r.serial_pread)},
      {"memcpy", OptionalPhase(r.memcpy_ref)},
      {"memcpy_parallel", OptionalPhase(r.memcpy_parallel)},
      {"verify_copy", OptionalPhase(r.verify_copy)},
      {"seal_cpu", OptionalPhase(r.seal_cpu)},
      {"encrypted", r.encrypted ? nlohmann::json{{"inflight_bytes", r.encrypted->inflight_bytes},
                                                 {"write", WritePhaseJson(r.encrypted->write)},
                                                 {"read", PhaseJson(r.encrypted->read)},
                                                 {"ratio_write_to_plain", EncryptedRow::Ratio(r.encrypted->write, r.encrypted->plain_write)},
                                                 {"ratio_read_to_plain", EncryptedRow::Ratio(r.encrypted->read, r.encrypted->plain_read)}}
                                : nlohmann::json(nullptr)},
      {"summary", SummaryJson(r)},
      {"context",
       {{"tokens", r.context_tokens}, {"bytes", context_bytes},
        {"load_seconds", best_bw > 0 ? nlohmann::json(static_cast<double>(context_bytes) / best_bw)
                                     : nlohmann::json(nullptr)}}},
      {"verdict", VerdictJson(r)},
      {"fio_note", r.fio_note},
      {"reference_name", r.reference_name},
  };
}

std::string FormatSummary(const DatapathResult& r) {
  std::string out;
  char line[256];
  out += "target " + r.target.url + " (" + (r.target.persistent ? "persistent" : "volatile") + ", " +
         (!r.target.shared ? "local" : r.target.scheme == "shm" ? "shared by this host's processes" : "shared across hosts") +
         ", cold reads: " +
         (r.target.cold ? r.target.cold_method : "NO, page cache may serve reads") + ")\n";
  out += "model " + r.model_preset + ": " + r.layout + " = " + FormatBytes(r.chunk_bytes) +
         " per chunk; " + std::to_string(r.write.chunks) + " chunks, " + FormatBytes(r.write.bytes) +
         "\n";
  out += "write: " + Fmt("%.2f GB/s", Gbps(r.write.BytesPerSecond())) + "\n";
  if (r.repeat > 1) {
    out += "each row is the median of " + std::to_string(r.repeat) + " runs; kvtier/fio is the median of the runs' "
           "ratios (each run's kvtier and fio passes back to back, their order alternating), per run in brackets\n";
  }
  out += "  in flight   kvtier GB/s  p50 ms  p99 ms |  fio GB/s  p50 ms  p99 ms | kvtier/fio\n";
  for (const SweepPoint& p : r.sweep) {
    std::snprintf(line, sizeof(line), "%11s  %11.2f %7.1f %7.1f |", FormatBytes(p.inflight_bytes).c_str(),
                  Gbps(p.kvtier.BytesPerSecond()), p.kvtier.p50_us / 1e3, p.kvtier.p99_us / 1e3);
    out += line;
    if (p.fio) {
      std::snprintf(line, sizeof(line), " %9.2f %7.1f %7.1f | %9.0f%%", Gbps(p.fio->bytes_per_second),
                    p.fio->p50_us / 1e3, p.fio->p99_us / 1e3, 100 * p.RatioToFio());
      out += line + PerRunText(p.read_ratios_to_fio);
    } else {
      out += "       n/a                     |       n/a";
    }
    if (p.kvtier.errors) out += "  (" + std::to_string(p.kvtier.errors) + " errors)";
    out += "\n";
    if (p.reference) {
      std::snprintf(line, sizeof(line), "%11s  raw client GETs, same objects and bound: %.2f GB/s; kvtier = %.0f%%",
                    "", Gbps(p.reference->BytesPerSecond()), 100 * p.RatioToReference());
      out += line;
      if (p.reference->errors) out += "  (" + std::to_string(p.reference->errors) + " reference errors)";
      out += "\n";
    }
    if (p.write) {
      std::snprintf(line, sizeof(line), "%11s  write %.2f GB/s", "", Gbps(p.write->BytesPerSecond()));
      out += line;
      if (p.fio_write) {
        std::snprintf(line, sizeof(line), "; fio O_DIRECT writes, same depth: %.2f GB/s; kvtier = %.0f%%",
                      Gbps(p.fio_write->bytes_per_second), 100 * p.RatioWriteToFio());
        out += line + PerRunText(p.write_ratios_to_fio);
      }
      if (p.write_reference) {
        const bool memory = r.target.scheme == "mem" || r.target.scheme == "shm";
        std::snprintf(line, sizeof(line), "; %s: %.2f GB/s; kvtier = %.0f%%",
                      memory ? "memcpy of the same bytes" : "raw client writes, same objects and bound",
                      Gbps(p.write_reference->BytesPerSecond()), 100 * p.RatioWriteToReference());
        out += line;
      }
      if (p.write->errors) out += "  (" + std::to_string(p.write->errors) + " errors)";
      if (p.write->flush_seconds >= 0.001) {
        std::snprintf(line, sizeof(line), "; then Flush (durable) %.3f s", p.write->flush_seconds);
        out += line;
      }
      out += "\n";
      if (p.encrypted_write) {
        std::snprintf(line, sizeof(line), "%11s  encrypted write (key_file=, same threads) %.2f GB/s = %.0f%% of plain\n",
                      "", Gbps(p.encrypted_write->BytesPerSecond()), 100 * p.RatioEncryptedWriteToPlain());
        out += line;
      }
    }
    if (p.unverified) {
      std::snprintf(line, sizeof(line), "%11s  same load, payload checksums off: %.2f GB/s; verified = %.0f%%\n",
                    "", Gbps(p.unverified->BytesPerSecond()), 100 * p.RatioVerifiedToUnverified());
      out += line;
    }
    if (p.first_pass) {
      std::snprintf(line, sizeof(line), "%11s  first pass over the freshly mapped pool: %.2f GB/s (the row above: the next pass)\n",
                    "", Gbps(p.first_pass->BytesPerSecond()));
      out += line;
    }
    if (p.hit) out += std::string(13, ' ') + HitText(*p.hit) + "\n";
  }
  if (!r.fio_note.empty()) out += "fio: " + r.fio_note + "\n";
  out += FioMemoryLine(r);
  if (!r.reference_name.empty()) out += "reference: " + r.reference_name + "\n";
  if (r.encrypted) {
    const EncryptedRow& e = *r.encrypted;
    out += "  mode        in flight  write GB/s  read GB/s | read/plain  write/plain\n";
    std::snprintf(line, sizeof(line), "  plain     %11s  %10.2f %10.2f |\n", FormatBytes(e.inflight_bytes).c_str(),
                  Gbps(e.plain_write.BytesPerSecond()), Gbps(e.plain_read.BytesPerSecond()));
    out += line;
    std::snprintf(line, sizeof(line), "  encrypted %11s  %10.2f %10.2f | %9.0f%%  %10.0f%%", FormatBytes(e.inflight_bytes).c_str(),
                  Gbps(e.write.BytesPerSecond()), Gbps(e.read.BytesPerSecond()),
                  100 * EncryptedRow::Ratio(e.read, e.plain_read), 100 * EncryptedRow::Ratio(e.write, e.plain_write));
    out += line;
    if (e.read.errors) out += "  (" + std::to_string(e.read.errors) + " errors)";
    out += "\n";
  }
  if (r.serial_pread) {
    std::snprintf(line, sizeof(line),
                  "serial pread baseline (one chunk at a time, buffered, cold): %.2f GB/s, p50 %.1f ms, "
                  "p99 %.1f ms\n",
                  Gbps(r.serial_pread->BytesPerSecond()), r.serial_pread->p50_us / 1e3,
                  r.serial_pread->p99_us / 1e3);
    out += line;
  }
  if (r.memcpy_ref) {
    out += "memcpy reference (one thread): " + Fmt("%.2f GB/s", Gbps(r.memcpy_ref->BytesPerSecond())) +
           "\n";
  }
  if (r.memcpy_parallel) {
    out += "memcpy reference (" + std::to_string(r.memcpy_parallel->chunks) + " threads, one per core): " +
           Fmt("%.2f GB/s", Gbps(r.memcpy_parallel->BytesPerSecond()));
    if (const SweepPoint* best = r.Best(); best != nullptr && r.memcpy_parallel->BytesPerSecond() > 0) {
      out += Fmt(", load = %.0f%% of it", 100 * best->kvtier.BytesPerSecond() / r.memcpy_parallel->BytesPerSecond());
    }
    out += "\n";
  }
  if (r.verify_copy) {
    out += "verify + copy, no I/O (one thread, the CPU work of a verified load): " +
           Fmt("%.2f GB/s", Gbps(r.verify_copy->BytesPerSecond())) + "\n";
  }
  if (r.seal_cpu) {
    out += "seal AES-256-GCM, no I/O (one thread, the CPU work an encrypted write adds): " +
           Fmt("%.2f GB/s", Gbps(r.seal_cpu->BytesPerSecond())) + " per core\n";
  }
  const nlohmann::json j = ToJson(r);
  const auto& s = j["summary"];
  if (!s.is_null()) {
    out += "best: " + FormatBytes(s["best_inflight_bytes"].get<uint64_t>()) + " in flight, " +
           Fmt("%.2f GB/s", s["gbps"].get<double>());
    if (!s["ratio_to_fio"].is_null()) {
      out += Fmt(" = %.0f%% of fio at the same depth", 100 * s["ratio_to_fio"].get<double>());
      out += Fmt(", %.0f%% of fio's best", 100 * s["ratio_to_best_fio"].get<double>());
    }
    if (!s["speedup_over_serial"].is_null()) {
      out += Fmt(", %.2fx the serial baseline", s["speedup_over_serial"].get<double>());
    }
    out += "\n";
  }
  const auto& c = j["context"];
  if (!c["load_seconds"].is_null()) {
    out += std::to_string(r.context_tokens) + "-token context (" +
           FormatBytes(c["bytes"].get<uint64_t>()) + "): loads in " +
           Fmt("%.3f s", c["load_seconds"].get<double>()) + " at the best bandwidth\n";
  }
  const auto& v = j["verdict"];
  if (!v.is_null()) {
    out += "vs recompute, compute modelled from profile " + v["profile"].get<std::string>() + ":\n";
    out += "  recompute " + Fmt("%.3f s", v["recompute_seconds"].get<double>()) + ", load " +
           Fmt("%.3f s", v["load_seconds"].get<double>()) + ", TTFT saved per hit " +
           Fmt("%.3f s", v["ttft_saved_seconds"].get<double>()) +
           Fmt(" (%.2fx)\n", v["speedup"].get<double>());
    if (v["break_even_tokens"].is_null()) {
      out += "  break-even: none, the target delivered no bandwidth\n";
    } else if (v["break_even_tokens"].get<uint64_t>() == 0) {
      out += "  break-even: loading beats recompute at every context length\n";
    } else {
      out += "  break-even: loading beats recompute from " +
             std::to_string(v["break_even_tokens"].get<uint64_t>()) + " tokens of context\n";
    }
  }
  return out;
}

std::string DatapathErrorLine(uint64_t errors, uint64_t wrong_bytes) {
  return std::to_string(errors - wrong_bytes) + " chunk reads failed, " + std::to_string(wrong_bytes) +
         " returned wrong bytes";
}

}  // namespace kvtier::internal
