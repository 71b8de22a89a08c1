// DeviceLoop: continuous batching over one Engine, the way a serving engine drives its accelerator.
//
// One thread owns the compute. Each turn of its loop runs one prefill step of the oldest waiting
// prompt (chunked prefill, so a long prompt does not stall everyone) and then one decode step for every
// request that is generating, batched into one forward pass. Client threads do their own loads and
// saves outside the loop (I/O overlaps compute) and block in RunPrefill / RunDecode.
//
// Thread-safety: RunPrefill and RunDecode may be called from many threads, each with its own Request.
// The destructor stops the loop; no call may be in flight then.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"
#include "eval/engine/engine.h"

namespace kvtier::internal {

class DeviceLoop {
 public:
  explicit DeviceLoop(Engine* engine);
  ~DeviceLoop();
  DeviceLoop(const DeviceLoop&) = delete;
  DeviceLoop& operator=(const DeviceLoop&) = delete;

  // Returns once the prompt is fully computed and its first output token chosen.
  Status RunPrefill(Request& req) EXCLUDES(mu_);
  // Returns once the request holds max_new_tokens outputs.
  Status RunDecode(Request& req) EXCLUDES(mu_);

 private:
  struct Job {
    Request* req = nullptr;
    bool done = false;
    Status status;
  };
  Status Wait(Job& job) EXCLUDES(mu_);
  void Loop() EXCLUDES(mu_);
  void StepPrefill(Job* job) EXCLUDES(mu_);
  void StepDecode(const std::vector<Job*>& batch) EXCLUDES(mu_);

  Engine* const engine_;
  Mutex mu_;  // also guards each queued Job's `done` and `status`
  CondVar work_cv_, done_cv_;
  std::deque<Job*> prefill_ GUARDED_BY(mu_);
  std::vector<Job*> decoding_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvtier::internal
