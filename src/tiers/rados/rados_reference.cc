#include "tiers/rados/rados_reference.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "tiers/rados/rados_client.h"
#include "tiers/rados/rados_conn.h"

namespace kvtier::rados {
namespace {

std::string RefName(uint64_t i) {
  return "kvtier-bench-rados-ref:" + std::to_string(::getpid()) + ":" + std::to_string(i);
}

}  // namespace

Result<object::RawReadResult> PlainRadosReadReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                      uint64_t window) {
  KVTIER_ASSIGN_OR_RETURN(RadosOptions o, ParseRadosOptions(url));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RadosConn> conn, RadosConn::Open(o));
  std::vector<char> bytes(object_bytes, 'k');
  Status put;
  uint64_t written = 0;
  for (; written < count && put.ok(); ++written) {
    std::memcpy(bytes.data(), &written, std::min<uint64_t>(sizeof(written), object_bytes));
    put = RadosStatus(rados_write_full(conn->io(), RefName(written).c_str(), bytes.data(), bytes.size()),
                      "write " + RefName(written));
  }
  object::RawReadResult r;
  window = std::max<uint64_t>(1, std::min(window, count));
  if (put.ok()) {
    auto buf = std::make_unique_for_overwrite<char[]>(window * object_bytes);
    std::vector<rados_completion_t> done(window);
    std::vector<std::string> names(window);
    std::chrono::duration<double> busy{0};
    for (uint64_t first = 0; first < count; first += window) {
      const uint64_t n = std::min(window, count - first);
      const auto t0 = std::chrono::steady_clock::now();
      for (uint64_t k = 0; k < n; ++k) {
        names[k] = RefName(first + k);
        rados_aio_create_completion2(nullptr, nullptr, &done[k]);
        rados_aio_read(conn->io(), names[k].c_str(), done[k], buf.get() + k * object_bytes, object_bytes, 0);
      }
      std::vector<int> got(n);
      for (uint64_t k = 0; k < n; ++k) got[k] = WaitAndRelease(done[k]);
      busy += std::chrono::steady_clock::now() - t0;
      for (uint64_t k = 0; k < n; ++k) {
        uint64_t tag = 0;
        std::memcpy(&tag, buf.get() + k * object_bytes, std::min<uint64_t>(sizeof(tag), object_bytes));
        const bool ok = got[k] == static_cast<int>(object_bytes) && (object_bytes < sizeof(tag) || tag == first + k) &&
                        buf[k * object_bytes + object_bytes - 1] == 'k';
        r.objects += ok ? 1 : 0;
        r.bytes += ok ? object_bytes : 0;
        r.errors += ok ? 0 : 1;
      }
    }
    r.seconds = busy.count();
  }
  for (uint64_t i = 0; i < written; ++i) (void)rados_remove(conn->io(), RefName(i).c_str());
  KVTIER_RETURN_IF_ERROR(put);
  return r;
}

}  // namespace kvtier::rados
