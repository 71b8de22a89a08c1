// ClientCounters: the request and error counts every ObjectClient reports in Stats(), kept once here.
// Thread-safe (relaxed atomics: the counts are statistics, not synchronisation).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tiers/object/object_client.h"

namespace kvtier::object {

class ClientCounters {
 public:
  void Requests(uint64_t n = 1) { requests_.fetch_add(n, std::memory_order_relaxed); }
  void Retry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  void Error() { errors_.fetch_add(1, std::memory_order_relaxed); }
  ObjectClientStats Snapshot() const {
    return {requests_.load(std::memory_order_relaxed), retries_.load(std::memory_order_relaxed),
            errors_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<uint64_t> requests_{0}, retries_{0}, errors_{0};
};

// A backend's option-name table as ObjectTierFactory's backend_options.
template <size_t N>
std::vector<std::string> OptionNames(const std::string_view (&names)[N]) {
  return std::vector<std::string>(std::begin(names), std::end(names));
}

}  // namespace kvtier::object
