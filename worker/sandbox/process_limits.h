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

// The run stage's judge (docs/judge-boundary.md): as BecomeSandboxUser, but
// CAP_SETUID, CAP_SETGID and CAP_KILL stay in the bounding, permitted,
// inheritable and ambient sets, so that they survive the exec of the
// harness (no file capabilities are involved, so the exec is not a secure
// one). They are capabilities in the sandbox's own user namespace only, where
// the judge's and the candidate's are the only ids. The judge gives the
// candidate's process its id with them right after forking it, and then
// keeps CAP_KILL alone (to stop a candidate of another id). The two share the
// stage's pid namespace; its procfs hides each from the other
// (hidepid=invisible, filesystem.cc), and a uid apart no signal crosses.
StepError BecomeJudgeUser(unsigned inside_id);

StepError SetNoNewPrivs();

// Closes every descriptor above 2 except `keep`.
StepError CloseOtherFds(const std::vector<int>& keep);

}  // namespace kbox::sandbox
