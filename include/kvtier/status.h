// Status and Result<T>: the one error type of kvtier.
//
// A Status is cheap on success (no allocation) and carries a code, a message and a retryable bit on
// failure. No exception crosses the public API; every fallible call returns a Status or a Result<T>.
// Both are [[nodiscard]]: ignoring a failure is a compile error under -Werror.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class Code : uint8_t {
  kOk = 0,
  kNotFound,         // a miss: the chunk is not in this tier
  kCorruption,       // stored bytes failed verification (and were removed)
  kInvalidArgument,  // the caller's input is malformed
  kIOError,          // the storage refused an operation
  kNoSpace,          // the storage or a budget is full
  kBusy,             // a bounded resource is saturated; try later
  kNotSupported,     // the tier does not offer this operation
  kVersionMismatch,  // data written by an unknown (newer) format version
  kInternal,         // a broken invariant inside kvtier
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message, bool retryable = false)
      : code_(code), retryable_(retryable), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  static Status IOError(std::string msg, bool retryable = false) {
    return {Code::kIOError, std::move(msg), retryable};
  }
  static Status NoSpace(std::string msg) { return {Code::kNoSpace, std::move(msg), true}; }
  static Status Busy(std::string msg) { return {Code::kBusy, std::move(msg), true}; }
  static Status NotSupported(std::string msg) { return {Code::kNotSupported, std::move(msg)}; }
  static Status VersionMismatch(std::string msg) { return {Code::kVersionMismatch, std::move(msg)}; }
  static Status Internal(std::string msg) { return {Code::kInternal, std::move(msg)}; }

  // Maps an errno value to a Status; the only place kvtier interprets errno.
  // `context` names the operation and path, e.g. "open /var/lib/kvtier/x".
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool retryable() const { return retryable_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }

  // "OK" or "<code name>: <message>".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  bool retryable_ = false;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result constructed from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // OK when a value is held.
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvtier

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)

#define KVTIER_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::kvtier::Status kvtier_s_ = (expr);      \
    if (!kvtier_s_.ok()) return kvtier_s_;    \
  } while (0)

#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_r_, __LINE__), lhs, expr)
