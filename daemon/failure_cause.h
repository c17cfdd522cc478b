#pragma once

// Why a job failed, in the closed sets kboxd's metrics label with
// (docs/metrics.md). The public result says it in words (`message`); these
// are for counting, and never leave kboxd except as metric label values.
// result_mapper.cc decides them, in the same branch that decides the status.

#include <array>
#include <string_view>

namespace kbox {

// Why a job ended as INFRA_ERROR (kbox's own failure).
enum class InfraCause {
  kNone,                // Not an INFRA_ERROR.
  kStageSpawn,          // A stage process could not be started (fork, exec, pipes).
  kZygoteDied,          // The pre-forked zygote died or broke its protocol mid-stage.
  kSandboxSetup,        // kbox-sandbox could not set the sandbox up.
  kHarnessSandboxLimit, // kbox's harness (not candidate or reference) hit a sandbox limit.
  kHarnessTimeout,      // The wall-clock limit expired while kbox's harness ran.
  kHarnessOutputLimit,  // kbox's harness flooded stdout/stderr.
  kHarnessCrash,        // The harness died without a report while its own code ran.
  kHarnessProtocol,     // The harness's result channel was malformed or its outcome unknown.
  kHarnessFailed,       // The harness reported HARNESS_FAILED (it caught its own error).
  kStageKilled,         // A stage process died by a SIGKILL from outside the job (not kboxd's,
                        // not the cgroup's OOM kill): docs/reliability.md, "Whose SIGKILL".
  kCompilerKilled,      // A compiler under the compile stage died by SIGKILL, no OOM kill seen.
  kCancelled,           // kboxd's shutdown deadline ended the job.
  kWorkspace,           // The job directory could not be prepared.
  kInternal,            // An exception in kboxd itself.
};

// Which limit of the sandbox stopped the candidate (statuses
// SANDBOX_VIOLATION, and TIMEOUT / RUNTIME_ERROR for the wall-clock and
// output limits). Only the candidate's: the reference's are REFERENCE_ERROR,
// the harness's are InfraCause::kHarnessSandboxLimit.
enum class ViolationKind {
  kNone,
  kSeccomp,         // The stage-wide seccomp filter killed a forbidden system call.
  kSeccompStrict,   // The strict filter killed process creation or exec.
  kAuditDenied,     // The harness's audit hook refused an operation (file, socket, ...).
  kMemoryLimit,     // The job's cgroup memory limit.
  kPidsLimit,       // The job's cgroup process limit.
  kFileSizeLimit,   // RLIMIT_FSIZE (SIGXFSZ).
  kCpuTimeLimit,    // RLIMIT_CPU (SIGXCPU).
  kWallTimeLimit,   // The stage's wall-clock limit (status TIMEOUT).
  kOutputLimit,     // stdout+stderr past max_output_bytes (status RUNTIME_ERROR).
};

inline constexpr std::array kAllInfraCauses = {
    InfraCause::kStageSpawn,       InfraCause::kZygoteDied,       InfraCause::kSandboxSetup,
    InfraCause::kHarnessSandboxLimit, InfraCause::kHarnessTimeout, InfraCause::kHarnessOutputLimit,
    InfraCause::kHarnessCrash,     InfraCause::kHarnessProtocol,  InfraCause::kHarnessFailed,
    InfraCause::kStageKilled,      InfraCause::kCompilerKilled,
    InfraCause::kCancelled,        InfraCause::kWorkspace,        InfraCause::kInternal};

inline constexpr std::array kAllViolationKinds = {
    ViolationKind::kSeccomp,     ViolationKind::kSeccompStrict, ViolationKind::kAuditDenied,
    ViolationKind::kMemoryLimit, ViolationKind::kPidsLimit,     ViolationKind::kFileSizeLimit,
    ViolationKind::kCpuTimeLimit, ViolationKind::kWallTimeLimit, ViolationKind::kOutputLimit};

// The metric label value ("harness_crash"); "none" for kNone.
std::string_view InfraCauseName(InfraCause cause);
std::string_view ViolationKindName(ViolationKind kind);

// Whether a job that ended INFRA_ERROR for `cause` is run again (up to
// infra_retries times): a process of kbox's was killed or crashed under it,
// which a second attempt does not meet again. Never a harness that hung or
// reported its own failure (a broken device: the retry would fail the same
// way), a shutdown, or a kboxd bug.
bool RetryableInfraCause(InfraCause cause);

// What the result mapper found besides the status.
struct FailureCause {
  InfraCause infra = InfraCause::kNone;
  ViolationKind violation = ViolationKind::kNone;
  // kbox's harness failed in a way a broken device explains (crashed, hung
  // or raised in its own code during a run stage); the evaluator quarantines
  // the job's GPU when it ran on one (daemon/device_health.h).
  bool device_suspect = false;
};

}  // namespace kbox
