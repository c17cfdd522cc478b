#include "daemon/result_mapper.h"

#include <signal.h>

#include <cmath>
#include <string_view>

namespace kbox {
namespace {

using v1::EvaluateResult;
using v1::StageReport;

// How the harness words a candidate process killed by its strict filter
// (worker/harness/kbox_harness/run_stage.py).
constexpr std::string_view kStrictFilterWords = "killed by the strict seccomp filter";

void Set(EvaluateResult& r, v1::Status status, std::string message) {
  r.set_status(status);
  r.set_message(std::move(message));
}

void SetError(EvaluateResult& r, v1::Phase phase, const std::string& type,
              const std::string& message) {
  auto* e = r.mutable_runtime_error();
  e->set_type(type);
  e->set_message(message);
  e->set_phase(phase);
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// Whose code a stage's failure belongs to. The harness announces each party
// before its code runs; in a compile stage candidate code runs in the
// harness's own process and can write those announcements and the report
// itself, so once it has run, everything that stage does is the candidate's:
// an announced HARNESS or REFERENCE there is no evidence against kbox.
v1::Party ResponsibleParty(const StageOutcome& s, v1::Phase phase) {
  if (phase == v1::PHASE_COMPILE && s.candidate_ran) return v1::CANDIDATE;
  return s.last_party;
}

struct LimitHit {
  std::string what;  // In words; empty when no limit stopped the stage.
  ViolationKind kind = ViolationKind::kNone;
};

// What the sandbox stopped, and which of its limits did.
LimitHit SandboxLimitHit(const StageOutcome& s, v1::Party party) {
  const ProcessOutcome& p = s.process;
  if (s.memory_limit_hit) {
    return {"exceeded the job's memory limit and was killed", ViolationKind::kMemoryLimit};
  }
  if (p.end == ProcessOutcome::End::kSignaled && p.term_signal == SIGSYS) {
    // kbox-sandbox names the call its seccomp listener held (stage 1); the
    // harness's strict filter kills without a name.
    const std::string marker = "kbox-sandbox: killed: forbidden system call ";
    const auto at = p.output_tail.rfind(marker);
    if (at != std::string::npos) {
      const auto start = at + marker.size();
      const std::string name = p.output_tail.substr(start, p.output_tail.find('\n', start) - start);
      return {"made a system call the sandbox forbids: " + name + " (killed by seccomp)",
              ViolationKind::kSeccomp};
    }
    // Without a name, the stacked strict filter killed it: it only takes
    // away process creation, exec and changes to limits and identity
    // (policy/seccomp/run_strict.policy).
    if (party == v1::CANDIDATE) {
      return {"tried to create a process, run a program, or change its limits or identity, "
              "which the sandbox forbids once candidate code runs (killed by the strict seccomp "
              "filter)",
              ViolationKind::kSeccompStrict};
    }
    return {"made a system call the sandbox forbids (killed by seccomp)", ViolationKind::kSeccomp};
  }
  if (p.end == ProcessOutcome::End::kSignaled && p.term_signal == SIGXFSZ) {
    return {"wrote a file larger than the sandbox allows", ViolationKind::kFileSizeLimit};
  }
  if (p.end == ProcessOutcome::End::kSignaled && p.term_signal == SIGXCPU) {
    return {"used more CPU time than the sandbox allows", ViolationKind::kCpuTimeLimit};
  }
  return {};
}

// A stage that ended without a usable report: attribute it to the party whose
// code was running.
void ApplyAbnormalEnd(const StageOutcome& s, v1::Phase phase, EvaluateResult& r,
                      FailureCause& cause) {
  const ProcessOutcome& p = s.process;
  const std::string stage = phase == v1::PHASE_COMPILE ? "compile stage" : "run stage";
  const std::string how = DescribeEnd(p);
  const v1::Party party = ResponsibleParty(s, phase);
  const bool candidate = party == v1::CANDIDATE;
  const bool reference = party == v1::REFERENCE;

  // Only the harness's own failures in a run stage can point at the device.
  const bool run_stage = phase == v1::PHASE_RUN;
  if (p.end == ProcessOutcome::End::kSpawnFailed) {
    Set(r, v1::INFRA_ERROR, stage + " could not be started: " + p.spawn_error);
    cause.infra = s.zygote_failed ? InfraCause::kZygoteDied : InfraCause::kStageSpawn;
    return;
  }
  if (s.sandbox_setup_failed) {
    Set(r, v1::INFRA_ERROR, stage + ": the sandbox could not be set up: " + LastLine(p.output_tail));
    cause.infra = InfraCause::kSandboxSetup;
    return;
  }
  // A limit of the sandbox stopped whoever was running.
  if (const LimitHit limit = SandboxLimitHit(s, party); !limit.what.empty()) {
    if (candidate) {
      Set(r, v1::SANDBOX_VIOLATION, "candidate " + limit.what);
      SetError(r, phase, "SandboxViolation", limit.what);
      cause.violation = limit.kind;
    } else if (reference) {
      Set(r, v1::REFERENCE_ERROR, "reference " + limit.what);
    } else {
      Set(r, v1::INFRA_ERROR, "kbox's harness " + limit.what + " (a sandbox policy gap)");
      cause.infra = InfraCause::kHarnessSandboxLimit;
    }
    return;
  }
  // A SIGKILL that kboxd did not send (its kills end as kTimedOut,
  // kOutputLimit or kCancelled) and that was no out-of-memory kill (handled
  // above): candidate code cannot send SIGKILL (the harness's no-SIGKILL
  // filter), and no process of the job can reach the launcher, so someone
  // outside the job killed the stage: kbox's fault, whoever was running.
  if (p.end == ProcessOutcome::End::kSignaled && p.term_signal == SIGKILL) {
    Set(r, v1::INFRA_ERROR, stage + " was killed by SIGKILL from outside the job (not by kboxd, "
                            "not by the job's memory limit); retry the job");
    cause.infra = InfraCause::kStageKilled;
    return;
  }
  if (p.end == ProcessOutcome::End::kCancelled) {
    Set(r, v1::INFRA_ERROR, stage + " " + how + "; retry the job");
    cause.infra = InfraCause::kCancelled;
    return;
  }
  if (p.end == ProcessOutcome::End::kTimedOut) {
    const long limit_s =
        p.expired_limit.count() > 0
            ? static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(p.expired_limit).count())
            : static_cast<long>(p.wall_ms / 1000);
    const std::string msg =
        stage + (p.timed_out_setting_up ? " did not finish setting up within its set-up limit ("
                                        : " ran past its wall-clock limit (") +
        std::to_string(limit_s) + " s); every process of the job was killed";
    if (p.timed_out_setting_up && !reference) {
      // No candidate code runs before set-up is over (it waits for the
      // turn's TURN_GIVEN and the judge's SET_UP_DONE), whatever process last spoke.
      Set(r, v1::INFRA_ERROR, msg + " while kbox's harness set it up");
      cause.infra = InfraCause::kHarnessTimeout;
      cause.device_suspect = run_stage;
      return;
    }
    if (candidate) {
      Set(r, v1::TIMEOUT, msg + " while running candidate code");
      SetError(r, phase, "Timeout", msg);
      cause.violation = ViolationKind::kWallTimeLimit;
    } else if (reference) {
      Set(r, v1::REFERENCE_ERROR, msg + " while running the reference");
      SetError(r, phase, "Timeout", msg);
    } else {
      // A harness that hangs in its own code on a GPU: a hung device.
      Set(r, v1::INFRA_ERROR, msg + " while running kbox's harness");
      cause.infra = InfraCause::kHarnessTimeout;
      cause.device_suspect = run_stage;
    }
    return;
  }
  if (p.end == ProcessOutcome::End::kOutputLimit) {
    const std::string msg = stage + " " + how;
    if (candidate) {
      Set(r, v1::RUNTIME_ERROR, "candidate " + msg);
      SetError(r, phase, "OutputLimitExceeded", msg);
      cause.violation = ViolationKind::kOutputLimit;
    } else if (reference) {
      Set(r, v1::REFERENCE_ERROR, "reference " + msg);
    } else {
      Set(r, v1::INFRA_ERROR, msg + " while running kbox's harness");
      cause.infra = InfraCause::kHarnessOutputLimit;
    }
    return;
  }
  // Exited or killed by a signal without a (valid) report.
  std::string why = stage + " " + how;
  if (!s.protocol_error.empty()) why += " (" + s.protocol_error + ")";
  else why += " without a report";
  if (candidate) {
    const v1::Status status = phase == v1::PHASE_COMPILE ? v1::COMPILE_ERROR : v1::RUNTIME_ERROR;
    Set(r, status, why + " while running candidate code");
    SetError(r, phase, p.end == ProcessOutcome::End::kSignaled ? "Crash" : "ProcessExit", why);
  } else if (reference) {
    Set(r, v1::REFERENCE_ERROR, why + " while running the reference");
    SetError(r, phase, "ProcessExit", why);
  } else {
    Set(r, v1::INFRA_ERROR, why + " in kbox's harness");
    // A malformed channel is a protocol fault; a silent death (a signal in
    // the driver, an exit from a CUDA abort) is a crash the device explains.
    cause.infra = s.protocol_error.empty() ? InfraCause::kHarnessCrash : InfraCause::kHarnessProtocol;
    cause.device_suspect = run_stage && s.protocol_error.empty();
  }
}

bool AllTrialsPassed(const StageReport& report, uint32_t expected_trials) {
  if (report.trials_size() != static_cast<int>(expected_trials) || expected_trials == 0) {
    return false;
  }
  for (const auto& t : report.trials()) {
    if (!t.passed()) return false;
  }
  return true;
}

void MergeFingerprint(const v1::Fingerprint& from, v1::Fingerprint& to) {
  auto take = [](const std::string& value, std::string* field) {
    if (!value.empty()) *field = value;
  };
  take(from.device_name(), to.mutable_device_name());
  take(from.compute_capability(), to.mutable_compute_capability());
  take(from.driver_version(), to.mutable_driver_version());
  take(from.cuda_version(), to.mutable_cuda_version());
  take(from.torch_version(), to.mutable_torch_version());
  take(from.python_version(), to.mutable_python_version());
  take(from.triton_version(), to.mutable_triton_version());
}

// Length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8SequenceLength(std::string_view s) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // Range of the second byte.
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < len || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((byte(k) >> 6) != 0x2) return 0;
  }
  return len;
}

}  // namespace

bool ApplyCompileStage(const StageOutcome& s, EvaluateResult& r, FailureCause* cause) {
  FailureCause ignored;
  FailureCause& c = cause ? *cause : ignored;
  if (!s.report) {
    ApplyAbnormalEnd(s, v1::PHASE_COMPILE, r, c);
    return false;
  }
  const StageReport& rep = *s.report;
  *r.mutable_durations()->mutable_compile_phases_ms() = rep.phase_ms();
  switch (rep.outcome()) {
    case StageReport::OK:
      return true;
    case StageReport::COMPILE_FAILED:
      Set(r, v1::COMPILE_ERROR, rep.message());
      *r.mutable_compile_log() = rep.compile_log();
      if (rep.compiler_killed() && !s.memory_limit_hit) {
        // Believed while the job has an attempt left (the evaluator runs it
        // again); on the last, CompilerKillOnLastAttemptIsTheCandidates.
        Set(r, v1::INFRA_ERROR, "a compiler was killed by SIGKILL from outside the job (" +
                                    rep.message() + "); retry the job");
        c.infra = InfraCause::kCompilerKilled;
      }
      return false;
    case StageReport::HARNESS_FAILED:
      if (ResponsibleParty(s, v1::PHASE_COMPILE) == v1::CANDIDATE) {
        // Written after candidate code ran in the same process: it may
        // have written it, and kbox's hook failing beside it cannot be told
        // from the candidate breaking it (docs/reliability.md).
        Set(r, v1::COMPILE_ERROR, "the compile stage failed after candidate code ran in its process: " +
                                      rep.message());
        SetError(r, v1::PHASE_COMPILE, "HarnessFailedBesideCandidate", rep.message());
        return false;
      }
      Set(r, v1::INFRA_ERROR, "harness failed in the compile stage: " + rep.message());
      c.infra = InfraCause::kHarnessFailed;
      return false;
    default:
      // As HARNESS_FAILED: the candidate may have written it.
      if (ResponsibleParty(s, v1::PHASE_COMPILE) == v1::CANDIDATE) {
        Set(r, v1::COMPILE_ERROR, "the compile stage reported an outcome it never reports (" +
                                      StageReport::Outcome_Name(rep.outcome()) +
                                      ") after candidate code ran in its process");
        SetError(r, v1::PHASE_COMPILE, "ResultChannelTampering", r.message());
        return false;
      }
      Set(r, v1::INFRA_ERROR, "compile stage reported an unexpected outcome " +
                                  StageReport::Outcome_Name(rep.outcome()));
      c.infra = InfraCause::kHarnessProtocol;
      return false;
  }
}

bool CompilerKillOnLastAttemptIsTheCandidates(EvaluateResult& r, FailureCause& c) {
  if (r.status() != v1::INFRA_ERROR || c.infra != InfraCause::kCompilerKilled) return false;
  Set(r, v1::COMPILE_ERROR,
      "extension build failed: a compiler was reported killed by SIGKILL on the job's last attempt; "
      "that report comes from the process the candidate's code runs in, so the failure is the "
      "candidate's (the build's log is in compile_log)");
  c.infra = InfraCause::kNone;
  return true;
}

void ApplyRunStage(const StageOutcome& s, EvaluateResult& r, FailureCause* cause) {
  FailureCause ignored;
  FailureCause& c = cause ? *cause : ignored;
  if (!s.report) {
    ApplyAbnormalEnd(s, v1::PHASE_RUN, r, c);
    return;
  }
  const StageReport& rep = *s.report;
  *r.mutable_durations()->mutable_run_phases_ms() = rep.phase_ms();
  MergeFingerprint(rep.fingerprint(), *r.mutable_fingerprint());
  *r.mutable_trials() = rep.trials();
  switch (rep.outcome()) {
    case StageReport::OK:
      // The harness runs beside candidate code, which can write to the
      // result pipe too: believe CORRECT only with every trial present and
      // passed. (Issue 5 moves the comparison out of that process.)
      if (!AllTrialsPassed(rep, r.settings().correctness_trials())) {
        Set(r, v1::RUNTIME_ERROR,
            "the run stage reported success without the trials to show for it; candidate code "
            "may have written to kbox's result channel");
        SetError(r, v1::PHASE_RUN, "ResultChannelTampering", r.message());
        break;
      }
      Set(r, v1::CORRECT, rep.message());
      break;
    case StageReport::INCORRECT:
      Set(r, v1::INCORRECT, rep.message());
      break;
    case StageReport::COMPILE_FAILED:
      Set(r, v1::COMPILE_ERROR, rep.message());
      *r.mutable_compile_log() = rep.compile_log();
      break;
    case StageReport::CANDIDATE_FAILED:
      if (rep.candidate_killed() && !s.memory_limit_hit) {
        // The judge saw the candidate's process die by SIGKILL, which
        // candidate code cannot send and the cgroup did not (no OOM kill).
        Set(r, v1::INFRA_ERROR, "the candidate's process was killed by SIGKILL from outside the "
                                "job; retry the job");
        c.infra = InfraCause::kStageKilled;
        break;
      }
      Set(r, v1::RUNTIME_ERROR, rep.message());
      *r.mutable_runtime_error() = rep.error();
      break;
    case StageReport::CANDIDATE_VIOLATION:
      Set(r, v1::SANDBOX_VIOLATION, rep.message());
      *r.mutable_runtime_error() = rep.error();
      // The harness reports two kinds: its strict filter killed the
      // candidate's process (it says so), or its audit hook refused a call.
      // Its words are all kboxd has; a forged report can only swap the two.
      c.violation = rep.message().find(kStrictFilterWords) != std::string::npos
                        ? ViolationKind::kSeccompStrict
                        : ViolationKind::kAuditDenied;
      break;
    case StageReport::REFERENCE_FAILED:
      Set(r, v1::REFERENCE_ERROR, rep.message());
      *r.mutable_runtime_error() = rep.error();
      break;
    case StageReport::HARNESS_FAILED:
      if (rep.candidate_killed() && !s.memory_limit_hit) {
        // The candidate's process died by SIGKILL before candidate code ran:
        // killed from outside the job, no sign of a broken device.
        Set(r, v1::INFRA_ERROR, "the candidate's process was killed by SIGKILL from outside the "
                                "job before candidate code ran; retry the job");
        c.infra = InfraCause::kStageKilled;
        break;
      }
      // The harness's own code raised: on a GPU, typically CUDA refusing to
      // initialise or a sticky device error outside candidate code.
      Set(r, v1::INFRA_ERROR, "harness failed in the run stage: " + rep.message());
      // Its type, message and traceback (sanitised by the harness; kbox's
      // own frames left out): the failing call is named in the message.
      *r.mutable_runtime_error() = rep.error();
      c.infra = InfraCause::kHarnessFailed;
      c.device_suspect = true;
      break;
    default:
      Set(r, v1::INFRA_ERROR, "run stage reported an unexpected outcome " +
                                  StageReport::Outcome_Name(rep.outcome()));
      c.infra = InfraCause::kHarnessProtocol;
      break;
  }
  // The candidate saw a failed fork or allocation and raised: the limit,
  // not its exception, is what happened.
  if (r.status() == v1::RUNTIME_ERROR && (s.pids_limit_hit || s.memory_limit_hit)) {
    const std::string limit = s.pids_limit_hit ? "hit the job's process limit"
                                               : "hit the job's memory limit";
    r.set_status(v1::SANDBOX_VIOLATION);
    r.set_message("candidate " + limit + " (" + r.message() + ")");
    c.violation = s.pids_limit_hit ? ViolationKind::kPidsLimit : ViolationKind::kMemoryLimit;
  }
  if (r.status() == v1::CORRECT && rep.has_candidate_timing() && rep.has_reference_timing()) {
    *r.mutable_candidate_timing() = rep.candidate_timing();
    *r.mutable_reference_timing() = rep.reference_timing();
    // "cache" only when the harness says so: every other figure in a
    // report was timed live in this stage (docs/reference-cache.md).
    if (r.reference_timing().source() != "cache") r.mutable_reference_timing()->set_source("live");
    // From the lower quartiles (the harness's timing.SPEEDUP_QUANTILE: what
    // disturbs a timed call only adds time); never from a figure missing on
    // either side.
    const v1::Timing& ct = rep.candidate_timing();
    const v1::Timing& rt = rep.reference_timing();
    if (ct.lower_quartile_ms() > 0 && rt.lower_quartile_ms() > 0) {
      r.set_speedup(rt.lower_quartile_ms() / ct.lower_quartile_ms());
    }
    if (ct.lower_quartile_ci_high_ms() > 0 && ct.lower_quartile_ci_low_ms() > 0) {
      r.set_speedup_ci_low(rt.lower_quartile_ci_low_ms() / ct.lower_quartile_ci_high_ms());
      r.set_speedup_ci_high(rt.lower_quartile_ci_high_ms() / ct.lower_quartile_ci_low_ms());
    }
    // The floor only means something next to the candidate's timing.
    const double floor_ms = rep.physical_floor_ms();
    if (std::isfinite(floor_ms) && floor_ms > 0) r.set_physical_floor_ms(floor_ms);
  }
}

void SanitizeResultText(EvaluateResult& r, size_t max_bytes) {
  auto clean = [max_bytes](std::string* text) { *text = SanitizeTail(*text, max_bytes); };
  clean(r.mutable_message());
  if (r.has_compile_log()) clean(r.mutable_compile_log()->mutable_text());
  if (r.has_runtime_error()) {
    clean(r.mutable_runtime_error()->mutable_type());
    clean(r.mutable_runtime_error()->mutable_message());
    clean(r.mutable_runtime_error()->mutable_traceback());
  }
  for (auto& t : *r.mutable_trials()) {
    clean(t.mutable_failure());
    clean(t.mutable_distribution());
  }
  for (auto& v : *r.mutable_verdicts()) {
    clean(v.mutable_message());
    clean(v.mutable_snippet());
  }
  clean(r.mutable_output_tail());
}

void FinalizeRewardable(EvaluateResult& r) {
  bool rejected = false;
  for (const auto& v : r.verdicts()) rejected |= v.severity() == v1::Verdict::REJECT;
  r.set_rewardable(r.status() == v1::CORRECT && !rejected);
}

std::string SanitizeTail(const std::string& text, size_t max_bytes) {
  std::string_view in = text;
  if (in.size() > max_bytes) {
    in.remove_prefix(in.size() - max_bytes);
    // Do not start in the middle of a character.
    while (!in.empty() && (static_cast<unsigned char>(in.front()) >> 6) == 0x2) in.remove_prefix(1);
  }
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    const size_t len = Utf8SequenceLength(in.substr(i));
    const bool valid = len > 0;
    if (!valid) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    if (len == 1 && ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)) {
      out += c == '\r' ? '\n' : '?';
    } else {
      out.append(in.substr(i, len));
    }
    i += len;
  }
  // Replacement characters are longer than the bytes they replace: cut the
  // front again, at a character boundary, to honour the bound.
  if (out.size() > max_bytes) {
    size_t cut = out.size() - max_bytes;
    while (cut < out.size() && (static_cast<unsigned char>(out[cut]) >> 6) == 0x2) ++cut;
    out.erase(0, cut);
  }
  return out;
}

}  // namespace kbox
