#include "eval/ttft/plan.h"

#include <algorithm>

#include "core/chunk_format.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

bool HasMem(const std::string& mode) { return mode == "mem" || mode == "mem+file"; }
bool HasDisk(const std::string& mode) { return mode == "file" || mode == "fs" || mode == "mem+file"; }

// mem:// rounds each chunk up to whole arena pages and keeps an index: a MiB per chunk covers it.
constexpr uint64_t kMemSlackPerChunk = 1ull << 20;

struct Need {
  std::string mode;
  uint32_t concurrency = 0;
  TtftFootprint fp;
  bool memory_short = false;
};

// The first point that does not fit, if any.
bool FirstMisfit(const TtftOptions& o, uint64_t memory, uint64_t disk, Need* out) {
  const uint64_t usable_memory = memory - memory / 10;
  for (const std::string& mode : o.modes) {
    for (uint32_t c : o.concurrency) {
      const TtftFootprint fp = FootprintOf(o, mode, c);
      const bool mem_short = fp.MemoryBytes() > usable_memory;
      if (mem_short || fp.disk_bytes > disk) {
        *out = Need{mode, c, fp, mem_short};
        return true;
      }
    }
  }
  return false;
}

std::string FitsAdvice(const TtftOptions& o, uint64_t memory, uint64_t disk) {
  Need n;
  uint32_t best_c = 0;
  for (uint32_t c = 1; c <= 1024; ++c) {
    TtftOptions t = o;
    t.concurrency = {c};
    if (FirstMisfit(t, memory, disk, &n)) break;
    best_c = c;
  }
  uint64_t best_ctx = 0;
  for (uint64_t ctx = 1024; ctx <= o.context_tokens; ctx += 1024) {
    TtftOptions t = o;
    t.context_tokens = ctx;
    if (FirstMisfit(t, memory, disk, &n)) break;
    best_ctx = ctx;
  }
  std::string out = "what would fit: ";
  out += best_c > 0 ? "--context " + std::to_string(o.context_tokens) + " up to --concurrency " +
                          std::to_string(best_c)
                    : "no concurrency at --context " + std::to_string(o.context_tokens);
  std::string levels;
  for (uint32_t c : o.concurrency) levels += (levels.empty() ? "" : ",") + std::to_string(c);
  out += best_ctx > 0 ? "; --concurrency " + levels + " up to --context " + std::to_string(best_ctx)
                      : "; no context of 1024 tokens or more at --concurrency " + levels;
  return out + " (or fewer --modes, --min-sessions, --turns, or a --dir with more space)";
}

}  // namespace

const std::vector<std::string>& TtftModeNames() {
  static const std::vector<std::string> names = {"recompute", "mem", "file", "fs", "mem+file"};
  return names;
}

Status ValidateTtft(const TtftOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.model.layout.Validate());
  if (o.context_tokens == 0 || o.turns == 0 || o.load_batch_chunks == 0 || o.concurrency.empty() ||
      o.modes.empty()) {
    return Status::InvalidArgument("context, turns, load batch, concurrency and modes must be non-zero");
  }
  if (o.context_tokens < o.model.layout.tokens_per_chunk) {
    return Status::InvalidArgument("--context must hold at least one chunk (" +
                                   std::to_string(o.model.layout.tokens_per_chunk) + " tokens)");
  }
  for (uint32_t c : o.concurrency) {
    if (c == 0) return Status::InvalidArgument("--concurrency levels must be positive");
  }
  const auto& known = TtftModeNames();
  for (const std::string& m : o.modes) {
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      return Status::InvalidArgument("unknown mode '" + m + "' (known: recompute, mem, file, fs, mem+file)");
    }
  }
  return Status::OK();
}

uint64_t SessionChunks(const TtftOptions& o) {
  return (o.context_tokens + static_cast<uint64_t>(o.turns) * o.turn_tokens) / o.model.layout.tokens_per_chunk;
}

TtftFootprint FootprintOf(const TtftOptions& o, const std::string& mode, uint32_t concurrency) {
  TtftFootprint fp;
  if (mode == "recompute") return fp;
  const uint64_t chunk = o.model.layout.BytesPerChunk();
  fp.sessions = std::max(concurrency, o.min_sessions);
  fp.chunks = fp.sessions * SessionChunks(o);
  fp.kv_bytes = fp.chunks * chunk;
  if (HasMem(mode)) {
    const uint64_t all = fp.chunks * (chunk + kMemSlackPerChunk);
    fp.mem_tier_bytes = mode == "mem" ? all : all / 2;
  }
  if (HasDisk(mode)) fp.disk_bytes = fp.chunks * StoredChunkBytes(chunk) + fp.chunks * 4096;
  fp.buffer_bytes = static_cast<uint64_t>(concurrency) *
                        std::min<uint64_t>(o.load_batch_chunks, SessionChunks(o)) * chunk +
                    chunk;  // + the one source chunk every save copies from
  return fp;
}

Status CheckTtftFits(const TtftOptions& o, uint64_t available_memory, uint64_t free_disk) {
  Need n;
  if (!FirstMisfit(o, available_memory, free_disk, &n)) return Status::OK();
  std::string what = "mode " + n.mode + " at concurrency " + std::to_string(n.concurrency) + " holds " +
                     std::to_string(n.fp.sessions) + " sessions x " + std::to_string(SessionChunks(o)) +
                     " chunks = " + FormatBytes(n.fp.kv_bytes) + " of KV; it needs ";
  if (n.memory_short) {
    what += FormatBytes(n.fp.MemoryBytes()) + " of memory (" + FormatBytes(n.fp.mem_tier_bytes) +
            " in mem:// + " + FormatBytes(n.fp.buffer_bytes) + " of load buffers) and this host has " +
            FormatBytes(available_memory) + " available (a tenth is kept free)";
  } else {
    what += FormatBytes(n.fp.disk_bytes) + " of chunk files and the --dir filesystem has " +
            FormatBytes(free_disk) + " free";
  }
  return Status::NoSpace("the run does not fit: " + what + "; " + FitsAdvice(o, available_memory, free_disk));
}

}  // namespace kvtier::internal
