#pragma once

#include <string>

#include <boost/assert/source_location.hpp>
#include <boost/throw_exception.hpp>

#include <stdexcept>

namespace kbox {

// A request (or config) field that is missing or out of bounds. `field` is the
// proto field path ("candidate_source", "limits.max_body_bytes"), so a client
// knows exactly what to fix.
struct FieldError {
  std::string field;
  std::string message;
};

// Lets boost::system::result<T, FieldError>::value() throw a readable error.
[[noreturn]] inline void throw_exception_from_error(const FieldError& e,
                                                    const boost::source_location& loc) {
  boost::throw_exception(std::invalid_argument(e.field + ": " + e.message), loc);
}

}  // namespace kbox
