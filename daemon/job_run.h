#pragma once

// One job on its way through Evaluator::RunJob's phases (daemon/job_phases.cc;
// docs/architecture.md, "One job through the code"): the request and what
// the phases hand each other. Each phase either lets the job go on or ends
// it with its result set; an end kboxd decides itself (not a stage's report)
// goes through End, the one place that makes it an INFRA_ERROR.

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/failure_cause.h"
#include "daemon/job_cancels.h"
#include "daemon/metrics.h"
#include "kbox/v1/evaluation.pb.h"
#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/check_types.h"
#include "worker/job_workspace.h"
#include "worker/stage_runner.h"

namespace kbox {

struct JobRun {
  // The job, as Evaluator::Evaluate hands it over for one attempt.
  const v1::EvaluateRequest& request;
  const v1::EffectiveSettings& settings;
  const static_check::AnticheatProfile& anticheat;
  const std::string& tenant;
  JobCancel& cancel;
  v1::EvaluateResult& result;
  JobTrace& trace;
  bool& held_back;  // Set when a drain kept it from starting: it runs after the restart.

  // The static checks' input and what they found for later phases.
  static_check::CheckInput check_input{};
  // C++ the static checks could not read as text: checked as the compile
  // stage reports it, never restored from the build cache or built on the
  // compile tier.
  bool deferred = false;
  std::vector<std::string> kernel_names{};
  // The job's directory; absent until PrepareWorkspace.
  std::optional<JobWorkspace> workspace{};
  WorkspaceOptions workspace_options{};
  std::string compile_arch{};   // TORCH_CUDA_ARCH_LIST of the build ("" on the CPU).
  std::string output{};         // The stages' output tail, compile then run.
  bool began = false;           // A compile or run stage started (a drain no longer holds it back).
  StageOutcome ran{};           // The run stage's outcome.
  std::string reference_key{};  // The reference cache's key offered to the run stage ("": none).

  bool gpu_backend() const { return settings.backend() != v1::BACKEND_CPU; }

  // kboxd ends the job itself: INFRA_ERROR, `message`, `cause` for the
  // metrics and the retry rule (failure_cause.h).
  void End(InfraCause cause, std::string message) {
    result.set_status(v1::INFRA_ERROR);
    result.set_message(std::move(message));
    trace.cause.infra = cause;
  }
  // Whether the job ends before the next thing it would start: a drain
  // holds back a job that has not begun (its client's cancel excepted), and
  // a cancel (its client's, or the shutdown deadline's) stops any. Checked
  // after every wait, since either may begin during it.
  bool Stopped(const std::atomic<bool>& draining) {
    if (!began && draining.load() && !cancel.by_client.load()) {
      End(InfraCause::kCancelled, "kboxd is draining (shutting down) and the job did not start; retry it");
      held_back = true;
      return true;
    }
    if (cancel.stop.load()) {
      End(InfraCause::kCancelled, "kboxd is shutting down; retry the job");
      return true;
    }
    return false;
  }
};

}  // namespace kbox
