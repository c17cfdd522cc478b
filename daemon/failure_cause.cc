#include "daemon/failure_cause.h"

namespace kbox {

std::string_view InfraCauseName(InfraCause cause) {
  switch (cause) {
    case InfraCause::kNone: return "none";
    case InfraCause::kStageSpawn: return "stage_spawn";
    case InfraCause::kZygoteDied: return "zygote_died";
    case InfraCause::kSandboxSetup: return "sandbox_setup";
    case InfraCause::kHarnessSandboxLimit: return "harness_sandbox_limit";
    case InfraCause::kHarnessTimeout: return "harness_timeout";
    case InfraCause::kHarnessOutputLimit: return "harness_output_limit";
    case InfraCause::kHarnessCrash: return "harness_crash";
    case InfraCause::kHarnessProtocol: return "harness_protocol";
    case InfraCause::kHarnessFailed: return "harness_failed";
    case InfraCause::kStageKilled: return "stage_killed";
    case InfraCause::kCompilerKilled: return "compiler_killed";
    case InfraCause::kCancelled: return "cancelled";
    case InfraCause::kWorkspace: return "workspace";
    case InfraCause::kInternal: return "internal";
  }
  return "internal";
}

bool RetryableInfraCause(InfraCause cause) {
  switch (cause) {
    case InfraCause::kStageKilled:
    case InfraCause::kCompilerKilled:
    case InfraCause::kZygoteDied:
    case InfraCause::kHarnessCrash:
      return true;
    default:
      return false;
  }
}

std::string_view ViolationKindName(ViolationKind kind) {
  switch (kind) {
    case ViolationKind::kNone: return "none";
    case ViolationKind::kSeccomp: return "seccomp";
    case ViolationKind::kSeccompStrict: return "seccomp_strict";
    case ViolationKind::kAuditDenied: return "audit_denied";
    case ViolationKind::kMemoryLimit: return "memory_limit";
    case ViolationKind::kPidsLimit: return "pids_limit";
    case ViolationKind::kFileSizeLimit: return "file_size_limit";
    case ViolationKind::kCpuTimeLimit: return "cpu_time_limit";
    case ViolationKind::kWallTimeLimit: return "wall_time_limit";
    case ViolationKind::kOutputLimit: return "output_limit";
  }
  return "none";
}

}  // namespace kbox
