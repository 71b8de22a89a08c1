#include "tiers/rados/rados_reference.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "tiers/rados/rados_client.h"
#include "tiers/rados/rados_conn.h"

namespace kvtier::rados {
namespace {

std::string RefName(uint64_t i) {
  return "kvtier-bench-rados-ref:" + std::to_string(::getpid()) + ":" + std::to_string(i);
}

// `window` buffers of reference objects (object/object_reference.h), the tag set per object.
class RadosRefBuffers {
 public:
  RadosRefBuffers(uint64_t window, uint64_t object_bytes)
      : bytes_(object_bytes), buf_(std::make_unique_for_overwrite<std::byte[]>(window * object_bytes)) {
    for (uint64_t k = 0; k < window; ++k) object::FillReferenceObject(slot(k), 0);
  }
  std::span<std::byte> slot(uint64_t k) const { return {buf_.get() + k * bytes_, bytes_}; }
  // Slot k holding reference object i.
  const char* Tagged(uint64_t k, uint64_t i) const {
    std::memcpy(slot(k).data(), &i, std::min<uint64_t>(sizeof(i), bytes_));
    return reinterpret_cast<const char*>(slot(k).data());
  }

 private:
  uint64_t bytes_;
  std::unique_ptr<std::byte[]> buf_;
};

// The timed writes: objects [0, count), at most `window` in flight. Their count and seconds into *w;
// `issued` (how many objects may exist now) even on failure; the first failed write's error.
Status TimedWrites(rados_ioctx_t io, uint64_t object_bytes, uint64_t count, uint64_t window,
                   object::RawReadResult* w, uint64_t* issued) {
  RadosRefBuffers bufs(window, object_bytes);
  std::vector<rados_completion_t> slot(window, nullptr);
  std::vector<std::string> names(window);
  Status first;
  const auto finish = [&](uint64_t j) {
    rados_completion_t& c = slot[j % window];
    const int ret = c == nullptr ? -EIO : WaitAndRelease(c);
    c = nullptr;
    if (ret >= 0) {
      ++w->objects;
      w->bytes += object_bytes;
    } else {
      ++w->errors;
      if (first.ok()) first = RadosStatus(ret, "write " + RefName(j));
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count && first.ok(); ++i) {
    const uint64_t k = i % window;
    if (i >= window) finish(i - window);
    names[k] = RefName(i);
    rados_aio_create_completion2(nullptr, nullptr, &slot[k]);
    *issued = i + 1;
    if (rados_aio_write_full(io, names[k].c_str(), slot[k], bufs.Tagged(k, i), object_bytes) < 0) {
      rados_aio_release(slot[k]);
      slot[k] = nullptr;  // counted as failed when its turn comes
    }
  }
  // The writes still in flight: the loop awaited those before issued - window.
  for (uint64_t j = *issued > window ? *issued - window : 0; j < *issued; ++j) finish(j);
  w->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return first;
}

// The reads: windows of `window` objects, each issued together and awaited; checked after the clock.
object::RawReadResult WindowedReads(rados_ioctx_t io, uint64_t object_bytes, uint64_t count, uint64_t window) {
  object::RawReadResult r;
  auto buf = std::make_unique_for_overwrite<std::byte[]>(window * object_bytes);
  std::vector<std::byte> pattern(object_bytes);
  object::FillReferenceObject(pattern, 0);
  std::vector<rados_completion_t> done(window);
  std::vector<std::string> names(window);
  std::vector<int> got(window);
  std::chrono::duration<double> busy{0};
  for (uint64_t first = 0; first < count; first += window) {
    const uint64_t n = std::min(window, count - first);
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t k = 0; k < n; ++k) {
      names[k] = RefName(first + k);
      rados_aio_create_completion2(nullptr, nullptr, &done[k]);
      char* at = reinterpret_cast<char*>(buf.get() + k * object_bytes);
      got[k] = rados_aio_read(io, names[k].c_str(), done[k], at, object_bytes, 0);
      if (got[k] < 0) rados_aio_release(done[k]);
    }
    for (uint64_t k = 0; k < n; ++k) got[k] = got[k] < 0 ? got[k] : WaitAndRelease(done[k]);
    busy += std::chrono::steady_clock::now() - t0;
    for (uint64_t k = 0; k < n; ++k) {
      const std::span<const std::byte> body(buf.get() + k * object_bytes, got[k] < 0 ? 0 : got[k]);
      const bool ok = object::ReferenceObjectMatches(body, pattern, first + k);
      r.objects += ok ? 1 : 0;
      r.bytes += ok ? object_bytes : 0;
      r.errors += ok ? 0 : 1;
    }
  }
  r.seconds = busy.count();
  return r;
}

}  // namespace

Result<object::RawRoundTrip> PlainRadosReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                 uint64_t window) {
  KVTIER_ASSIGN_OR_RETURN(RadosOptions o, ParseRadosOptions(url));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RadosConn> conn, RadosConn::Open(o));
  window = std::max<uint64_t>(1, std::min(window, count));
  object::RawRoundTrip r;
  uint64_t issued = 0;
  Status put = TimedWrites(conn->io(), object_bytes, count, window, &r.write, &issued);
  if (put.ok()) r.read = WindowedReads(conn->io(), object_bytes, count, window);
  for (uint64_t i = 0; i < issued; ++i) (void)rados_remove(conn->io(), RefName(i).c_str());
  KVTIER_RETURN_IF_ERROR(put);
  return r;
}

}  // namespace kvtier::rados
