#pragma once

// kbox's one status type: the outcome of an operation that either succeeds
// or fails with a message a person can act on (Status), and of one that
// returns a value when it succeeds (StatusOr<T>: the job's workspace, its
// cgroups, the sandbox's set-up, the precompiled header's build). Errors
// about one field of a request or config keep FieldError (field_error.h),
// which names the field, and the Python tokenizer's its line and column;
// kboxd's answers map errors to HTTP in one table (daemon/api_handler.cc,
// ErrorCodeName).

#include <string>
#include <utility>

#include <boost/assert/source_location.hpp>
#include <boost/system/result.hpp>
#include <boost/throw_exception.hpp>

#include <stdexcept>

namespace kbox {

class [[nodiscard]] Status {
 public:
  // Success.
  Status() = default;
  static Status Ok() { return Status(); }
  // Failure, saying what failed and why.
  static Status Error(std::string message) {
    Status status;
    status.ok_ = false;
    status.message_ = std::move(message);
    return status;
  }

  bool ok() const { return ok_; }
  // Empty on success.
  const std::string& message() const { return message_; }

 private:
  bool ok_ = true;
  std::string message_;
};

template <typename T>
using StatusOr = boost::system::result<T, Status>;

// Lets StatusOr<T>::value() throw a readable error.
[[noreturn]] inline void throw_exception_from_error(const Status& status, const boost::source_location& loc) {
  boost::throw_exception(std::runtime_error(status.message()), loc);
}

}  // namespace kbox
