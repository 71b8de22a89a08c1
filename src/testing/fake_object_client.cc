#include "testing/fake_object_client.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "tiers/object/object_scheme.h"

namespace kvtier::testing {

void FakeObjectStore::FailNext(uint32_t ops, Status status) {
  internal::MutexLock lock(mu_);
  fail_next_ = ops;
  fault_ = std::move(status);
}

void FakeObjectStore::FailAlways(Status status) {
  internal::MutexLock lock(mu_);
  fail_always_ = true;
  fault_ = std::move(status);
}

void FakeObjectStore::FailPuts(Status status) {
  internal::MutexLock lock(mu_);
  put_fault_ = std::move(status);
}

void FakeObjectStore::ClearFaults() {
  internal::MutexLock lock(mu_);
  midway_next_ = 0;
  fail_next_ = 0;
  fail_always_ = false;
  fault_ = Status::OK();
  put_fault_ = Status::OK();
}

Status FakeObjectStore::NextFault(bool is_put) {
  ++seen_.ops;
  if (fail_always_) return fault_;
  if (fail_next_ > 0) {
    --fail_next_;
    return fault_;
  }
  return is_put ? put_fault_ : Status::OK();
}

Status FakeObjectStore::FlipByte(const std::string& name, uint64_t offset) {
  internal::MutexLock lock(mu_);
  auto it = objects_.find(name);
  if (it == objects_.end()) return Status::NotFound(name);
  if (offset >= it->second.size()) return Status::InvalidArgument("offset past the object");
  it->second[offset] ^= std::byte{0x5A};
  return Status::OK();
}

Status FakeObjectStore::Truncate(const std::string& name, uint64_t bytes) {
  internal::MutexLock lock(mu_);
  auto it = objects_.find(name);
  if (it == objects_.end()) return Status::NotFound(name);
  it->second.resize(std::min<uint64_t>(bytes, it->second.size()));
  return Status::OK();
}

void FakeObjectStore::Set(const std::string& name, std::vector<std::byte> bytes) {
  internal::MutexLock lock(mu_);
  objects_[name] = std::move(bytes);
}

std::vector<std::byte> FakeObjectStore::Bytes(const std::string& name) const {
  internal::MutexLock lock(mu_);
  auto it = objects_.find(name);
  return it == objects_.end() ? std::vector<std::byte>{} : it->second;
}

bool FakeObjectStore::Has(const std::string& name) const {
  internal::MutexLock lock(mu_);
  return objects_.count(name) != 0;
}

void FakeObjectStore::Erase(const std::string& name) {
  internal::MutexLock lock(mu_);
  objects_.erase(name);
}

size_t FakeObjectStore::size() const {
  internal::MutexLock lock(mu_);
  return objects_.size();
}

FakeObjectStore::Observed FakeObjectStore::observed() const {
  internal::MutexLock lock(mu_);
  return seen_;
}

void FakeObjectStore::Begin(uint64_t bytes) {
  internal::MutexLock lock(mu_);
  inflight_ += bytes;
  seen_.max_inflight_bytes = std::max(seen_.max_inflight_bytes, inflight_);
  seen_.max_batch_bytes = std::max(seen_.max_batch_bytes, bytes);
}

void FakeObjectStore::End(uint64_t bytes) {
  internal::MutexLock lock(mu_);
  inflight_ -= bytes;
}

void FakeObjectStore::Place(const std::string& name, uint64_t server) {
  internal::MutexLock lock(mu_);
  placement_[name] = server;
}

uint64_t FakeObjectStore::PlacementOf(std::string_view name) const {
  internal::MutexLock lock(mu_);
  auto it = placement_.find(name);
  return it == placement_.end() ? 0 : it->second;
}

std::vector<std::vector<std::string>> FakeObjectStore::get_batches() const {
  internal::MutexLock lock(mu_);
  return get_batches_;
}

void FakeObjectStore::FailNextMidway(uint32_t ops, Status status, bool erase) {
  internal::MutexLock lock(mu_);
  midway_next_ = ops;
  midway_fault_ = std::move(status);
  midway_erase_ = erase;
}

void FakeObjectStore::GetMany(std::span<object::ObjectRead> ops) {
  uint64_t bytes = 0;
  for (const auto& op : ops) bytes += op.Capacity();
  Begin(bytes);
  {
    internal::MutexLock lock(mu_);
    ++seen_.get_calls;
    if (!placement_.empty()) {
      get_batches_.emplace_back();
      for (const auto& op : ops) get_batches_.back().push_back(op.name);
    }
    for (auto& op : ops) {
      op.bytes = 0;
      op.status = NextFault(false);
      if (!op.status.ok()) continue;
      auto it = objects_.find(op.name);
      if (it == objects_.end()) {
        op.status = Status::NotFound(op.name);
        continue;
      }
      if (midway_next_ > 0 && it->second.size() <= op.Capacity()) {
        --midway_next_;  // half the object lands, as when a connection is lost mid-reply
        auto landed = std::exchange(op.landed, nullptr);
        (void)object::LandObject(op, std::span(it->second).first(it->second.size() / 2));
        op.landed = std::move(landed);
        op.bytes = 0;
        op.status = midway_fault_;
        if (midway_erase_) objects_.erase(it);
        continue;
      }
      op.status = object::LandObject(op, it->second);
    }
  }
  End(bytes);
}

void FakeObjectStore::PutMany(std::span<object::ObjectWrite> ops) {
  uint64_t bytes = 0;
  for (const auto& op : ops) bytes += TotalBytes(op.data);
  Begin(bytes);
  {
    internal::MutexLock lock(mu_);
    for (auto& op : ops) {
      op.status = NextFault(true);
      if (!op.status.ok()) continue;
      std::vector<std::byte> v;
      v.reserve(TotalBytes(op.data));
      for (const auto& p : op.data) v.insert(v.end(), p.begin(), p.end());
      objects_[op.name] = std::move(v);
      seen_.max_objects = std::max<uint64_t>(seen_.max_objects, objects_.size());
    }
  }
  End(bytes);
}

Status FakeObjectStore::Delete(std::string_view name) {
  internal::MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(NextFault(false));
  auto it = objects_.find(name);
  if (it != objects_.end()) objects_.erase(it);
  return Status::OK();
}

Result<bool> FakeObjectStore::Exists(std::string_view name) {
  internal::MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(NextFault(false));
  return objects_.find(name) != objects_.end();
}

Status FakeObjectStore::List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) {
  std::vector<object::ObjectInfo> found;
  {
    internal::MutexLock lock(mu_);
    KVTIER_RETURN_IF_ERROR(NextFault(false));
    for (const auto& [name, bytes] : objects_) {
      if (name.compare(0, prefix.size(), prefix) == 0) found.push_back({name, bytes.size()});
    }
  }
  for (const auto& info : found) {
    if (!fn(info)) break;
  }
  return Status::OK();
}

namespace {

template <typename Op>
uint64_t Failed(std::span<Op> ops) {
  return static_cast<uint64_t>(std::count_if(ops.begin(), ops.end(), [](const Op& op) {
    return !op.status.ok() && !op.status.IsNotFound();
  }));
}

}  // namespace

void FakeObjectClient::GetMany(std::span<object::ObjectRead> ops) {
  requests_.fetch_add(ops.size(), std::memory_order_relaxed);
  store_->GetMany(ops);
  errors_.fetch_add(Failed(ops), std::memory_order_relaxed);
}

void FakeObjectClient::PutMany(std::span<object::ObjectWrite> ops) {
  requests_.fetch_add(ops.size(), std::memory_order_relaxed);
  store_->PutMany(ops);
  errors_.fetch_add(Failed(ops), std::memory_order_relaxed);
}

Status FakeObjectClient::Delete(std::string_view name) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  Status s = store_->Delete(name);
  if (!s.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Result<bool> FakeObjectClient::Exists(std::string_view name) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  auto r = store_->Exists(name);
  if (!r.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Status FakeObjectClient::List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  return store_->List(prefix, fn);
}

object::ObjectClientStats FakeObjectClient::Stats() const {
  return {requests_.load(std::memory_order_relaxed), 0, errors_.load(std::memory_order_relaxed)};
}

std::shared_ptr<FakeObjectStore> FakeStoreAt(const std::string& path) {
  static internal::Mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<FakeObjectStore>>;
  internal::MutexLock lock(mu);
  auto& s = (*stores)[path];
  if (s == nullptr) s = std::make_shared<FakeObjectStore>();
  return s;
}

void RegisterObjmemScheme() {
  object::RegisterObjectScheme("objmem", [](const TierUrl& url, const object::ObjectClientOptions&)
                                             -> Result<std::unique_ptr<object::ObjectClient>> {
    return std::unique_ptr<object::ObjectClient>(std::make_unique<FakeObjectClient>(FakeStoreAt(url.path)));
  });
}

}  // namespace kvtier::testing
