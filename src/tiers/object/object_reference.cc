#include "tiers/object/object_reference.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "core/chunk_format.h"

namespace kvtier::object {
namespace {

std::string RefName(const ObjectTier& tier, uint64_t i) {
  return tier.options().prefix + "kvtier-bench-ref:" + std::to_string(::getpid()) + ":" + std::to_string(i);
}

Status PutAll(ObjectTier& tier, uint64_t object_bytes, uint64_t count) {
  std::vector<std::byte> bytes(object_bytes);
  for (uint64_t i = 0; i < count; ++i) {
    FillReferenceObject(bytes, i);
    const std::span<const std::byte> piece(bytes);
    ObjectWrite w{RefName(tier, i), GatherList(&piece, 1), Status::OK()};
    tier.client().PutMany(std::span(&w, 1));
    KVTIER_RETURN_IF_ERROR(w.status);
  }
  return Status::OK();
}

}  // namespace

void FillReferenceObject(std::span<std::byte> b, uint64_t i) {
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>(k * 131 + 7);
  std::memcpy(b.data(), &i, std::min(sizeof(i), b.size()));
}

bool ReferenceObjectMatches(std::span<const std::byte> got, std::span<const std::byte> pattern, uint64_t i) {
  uint64_t tag = 0;
  std::memcpy(&tag, got.data(), std::min(sizeof(tag), got.size()));
  const size_t skip = std::min(sizeof(tag), got.size());
  return got.size() == pattern.size() && (got.size() < sizeof(tag) || tag == i) &&
         std::memcmp(got.data() + skip, pattern.data() + skip, got.size() - skip) == 0;
}

Result<RawReadResult> RawReadReference(ObjectTier& tier, uint64_t payload_bytes, uint64_t count) {
  if (tier.capabilities().read_only) return Status::NotSupported("the reference writes objects");
  const uint64_t object_bytes = internal::kChunkHeaderSize + payload_bytes;
  Status put = PutAll(tier, object_bytes, count);
  RawReadResult r;
  if (put.ok()) {
    const uint64_t per_window = std::max<uint64_t>(1, tier.options().inflight_bytes / object_bytes);
    const uint64_t window = std::min(per_window, count);
    std::unique_ptr<std::byte[]> buf = std::make_unique_for_overwrite<std::byte[]>(window * object_bytes);
    std::vector<std::byte> pattern(object_bytes);
    FillReferenceObject(pattern, 0);
    std::vector<ObjectRead> reads;
    std::chrono::duration<double> busy{0};
    for (uint64_t first = 0; first < count; first += window) {
      const uint64_t n = std::min(window, count - first);
      reads.assign(n, ObjectRead{});
      for (uint64_t k = 0; k < n; ++k) {
        reads[k].name = RefName(tier, first + k);
        reads[k].dst = {buf.get() + k * object_bytes, object_bytes};
      }
      const auto t0 = std::chrono::steady_clock::now();
      tier.client().GetMany(reads);
      busy += std::chrono::steady_clock::now() - t0;
      for (uint64_t k = 0; k < n; ++k) {
        const bool ok = reads[k].status.ok() && reads[k].bytes == object_bytes &&
                        ReferenceObjectMatches(reads[k].dst, pattern, first + k);
        if (ok) {
          ++r.objects;
          r.bytes += object_bytes;
        } else {
          ++r.errors;
        }
      }
    }
    r.seconds = busy.count();
  }
  for (uint64_t i = 0; i < count; ++i) (void)tier.client().Delete(RefName(tier, i));
  KVTIER_RETURN_IF_ERROR(put);
  return r;
}

}  // namespace kvtier::object
