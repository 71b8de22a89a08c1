// Page-locking the host memory a Store's tiers serve chunks from, once per process: a shm:// pool's
// mapping (internal::ShmHostRegions) is registered with cudaHostRegister by the first caller of this
// process and shared by every later one, so copies between it and a GPU run at pinned speed without a
// second registration of the same pages (which the driver refuses).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier::internal {

// The long-lived host regions of `store`'s tiers, in tier order (see ShmHostRegions for which).
std::vector<std::span<std::byte>> StoreHostRegions(Store& store);

// Holds this process's registration of some regions; the last holder of a region unregisters it.
// REQUIRES: released before the tiers whose memory it pins are closed.
class HostRegionPins {
 public:
  HostRegionPins() = default;
  ~HostRegionPins();
  HostRegionPins(const HostRegionPins&) = delete;
  HostRegionPins& operator=(const HostRegionPins&) = delete;
  size_t regions() const { return held_.size(); }

 private:
  friend Result<std::unique_ptr<HostRegionPins>> PinHostRegions(std::span<const std::span<std::byte>>, int);
  std::vector<std::byte*> held_;
};

// Registers every region with `device` current, each once per process (a region some other holder
// registered is shared); NotSupported without CUDA or a device, or the driver's refusal (IOError) of a
// region — then nothing new stays registered.
Result<std::unique_ptr<HostRegionPins>> PinHostRegions(std::span<const std::span<std::byte>> regions, int device);

}  // namespace kvtier::internal
