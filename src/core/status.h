// Status: how every core function reports success or failure. No exception leaves the core;
// the C layer maps Code one-to-one onto dlock_status.
#ifndef DLOCK_CORE_STATUS_H_
#define DLOCK_CORE_STATUS_H_

#include <string>
#include <utility>

namespace dlock {

enum class Code : int {  // same numbers as dlock_status
  kOk = 0,
  kNotAcquired = 1,
  kNotHeld = 2,
  kInvalidArgument = 3,
  kIoError = 4,
  kBackendError = 5,
  kAuthError = 6,
  kCancelled = 7,
  kNoMemory = 8,
  kInternal = 9,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status NotAcquired(std::string m) { return {Code::kNotAcquired, std::move(m)}; }
  static Status NotHeld(std::string m) { return {Code::kNotHeld, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  static Status BackendError(std::string m) { return {Code::kBackendError, std::move(m)}; }
  static Status AuthError(std::string m) { return {Code::kAuthError, std::move(m)}; }
  static Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "context: message", keeping the code.
  Status Prefixed(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace dlock

#endif  // DLOCK_CORE_STATUS_H_
