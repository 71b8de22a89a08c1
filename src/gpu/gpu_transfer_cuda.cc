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

// A stream being captured into a CUDA graph cannot take kvtier's work: the event it would record or
// wait for belongs to work outside the capture (and the host reads cannot be captured at all).
Status CheckNotCapturing(cudaStream_t stream, const char* fn) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  KVTIER_CUDA_RETURN(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {
    return Status::InvalidArgument(std::string(fn) +
                                   ": the stream is being captured into a CUDA graph; kvtier's transfers "
                                   "cannot be captured: call it outside the capture");
  }
  return Status::OK();
}

// The engine's stream of an `after_stream` or a layer wait: nullptr (0) is the legacy default stream,
// named explicitly so that it stays the legacy stream whatever default-stream mode a build uses.
cudaStream_t EngineStream(void* stream) {
  return stream == nullptr ? cudaStreamLegacy : static_cast<cudaStream_t>(stream);
}

// Chunks lent by a tier are copied to the GPU straight from the tier's memory when every byte of them
// lies in page-locked memory (PinStoreHostMemory, or a tier allocated with PinnedHostAllocator) in a few
// runs; otherwise they are read into the pinned staging like any other chunk.
constexpr size_t kMaxLentRuns = 8;

bool PinnedByte(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown pointer is not an error of the transfer
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

bool CopyableInPlace(const BorrowedChunk& b, uint64_t chunk_bytes) {
  if (b.size() != chunk_bytes || b.pieces().size() > kMaxLentRuns) return false;
  for (const auto& p : b.pieces()) {
    if (!p.empty() && !(PinnedByte(p.data()) && PinnedByte(p.data() + p.size() - 1))) return false;
  }
  return true;
}

class CudaLoad final : public GpuLoad {
 public:
  CudaLoad(int device, std::vector<Event> events) : device_(device), events_(std::move(events)) {}
  // Lent chunks go back to their tier once the GPU has copied them.
  ~CudaLoad() override {
    if (!lent_.empty()) (void)Wait();
  }

  size_t chunks() const override { return chunks_; }
  uint32_t layer_groups() const override { return static_cast<uint32_t>(events_.size()); }

  Status WaitLayerGroup(uint32_t group) override {
    KVTIER_RETURN_IF_ERROR(CheckGroup(group));
    DeviceScope scope;
    KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
    KVTIER_CUDA_RETURN(cudaEventSynchronize(events_[group].get()), "GPU load of a layer group");
    return Status::OK();
  }

  Status StreamWaitLayerGroup(uint32_t group, void* stream) override {
    KVTIER_RETURN_IF_ERROR(CheckGroup(group));
    DeviceScope scope;
    KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
    const cudaStream_t s = EngineStream(stream);
    KVTIER_RETURN_IF_ERROR(CheckNotCapturing(s, "StreamWaitLayerGroup"));
    KVTIER_CUDA_RETURN(cudaStreamWaitEvent(s, events_[group].get(), 0), "cudaStreamWaitEvent");
    return Status::OK();
  }

  Result<bool> Done() override {
    DeviceScope scope;
    KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
    for (const Event& e : events_) {
      const cudaError_t err = cudaEventQuery(e.get());
      if (err == cudaErrorNotReady) return false;
      KVTIER_CUDA_RETURN(err, "GPU load");
    }
    return true;
  }

  Status Wait() override {
    for (uint32_t g = 0; g < layer_groups(); ++g) KVTIER_RETURN_IF_ERROR(WaitLayerGroup(g));
    lent_.clear();  // every copy from them has finished
    return Status::OK();
  }

  cudaEvent_t event(uint32_t group) const { return events_[group].get(); }
  void set_chunks(size_t n) { chunks_ = n; }
  // Keeps chunks lent for this load until its copies have finished (calling thread only).
  void Keep(std::vector<BorrowedChunk>& lent) {
    for (BorrowedChunk& b : lent) lent_.push_back(std::move(b));
    lent.clear();
  }

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
  std::vector<BorrowedChunk> lent_;
};

// One pinned staging buffer with its run list; `done` fires after the GPU's last use of both. Every
// GPU operation runs on the transfer's one stream, in order, so the device staging and run buffers are
// shared by the slots.
struct Slot {
  PinnedBuffer host;
  PinnedBuffer runs_host;
  // Per chunk of the batch read into it: where its bytes lie on the host (a lent chunk's runs in its
  // tier, or its place in `host`), and the chunks lent, handed to the load before they are queued.
  std::vector<std::vector<std::span<const std::byte>>> src;
  std::vector<BorrowedChunk> lent;
  std::vector<size_t> group_end;  // end of each layer group's runs in runs_host (calling thread only)
  // Per layer group g and chunk c of the batch, [g * chunks + c]: the bytes of the chunk group g's runs
  // read (calling thread only).
  std::vector<ByteRange> ranges;
  Event done;
  // Set on the calling thread once the slot's last GPU work is queued; cleared by whoever waits (a host
  // reader thread or the calling thread), always ordered after the set by the thread pool's queue, and
  // by Drain after a failure (when nothing is in flight any more).
  std::atomic<bool> busy{false};
};

// Where a request's chunks go: the transfer's cache through a block table, or caller-described pieces.
struct Places {
  std::span<const uint32_t> table;
  const DevicePieces* pieces = nullptr;
  std::vector<size_t> starts;  // pieces: the first piece of each chunk, then the end (ValidatePieces)
};

// Runs planned per chunk for caller-described pieces before any request asks for more (they grow).
constexpr uint64_t kInitialPieceRuns = 64;

class CudaTransfer final : public GpuTransfer {
 public:
  // `cache` nullptr: a transfer for caller-described pieces only (OpenPieces).
  CudaTransfer(const Layout& layout, const PagedKvCache* cache, int device, uint32_t batch, uint32_t groups,
               uint32_t host_threads)
      : layout_(layout),
        geometry_(layout),
        paged_{cache ? cache->num_blocks : 0, cache ? cache->block_tokens : 0},
        device_(device),
        batch_(batch),
        groups_(groups),
        // Per chunk and (layer, K/V): at most tokens/block_tokens + 1 runs (a chunk may start mid-block).
        max_runs_(uint64_t{batch} * (cache ? geometry_.pieces() * (layout.tokens_per_chunk / cache->block_tokens + 2)
                                           : kInitialPieceRuns)),
        slot_count_(host_threads + 1),
        slots_(new Slot[slot_count_]),
        readers_(host_threads) {
    for (uint32_t l = 0; cache != nullptr && l < layout.layers; ++l) {
      k_.push_back(reinterpret_cast<uint64_t>(cache->k[l]));
      v_.push_back(reinterpret_cast<uint64_t>(cache->v[l]));
    }
  }

  // The members are destroyed on the cache's device (stream_ synchronises first); exit_scope_,
  // destroyed last, gives the caller's device back.
  ~CudaTransfer() override { (void)exit_scope_.Enter(device_); }

  Status Init() {
    DeviceScope scope;
    KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
    const size_t bytes = size_t{batch_} * layout_.BytesPerChunk();
    for (uint32_t i = 0; i < slot_count_; ++i) {
      Slot& s = slots_[i];
      KVTIER_RETURN_IF_ERROR(s.host.Allocate(device_, bytes));
      KVTIER_RETURN_IF_ERROR(s.runs_host.Allocate(device_, max_runs_ * sizeof(DeviceRun)));
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
                                        std::span<const uint32_t> block_table, void* after_stream) override;
  Status Save(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
              std::span<const uint32_t> block_table, void* after_stream) override;
  Result<std::unique_ptr<GpuLoad>> LoadPieces(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                              const DevicePieces& places, void* after_stream) override;
  Status SavePieces(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, const DevicePieces& places,
                    void* after_stream) override;

 private:
  Status CheckLayout(const Namespace& ns) const {
    if (!(ns.layout() == layout_)) {
      return Status::InvalidArgument("namespace layout " + ns.layout().ToString() +
                                     " is not the transfer's " + layout_.ToString());
    }
    return Status::OK();
  }

  Result<Places> TablePlaces(const Namespace& ns, size_t chunks, std::span<const uint32_t> table) const {
    KVTIER_RETURN_IF_ERROR(CheckLayout(ns));
    if (k_.empty()) {
      return Status::InvalidArgument("GpuTransfer: opened for pieces (OpenPieces): it has no cache for a block "
                                     "table; use LoadPieces / SavePieces");
    }
    KVTIER_RETURN_IF_ERROR(CheckBlockTable(layout_, paged_, chunks, table));
    Places p;
    p.table = table;
    return p;
  }

  Result<Places> PiecePlaces(const Namespace& ns, size_t chunks, const DevicePieces& places) const {
    KVTIER_RETURN_IF_ERROR(CheckLayout(ns));
    Places p;
    p.pieces = &places;
    KVTIER_RETURN_IF_ERROR(ValidatePieces(places, chunks, layout_.BytesPerChunk(), groups_, p.starts));
    return p;
  }

  // Grows the run buffers to hold a batch of chunks of `per_chunk` pieces each; first waits until
  // nothing this transfer queued is in flight (the buffers are in use until then). REQUIRES: the
  // device is current.
  Status EnsureRunCapacity(size_t per_chunk) {
    const uint64_t need = uint64_t{batch_} * per_chunk;
    if (need <= max_runs_) return Status::OK();
    KVTIER_CUDA_RETURN(cudaStreamSynchronize(stream_.get()), "GPU transfer");
    max_runs_ = 0;  // until every buffer has its new size
    for (uint32_t i = 0; i < slot_count_; ++i) {
      slots_[i].busy.store(false, std::memory_order_release);
      KVTIER_RETURN_IF_ERROR(slots_[i].runs_host.Allocate(device_, need * sizeof(DeviceRun)));
    }
    KVTIER_RETURN_IF_ERROR(runs_dev_.Allocate(need * sizeof(DeviceRun)));
    max_runs_ = need;
    return Status::OK();
  }

  Result<std::unique_ptr<GpuLoad>> LoadAt(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                          const Places& places, void* after_stream);
  Status SaveAt(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, const Places& places,
                void* after_stream);

  // Makes the transfer's stream wait for the work queued on the engine's stream so far. nullptr is the
  // legacy default stream (handle 0: PyTorch's default stream, an engine run with --enforce-eager): the
  // transfer's stream is non-blocking, so without this event it would not wait for that stream at all.
  Status WaitForStream(void* after_stream, const char* fn) {
    const cudaStream_t s = EngineStream(after_stream);
    KVTIER_RETURN_IF_ERROR(CheckNotCapturing(s, fn));
    KVTIER_CUDA_RETURN(cudaEventRecord(after_.get(), s), "cudaEventRecord on the engine's stream");
    KVTIER_CUDA_RETURN(cudaStreamWaitEvent(stream_.get(), after_.get(), 0), "cudaStreamWaitEvent");
    return Status::OK();
  }

  // After a failure: waits until nothing this transfer queued is in flight (no copy still writes the
  // caller's blocks or reads a staging slot), so every slot is free; returns `err`.
  Status Drain(Status err) {
    (void)cudaStreamSynchronize(stream_.get());
    for (uint32_t i = 0; i < slot_count_; ++i) {
      slots_[i].lent.clear();
      slots_[i].busy.store(false, std::memory_order_release);
    }
    return err;
  }

  // May run on a host reader thread: sets the device for it.
  Status WaitSlot(Slot& s) {
    if (!s.busy.load(std::memory_order_acquire)) return Status::OK();
    DeviceScope scope;
    KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
    KVTIER_CUDA_RETURN(cudaEventSynchronize(s.done.get()), "GPU transfer");
    s.busy.store(false, std::memory_order_release);
    return Status::OK();
  }

  // Appends the runs of layer group `g` (of `groups`) of request chunk `chunk`, staged at `staging`, and
  // returns the bytes of the chunk they cover.
  ByteRange PlanChunkGroup(const Places& places, uint64_t chunk, uint32_t g, uint32_t groups, uint64_t staging,
                           RunDirection dir) {
    if (places.pieces != nullptr) {
      const size_t b = places.starts[chunk], e = places.starts[chunk + 1];
      const std::span<const uint32_t> ids = groups == 1 ? std::span<const uint32_t>() : places.pieces->groups;
      return PieceRuns(places.pieces->pieces.subspan(b, e - b), ids.empty() ? ids : ids.subspan(b, e - b), g,
                       staging, dir, runs_);
    }
    const LayerRange r = LayerGroup(layout_.layers, groups, g);
    plan_.clear();
    PlanChunkRuns(geometry_, paged_, places.table, chunk, r.begin, r.end, plan_);
    ToDeviceRuns(plan_, geometry_, paged_, staging, k_, v_, dir, runs_);
    return {geometry_.LayersOffset(r.begin), geometry_.LayersBytes(r.begin, r.end)};
  }

  // Plans the runs of chunks [first, first + count) of the request staged in `s` into s.runs_host,
  // group by group; s.group_end[g] is the end of group g's runs, s.ranges the bytes each group of each
  // chunk reads. REQUIRES: the GPU has left `s`.
  Status PlanBatch(Slot& s, const Places& places, uint64_t first, uint32_t count, RunDirection dir,
                   uint32_t groups) {
    runs_.clear();
    s.group_end.clear();
    s.ranges.clear();
    for (uint32_t g = 0; g < groups; ++g) {
      for (uint32_t c = 0; c < count; ++c) {
        const uint64_t staging = reinterpret_cast<uint64_t>(dev_.data()) + c * layout_.BytesPerChunk();
        s.ranges.push_back(PlanChunkGroup(places, first + c, g, groups, staging, dir));
      }
      s.group_end.push_back(runs_.size());
    }
    if (runs_.size() > max_runs_) return Status::Internal("GPU transfer: run list exceeds its buffer");
    std::memcpy(s.runs_host.data(), runs_.data(), runs_.size() * sizeof(DeviceRun));
    return Status::OK();
  }

  // Uploads runs [begin, end) of `s` to the device run buffer and launches the run kernel over them. The
  // buffer is reused in stream order: the next upload runs after this kernel.
  Status UploadAndLaunch(const Slot& s, size_t begin, size_t end) {
    if (end == begin) return Status::OK();
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(runs_dev_.data(), s.runs_host.data() + begin * sizeof(DeviceRun),
                                       (end - begin) * sizeof(DeviceRun), cudaMemcpyHostToDevice, stream_.get()),
                       "run list upload");
    const auto* runs = reinterpret_cast<const DeviceRun*>(runs_dev_.data());
    KVTIER_CUDA_RETURN(LaunchCopyRuns(runs, static_cast<uint32_t>(end - begin), stream_.get()), "run kernel");
    return Status::OK();
  }

  // Records the slot's event after its last queued use and marks it busy.
  Status MarkQueued(Slot& s) {
    KVTIER_CUDA_RETURN(cudaEventRecord(s.done.get(), stream_.get()), "cudaEventRecord");
    s.busy.store(true, std::memory_order_release);
    return Status::OK();
  }

  // Queues layer group `g` of the `count` chunks staged (and planned) in `s`: one bulk copy per chunk,
  // then the scatter.
  Status QueueLoadGroup(const Slot& s, uint32_t g, uint32_t count);
  // Loads with one layer group: batches queued as they are read (host reads overlap the GPU).
  Result<size_t> LoadPipelined(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                               const Places& places, CudaLoad& load);
  // Layer-wise loads: waves of up to slot_count_ batches are read, then queued group-major; group g's
  // event is recorded after group g of every wave.
  Result<size_t> LoadWaves(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                           const Places& places, CudaLoad& load);
  // On a reader thread: waits until the GPU has left the slot, then borrows the leading chunks that can
  // be copied in place and reads and verifies the rest into it.
  Result<size_t> ReadBatch(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, Slot& s);
  // Queues the gather and the GPU->host copies of a batch to save.
  Status EnqueueSave(Slot& s, const Places& places, uint64_t first, uint32_t count);
  Status SaveBatches(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, const Places& places);
  Status SaveStaged(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, Slot& s);

  DeviceScope exit_scope_;  // first: destroyed last
  const Layout layout_;
  const ChunkGeometry geometry_;
  const PagedGeometry paged_;
  const int device_;
  const uint32_t batch_;
  const uint32_t groups_;
  uint64_t max_runs_;  // runs one batch may have: the size of every run buffer
  const uint32_t slot_count_;
  std::vector<uint64_t> k_, v_;
  std::vector<CopyRun> plan_;      // scratch of the calling thread
  std::vector<DeviceRun> runs_;    // scratch of the calling thread
  std::unique_ptr<Slot[]> slots_;  // pinned host staging, one per batch in flight
  DeviceBuffer dev_;               // device staging of one batch
  DeviceBuffer runs_dev_;          // the run list of one batch and group
  Event after_;                    // recorded on the engine's stream before a load or save
  Stream stream_;                  // destroyed (and synchronised) before the buffers above
  ThreadPool readers_;             // last: joined first, while every buffer is still there
};

Status CudaTransfer::QueueLoadGroup(const Slot& s, uint32_t g, uint32_t count) {
  const uint64_t chunk = layout_.BytesPerChunk();
  for (uint32_t c = 0; c < count; ++c) {  // one bulk copy per chunk (and layer group), per run of a lent one
    const uint64_t off = s.ranges[uint64_t{g} * count + c].offset, bytes = s.ranges[uint64_t{g} * count + c].bytes;
    uint64_t at = 0;  // offset of the run in the chunk
    for (const auto& run : s.src[c]) {
      const uint64_t lo = std::max(at, off), hi = std::min(at + run.size(), off + bytes);
      if (lo < hi) {
        KVTIER_CUDA_RETURN(cudaMemcpyAsync(dev_.data() + c * chunk + lo, run.data() + (lo - at), hi - lo,
                                           cudaMemcpyHostToDevice, stream_.get()),
                           "host->GPU copy");
      }
      at += run.size();
    }
  }
  return UploadAndLaunch(s, g == 0 ? 0 : s.group_end[g - 1], s.group_end[g]);
}

Result<size_t> CudaTransfer::ReadBatch(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                       Slot& s) {
  // A reader thread makes no CUDA call (the slot's event, the lent chunks' pointer attributes, a pinned
  // allocation of a tier) before the transfer's device is current: on a fresh thread the runtime would
  // otherwise make a context on GPU 0, a device the caller may never have used.
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
  KVTIER_RETURN_IF_ERROR(WaitSlot(s));
  const uint64_t chunk = layout_.BytesPerChunk();
  s.src.assign(keys.size(), {});
  s.lent.clear();
  size_t lent = 0;
  for (; lent < keys.size(); ++lent) {
    Result<BorrowedChunk> b = store.Borrow(ns, keys[lent]);  // verified; released again when not usable
    if (!b.ok() || !CopyableInPlace(*b, chunk)) break;
    s.src[lent].assign(b->pieces().begin(), b->pieces().end());
    s.lent.push_back(std::move(*b));
  }
  if (lent == keys.size()) return lent;
  std::vector<std::span<std::byte>> pieces(keys.size() - lent);
  std::vector<ScatterList> dsts(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    pieces[i] = {s.host.data() + (lent + i) * chunk, chunk};
    dsts[i] = ScatterList(&pieces[i], 1);
  }
  KVTIER_ASSIGN_OR_RETURN(const size_t loaded, store.Load(ns, keys.subspan(lent), dsts));
  for (size_t c = lent; c < lent + loaded; ++c) s.src[c] = {{s.host.data() + c * chunk, chunk}};
  return lent + loaded;
}

Result<size_t> CudaTransfer::LoadPipelined(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                           const Places& places, CudaLoad& load) {
  auto read = [&](size_t, uint32_t slot, size_t first, uint32_t count) {
    return ReadBatch(store, ns, keys.subspan(first, count), slots_[slot]);
  };
  // On this thread, in batch order: queue the batch's copies and kernel.
  auto consume = [&](size_t, uint32_t slot, size_t first, uint32_t, uint32_t loaded) -> Status {
    Slot& s = slots_[slot];
    load.Keep(s.lent);
    KVTIER_RETURN_IF_ERROR(PlanBatch(s, places, first, loaded, RunDirection::kToBlocks, groups_));
    for (uint32_t g = 0; g < groups_; ++g) KVTIER_RETURN_IF_ERROR(QueueLoadGroup(s, g, loaded));
    return MarkQueued(s);
  };
  return RunOrderedBatches(readers_, BatchPlan{keys.size(), batch_, slot_count_}, read, consume);
}

Result<size_t> CudaTransfer::LoadWaves(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                       const Places& places, CudaLoad& load) {
  const size_t wave = size_t{batch_} * slot_count_;
  size_t total = 0;
  for (size_t w0 = 0; w0 < keys.size(); w0 += wave) {
    const std::span<const ChunkKey> wkeys = keys.subspan(w0, std::min(wave, keys.size() - w0));
    std::vector<std::pair<uint32_t, uint32_t>> staged;  // (slot, chunks) in batch order
    auto read = [&](size_t, uint32_t slot, size_t first, uint32_t count) {
      return ReadBatch(store, ns, wkeys.subspan(first, count), slots_[slot]);
    };
    // Every batch of a wave has its own slot, so planning here and queueing after the wave is read
    // never lets a read refill a slot the GPU has not copied yet.
    auto consume = [&](size_t, uint32_t slot, size_t first, uint32_t, uint32_t loaded) -> Status {
      load.Keep(slots_[slot].lent);
      KVTIER_RETURN_IF_ERROR(PlanBatch(slots_[slot], places, w0 + first, loaded, RunDirection::kToBlocks, groups_));
      staged.emplace_back(slot, loaded);
      return Status::OK();
    };
    Result<size_t> n = RunOrderedBatches(readers_, BatchPlan{wkeys.size(), batch_, slot_count_}, read, consume);
    if (!n.ok()) return n.status();
    for (uint32_t g = 0; g < groups_; ++g) {
      for (const auto& [slot, count] : staged) KVTIER_RETURN_IF_ERROR(QueueLoadGroup(slots_[slot], g, count));
      KVTIER_CUDA_RETURN(cudaEventRecord(load.event(g), stream_.get()), "cudaEventRecord");
    }
    for (const auto& [slot, count] : staged) KVTIER_RETURN_IF_ERROR(MarkQueued(slots_[slot]));
    total += *n;
    if (*n < wkeys.size()) break;
  }
  return total;
}

Result<std::unique_ptr<GpuLoad>> CudaTransfer::Load(Store& store, const Namespace& ns,
                                                    std::span<const ChunkKey> keys,
                                                    std::span<const uint32_t> block_table, void* after_stream) {
  KVTIER_ASSIGN_OR_RETURN(const Places places, TablePlaces(ns, keys.size(), block_table));
  return LoadAt(store, ns, keys, places, after_stream);
}

Result<std::unique_ptr<GpuLoad>> CudaTransfer::LoadPieces(Store& store, const Namespace& ns,
                                                          std::span<const ChunkKey> keys, const DevicePieces& places,
                                                          void* after_stream) {
  KVTIER_ASSIGN_OR_RETURN(const Places p, PiecePlaces(ns, keys.size(), places));
  return LoadAt(store, ns, keys, p, after_stream);
}

Result<std::unique_ptr<GpuLoad>> CudaTransfer::LoadAt(Store& store, const Namespace& ns,
                                                      std::span<const ChunkKey> keys, const Places& places,
                                                      void* after_stream) {
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
  // refused before anything is created or queued
  KVTIER_RETURN_IF_ERROR(CheckNotCapturing(EngineStream(after_stream), "GpuTransfer::Load"));
  if (places.pieces != nullptr) KVTIER_RETURN_IF_ERROR(EnsureRunCapacity(MaxPiecesPerChunk(places.starts)));
  std::vector<Event> events(groups_);
  for (Event& e : events) KVTIER_RETURN_IF_ERROR(e.Create());
  auto load = std::make_unique<CudaLoad>(device_, std::move(events));
  KVTIER_RETURN_IF_ERROR(WaitForStream(after_stream, "GpuTransfer::Load"));
  Result<size_t> loaded = groups_ > 1 ? LoadWaves(store, ns, keys, places, *load)
                                      : LoadPipelined(store, ns, keys, places, *load);
  if (!loaded.ok()) return Drain(loaded.status());
  // Batches read past a miss were never queued: what they borrowed goes back now.
  for (uint32_t i = 0; i < slot_count_; ++i) slots_[i].lent.clear();
  if (groups_ == 1 || *loaded == 0) {  // the events fire after everything queued
    for (uint32_t g = 0; g < groups_; ++g) {
      if (cudaError_t err = cudaEventRecord(load->event(g), stream_.get()); err != cudaSuccess) {
        return Drain(CudaStatus(err, "cudaEventRecord"));
      }
    }
  }
  load->set_chunks(*loaded);
  return std::unique_ptr<GpuLoad>(std::move(load));
}

Status CudaTransfer::EnqueueSave(Slot& s, const Places& places, uint64_t first, uint32_t count) {
  KVTIER_RETURN_IF_ERROR(PlanBatch(s, places, first, count, RunDirection::kFromBlocks, 1));
  KVTIER_RETURN_IF_ERROR(UploadAndLaunch(s, 0, s.group_end[0]));
  const uint64_t chunk = layout_.BytesPerChunk();
  for (uint32_t c = 0; c < count; ++c) {  // one bulk copy per chunk
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(s.host.data() + c * chunk, dev_.data() + c * chunk, chunk,
                                       cudaMemcpyDeviceToHost, stream_.get()),
                       "GPU->host copy");
  }
  return MarkQueued(s);
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

Status CudaTransfer::SaveBatches(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                 const Places& places) {
  Slot* prev = nullptr;
  std::span<const ChunkKey> prev_keys;
  for (size_t start = 0, b = 0; start < keys.size(); ++b) {
    Slot& s = slots_[b % 2];
    KVTIER_RETURN_IF_ERROR(WaitSlot(s));
    const uint32_t m = static_cast<uint32_t>(std::min<size_t>(batch_, keys.size() - start));
    KVTIER_RETURN_IF_ERROR(EnqueueSave(s, places, start, m));
    // The host saves the previous batch while the GPU gathers this one.
    if (prev != nullptr) KVTIER_RETURN_IF_ERROR(SaveStaged(store, ns, prev_keys, *prev));
    prev = &s;
    prev_keys = keys.subspan(start, m);
    start += m;
  }
  if (prev != nullptr) KVTIER_RETURN_IF_ERROR(SaveStaged(store, ns, prev_keys, *prev));
  return Status::OK();
}

Status CudaTransfer::Save(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                          std::span<const uint32_t> block_table, void* after_stream) {
  KVTIER_ASSIGN_OR_RETURN(const Places places, TablePlaces(ns, keys.size(), block_table));
  return SaveAt(store, ns, keys, places, after_stream);
}

Status CudaTransfer::SavePieces(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                                const DevicePieces& places, void* after_stream) {
  KVTIER_ASSIGN_OR_RETURN(const Places p, PiecePlaces(ns, keys.size(), places));
  return SaveAt(store, ns, keys, p, after_stream);
}

Status CudaTransfer::SaveAt(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                            const Places& places, void* after_stream) {
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device_));
  if (places.pieces != nullptr) KVTIER_RETURN_IF_ERROR(EnsureRunCapacity(MaxPiecesPerChunk(places.starts)));
  KVTIER_RETURN_IF_ERROR(WaitForStream(after_stream, "GpuTransfer::Save"));
  if (Status st = SaveBatches(store, ns, keys, places); !st.ok()) return Drain(st);
  return Status::OK();
}

}  // namespace
}  // namespace internal

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::Open(const Layout& layout, const PagedKvCache& cache,
                                                       const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::ValidateOpen(layout, cache, options));
  KVTIER_RETURN_IF_ERROR(internal::CheckDevice(cache.device));
  const uint64_t batch = std::clamp<uint64_t>(options.staging_bytes / layout.BytesPerChunk(), 1, 1u << 16);
  auto t = std::make_unique<internal::CudaTransfer>(layout, &cache, cache.device, static_cast<uint32_t>(batch),
                                                    options.layer_groups, options.host_threads);
  KVTIER_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<GpuTransfer>(std::move(t));
}

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::OpenPieces(const Layout& layout, int device,
                                                             const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::ValidateOptions(layout, options));
  KVTIER_RETURN_IF_ERROR(internal::CheckDevice(device));
  const uint64_t batch = std::clamp<uint64_t>(options.staging_bytes / layout.BytesPerChunk(), 1, 1u << 16);
  auto t = std::make_unique<internal::CudaTransfer>(layout, nullptr, device, static_cast<uint32_t>(batch),
                                                    options.layer_groups, options.host_threads);
  KVTIER_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<GpuTransfer>(std::move(t));
}

}  // namespace kvtier
