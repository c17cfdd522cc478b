#pragma once

// Every sandbox facet is a step applied in the process being confined; a step
// returns nothing on success or a message saying which call failed and why.
// The steps run in kbox-sandbox's single-threaded children, so they may
// allocate; they never run in kboxd itself.

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

namespace kbox::sandbox {

using StepError = std::optional<std::string>;

// "what: strerror(errno)" for the errno of the call that just failed.
inline std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace kbox::sandbox
