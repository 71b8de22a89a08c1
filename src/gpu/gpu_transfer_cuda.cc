// GpuTransfer over the CUDA runtime: pinned staging, one bulk copy per chunk, the run kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/copy_runs.h"
#include "gpu/cuda_handles.h"
#include "gpu/cuda_status.h"
#include "gpu/gpu_plan.h"
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

// One staging buffer (host and device) with its run lists; `done` fires after the GPU's last use.
struct Slot {
  PinnedBuffer host;
  DeviceBuffer dev;
  PinnedBuffer runs_host;
  DeviceBuffer runs_dev;
  Event done;
  bool busy = false;
};

class CudaTransfer final : public GpuTransfer {
 public:
  CudaTransfer(const Layout& layout, const PagedKvCache& cache, uint32_t batch, uint32_t groups)
      : layout_(layout),
        geometry_(layout),
        paged_{cache.num_blocks, cache.block_tokens},
        device_(cache.device),
        batch_(batch),
        groups_(groups),
        // Per chunk and (layer, K/V): at most tokens/block_tokens + 1 runs (a chunk may start mid-block).
        max_runs_(uint64_t{batch} * geometry_.pieces() * (layout.tokens_per_chunk / cache.block_tokens + 2)) {
    for (uint32_t l = 0; l < layout.layers; ++l) {
      k_.push_back(reinterpret_cast<uint64_t>(cache.k[l]));
      v_.push_back(reinterpret_cast<uint64_t>(cache.v[l]));
    }
  }

  ~CudaTransfer() override { (void)cudaSetDevice(device_); }  // stream_ (declared last) syncs first

  Status Init() {
    KVTIER_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    const size_t bytes = size_t{batch_} * layout_.BytesPerChunk();
    for (Slot& s : slots_) {
      KVTIER_RETURN_IF_ERROR(s.host.Allocate(bytes));
      KVTIER_RETURN_IF_ERROR(s.dev.Allocate(bytes));
      KVTIER_RETURN_IF_ERROR(s.runs_host.Allocate(max_runs_ * sizeof(DeviceRun)));
      KVTIER_RETURN_IF_ERROR(s.runs_dev.Allocate(max_runs_ * sizeof(DeviceRun)));
      KVTIER_RETURN_IF_ERROR(s.done.Create());
    }
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

  Status WaitSlot(Slot& s) {
    if (!s.busy) return Status::OK();
    KVTIER_CUDA_RETURN(cudaEventSynchronize(s.done.get()), "GPU transfer");
    s.busy = false;
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
        const uint64_t staging = reinterpret_cast<uint64_t>(s.dev.data()) + c * layout_.BytesPerChunk();
        ToDeviceRuns(plan_, geometry_, paged_, staging, k_, v_, dir, runs_);
      }
      group_end.push_back(runs_.size());
    }
    if (runs_.size() > max_runs_) return Status::Internal("GPU transfer: run list exceeds its buffer");
    std::memcpy(s.runs_host.data(), runs_.data(), runs_.size() * sizeof(DeviceRun));
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(s.runs_dev.data(), s.runs_host.data(), runs_.size() * sizeof(DeviceRun),
                                       cudaMemcpyHostToDevice, stream_.get()),
                       "run list upload");
    return Status::OK();
  }

  Status Launch(Slot& s, size_t begin, size_t end) {
    const auto* runs = reinterpret_cast<const DeviceRun*>(s.runs_dev.data()) + begin;
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
  std::vector<uint64_t> k_, v_;
  std::vector<CopyRun> plan_;      // scratch
  std::vector<DeviceRun> runs_;    // scratch
  std::array<Slot, 2> slots_;
  Event after_;                    // recorded on the engine's stream before a save
  Stream stream_;                  // last: destroyed (and synchronised) first
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
      KVTIER_CUDA_RETURN(cudaMemcpyAsync(s.dev.data() + c * chunk + off, s.host.data() + c * chunk + off, bytes,
                                         cudaMemcpyHostToDevice, stream_.get()),
                         "host->GPU copy");
    }
    KVTIER_RETURN_IF_ERROR(Launch(s, begin, group_end[g]));
    begin = group_end[g];
    if (load != nullptr) KVTIER_CUDA_RETURN(cudaEventRecord(load->event(g), stream_.get()), "cudaEventRecord");
  }
  KVTIER_CUDA_RETURN(cudaEventRecord(s.done.get(), stream_.get()), "cudaEventRecord");
  s.busy = true;
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
  std::vector<std::span<std::byte>> pieces(batch_);
  std::vector<ScatterList> dsts(batch_);
  size_t loaded = 0;
  bool recorded = false;
  for (size_t start = 0, b = 0; start < keys.size(); ++b) {
    Slot& s = slots_[b % 2];
    KVTIER_RETURN_IF_ERROR(WaitSlot(s));  // the GPU has finished with this staging buffer
    const uint32_t m = static_cast<uint32_t>(std::min<size_t>(batch_, keys.size() - start));
    for (uint32_t c = 0; c < m; ++c) {
      pieces[c] = {s.host.data() + c * chunk, chunk};
      dsts[c] = ScatterList(&pieces[c], 1);
    }
    // Read and verified on the host; meanwhile the GPU copies the previous batch.
    Result<size_t> got = store.Load(ns, keys.subspan(start, m), std::span(dsts.data(), m));
    if (!got.ok()) return got.status();
    const uint32_t n = static_cast<uint32_t>(*got);
    const bool last = n < m || start + m == keys.size();
    if (n > 0) {
      KVTIER_RETURN_IF_ERROR(EnqueueLoad(s, block_table, start, n, last ? load.get() : nullptr));
      recorded = last;
    }
    loaded += n;
    start += m;
    if (n < m) break;
  }
  if (!recorded) {  // nothing queued by the last batch: the events fire after what is queued
    for (uint32_t g = 0; g < groups_; ++g) {
      KVTIER_CUDA_RETURN(cudaEventRecord(load->event(g), stream_.get()), "cudaEventRecord");
    }
  }
  load->set_chunks(loaded);
  return std::unique_ptr<GpuLoad>(std::move(load));
}

Status CudaTransfer::EnqueueSave(Slot& s, std::span<const uint32_t> table, uint64_t first, uint32_t count) {
  std::vector<size_t> group_end;
  KVTIER_RETURN_IF_ERROR(PlanBatch(s, table, first, count, RunDirection::kFromBlocks, 1, group_end));
  KVTIER_RETURN_IF_ERROR(Launch(s, 0, group_end[0]));
  const uint64_t chunk = layout_.BytesPerChunk();
  for (uint32_t c = 0; c < count; ++c) {  // one bulk copy per chunk
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(s.host.data() + c * chunk, s.dev.data() + c * chunk, chunk,
                                       cudaMemcpyDeviceToHost, stream_.get()),
                       "GPU->host copy");
  }
  KVTIER_CUDA_RETURN(cudaEventRecord(s.done.get(), stream_.get()), "cudaEventRecord");
  s.busy = true;
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
                                                    options.layer_groups);
  KVTIER_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<GpuTransfer>(std::move(t));
}

}  // namespace kvtier
