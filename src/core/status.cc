#include "kvtier/status.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kCorruption: return "Corruption";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kIOError: return "IOError";
    case Code::kNoSpace: return "NoSpace";
    case Code::kBusy: return "Busy";
    case Code::kNotSupported: return "NotSupported";
    case Code::kVersionMismatch: return "VersionMismatch";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status::NotFound(std::move(msg));
    case ENOSPC:
    case EDQUOT:
      return Status::NoSpace(std::move(msg));
    case EINVAL:
    case ENAMETOOLONG:
      return Status::InvalidArgument(std::move(msg));
    case EOPNOTSUPP:
    case ENOSYS:
      return Status::NotSupported(std::move(msg));
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ETIMEDOUT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return Status::IOError(std::move(msg), /*retryable=*/true);
    default:
      return Status::IOError(std::move(msg));
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

}  // namespace kvtier
