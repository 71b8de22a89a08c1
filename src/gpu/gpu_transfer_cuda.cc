// GpuTransfer over the CUDA runtime: pinned staging, one bulk copy per chunk, the run kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/copy_runs.h"
#include "gpu/cuda_handles.h"
#include "gpu/cuda_status.h"
#include "gpu/gpu_plan.h"
#include "gpu/ordered_batches.h"
#include "io/thread_pool.h"
#include "kvtier/gpu.h"
#include "kvtier/store.h"

namespace kvtier {
namespace internal {
namespace {

class CudaLoad final : public GpuLoad {
 public:
  CudaLoad(int device, std::vector<Event> events) : device_(device), events_(std::move(events)) {}

  size_t chunks() const override { return chunks_; }
  uint32_t layer_groups() const override { return static_cast<uint32_t>(events_.size()); }

  Status WaitLayerGroup(uint32_t group) override {
    KVTIER_RETURN_IF_ERROR(CheckGroup(group));
    KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    KVTIER_CUDA_RETURN(cudaEventSynchronize(events_[group].get()), "GPU load of a layer group");
    return Status::OK();
  }

  Status StreamWaitLayerGroup(uint32_t group, void* stream) override {
    KVTIER_RETURN_IF_ERROR(CheckGroup(group));
    KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    KVTIER_CUDA_RETURN(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), events_[group].get(), 0),
                       "cudaStreamWaitEvent");
    return Status::OK();
  }

  bool Done() override {
    if (cudaSetDevice(device_) != cudaSuccess) return false;
    for (const Event& e : events_) {
      if (cudaEventQuery(e.get()) != cudaSuccess) return false;
    }
    return true;
  }

  Status Wait() override {
    for (uint32_t g = 0; g < layer_groups(); ++g) KVTIER_RETURN_IF_ERROR(WaitLayerGroup(g));
    return Status::OK();
  }

  cudaEvent_t event(uint32_t group) const { return events_[group].get(); }
  void set_chunks(size_t n) { chunks_ = n; }

 private:
  Status CheckGroup(uint32_t group) const {
    if (group >= events_.size()) {
      return Status::InvalidArgument("layer group " + std::to_string(group) + " of a load with " +
                                     std::to_string(events_.size()));
    }
    return Status::OK();
  }

  const int device_;
  std::vector<Event> events_;
  size_t chunks_ = 0;
};

// One pinned staging buffer with its run list; `done` fires after the GPU's last use of both. Every
// GPU operation runs on the transfer's one stream, in order, so the device staging and run buffers are
// shared by the slots.
struct Slot {
  PinnedBuffer host;
  PinnedBuffer runs_host;
  Event done;
  // Set on the calling thread when GPU work is queued; cleared by whoever waits (a host reader thread
  // or the calling thread), always ordered after the set by the thread pool's queue.
  std::atomic<bool> busy{false};
};

class CudaTransfer final : public GpuTransfer {
 public:
  CudaTransfer(const Layout& layout, const PagedKvCache& cache, uint32_t batch, uint32_t groups,
               uint32_t host_threads)
      : layout_(layout),
        geometry_(layout),
        paged_{cache.num_blocks, cache.block_tokens},
        device_(cache.device),
        batch_(batch),
        groups_(groups),
        // Per chunk and (layer, K/V): at most tokens/block_tokens + 1 runs (a chunk may start mid-block).
        max_runs_(uint64_t{batch} * geometry_.pieces() * (layout.tokens_per_chunk / cache.block_tokens + 2)),
        slot_count_(host_threads + 1),
        slots_(new Slot[slot_count_]),
        readers_(host_threads) {
    for (uint32_t l = 0; l < layout.layers; ++l) {
      k_.push_back(reinterpret_cast<uint64_t>(cache.k[l]));
      v_.push_back(reinterpret_cast<uint64_t>(cache.v[l]));
    }
  }

  ~CudaTransfer() override { (void)cudaSetDevice(device_); }  // stream_ (declared last) syncs first

  Status Init() {
    KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    const size_t bytes = size_t{batch_} * layout_.BytesPerChunk();
    for (uint32_t i = 0; i < slot_count_; ++i) {
      Slot& s = slots_[i];
      KVTIER_RETURN_IF_ERROR(s.host.Allocate(bytes));
      KVTIER_RETURN_IF_ERROR(s.runs_host.Allocate(max_runs_ * sizeof(DeviceRun)));
      KVTIER_RETURN_IF_ERROR(s.done.Create());
    }
    KVTIER_RETURN_IF_ERROR(dev_.Allocate(bytes));
    KVTIER_RETURN_IF_ERROR(runs_dev_.Allocate(max_runs_ * sizeof(DeviceRun)));
    KVTIER_RETURN_IF_ERROR(after_.Create());
    return stream_.Create();
  }

  const Layout& layout() const override { return layout_; }
  uint32_t batch_chunks() const override { return batch_; }

  Result<std::unique_ptr<GpuLoad>> Load(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                        std::span<const uint32_t> block_table) override;
  Status Save(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
              std::span<const uint32_t> block_table, void* after_stream) override;

 private:
  Status CheckRequest(const Namespace& ns, size_t chunks, std::span<const uint32_t> table) const {
    if (!(ns.layout() == layout_)) {
      return Status::InvalidArgument("namespace layout " + ns.layout().ToString() +
                                     " is not the transfer's " + layout_.ToString());
    }
    return CheckBlockTable(layout_, paged_, chunks, table);
  }

  // May run on a host reader thread: sets the device for it.
  Status WaitSlot(Slot& s) {
    if (!s.busy.load(std::memory_order_acquire)) return Status::OK();
    KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    KVTIER_CUDA_RETURN(cudaEventSynchronize(s.done.get()), "GPU transfer");
    s.busy.store(false, std::memory_order_release);
    return Status::OK();
  }

  // Plans the runs of chunks [first, first + count) of the request staged in `s`, group by group;
  // group_end[g] is the end of group g's runs. Uploads them to s.runs_dev on the stream.
  Status PlanBatch(Slot& s, std::span<const uint32_t> table, uint64_t first, uint32_t count,
                   RunDirection dir, uint32_t groups, std::vector<size_t>& group_end) {
    runs_.clear();
    group_end.clear();
    for (uint32_t g = 0; g < groups; ++g) {
      const LayerRange r = LayerGroup(layout_.layers, groups, g);
      for (uint32_t c = 0; c < count; ++c) {
        plan_.clear();
        PlanChunkRuns(geometry_, paged_, table, first + c, r.begin, r.end, plan_);
        const uint64_t staging = reinterpret_cast<uint64_t>(dev_.data()) + c * layout_.BytesPerChunk();
        ToDeviceRuns(plan_, geometry_, paged_, staging, k_, v_, dir, runs_);
      }
      group_end.push_back(runs_.size());
    }
    if (runs_.size() > max_runs_) return Status::Internal("GPU transfer: run list exceeds its buffer");
    std::memcpy(s.runs_host.data(), runs_.data(), runs_.size() * sizeof(DeviceRun));
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(runs_dev_.data(), s.runs_host.data(), runs_.size() * sizeof(DeviceRun),
                                       cudaMemcpyHostToDevice, stream_.get()),
                       "run list upload");
    return Status::OK();
  }

  Status Launch(size_t begin, size_t end) {
    const auto* runs = reinterpret_cast<const DeviceRun*>(runs_dev_.data()) + begin;
    KVTIER_CUDA_RETURN(LaunchCopyRuns(runs, static_cast<uint32_t>(end - begin), stream_.get()), "run kernel");
    return Status::OK();
  }

  // Queues the copies and kernels of a loaded batch; records `load`'s group events when given.
  Status EnqueueLoad(Slot& s, std::span<const uint32_t> table, uint64_t first, uint32_t count,
                     const CudaLoad* load);
  // Queues the gather and the GPU->host copies of a batch to save.
  Status EnqueueSave(Slot& s, std::span<const uint32_t> table, uint64_t first, uint32_t count);
  Status SaveStaged(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, Slot& s);

  const Layout layout_;
  const ChunkGeometry geometry_;
  const PagedGeometry paged_;
  const int device_;
  const uint32_t batch_;
  const uint32_t groups_;
  const uint64_t max_runs_;
  const uint32_t slot_count_;
  std::vector<uint64_t> k_, v_;
  std::vector<CopyRun> plan_;      // scratch of the calling thread
  std::vector<DeviceRun> runs_;    // scratch of the calling thread
  std::unique_ptr<Slot[]> slots_;  // pinned host staging, one per batch in flight
  DeviceBuffer dev_;               // device staging of one batch
  DeviceBuffer runs_dev_;          // the run list of one batch
  Event after_;                    // recorded on the engine's stream before a save
  Stream stream_;                  // destroyed (and synchronised) before the buffers above
  ThreadPool readers_;             // last: joined first, while every buffer is still there
};

Status CudaTransfer::EnqueueLoad(Slot& s, std::span<const uint32_t> table, uint64_t first, uint32_t count,
                                 const CudaLoad* load) {
  std::vector<size_t> group_end;
  KVTIER_RETURN_IF_ERROR(PlanBatch(s, table, first, count, RunDirection::kToBlocks, groups_, group_end));
  const uint64_t chunk = layout_.BytesPerChunk();
  size_t begin = 0;
  for (uint32_t g = 0; g < groups_; ++g) {
    const LayerRange r = LayerGroup(layout_.layers, groups_, g);
    const uint64_t off = geometry_.LayersOffset(r.begin), bytes = geometry_.LayersBytes(r.begin, r.end);
    for (uint32_t c = 0; c < count; ++c) {  // one bulk copy per chunk (and layer group)
      KVTIER_CUDA_RETURN(cudaMemcpyAsync(dev_.data() + c * chunk + off, s.host.data() + c * chunk + off, bytes,
                                         cudaMemcpyHostToDevice, stream_.get()),
                         "host->GPU copy");
    }
    KVTIER_RETURN_IF_ERROR(Launch(begin, group_end[g]));
    begin = group_end[g];
    if (load != nullptr) KVTIER_CUDA_RETURN(cudaEventRecord(load->event(g), stream_.get()), "cudaEventRecord");
  }
  KVTIER_CUDA_RETURN(cudaEventRecord(s.done.get(), stream_.get()), "cudaEventRecord");
  s.busy.store(true, std::memory_order_release);
  return Status::OK();
}

Result<std::unique_ptr<GpuLoad>> CudaTransfer::Load(Store& store, const Namespace& ns,
                                                    std::span<const ChunkKey> keys,
                                                    std::span<const uint32_t> block_table) {
  KVTIER_RETURN_IF_ERROR(CheckRequest(ns, keys.size(), block_table));
  KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
  std::vector<Event> events(groups_);
  for (Event& e : events) KVTIER_RETURN_IF_ERROR(e.Create());
  auto load = std::make_unique<CudaLoad>(device_, std::move(events));

  const uint64_t chunk = layout_.BytesPerChunk();
  // On a reader thread: wait until the GPU has left the slot, then read and verify into it.
  auto read = [&](size_t, uint32_t slot, size_t first, uint32_t count) -> Result<size_t> {
    Slot& s = slots_[slot];
    KVTIER_RETURN_IF_ERROR(WaitSlot(s));
    std::vector<std::span<std::byte>> pieces(count);
    std::vector<ScatterList> dsts(count);
    for (uint32_t c = 0; c < count; ++c) {
      pieces[c] = {s.host.data() + c * chunk, chunk};
      dsts[c] = ScatterList(&pieces[c], 1);
    }
    return store.Load(ns, keys.subspan(first, count), dsts);
  };
  // On this thread, in batch order: queue the batch's copies and kernels; the last one records the
  // layer groups' events.
  bool recorded = false;
  auto consume = [&](size_t, uint32_t slot, size_t first, uint32_t count, uint32_t loaded) -> Status {
    const bool last = loaded < count || first + count == keys.size();
    KVTIER_RETURN_IF_ERROR(EnqueueLoad(slots_[slot], block_table, first, loaded, last ? load.get() : nullptr));
    recorded = last;
    return Status::OK();
  };
  Result<size_t> loaded =
      RunOrderedBatches(readers_, BatchPlan{keys.size(), batch_, slot_count_}, read, consume);
  if (!loaded.ok()) return loaded.status();
  if (!recorded) {  // nothing queued by the last batch: the events fire after what is queued
    for (uint32_t g = 0; g < groups_; ++g) {
      KVTIER_CUDA_RETURN(cudaEventRecord(load->event(g), stream_.get()), "cudaEventRecord");
    }
  }
  load->set_chunks(*loaded);
  return std::unique_ptr<GpuLoad>(std::move(load));
}

Status CudaTransfer::EnqueueSave(Slot& s, std::span<const uint32_t> table, uint64_t first, uint32_t count) {
  std::vector<size_t> group_end;
  KVTIER_RETURN_IF_ERROR(PlanBatch(s, table, first, count, RunDirection::kFromBlocks, 1, group_end));
  KVTIER_RETURN_IF_ERROR(Launch(0, group_end[0]));
  const uint64_t chunk = layout_.BytesPerChunk();
  for (uint32_t c = 0; c < count; ++c) {  // one bulk copy per chunk
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(s.host.data() + c * chunk, dev_.data() + c * chunk, chunk,
                                       cudaMemcpyDeviceToHost, stream_.get()),
                       "GPU->host copy");
  }
  KVTIER_CUDA_RETURN(cudaEventRecord(s.done.get(), stream_.get()), "cudaEventRecord");
  s.busy.store(true, std::memory_order_release);
  return Status::OK();
}

Status CudaTransfer::SaveStaged(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, Slot& s) {
  KVTIER_RETURN_IF_ERROR(WaitSlot(s));
  const uint64_t chunk = layout_.BytesPerChunk();
  std::vector<std::span<const std::byte>> pieces(keys.size());
  std::vector<GatherList> srcs(keys.size());
  for (size_t c = 0; c < keys.size(); ++c) {
    pieces[c] = {s.host.data() + c * chunk, chunk};
    srcs[c] = GatherList(&pieces[c], 1);
  }
  return store.Save(ns, keys, srcs);  // copies into the top tier before it returns
}

Status CudaTransfer::Save(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                          std::span<const uint32_t> block_table, void* after_stream) {
  KVTIER_RETURN_IF_ERROR(CheckRequest(ns, keys.size(), block_table));
  KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
  if (after_stream != nullptr) {
    KVTIER_CUDA_RETURN(cudaEventRecord(after_.get(), static_cast<cudaStream_t>(after_stream)), "cudaEventRecord");
    KVTIER_CUDA_RETURN(cudaStreamWaitEvent(stream_.get(), after_.get(), 0), "cudaStreamWaitEvent");
  }
  Slot* prev = nullptr;
  std::span<const ChunkKey> prev_keys;
  for (size_t start = 0, b = 0; start < keys.size(); ++b) {
    Slot& s = slots_[b % 2];
    KVTIER_RETURN_IF_ERROR(WaitSlot(s));
    const uint32_t m = static_cast<uint32_t>(std::min<size_t>(batch_, keys.size() - start));
    KVTIER_RETURN_IF_ERROR(EnqueueSave(s, block_table, start, m));
    // The host saves the previous batch while the GPU gathers this one.
    if (prev != nullptr) KVTIER_RETURN_IF_ERROR(SaveStaged(store, ns, prev_keys, *prev));
    prev = &s;
    prev_keys = keys.subspan(start, m);
    start += m;
  }
  if (prev != nullptr) KVTIER_RETURN_IF_ERROR(SaveStaged(store, ns, prev_keys, *prev));
  return Status::OK();
}

}  // namespace
}  // namespace internal

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::Open(const Layout& layout, const PagedKvCache& cache,
                                                       const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::ValidateOpen(layout, cache, options));
  KVTIER_RETURN_IF_ERROR(internal::CheckDevice(cache.device));
  const uint64_t batch = std::clamp<uint64_t>(options.staging_bytes / layout.BytesPerChunk(), 1, 1u << 16);
  auto t = std::make_unique<internal::CudaTransfer>(layout, cache, static_cast<uint32_t>(batch),
                                                    options.layer_groups, options.host_threads);
  KVTIER_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<GpuTransfer>(std::move(t));
}

}  // namespace kvtier
