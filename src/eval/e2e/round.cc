#include "eval/e2e/round.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "core/thread_annotations.h"
#include "eval/e2e/device_loop.h"

namespace kvtier::internal {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Begin, waiting while the pool is busy with other clients' requests.
Result<std::unique_ptr<Request>> BeginWhenRoom(Engine& engine, uint32_t session,
                                               const std::vector<uint32_t>& prompt, uint32_t max_new) {
  for (;;) {
    auto req = engine.Begin(session, prompt, max_new);
    if (req.ok() || req.status().code() != Code::kBusy) return req;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Result<RequestRecord> Serve(Engine& engine, DeviceLoop& loop, const WorkloadOptions& w, uint32_t session) {
  RequestRecord rec;
  rec.session = session;
  const std::vector<uint32_t> prompt = SessionPrompt(w, session);
  const auto t0 = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Request> req, BeginWhenRoom(engine, session, prompt, w.output_tokens));
  Status s = engine.LoadCached(*req);
  if (s.ok()) s = loop.RunPrefill(*req);
  rec.ttft_s = Since(t0);
  if (s.ok()) (void)engine.SaveNew(*req);  // best effort, like the engine's own Prefill
  if (s.ok()) s = loop.RunDecode(*req);
  rec.total_s = Since(t0);
  engine.End(*req);
  KVTIER_RETURN_IF_ERROR(s);
  const PrefillStats& st = req->stats();
  rec.load_s = st.load_seconds;
  rec.prompt_tokens = st.prompt_tokens;
  rec.loaded_tokens = st.loaded_tokens;
  rec.computed_tokens = st.computed_tokens;
  rec.loaded_bytes = st.loaded_bytes;
  rec.output = req->output();
  rec.output_tokens = static_cast<uint32_t>(rec.output.size());
  return rec;
}

// What the clients of a round hand back, each from its own thread.
struct Collected {
  Mutex mu;
  std::vector<RequestRecord> requests GUARDED_BY(mu);
  std::string error GUARDED_BY(mu);  // the first failure
};

}  // namespace

RoundResult RunRound(Engine& engine, const WorkloadOptions& w, const std::string& mode,
                     uint32_t sessions, uint32_t concurrency, const ProgressFn& progress) {
  RoundResult result;
  result.mode = mode;
  result.concurrency = concurrency;
  Collected collected;
  std::atomic<uint32_t> next{0}, done{0};
  const auto t0 = Clock::now();
  {
    DeviceLoop loop(&engine);
    std::vector<std::thread> clients;
    for (uint32_t c = 0; c < concurrency; ++c) {
      clients.emplace_back([&] {
        for (uint32_t s = next++; s < sessions; s = next++) {
          Result<RequestRecord> rec = Serve(engine, loop, w, s);
          MutexLock lock(collected.mu);
          if (rec.ok()) {
            collected.requests.push_back(std::move(rec).value());
          } else if (collected.error.empty()) {
            collected.error = "session " + std::to_string(s) + ": " + rec.status().ToString();
          }
          ++done;
        }
      });
    }
    auto last = Clock::now();
    while (done.load() < sessions) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (progress && Since(last) >= 1.0) {
        last = Clock::now();
        progress(done.load(), sessions);
      }
    }
    for (auto& t : clients) t.join();
  }
  result.wall_s = Since(t0);
  MutexLock lock(collected.mu);
  result.requests = std::move(collected.requests);
  result.error = std::move(collected.error);
  return result;
}

}  // namespace kvtier::internal
