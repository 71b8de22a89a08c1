// DefaultHostAllocator: anonymous mappings, committed only where touched.
#include <sys/mman.h>

#include "kvtier/host_allocator.h"

namespace kvtier {
namespace {

class MmapAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes, size_t /*alignment: mmap gives pages, and huge pages where advised*/) override {
    if (bytes == 0) return nullptr;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    // Large pages cut TLB misses on long copies; a kernel without them simply ignores the advice.
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
  }
  void Free(void* p, size_t bytes) override {
    if (p != nullptr) munmap(p, bytes);
  }
};

}  // namespace

std::shared_ptr<HostAllocator> DefaultHostAllocator() {
  static const std::shared_ptr<HostAllocator> kDefault = std::make_shared<MmapAllocator>();
  return kDefault;
}

}  // namespace kvtier
