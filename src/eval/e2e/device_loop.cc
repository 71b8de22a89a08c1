#include "eval/e2e/device_loop.h"

#include <algorithm>

namespace kvtier::internal {

DeviceLoop::DeviceLoop(Engine* engine) : engine_(engine), thread_([this] { Loop(); }) {}

DeviceLoop::~DeviceLoop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  thread_.join();
}

Status DeviceLoop::RunPrefill(Request& req) {
  Job job;
  job.req = &req;
  {
    MutexLock lock(mu_);
    prefill_.push_back(&job);
  }
  work_cv_.NotifyOne();
  return Wait(job);
}

Status DeviceLoop::RunDecode(Request& req) {
  if (req.output().size() >= req.max_new_tokens()) return Status::OK();
  Job job;
  job.req = &req;
  {
    MutexLock lock(mu_);
    decoding_.push_back(&job);
  }
  work_cv_.NotifyOne();
  return Wait(job);
}

Status DeviceLoop::Wait(Job& job) {
  MutexLock lock(mu_);
  while (!job.done) done_cv_.Wait(mu_);
  return job.status;
}

void DeviceLoop::Loop() {
  for (;;) {
    Job* prefill = nullptr;
    std::vector<Job*> batch;
    {
      MutexLock lock(mu_);
      while (!stop_ && prefill_.empty() && decoding_.empty()) work_cv_.Wait(mu_);
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
  MutexLock lock(mu_);
  prefill_.pop_front();
  job->status = left.status();
  job->done = true;
  done_cv_.NotifyAll();
}

void DeviceLoop::StepDecode(const std::vector<Job*>& batch) {
  std::vector<Request*> reqs;
  for (Job* j : batch) reqs.push_back(j->req);
  Status s = engine_->Decode(reqs);
  MutexLock lock(mu_);
  for (Job* j : batch) {
    if (s.ok() && j->req->output().size() < j->req->max_new_tokens()) continue;
    j->status = s;
    j->done = true;
    decoding_.erase(std::find(decoding_.begin(), decoding_.end(), j));
  }
  done_cv_.NotifyAll();
}

}  // namespace kvtier::internal
