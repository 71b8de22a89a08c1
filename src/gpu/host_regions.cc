#include "gpu/host_regions.h"

#include <map>

#include "core/thread_annotations.h"
#include "kvtier/gpu.h"

namespace kvtier::internal {
namespace {

// This process's registrations of long-lived regions, by start address, with their holders' count.
struct Registered {
  std::unique_ptr<PinnedRegistration> pin;
  size_t bytes = 0;
  size_t holders = 0;
};

class Registry {
 public:
  static Registry& Get() {
    static Registry* r = new Registry();  // never destroyed: holders may outlive static destruction order
    return *r;
  }
  Status Acquire(std::span<std::byte> region, int device) {
    MutexLock l(mu_);
    auto it = by_start_.find(region.data());
    if (it != by_start_.end()) {
      if (it->second.bytes != region.size()) {
        return Status::InvalidArgument("a host region at the same address is registered with another size");
      }
      ++it->second.holders;
      return Status::OK();
    }
    KVTIER_ASSIGN_OR_RETURN(auto pin, PinnedRegistration::Register(region, device));
    by_start_.emplace(region.data(), Registered{std::move(pin), region.size(), 1});
    return Status::OK();
  }
  void Release(std::byte* start) {
    MutexLock l(mu_);
    auto it = by_start_.find(start);
    if (it != by_start_.end() && --it->second.holders == 0) by_start_.erase(it);  // unregisters
  }

 private:
  Mutex mu_;
  std::map<std::byte*, Registered> by_start_ GUARDED_BY(mu_);
};

}  // namespace

std::vector<std::span<std::byte>> StoreHostRegions(Store& store) {
  std::vector<std::span<std::byte>> out;
  for (size_t i = 0; i < store.tier_count(); ++i) {
    for (const auto& r : store.tier(i).HostRegions()) out.push_back(r);
  }
  return out;
}

HostRegionPins::~HostRegionPins() {
  for (std::byte* start : held_) Registry::Get().Release(start);
}

Result<std::unique_ptr<HostRegionPins>> PinHostRegions(std::span<const std::span<std::byte>> regions, int device) {
  auto pins = std::make_unique<HostRegionPins>();
  for (const auto& r : regions) {
    KVTIER_RETURN_IF_ERROR(Registry::Get().Acquire(r, device));  // `pins` gives back what it took so far
    pins->held_.push_back(r.data());
  }
  return pins;
}

}  // namespace kvtier::internal

namespace kvtier {

Result<std::unique_ptr<HostMemoryPins>> PinStoreHostMemory(Store& store, int device) {
  KVTIER_RETURN_IF_ERROR(GpuAvailable(device));
  const std::vector<std::span<std::byte>> regions = internal::StoreHostRegions(store);
  KVTIER_ASSIGN_OR_RETURN(auto pins, internal::PinHostRegions(regions, device));
  return std::unique_ptr<HostMemoryPins>(std::move(pins));
}

}  // namespace kvtier
