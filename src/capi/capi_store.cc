// Opening and closing stores, and the synchronous Store calls of the C API.
#include <cstddef>
#include <string>

#include "capi/capi_internal.h"

using kvtier::Status;
using namespace kvtier::capi;

namespace {

kvtier::Result<kvtier::StoreOptions> ToStoreOptions(const kvtier_store_options& o) {
  const char* fn = "kvtier_store_open";
  // The options of an older build end at key_file (no event fields): accepted, without events.
  const bool has_events = o.struct_size == sizeof(kvtier_store_options);
  if (!has_events && o.struct_size != offsetof(kvtier_store_options, events)) {
    return Status::InvalidArgument(std::string(fn) + ": options.struct_size is " +
                                   std::to_string(o.struct_size) + ", this library's is " +
                                   std::to_string(sizeof(kvtier_store_options)) +
                                   " (call kvtier_store_options_init)");
  }
  if (o.tiers == nullptr && o.tier_count > 0) return NullArgument(fn, "options.tiers");
  if (o.async_threads == 0) {
    return Status::InvalidArgument(std::string(fn) + ": options.async_threads must be at least 1");
  }
  kvtier::StoreOptions out;
  for (size_t i = 0; i < o.tier_count; ++i) {
    if (o.tiers[i] == nullptr) {
      return Status::InvalidArgument(std::string(fn) + ": options.tiers[" + std::to_string(i) + "] is NULL");
    }
    out.tiers.emplace_back(o.tiers[i]);
  }
  out.promote_on_load = o.promote_on_load != 0;
  out.admission = o.admit_on_second_use != 0 ? kvtier::Admission::kSecondUse : kvtier::Admission::kAlways;
  out.save_queue_bytes = o.save_queue_bytes;
  out.save_queue_chunks = o.save_queue_chunks;
  out.background_threads = o.background_threads;
  if (o.key_file != nullptr) out.key_file = o.key_file;
  if (has_events && o.events != nullptr) {
    kvtier::EventPublisherOptions events;
    events.endpoint = o.events;
    if (o.events_topic != nullptr) events.topic = o.events_topic;
    KVTIER_ASSIGN_OR_RETURN(out.observer, kvtier::EventPublisher::Open(events));
  }
  return out;
}

Status CheckStoreNs(const char* fn, const kvtier_store* store, const kvtier_ns* ns) {
  if (store == nullptr) return NullArgument(fn, "store");
  if (ns == nullptr) return NullArgument(fn, "ns");
  return Status::OK();
}

}  // namespace

extern "C" {

void kvtier_store_options_init(kvtier_store_options* options) {
  if (options == nullptr) {
    (void)Fail(NullArgument("kvtier_store_options_init", "options"));
    return;
  }
  const kvtier::StoreOptions d;
  *options = kvtier_store_options{};
  options->struct_size = sizeof(kvtier_store_options);
  options->promote_on_load = d.promote_on_load ? 1 : 0;
  options->admit_on_second_use = d.admission == kvtier::Admission::kSecondUse ? 1 : 0;
  options->save_queue_bytes = d.save_queue_bytes;
  options->save_queue_chunks = d.save_queue_chunks;
  options->background_threads = d.background_threads;
  options->async_threads = 4;
}

kvtier_status kvtier_store_open(const kvtier_store_options* options, kvtier_store** out) {
  return Guard("kvtier_store_open", [&]() -> Status {
    if (out == nullptr) return NullArgument("kvtier_store_open", "out");
    *out = nullptr;
    if (options == nullptr) return NullArgument("kvtier_store_open", "options");
    KVTIER_ASSIGN_OR_RETURN(kvtier::StoreOptions opt, ToStoreOptions(*options));
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<kvtier::Store> store, kvtier::Store::Open(opt));
    auto handle = std::make_unique<kvtier_store>();
    handle->store = std::move(store);
    handle->async = std::make_unique<kvtier::internal::ThreadPool>(options->async_threads);
    KVTIER_RETURN_IF_ERROR(handle->async->status());  // the OS refused a thread: an error, not an abort
    *out = handle.release();
    return Status::OK();
  });
}

void kvtier_store_close(kvtier_store* store) {
  if (store == nullptr) return;
  store->async.reset();  // finishes queued and running operations, then joins its threads
  delete store;          // the Store waits for its background queue
}

kvtier_status kvtier_store_flush(kvtier_store* store) {
  return Guard("kvtier_store_flush", [&]() -> Status {
    if (store == nullptr) return NullArgument("kvtier_store_flush", "store");
    return store->store->Flush();
  });
}

size_t kvtier_lookup(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys, size_t n_keys) {
  const char* fn = "kvtier_lookup";
  size_t hit = 0;
  (void)Guard(fn, [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(CheckStoreNs(fn, store, ns));
    KVTIER_ASSIGN_OR_RETURN(std::vector<kvtier::ChunkKey> k, CopyKeys(fn, keys, n_keys));
    hit = store->store->Lookup(ns->ns, k);
    return Status::OK();
  });
  return hit;
}

kvtier_status kvtier_load(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys, size_t n_keys,
                          const kvtier_buf* pieces, const size_t* pieces_per_chunk, size_t* loaded) {
  const char* fn = "kvtier_load";
  return Guard(fn, [&]() -> Status {
    if (loaded == nullptr) return NullArgument(fn, "loaded");
    *loaded = 0;
    KVTIER_RETURN_IF_ERROR(CheckStoreNs(fn, store, ns));
    KVTIER_ASSIGN_OR_RETURN(std::vector<kvtier::ChunkKey> k, CopyKeys(fn, keys, n_keys));
    ChunkBuffers<std::byte> dst;
    KVTIER_RETURN_IF_ERROR(
        BuildBuffers(fn, n_keys, pieces, pieces_per_chunk, ns->ns.layout().BytesPerChunk(), dst));
    KVTIER_ASSIGN_OR_RETURN(*loaded, store->store->Load(ns->ns, k, dst.chunks));
    return Status::OK();
  });
}

kvtier_status kvtier_save(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys, size_t n_keys,
                          const kvtier_buf* pieces, const size_t* pieces_per_chunk) {
  const char* fn = "kvtier_save";
  return Guard(fn, [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(CheckStoreNs(fn, store, ns));
    KVTIER_ASSIGN_OR_RETURN(std::vector<kvtier::ChunkKey> k, CopyKeys(fn, keys, n_keys));
    ChunkBuffers<const std::byte> src;
    KVTIER_RETURN_IF_ERROR(
        BuildBuffers(fn, n_keys, pieces, pieces_per_chunk, ns->ns.layout().BytesPerChunk(), src));
    return store->store->Save(ns->ns, k, src.chunks);
  });
}

void kvtier_prefetch(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys, size_t n_keys) {
  const char* fn = "kvtier_prefetch";
  (void)Guard(fn, [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(CheckStoreNs(fn, store, ns));
    KVTIER_ASSIGN_OR_RETURN(std::vector<kvtier::ChunkKey> k, CopyKeys(fn, keys, n_keys));
    store->store->Prefetch(ns->ns, k);
    return Status::OK();
  });
}

}  // extern "C"
