#pragma once

// Facets applied to the sandboxed program itself, in this order, right before
// exec: resource limits, the unprivileged identity (which also drops every
// capability), no_new_privs, and closing every descriptor not named.

#include <vector>

#include "kbox/v1/sandbox.pb.h"
#include "worker/sandbox/sandbox_step.h"

namespace kbox::sandbox {

StepError ApplyRlimits(const v1::SandboxRlimits& limits);

// setresgid/setresuid to the one mapped id; as a non-zero uid in its user
// namespace the process keeps no capabilities across exec.
StepError BecomeSandboxUser(unsigned inside_id);

StepError SetNoNewPrivs();

// Closes every descriptor above 2 except `keep`.
StepError CloseOtherFds(const std::vector<int>& keep);

}  // namespace kbox::sandbox
