#include "e2e/device_loop.h"

#include <algorithm>

namespace kvtier::internal {

DeviceLoop::DeviceLoop(Engine* engine) : engine_(engine), thread_([this] { Loop(); }) {}

DeviceLoop::~DeviceLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

Status DeviceLoop::RunPrefill(Request& req) {
  Job job;
  job.req = &req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prefill_.push_back(&job);
  }
  work_cv_.notify_one();
  return Wait(job);
}

Status DeviceLoop::RunDecode(Request& req) {
  if (req.output().size() >= req.max_new_tokens()) return Status::OK();
  Job job;
  job.req = &req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    decoding_.push_back(&job);
  }
  work_cv_.notify_one();
  return Wait(job);
}

Status DeviceLoop::Wait(Job& job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return job.done; });
  return job.status;
}

void DeviceLoop::Loop() {
  for (;;) {
    Job* prefill = nullptr;
    std::vector<Job*> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !prefill_.empty() || !decoding_.empty(); });
      if (stop_) return;
      if (!prefill_.empty()) prefill = prefill_.front();
      batch = decoding_;
    }
    if (prefill != nullptr) StepPrefill(prefill);
    if (!batch.empty()) StepDecode(batch);
  }
}

void DeviceLoop::StepPrefill(Job* job) {
  Result<uint32_t> left = engine_->PrefillStep(*job->req);
  if (left.ok() && *left > 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  prefill_.pop_front();
  job->status = left.status();
  job->done = true;
  done_cv_.notify_all();
}

void DeviceLoop::StepDecode(const std::vector<Job*>& batch) {
  std::vector<Request*> reqs;
  for (Job* j : batch) reqs.push_back(j->req);
  Status s = engine_->Decode(reqs);
  std::lock_guard<std::mutex> lock(mu_);
  for (Job* j : batch) {
    if (s.ok() && j->req->output().size() < j->req->max_new_tokens()) continue;
    j->status = s;
    j->done = true;
    decoding_.erase(std::find(decoding_.begin(), decoding_.end(), j));
  }
  done_cv_.notify_all();
}

}  // namespace kvtier::internal
