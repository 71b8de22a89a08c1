// Page-locking the host memory a Store's tiers lend chunks from, once per process: each region a tier
// offers (Tier::HostRegions, e.g. a shm:// pool's mapping) is registered with cudaHostRegister by the
// first caller of this process and shared by every later one, so copies between it and a GPU run at
// pinned speed without a second registration of the same pages (which the driver refuses). The public
// face is PinStoreHostMemory (kvtier/gpu.h).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/gpu.h"
#include "kvtier/store.h"

namespace kvtier::internal {

// The long-lived host regions of `store`'s tiers (Tier::HostRegions), in tier order.
std::vector<std::span<std::byte>> StoreHostRegions(Store& store);

// Holds this process's registration of some regions; the last holder of a region unregisters it.
// REQUIRES: released before the tiers whose memory it pins are closed.
class HostRegionPins final : public HostMemoryPins {
 public:
  HostRegionPins() = default;
  ~HostRegionPins() override;
  HostRegionPins(const HostRegionPins&) = delete;
  HostRegionPins& operator=(const HostRegionPins&) = delete;
  size_t regions() const override { return held_.size(); }

 private:
  friend Result<std::unique_ptr<HostRegionPins>> PinHostRegions(std::span<const std::span<std::byte>>, int);
  std::vector<std::byte*> held_;
};

// Registers every region with `device` current, each once per process (a region some other holder
// registered is shared); NotSupported without CUDA or a device, or the driver's refusal (IOError) of a
// region — then nothing new stays registered.
Result<std::unique_ptr<HostRegionPins>> PinHostRegions(std::span<const std::span<std::byte>> regions, int device);

}  // namespace kvtier::internal
