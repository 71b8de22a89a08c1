// RadosConn: one librados cluster handle and the io context of one pool (and namespace), shared by the
// rados:// client and its same-run bench reference. Owns both; closes them when destroyed. Thread-safe
// for asynchronous operations (librados' io contexts are). RadosStatus maps librados' negative errno
// results in one place.
#pragma once

#include <rados/librados.h>

#include <memory>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::rados {

struct RadosOptions;

class RadosConn {
 public:
  // InvalidArgument when authentication is refused or the pool does not exist, IOError (retryable)
  // when no monitor answers within the connect timeout.
  static Result<std::unique_ptr<RadosConn>> Open(const RadosOptions& options);
  ~RadosConn();
  RadosConn(const RadosConn&) = delete;
  RadosConn& operator=(const RadosConn&) = delete;

  rados_ioctx_t io() const { return io_; }

 private:
  RadosConn() = default;
  rados_t cluster_ = nullptr;
  rados_ioctx_t io_ = nullptr;
};

// OK for ret >= 0, else Status::FromErrno(-ret, "rados: " + context).
Status RadosStatus(int ret, std::string_view context);

// Waits for a completion and releases it; its return value.
int WaitAndRelease(rados_completion_t c);

}  // namespace kvtier::rados
