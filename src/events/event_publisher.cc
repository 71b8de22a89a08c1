// EventPublisher over a ZeroMQ XPUB socket (include/kvtier/events.h).
//
// The Store's threads push events into a bounded queue (OnChunkEvent: a mutex, a deque, no I/O); one
// thread of the publisher takes batches from it, encodes them (event_batch.h) and sends them as
// [topic, sequence, payload]. The socket is XPUB with XPUB_NODROP, so a subscriber that does not read
// makes the send report EAGAIN past the high-water mark instead of ZeroMQ dropping the message
// silently: the thread then waits for the socket, the queue fills, and further events are dropped
// and counted at the queue. Subscription messages (XPUB_VERBOSER) keep a count of subscribers.
//
// Thread-safety: OnChunkEvent and Stats from any thread; the socket is used only by the thread.
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"
#include "core/threads.h"
#include "events/event_batch.h"
#include "events/event_endpoint.h"
#include "kvtier/events.h"

namespace kvtier {

namespace {

using internal::CondVar;
using internal::Mutex;
using internal::MutexLock;

constexpr auto kPollInterval = std::chrono::milliseconds(50);  // how often subscriptions are read when idle
constexpr auto kFullPause = std::chrono::milliseconds(5);      // between tries of a full socket

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ZmqEventPublisher final : public EventPublisher {
 public:
  explicit ZmqEventPublisher(const EventPublisherOptions& options) : options_(options) {}
  ~ZmqEventPublisher() override { Stop(); }

  Status Start(const std::string& endpoint);
  void OnChunkEvent(const ChunkEvent& event) override EXCLUDES(mu_);
  ChunkObserverStats Stats() const override;
  std::string endpoint() const override { return bound_; }

 private:
  void Run() EXCLUDES(mu_);
  // Takes up to batch_events events; false once stopping with nothing left.
  bool Take(std::vector<ChunkEvent>* batch) EXCLUDES(mu_);
  // Waits up to `pause` (less when stopped meanwhile); true when stopping.
  bool WaitUnlessStopping(std::chrono::milliseconds pause) EXCLUDES(mu_);
  void ReadSubscriptions();
  // Sends one message, waiting for the socket while it is full; false when stopped before it went.
  bool Send(const std::string& payload);
  void Stop() EXCLUDES(mu_);

  const EventPublisherOptions options_;
  zmq::context_t context_{1};
  zmq::socket_t socket_;  // only the thread uses it once started
  std::string bound_;
  uint64_t seq_ = 0;      // the thread's

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<ChunkEvent> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> thread_;

  std::atomic<uint64_t> published_{0}, dropped_{0};
  std::atomic<int64_t> subscribers_{0};
};

Status ZmqEventPublisher::Start(const std::string& endpoint) {
  try {
    socket_ = zmq::socket_t(context_, zmq::socket_type::xpub);
    socket_.set(zmq::sockopt::sndhwm, options_.send_hwm);
    socket_.set(zmq::sockopt::xpub_nodrop, 1);
    socket_.set(zmq::sockopt::xpub_verboser, 1);
    socket_.set(zmq::sockopt::linger, 200);
    if (options_.send_buffer > 0) socket_.set(zmq::sockopt::sndbuf, options_.send_buffer);
    socket_.bind(endpoint);
    bound_ = socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status::IOError("event publisher on " + endpoint + ": " + e.what());
  }
  return internal::StartThreads(&thread_, 1, [this] { Run(); }, "the event publisher");
}

void ZmqEventPublisher::OnChunkEvent(const ChunkEvent& event) {
  {
    MutexLock lock(mu_);
    if (stop_ || queue_.size() >= options_.queue_events) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(event);
  }
  cv_.NotifyOne();
}

ChunkObserverStats ZmqEventPublisher::Stats() const {
  ChunkObserverStats s;
  s.published = published_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  s.subscribers = static_cast<uint32_t>(std::max<int64_t>(0, subscribers_.load(std::memory_order_relaxed)));
  return s;
}

bool ZmqEventPublisher::Take(std::vector<ChunkEvent>* batch) {
  batch->clear();
  MutexLock lock(mu_);
  if (queue_.empty() && !stop_) cv_.WaitUntil(mu_, std::chrono::steady_clock::now() + kPollInterval);
  while (!queue_.empty() && batch->size() < options_.batch_events) {
    batch->push_back(queue_.front());
    queue_.pop_front();
  }
  return !(stop_ && batch->empty());
}

void ZmqEventPublisher::ReadSubscriptions() {
  zmq::message_t msg;
  while (socket_.recv(msg, zmq::recv_flags::dontwait)) {
    if (msg.size() == 0) continue;
    const auto first = static_cast<const unsigned char*>(msg.data())[0];
    if (first == 1) subscribers_.fetch_add(1, std::memory_order_relaxed);
    if (first == 0) subscribers_.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool ZmqEventPublisher::WaitUnlessStopping(std::chrono::milliseconds pause) {
  MutexLock lock(mu_);
  if (!stop_) cv_.WaitUntil(mu_, std::chrono::steady_clock::now() + pause);
  return stop_;
}

bool ZmqEventPublisher::Send(const std::string& payload) {
  const std::string seq = internal::SequenceFrame(seq_);
  for (;;) {
    ReadSubscriptions();
    // XPUB_NODROP: the first frame fails with EAGAIN (an empty result) while a subscriber is at the
    // high-water mark; once it goes, the socket takes the rest of the message (the mark counts whole
    // messages). XPUB reports POLLOUT even when full, so a full socket is retried after a pause.
    if (socket_.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      socket_.send(zmq::buffer(seq), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(payload), zmq::send_flags::none);
      ++seq_;
      return true;
    }
    if (WaitUnlessStopping(kFullPause)) return false;
  }
}

void ZmqEventPublisher::Run() {
  std::vector<ChunkEvent> batch;
  try {
    while (Take(&batch)) {
      ReadSubscriptions();
      if (batch.empty()) continue;
      if (Send(internal::EncodeEventBatch(NowSeconds(), batch))) {
        published_.fetch_add(batch.size(), std::memory_order_relaxed);
      } else {
        dropped_.fetch_add(batch.size(), std::memory_order_relaxed);
      }
    }
  } catch (const zmq::error_t&) {
    // The context was terminated under us: nothing more can be sent; what is queued counts as dropped.
  }
  MutexLock lock(mu_);
  dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);
  queue_.clear();
}

void ZmqEventPublisher::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : thread_) t.join();
  thread_.clear();
  socket_.close();
}

}  // namespace

Result<std::shared_ptr<EventPublisher>> EventPublisher::Open(const EventPublisherOptions& options) {
  const std::string& endpoint = options.endpoint;
  if (endpoint.empty()) return Status::InvalidArgument("event publisher: the endpoint is empty");
  KVTIER_RETURN_IF_ERROR(internal::CheckEventEndpoint(endpoint, options.allow_remote));
  if (options.queue_events == 0 || options.batch_events == 0 || options.send_hwm <= 0) {
    return Status::InvalidArgument("event publisher: queue_events, batch_events and send_hwm must be positive");
  }
  auto pub = std::make_shared<ZmqEventPublisher>(options);
  KVTIER_RETURN_IF_ERROR(pub->Start(endpoint));
  return std::shared_ptr<EventPublisher>(std::move(pub));
}

}  // namespace kvtier
