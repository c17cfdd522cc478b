#include "daemon/evaluator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "daemon/result_mapper.h"
#include "daemon/static_verdicts.h"
#include "policy/request_policy.h"

namespace kbox {
namespace {

double MsBetween(Evaluator::Clock::time_point a, Evaluator::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string ArchList(const HostInfo& host, const std::vector<uint32_t>& gpus) {
  std::vector<std::string> archs;
  for (const auto& g : host.probe.gpus()) {
    if (std::find(gpus.begin(), gpus.end(), g.index()) == gpus.end()) continue;
    if (std::find(archs.begin(), archs.end(), g.compute_capability()) == archs.end()) {
      archs.push_back(g.compute_capability());
    }
  }
  std::string out;
  for (const auto& a : archs) out += (out.empty() ? "" : ";") + a;
  return out;
}

}  // namespace

Evaluator::Evaluator(const v1::DaemonConfig& config, HostInfo host, std::vector<uint32_t> gpus,
                     const SandboxRuntime& sandbox, Metrics& metrics)
    : config_(config),
      host_(std::move(host)),
      sandbox_(sandbox),
      metrics_(metrics),
      runner_(HarnessSettings{.python = config.python(),
                              .harness_dir = config.harness_dir(),
                              .max_output_bytes = config.max_output_bytes(),
                              .build_jobs = std::max(1u, config.compile_workers())},
              sandbox.settings),
      compile_slots_(SlotPool::Anonymous(config.compile_workers())),
      cpu_slots_(SlotPool::Anonymous(config.cpu_run_slots())),
      gpu_slots_(gpus),
      gpus_(gpus),
      cuda_arch_list_(ArchList(host_, gpus)) {
  // Job ids: a random per-daemon prefix plus a counter, so ids from a
  // restarted daemon never collide with old workspaces or logs.
  std::random_device rd;
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%08x", rd());
  job_id_prefix_ = prefix;
}

std::string Evaluator::NextJobId() {
  return job_id_prefix_ + "-" + std::to_string(++job_counter_);
}

v1::StageSpec Evaluator::MakeSpec(const JobWorkspace& ws, const v1::EffectiveSettings& s,
                                  v1::Stage stage,
                                  const std::vector<std::string>& candidate_kernels) const {
  v1::StageSpec spec;
  spec.set_stage(stage);
  spec.set_reference_path(ws.reference_path().string());
  spec.set_candidate_path(ws.candidate_path().string());
  spec.set_build_dir(ws.build_dir().string());
  spec.set_backend(s.backend());
  spec.set_precision(s.precision());
  spec.set_seed(s.seed());
  spec.set_atol(s.atol());
  spec.set_rtol(s.rtol());
  spec.set_correctness_trials(s.correctness_trials());
  spec.set_measure_performance(s.measure_performance());
  spec.set_performance_trials(s.performance_trials());
  spec.set_warmup_calls(config_.warmup_calls());
  spec.set_max_log_bytes(config_.max_log_bytes());
  if (stage == v1::STAGE_RUN) {
    // The harness checks that one of them launched (run.kernel-not-launched).
    for (const std::string& name : candidate_kernels) spec.add_candidate_kernels(name);
  }
  if (stage == v1::STAGE_RUN && sandbox_.settings) {
    spec.set_strict_seccomp_bpf(sandbox_.strict_filter_path);
    if (s.backend() == v1::BACKEND_TRITON) spec.set_ptxas_path(sandbox_.settings->ptxas_path);
  }
  return spec;
}

v1::EvaluateResult Evaluator::Evaluate(const v1::EvaluateRequest& request,
                                       const v1::EffectiveSettings& settings,
                                       const static_check::AnticheatProfile& anticheat,
                                       Clock::time_point received) {
  v1::EvaluateResult result;
  result.set_job_id(NextJobId());
  result.set_client_request_id(request.client_request_id());
  *result.mutable_settings() = settings;
  *result.mutable_fingerprint() = HostFingerprint(host_);
  result.mutable_fingerprint()->set_device_name("cpu");
  try {
    RunJob(request, settings, anticheat, result);
  } catch (const std::exception& e) {
    result.set_status(v1::INFRA_ERROR);
    result.set_message(std::string("kboxd internal error: ") + e.what());
  }
  result.mutable_durations()->set_total_ms(MsBetween(received, Clock::now()));
  SanitizeResultText(result, 2 * static_cast<size_t>(config_.max_log_bytes()));
  FinalizeRewardable(result);
  metrics_.RecordJob(result);
  return result;
}

void Evaluator::RunJob(const v1::EvaluateRequest& request, const v1::EffectiveSettings& settings,
                       const static_check::AnticheatProfile& anticheat,
                       v1::EvaluateResult& result) {
  // Static checks first: a rejected candidate is never written to disk,
  // compiled or run. The verdicts of one that goes on ride along.
  const StaticPhase checked = RunStaticCheck(
      static_check::CheckInput{.candidate_source = request.candidate_source(),
                               .reference_source = request.reference_source(),
                               .backend = TaskBackendOf(settings.backend()),
                               .precision = TaskPrecisionOf(settings.precision())},
      anticheat);
  result.mutable_durations()->set_static_ms(checked.ms);
  if (checked.ran) metrics_.RecordStaticCheck(checked.report, checked.ms / 1000.0);
  if (!ApplyStaticCheck(checked.report, result)) return;

  WorkspaceOptions options;
  options.keep = config_.keep_job_dirs();
  if (sandbox_.settings) {
    options.owner_uid = sandbox_.settings->uid;
    options.owner_gid = sandbox_.settings->gid;
  }
  if (sandbox_.scratch_capped) options.scratch_bytes = config_.job_scratch_bytes();
  auto ws = JobWorkspace::Create(config_.work_dir(), result.job_id(), request.reference_source(),
                                 request.candidate_source(), options);
  if (!ws) {
    result.set_status(v1::INFRA_ERROR);
    result.set_message("cannot prepare the job directory: " + ws.error().message);
    return;
  }
  const bool gpu_backend = settings.backend() != v1::BACKEND_CPU;
  auto* durations = result.mutable_durations();
  std::string output;

  auto shutting_down = [&] {
    if (!cancelled_.load()) return false;
    result.set_status(v1::INFRA_ERROR);
    result.set_message("kboxd is shutting down; retry the job");
    return true;
  };
  {
    auto compile_slot = compile_slots_.Acquire();
    if (shutting_down()) return;
    StagePlacement placement;
    placement.cancel = &cancelled_;
    placement.cuda_arch = gpu_backend ? cuda_arch_list_ : "";
    placement.wall_limit = std::chrono::seconds(config_.compile_time_limit_s());
    StageOutcome compiled = runner_.Run(*ws, MakeSpec(*ws, settings, v1::STAGE_COMPILE), placement);
    durations->set_compile_ms(compiled.process.wall_ms);
    output = compiled.process.output_tail;
    if (!ApplyCompileStage(compiled, result)) {
      result.set_output_tail(output);
      return;
    }
  }

  const auto queued = Clock::now();
  auto device = gpu_backend ? gpu_slots_.Acquire() : cpu_slots_.Acquire();
  durations->set_queue_wait_ms(MsBetween(queued, Clock::now()));

  if (shutting_down()) return;
  StagePlacement placement;
  placement.cancel = &cancelled_;
  if (gpu_backend) {
    // Same arch list as the build: load_inline re-derives its flags in the
    // run stage, and different flags would make ninja rebuild on the GPU.
    placement.cuda_arch = cuda_arch_list_;
    placement.gpu = device.slot();
    result.mutable_fingerprint()->set_device_index(device.slot());
  }
  placement.wall_limit = std::chrono::seconds(settings.time_limit_s());
  placement.mask_toolchain = settings.backend() != v1::BACKEND_TRITON;
  StageOutcome ran =
      runner_.Run(*ws, MakeSpec(*ws, settings, v1::STAGE_RUN, checked.report.kernel_names), placement);
  durations->set_run_ms(ran.process.wall_ms);
  ApplyRunStage(ran, result);
  if (ran.report) {
    const static_check::CheckReport graded = GradeRunFindings(ran.report->verdicts(), anticheat);
    metrics_.RecordVerdicts(graded);
    ApplyRunFindings(graded, result);
  }
  output += ran.process.output_tail;
  result.set_output_tail(output);
}

}  // namespace kbox
