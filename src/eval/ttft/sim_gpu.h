// The simulated GPU of `kvtier bench ttft`: one per serving instance, running prefills one at a time in
// the order they become ready, so requests queue behind each other as on a real server. Its work is a
// calibrated model (gpuprofile/gpu_profile.h); its clock is the run's clock, so the loads that clients
// do for real overlap the compute of other requests.
//
// Thread-safe: many clients call Run at once; the first to call is served first (FIFO by readiness).
#pragma once

#include <chrono>
#include <thread>

#include "core/thread_annotations.h"

namespace kvtier::internal {

// Seconds since a run started. Real: a steady clock that really sleeps. Tests substitute a clock
// whose time moves only when told to.
class TtftClock {
 public:
  virtual ~TtftClock() = default;
  virtual double Now() = 0;
  // Returns once Now() >= t.
  virtual void SleepUntil(double t) = 0;
};

class SteadyTtftClock final : public TtftClock {
 public:
  SteadyTtftClock() : t0_(std::chrono::steady_clock::now()) {}
  double Now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void SleepUntil(double t) override {
    std::this_thread::sleep_until(t0_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            std::chrono::duration<double>(t)));
  }

 private:
  const std::chrono::steady_clock::time_point t0_;
};

// When one prefill ran on the GPU.
struct GpuSlot {
  double start = 0;  // max(ready, the end of the prefill before it)
  double end = 0;    // start + compute
};

class SimGpu {
 public:
  // Books `compute_s` of GPU time for a request whose inputs (its loaded KV) are ready at `ready`:
  // it starts when the GPU is free and the request is ready. Does not wait; the caller sleeps until
  // the slot's end on its clock.
  GpuSlot Run(double ready, double compute_s) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    GpuSlot s;
    s.start = ready > free_at_ ? ready : free_at_;
    s.end = s.start + compute_s;
    free_at_ = s.end;
    busy_s_ += compute_s;
    return s;
  }
  // Total compute booked so far.
  double busy_seconds() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return busy_s_;
  }

 private:
  Mutex mu_;
  double free_at_ GUARDED_BY(mu_) = 0;
  double busy_s_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::internal
