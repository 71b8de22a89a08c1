// Version calls, status names and the per-thread last error of the C API.
#include <exception>
#include <new>
#include <string>

#include "capi/capi_internal.h"

namespace kvtier::capi {
namespace {

thread_local std::string t_last_error;
// Set when the message itself could not be stored (no memory): kvtier_last_error returns a fixed text.
thread_local bool t_last_error_lost = false;

constexpr const char* kLostMessage = "NoSpace: out of memory while recording an error";

void Record(const Status& s) noexcept {
  try {
    t_last_error = s.ToString();
    t_last_error_lost = false;
  } catch (...) {
    t_last_error_lost = true;
  }
}

}  // namespace

void SetLastError(const std::string& text) noexcept {
  try {
    t_last_error = text;
    t_last_error_lost = false;
  } catch (...) {
    t_last_error_lost = true;
  }
}

kvtier_status Fail(const Status& s) noexcept {
  if (s.ok()) return KVTIER_OK;
  Record(s);
  return static_cast<kvtier_status>(s.code());
}

Status ExceptionStatus(const char* fn) noexcept {
  const bool no_memory = [] {
    try {
      throw;
    } catch (const std::bad_alloc&) {
      return true;
    } catch (...) {
      return false;
    }
  }();
  const Code code = no_memory ? Code::kNoSpace : Code::kInternal;
  try {
    std::string what = "unexpected exception";
    try {
      throw;
    } catch (const std::bad_alloc&) {
      what = "out of memory";
    } catch (const std::exception& e) {
      what += std::string(": ") + e.what();
    } catch (...) {
    }
    return Status(code, std::string(fn) + ": " + what);
  } catch (...) {
    return Status(code, std::string());  // no memory for a message; an empty string allocates nothing
  }
}

kvtier_status FailFromException(const char* fn) noexcept {
  const Status s = ExceptionStatus(fn);
  if (s.message().empty()) {
    t_last_error_lost = true;
    return static_cast<kvtier_status>(s.code());
  }
  return Fail(s);
}

}  // namespace kvtier::capi

static_assert(KVTIER_OK == static_cast<int>(kvtier::Code::kOk));
static_assert(KVTIER_NOT_FOUND == static_cast<int>(kvtier::Code::kNotFound));
static_assert(KVTIER_CORRUPTION == static_cast<int>(kvtier::Code::kCorruption));
static_assert(KVTIER_INVALID_ARGUMENT == static_cast<int>(kvtier::Code::kInvalidArgument));
static_assert(KVTIER_IO_ERROR == static_cast<int>(kvtier::Code::kIOError));
static_assert(KVTIER_NO_SPACE == static_cast<int>(kvtier::Code::kNoSpace));
static_assert(KVTIER_BUSY == static_cast<int>(kvtier::Code::kBusy));
static_assert(KVTIER_NOT_SUPPORTED == static_cast<int>(kvtier::Code::kNotSupported));
static_assert(KVTIER_VERSION_MISMATCH == static_cast<int>(kvtier::Code::kVersionMismatch));
static_assert(KVTIER_INTERNAL == static_cast<int>(kvtier::Code::kInternal));

extern "C" {

const char* kvtier_version(void) { return KVTIER_VERSION_STRING; }

uint32_t kvtier_abi_version(void) { return KVTIER_ABI_VERSION; }

const char* kvtier_status_name(int status) {
  if (status < KVTIER_OK || status > KVTIER_INTERNAL) return "Unknown";
  // CodeName returns views of string literals: NUL-terminated.
  return kvtier::CodeName(static_cast<kvtier::Code>(status)).data();
}

const char* kvtier_last_error(void) {
  using namespace kvtier::capi;
  return t_last_error_lost ? kLostMessage : t_last_error.c_str();
}

}  // extern "C"
