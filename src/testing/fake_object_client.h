// An in-memory object store and its ObjectClient, with fault injection, for tests of the object tier
// (object/object_tier.h). Instant: nothing waits, so tests never depend on time.
//
// The objmem:// scheme (RegisterObjmemScheme) opens an ObjectTier over the store named by the URL's
// path (objmem:///any/name?capacity=...): tiers opened on one path share one store, like processes
// sharing a bucket. Only test binaries register it; the CLI never does.
// Thread-safe.
#pragma once

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "tiers/object/object_client.h"

namespace kvtier::testing {

class FakeObjectStore {
 public:
  // Faults. Each counts object operations (one op of a batch, a Delete, an Exists, a List).
  void FailNext(uint32_t ops, Status status) EXCLUDES(mu_);   // the next `ops` ops fail with `status`
  void FailAlways(Status status) EXCLUDES(mu_);               // every op fails until ClearFaults
  void FailPuts(Status status) EXCLUDES(mu_);                 // every put fails (e.g. NoSpace) until ClearFaults
  // The next `ops` gets land half of their object in the destination, then fail with `status` (a
  // connection lost mid-reply); with `erase` the object is gone afterwards (evicted meanwhile).
  void FailNextMidway(uint32_t ops, Status status, bool erase = false) EXCLUDES(mu_);
  void ClearFaults() EXCLUDES(mu_);

  // Damage behind the tier's back. NotFound when the object is absent.
  Status FlipByte(const std::string& name, uint64_t offset) EXCLUDES(mu_);
  Status Truncate(const std::string& name, uint64_t bytes) EXCLUDES(mu_);
  void Set(const std::string& name, std::vector<std::byte> bytes) EXCLUDES(mu_);  // e.g. a foreign object
  std::vector<std::byte> Bytes(const std::string& name) const EXCLUDES(mu_);      // empty when absent
  bool Has(const std::string& name) const EXCLUDES(mu_);
  void Erase(const std::string& name) EXCLUDES(mu_);  // e.g. the store evicting it
  size_t size() const EXCLUDES(mu_);

  // What the store saw.
  struct Observed {
    uint64_t max_batch_bytes = 0;     // largest bytes of one GetMany/PutMany call
    uint64_t max_inflight_bytes = 0;  // largest bytes of calls running at once
    uint64_t get_calls = 0;           // GetMany calls
    uint64_t ops = 0;                 // object operations tried
    uint64_t max_objects = 0;         // most objects held at once
  };
  Observed observed() const EXCLUDES(mu_);

  // Placement: which server the client says holds `name` (0: unknown, the default). Once any is
  // placed, the names of every GetMany call are kept (get_batches).
  void Place(const std::string& name, uint64_t server) EXCLUDES(mu_);
  uint64_t PlacementOf(std::string_view name) const EXCLUDES(mu_);
  std::vector<std::vector<std::string>> get_batches() const EXCLUDES(mu_);

  // The client's side (FakeObjectClient calls these).
  void GetMany(std::span<object::ObjectRead> ops) EXCLUDES(mu_);
  void PutMany(std::span<object::ObjectWrite> ops) EXCLUDES(mu_);
  Status Delete(std::string_view name) EXCLUDES(mu_);
  Result<bool> Exists(std::string_view name) EXCLUDES(mu_);
  Status List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) EXCLUDES(mu_);

 private:
  // The injected fault for the next op, or OK. Counts the op.
  Status NextFault(bool is_put) REQUIRES(mu_);
  void Begin(uint64_t bytes) EXCLUDES(mu_);
  void End(uint64_t bytes) EXCLUDES(mu_);

  mutable internal::Mutex mu_;
  std::map<std::string, std::vector<std::byte>, std::less<>> objects_ GUARDED_BY(mu_);
  uint32_t fail_next_ GUARDED_BY(mu_) = 0;
  bool fail_always_ GUARDED_BY(mu_) = false;
  Status fault_ GUARDED_BY(mu_);
  Status put_fault_ GUARDED_BY(mu_);
  uint32_t midway_next_ GUARDED_BY(mu_) = 0;
  Status midway_fault_ GUARDED_BY(mu_);
  bool midway_erase_ GUARDED_BY(mu_) = false;
  uint64_t inflight_ GUARDED_BY(mu_) = 0;
  Observed seen_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> placement_ GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> get_batches_ GUARDED_BY(mu_);
};

class FakeObjectClient : public object::ObjectClient {
 public:
  // `scatter`: reads land in the caller's pieces (ObjectRead::rest), as the redis:// client's do.
  explicit FakeObjectClient(std::shared_ptr<FakeObjectStore> store, bool scatter = true)
      : store_(std::move(store)), scatter_(scatter) {}
  std::string Describe() const override { return "fake in-memory object store"; }
  bool ScatterReads() const override { return scatter_; }
  uint64_t Placement(std::string_view name) const override { return store_->PlacementOf(name); }
  void GetMany(std::span<object::ObjectRead> ops) override;
  void PutMany(std::span<object::ObjectWrite> ops) override;
  Status Delete(std::string_view name) override;
  Result<bool> Exists(std::string_view name) override;
  Status List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) override;
  object::ObjectClientStats Stats() const override;

 private:
  std::shared_ptr<FakeObjectStore> store_;
  const bool scatter_;
  std::atomic<uint64_t> requests_{0}, errors_{0};
};

// The store behind objmem://<path>, created on first use and kept for the life of the process.
std::shared_ptr<FakeObjectStore> FakeStoreAt(const std::string& path);
// Registers objmem:// (idempotent).
void RegisterObjmemScheme();

}  // namespace kvtier::testing
