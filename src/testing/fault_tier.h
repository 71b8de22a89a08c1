// FaultTier: a forwarding Tier that injects faults into another tier, for tests of how kvtier behaves
// when storage misbehaves. Every call goes to the wrapped tier unless a fault is switched on:
//
//   read_error    Get/GetMany fail with the IOError that EIO maps to; nothing is read
//   write_error   Put fails with the IOError of EIO; nothing is stored
//   no_space      Put fails with the NoSpace of ENOSPC; nothing is stored
//   short_read    Get reads only part of the chunk: the first half of `dst` is filled from the wrapped
//                 tier, the rest is garbage, and the call reports the IOError a short pread becomes
//   read_delay / write_delay   add latency before forwarding
//
// Faults are switched at runtime (from any thread) through FaultControls, which the test keeps after
// handing the tier itself to a Store. The counters say how many calls each fault hit.
//
// Ownership: FaultTier owns the wrapped tier; FaultControls is shared between the tier and the test.
// Thread-safety: as every Tier; controls are atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/forwarding_tier.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

struct FaultControls {
  std::atomic<bool> read_error{false};
  std::atomic<bool> write_error{false};
  std::atomic<bool> no_space{false};
  std::atomic<bool> short_read{false};
  std::atomic<uint32_t> read_delay_us{0};
  std::atomic<uint32_t> write_delay_us{0};

  // Calls that a fault hit (each counted once, by the first fault that applied).
  std::atomic<uint64_t> injected_read_errors{0};
  std::atomic<uint64_t> injected_write_errors{0};
  std::atomic<uint64_t> injected_no_space{0};
  std::atomic<uint64_t> injected_short_reads{0};

  void ClearFaults();  // switches every fault off; counters stay
  uint64_t InjectedTotal() const;
};

class FaultTier final : public ForwardingTier {
 public:
  FaultTier(std::unique_ptr<Tier> base, std::shared_ptr<FaultControls> controls);

  bool Contains(const ChunkId& id) override;
  Status Put(const ChunkId& id, GatherList payload) override;
  Status Get(const ChunkId& id, ScatterList dst) override;
  void GetMany(std::span<ReadOp> ops) override;

  Tier& base() { return inner(); }

 private:
  // A read fault's status, or OK to forward.
  Status ReadFault(const ChunkId& id, ScatterList dst);
  Status GetNoDelay(const ChunkId& id, ScatterList dst);

  std::shared_ptr<FaultControls> controls_;
};

// Wraps `base`; returns the wrapper and fills `*controls` with its switches.
std::unique_ptr<FaultTier> WrapWithFaults(std::unique_ptr<Tier> base,
                                          std::shared_ptr<FaultControls>* controls);

}  // namespace kvtier::internal
