// The GPU path of the C API (kvtier_gpu_*): a thin layer over kvtier::GpuTransfer (include/kvtier/gpu.h).
#include <memory>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "kvtier/gpu.h"

struct kvtier_gpu {
  std::unique_ptr<kvtier::GpuTransfer> transfer;
  // The last load that succeeded, for the wait calls. A load that fails leaves it in place: the engine
  // may still have to wait for an earlier request's load of the same step (a failed load has waited for
  // everything it queued itself).
  std::unique_ptr<kvtier::GpuLoad> last;
};

struct kvtier_host_pins {
  std::unique_ptr<kvtier::HostMemoryPins> pins;
};

using kvtier::Status;
using kvtier::capi::Guard;
using kvtier::capi::NullArgument;

namespace {

Status LastLoad(const char* fn, kvtier_gpu* gpu) {
  if (gpu == nullptr) return NullArgument(fn, "gpu");
  if (gpu->last == nullptr) return Status::InvalidArgument(std::string(fn) + ": no load to wait for");
  return Status::OK();
}

Status Table(const char* fn, const uint32_t* table, size_t n) {
  if (table == nullptr && n > 0) return NullArgument(fn, "block_table");
  return Status::OK();
}

// The handles every load and save takes.
Status Handles(const char* fn, const kvtier_gpu* gpu, const kvtier_store* store, const kvtier_ns* ns) {
  if (gpu == nullptr) return NullArgument(fn, "gpu");
  if (store == nullptr) return NullArgument(fn, "store");
  if (ns == nullptr) return NullArgument(fn, "ns");
  return Status::OK();
}

// Keeps a started load for the wait calls and reports its verified prefix; a failed one changes nothing.
Status Keep(kvtier_gpu* gpu, kvtier::Result<std::unique_ptr<kvtier::GpuLoad>> load, size_t* loaded) {
  if (!load.ok()) return load.status();
  gpu->last = std::move(*load);
  *loaded = gpu->last->chunks();
  return Status::OK();
}

// kvtier_gpu_open's options: 0 keeps GpuTransferOptions' default.
kvtier::GpuTransferOptions Options(uint64_t staging_bytes, uint32_t layer_groups, uint32_t host_threads) {
  kvtier::GpuTransferOptions opt;
  if (staging_bytes > 0) opt.staging_bytes = staging_bytes;
  if (layer_groups > 0) opt.layer_groups = layer_groups;
  if (host_threads > 0) opt.host_threads = host_threads;
  return opt;
}

// Gives an opened transfer to the caller as a new handle.
Status Hand(kvtier::Result<std::unique_ptr<kvtier::GpuTransfer>> t, kvtier_gpu** out) {
  if (!t.ok()) return t.status();
  auto h = std::make_unique<kvtier_gpu>();
  h->transfer = std::move(*t);
  *out = h.release();
  return Status::OK();
}

// The C arrays of a piece list as kvtier::DevicePieces (`storage` holds the converted pieces).
kvtier::Result<kvtier::DevicePieces> Pieces(const char* fn, const kvtier_buf* pieces, size_t n_pieces,
                                            const size_t* per_chunk, size_t n_keys, const uint32_t* groups,
                                            std::vector<kvtier::DevicePiece>& storage) {
  if (pieces == nullptr && n_pieces > 0) return NullArgument(fn, "pieces");
  if (per_chunk == nullptr && n_keys > 0) return NullArgument(fn, "pieces_per_chunk");
  storage.resize(n_pieces);
  for (size_t i = 0; i < n_pieces; ++i) storage[i] = {pieces[i].data, pieces[i].size};
  kvtier::DevicePieces out;
  out.pieces = storage;
  out.pieces_per_chunk = std::span(per_chunk, n_keys);
  if (groups != nullptr) out.groups = std::span(groups, n_pieces);
  return out;
}

}  // namespace

extern "C" {

kvtier_status kvtier_gpu_available(int device) {
  return Guard("kvtier_gpu_available", [&] { return kvtier::GpuAvailable(device); });
}

kvtier_status kvtier_gpu_open(const kvtier_ns* ns, const kvtier_gpu_cache* cache, uint64_t staging_bytes,
                              uint32_t layer_groups, uint32_t host_threads, kvtier_gpu** out) {
  if (out != nullptr) *out = nullptr;
  return Guard("kvtier_gpu_open", [&]() -> Status {
    if (ns == nullptr) return NullArgument("kvtier_gpu_open", "ns");
    if (cache == nullptr) return NullArgument("kvtier_gpu_open", "cache");
    if (out == nullptr) return NullArgument("kvtier_gpu_open", "out");
    if (cache->layers > 0 && (cache->k == nullptr || cache->v == nullptr)) {
      return NullArgument("kvtier_gpu_open", "cache->k or cache->v");
    }
    kvtier::PagedKvCache c;
    c.device = cache->device;
    c.num_blocks = cache->num_blocks;
    c.block_tokens = cache->block_tokens;
    c.k.assign(cache->k, cache->k + cache->layers);
    c.v.assign(cache->v, cache->v + cache->layers);
    return Hand(kvtier::GpuTransfer::Open(ns->ns.layout(), c, Options(staging_bytes, layer_groups, host_threads)),
                out);
  });
}

kvtier_status kvtier_gpu_open_pieces(const kvtier_ns* ns, int32_t device, uint64_t staging_bytes,
                                     uint32_t layer_groups, uint32_t host_threads, kvtier_gpu** out) {
  if (out != nullptr) *out = nullptr;
  return Guard("kvtier_gpu_open_pieces", [&]() -> Status {
    if (ns == nullptr) return NullArgument("kvtier_gpu_open_pieces", "ns");
    if (out == nullptr) return NullArgument("kvtier_gpu_open_pieces", "out");
    return Hand(kvtier::GpuTransfer::OpenPieces(ns->ns.layout(), device,
                                                Options(staging_bytes, layer_groups, host_threads)),
                out);
  });
}

void kvtier_gpu_close(kvtier_gpu* gpu) { delete gpu; }

kvtier_status kvtier_store_pin_host_memory(kvtier_store* store, int device, kvtier_host_pins** out,
                                           size_t* regions) {
  if (out != nullptr) *out = nullptr;
  if (regions != nullptr) *regions = 0;
  return Guard("kvtier_store_pin_host_memory", [&]() -> Status {
    constexpr const char* fn = "kvtier_store_pin_host_memory";
    if (store == nullptr) return NullArgument(fn, "store");
    if (out == nullptr) return NullArgument(fn, "out");
    auto pins = kvtier::PinStoreHostMemory(*store->store, device);
    if (!pins.ok()) return pins.status();
    auto h = std::make_unique<kvtier_host_pins>();
    h->pins = std::move(*pins);
    if (regions != nullptr) *regions = h->pins->regions();
    *out = h.release();
    return Status::OK();
  });
}

void kvtier_host_pins_free(kvtier_host_pins* pins) { delete pins; }

kvtier_status kvtier_gpu_load(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                              size_t n_keys, const uint32_t* block_table, size_t n_blocks, size_t* loaded) {
  return kvtier_gpu_load_after(gpu, store, ns, keys, n_keys, block_table, n_blocks, nullptr, loaded);
}

kvtier_status kvtier_gpu_load_after(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                    const kvtier_key* keys, size_t n_keys, const uint32_t* block_table,
                                    size_t n_blocks, void* after_stream, size_t* loaded) {
  if (loaded != nullptr) *loaded = 0;
  return Guard("kvtier_gpu_load_after", [&]() -> Status {
    constexpr const char* fn = "kvtier_gpu_load_after";
    KVTIER_RETURN_IF_ERROR(Handles(fn, gpu, store, ns));
    if (loaded == nullptr) return NullArgument(fn, "loaded");
    KVTIER_RETURN_IF_ERROR(Table(fn, block_table, n_blocks));
    auto k = kvtier::capi::CopyKeys(fn, keys, n_keys);
    if (!k.ok()) return k.status();
    return Keep(gpu, gpu->transfer->Load(*store->store, ns->ns, *k, std::span(block_table, n_blocks), after_stream),
                loaded);
  });
}

kvtier_status kvtier_gpu_wait_layers(kvtier_gpu* gpu, uint32_t group) {
  return Guard("kvtier_gpu_wait_layers", [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(LastLoad("kvtier_gpu_wait_layers", gpu));
    return gpu->last->WaitLayerGroup(group);
  });
}

kvtier_status kvtier_gpu_wait(kvtier_gpu* gpu) {
  return Guard("kvtier_gpu_wait", [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(LastLoad("kvtier_gpu_wait", gpu));
    return gpu->last->Wait();
  });
}

kvtier_status kvtier_gpu_stream_wait_layers(kvtier_gpu* gpu, uint32_t group, void* stream) {
  return Guard("kvtier_gpu_stream_wait_layers", [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(LastLoad("kvtier_gpu_stream_wait_layers", gpu));
    return gpu->last->StreamWaitLayerGroup(group, stream);
  });
}

kvtier_status kvtier_gpu_save(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                              size_t n_keys, const uint32_t* block_table, size_t n_blocks, void* after_stream) {
  return Guard("kvtier_gpu_save", [&]() -> Status {
    constexpr const char* fn = "kvtier_gpu_save";
    KVTIER_RETURN_IF_ERROR(Handles(fn, gpu, store, ns));
    KVTIER_RETURN_IF_ERROR(Table(fn, block_table, n_blocks));
    auto k = kvtier::capi::CopyKeys(fn, keys, n_keys);
    if (!k.ok()) return k.status();
    return gpu->transfer->Save(*store->store, ns->ns, *k, std::span(block_table, n_blocks), after_stream);
  });
}

kvtier_status kvtier_gpu_load_pieces(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                     const kvtier_key* keys, size_t n_keys, const kvtier_buf* pieces,
                                     size_t n_pieces, const size_t* pieces_per_chunk, const uint32_t* piece_groups,
                                     void* after_stream, size_t* loaded) {
  if (loaded != nullptr) *loaded = 0;
  return Guard("kvtier_gpu_load_pieces", [&]() -> Status {
    constexpr const char* fn = "kvtier_gpu_load_pieces";
    KVTIER_RETURN_IF_ERROR(Handles(fn, gpu, store, ns));
    if (loaded == nullptr) return NullArgument(fn, "loaded");
    std::vector<kvtier::DevicePiece> storage;
    auto places = Pieces(fn, pieces, n_pieces, pieces_per_chunk, n_keys, piece_groups, storage);
    if (!places.ok()) return places.status();
    auto k = kvtier::capi::CopyKeys(fn, keys, n_keys);
    if (!k.ok()) return k.status();
    return Keep(gpu, gpu->transfer->LoadPieces(*store->store, ns->ns, *k, *places, after_stream), loaded);
  });
}

kvtier_status kvtier_gpu_save_pieces(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                     const kvtier_key* keys, size_t n_keys, const kvtier_buf* pieces,
                                     size_t n_pieces, const size_t* pieces_per_chunk, const uint32_t* piece_groups,
                                     void* after_stream) {
  return Guard("kvtier_gpu_save_pieces", [&]() -> Status {
    constexpr const char* fn = "kvtier_gpu_save_pieces";
    KVTIER_RETURN_IF_ERROR(Handles(fn, gpu, store, ns));
    std::vector<kvtier::DevicePiece> storage;
    auto places = Pieces(fn, pieces, n_pieces, pieces_per_chunk, n_keys, piece_groups, storage);
    if (!places.ok()) return places.status();
    auto k = kvtier::capi::CopyKeys(fn, keys, n_keys);
    if (!k.ok()) return k.status();
    return gpu->transfer->SavePieces(*store->store, ns->ns, *k, *places, after_stream);
  });
}

}  // extern "C"
