#include "tiers/file/file_scan.h"

#include <algorithm>
#include <ctime>

#include "io/chunk_io.h"

namespace kvtier::internal {
namespace {

int64_t NowNs() {
  struct timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

void VisitChunk(ChunkDir& dir, const WalkEntry& e, ScanResult* out) {
  Status s;
  uint64_t fingerprint = 0;
  if (e.stat.type != FileType::kRegular) {
    s = Status::Corruption(dir.Describe(e.rel) + " is not a regular file");
  } else {
    auto header = ReadChunkHeader(dir.fs(), e.rel, e.id);
    s = header.status();
    if (header.ok()) fingerprint = header->id.layout_fingerprint;
  }
  if (s.ok()) {
    ScannedChunk c{e.id, e.stat.size, e.stat.mtime_ns};
    c.id.layout_fingerprint = fingerprint;
    out->chunks.push_back(c);
  } else if (s.IsCorruption()) {
    ++out->corrupt_found;
    if (!dir.read_only() && dir.RemoveEntry(e).ok()) ++out->corrupt_removed;
  } else if (s.code() == Code::kVersionMismatch) {
    ++out->newer_skipped;
  } else if (!s.IsNotFound()) {
    ++out->unreadable;
  }
}

}  // namespace

Result<ScanResult> ScanChunkDir(ChunkDir& dir) {
  ScanResult out;
  const int64_t now = NowNs();
  KVTIER_RETURN_IF_ERROR(dir.Walk(
      [&](const WalkEntry& e) {
        if (e.kind == EntryKind::kChunk) {
          VisitChunk(dir, e, &out);
        } else if (e.kind == EntryKind::kTemp && !dir.read_only() &&
                   IsStaleTemp(*e.temp, e.stat.mtime_ns, now, kFileTempGrace) && dir.RemoveEntry(e).ok()) {
          ++out.temp_removed;
        }
        return true;
      },
      &out.skipped));
  std::sort(out.chunks.begin(), out.chunks.end(),
            [](const ScannedChunk& a, const ScannedChunk& b) { return a.mtime_ns < b.mtime_ns; });
  return out;
}

}  // namespace kvtier::internal
