#include "daemon/evaluator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <system_error>

#include "daemon/config_loader.h"
#include "daemon/result_mapper.h"
#include "daemon/static_verdicts.h"
#include "daemon/version.h"
#include "policy/request_policy.h"
#include "worker/process_group_pause.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;

// How often a quarantined GPU is probed, and how long one probe may take
// (CUDA initialisation on a cold driver takes seconds; a hung one, forever).
constexpr auto kDeviceProbeInterval = std::chrono::seconds(30);
constexpr auto kDeviceProbeLimit = std::chrono::seconds(120);
// How long a holder's quiet waits for a stage setting up to stop: a thread
// stops on its way back from the kernel, and the CUDA driver's ioctls (a
// context's creation, pinning host memory) may keep one there for a while
// (the H100 run with 1 s saw 10 of 37 stages not stopped). Past it the stage
// is continued and waited for instead.
constexpr auto kSetUpPauseLimit = std::chrono::milliseconds(5000);

// A compile worker's zygote (preforked_compile_stage): metrics read the
// "compile" prefix (DeviceOfSlot).
std::string CompileZygoteSlot(uint32_t worker) { return "compile" + std::to_string(worker); }

double MsBetween(Evaluator::Clock::time_point a, Evaluator::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A TurnGate timestamp (steady clock nanoseconds) as a time point.
Evaluator::Clock::time_point AtNs(int64_t ns) {
  return Evaluator::Clock::time_point(std::chrono::nanoseconds(ns));
}

// How long a stage had its device: from when the device began waiting for
// it (its set-up, with no other stage ready; else the turn) to the turn
// handed over (the judge's DONE_WITH_DEVICE, when `hand_over` is on) or, without that,
// now (the stage's end).
double TurnHeldMs(const TurnGate& gate) {
  const int64_t done = gate.done_with_device_ns();
  return std::max(0.0, MsBetween(AtNs(gate.device_time_from_ns()),
                                 done != 0 ? AtNs(done) : Evaluator::Clock::now()));
}

// How long the device, free and due to this stage, waited for its set-up
// to end: turns go only to stages done setting up (device_turns.h).
double TurnSetUpWaitMs(const TurnGate& gate) {
  const int64_t granted = gate.granted_ns()->load();
  if (granted == 0) return 0.0;
  return std::max(0.0, MsBetween(AtNs(gate.device_time_from_ns()), AtNs(granted)));
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

// A tool kboxd never runs, identified by what a package upgrade changes: its
// resolved path, size and mtime. The first executable `name` in `dirs`.
std::string ToolIdentity(const std::string& name, const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    if (dir.empty()) continue;
    const fs::path path = fs::path(dir) / name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0) continue;
    std::error_code ec;
    const fs::path real = fs::canonical(path, ec);
    return (ec ? path : real).string() + " size=" + std::to_string(st.st_size) +
           " mtime=" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  }
  return "absent";
}

// Everything besides the job's own inputs that can change what a compile
// stage builds, as kboxd knows it (docs/build-cache.md): one line each.
std::string ToolchainFingerprint(const v1::DaemonConfig& config, const HostInfo& host,
                                 const HarnessSettings& harness) {
  const v1::ProbeReport& p = host.probe;
  std::string out;
  auto line = [&out](const std::string& name, const std::string& value) {
    out += name + " " + value + "\n";
  };
  line("kbox", kVersion);
  line("harness", DirectoryDigest(harness.harness_dir));
  line("python", config.sandbox().python() + " " + p.python_version());
  line("torch", p.torch_version());
  line("cuda", p.cuda_version());
  line("triton", p.triton_version());
  // The light header builds the same code from the same headers, but a
  // different translation unit could still differ bit for bit: keep apart.
  line("light_headers", config.experimental().light_headers() ? "on" : "off");
  // The PCH holds the same declarations as the header it replaces; recorded
  // anyway, for symmetry and so an audit can tell the builds apart. The
  // setting, not whether the start-up build is done: the fingerprint is
  // computed once, and builds made before it is ready are the same code.
  line("precompiled_header", PrecompiledHeaderWanted(config) ? "on" : "off");
  // Per-operator headers leave declarations out of a CUDA source's
  // translation unit, as the light header does: kept apart the same way.
  line("cuda_per_operator_headers",
       config.experimental().light_headers() && config.experimental().cuda_per_operator_headers() ? "on"
                                                                                                  : "off");
  // The stages' inherited environment picks the compilers and libraries.
  std::vector<std::string> path_dirs;
  std::string cuda_home, cuda_path;
  for (const std::string& kv : InheritedEnvironment(harness)) {
    line("env", kv);
    const std::string value = kv.substr(kv.find('=') + 1);
    if (kv.starts_with("PATH=")) {
      for (size_t begin = 0; begin <= value.size();) {
        size_t end = value.find(':', begin);
        if (end == std::string::npos) end = value.size();
        path_dirs.push_back(value.substr(begin, end - begin));
        begin = end + 1;
      }
    }
    if (kv.starts_with("CUDA_HOME=")) cuda_home = value;
    if (kv.starts_with("CUDA_PATH=")) cuda_path = value;
  }
  // torch's cpp_extension runs `c++` and ninja from PATH, and nvcc from
  // CUDA_HOME (else CUDA_PATH, PATH, /usr/local/cuda).
  line("tool c++", ToolIdentity("c++", path_dirs));
  line("tool ninja", ToolIdentity("ninja", path_dirs));
  std::vector<std::string> nvcc_dirs;
  if (!cuda_home.empty()) nvcc_dirs.push_back(cuda_home + "/bin");
  if (!cuda_path.empty()) nvcc_dirs.push_back(cuda_path + "/bin");
  nvcc_dirs.insert(nvcc_dirs.end(), path_dirs.begin(), path_dirs.end());
  nvcc_dirs.push_back("/usr/local/cuda/bin");
  line("tool nvcc", ToolIdentity("nvcc", nvcc_dirs));
  return out;
}

// Each device once per lane: the stage holding the device's turn, and each
// stage that may prepare ahead of it. Devices first, so jobs spread over the
// devices before two share one.
std::vector<uint32_t> Lanes(const std::vector<uint32_t>& devices, uint32_t ahead) {
  std::vector<uint32_t> lanes;
  for (uint32_t k = 0; k <= ahead; ++k) lanes.insert(lanes.end(), devices.begin(), devices.end());
  return lanes;
}

std::vector<uint32_t> Indices(uint32_t count) {
  std::vector<uint32_t> ids(count);
  for (uint32_t i = 0; i < count; ++i) ids[i] = i;
  return ids;
}

}  // namespace

Evaluator::LaneName::~LaneName() {
  if (!owner_) return;
  std::lock_guard lock(owner_->lane_mu_);
  owner_->lanes_in_use_[device_] &= ~(1u << index_);
}

Evaluator::LaneName Evaluator::TakeLane(const std::string& device) {
  std::lock_guard lock(lane_mu_);
  uint32_t& used = lanes_in_use_[device];
  uint32_t index = 0;
  while (used & (1u << index)) ++index;  // At most 1 + run_stages_ahead leases per device.
  used |= 1u << index;
  return LaneName(this, device, index);
}

Evaluator::Evaluator(const v1::DaemonConfig& config, HostInfo host, std::vector<uint32_t> gpus,
                     const SandboxRuntime& sandbox, Metrics& metrics, BuildCache* build_cache)
    : config_(config),
      host_(std::move(host)),
      sandbox_(sandbox),
      metrics_(metrics),
      runner_(HarnessSettings{.python = config.sandbox().python(),
                              .harness_dir = config.sandbox().harness_dir(),
                              .max_output_bytes = config.limits().max_output_bytes(),
                              .build_jobs = std::max(1u, config.scheduling().compile_workers())},
              sandbox.settings),
      compile_slots_(SlotPool::Anonymous(config.scheduling().compile_workers())),
      cpu_slots_(Lanes(Indices(config.scheduling().cpu_run_slots()), RunStagesAhead(config, /*gpu=*/false))),
      gpu_slots_(Lanes(gpus, RunStagesAhead(config, /*gpu=*/true))),
      device_health_(
          gpu_slots_,
          [this](uint32_t gpu) {
            return ProbeGpu(config_.sandbox().python(), config_.sandbox().harness_dir(),
                            InheritedEnvironment(runner_.settings()), gpu, kDeviceProbeLimit);
          },
          kDeviceProbeInterval,
          [this](uint32_t gpu, bool healthy, const std::string&) {
            if (!healthy) metrics_.RecordQuarantine(gpu);
          }),
      gpus_(gpus),
      cuda_arch_list_(ArchList(host_, gpus)),
      build_cache_(build_cache) {
  // The tier's builds are keyed as the cache's, cache or no cache here.
  if (build_cache_ || !config_.scheduling().compile_endpoint().empty()) {
    toolchain_ = ToolchainFingerprint(config_, host_, runner_.settings());
  }
  if (config_.caches().reference_cache_enabled()) {
    reference_cache_.emplace(
        ReferenceCache::Options{.max_entries = config_.caches().reference_cache_max_entries(),
                                .ttl = std::chrono::seconds(config_.caches().reference_cache_ttl_s())});
    reference_harness_ = std::string(kVersion) + " " + DirectoryDigest(config_.sandbox().harness_dir());
  }
  if (config_.experimental().preforked_run_stage() || config_.experimental().preforked_compile_stage())
    EnablePrefork();
  // Job ids: a random per-daemon prefix plus a counter, so ids from a
  // restarted daemon never collide with old workspaces or logs.
  std::random_device rd;
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%08x", rd());
  job_id_prefix_ = prefix;
}

void Evaluator::EnablePrefork() {
  const std::string flags =
      config_.experimental().preforked_run_stage() && config_.experimental().preforked_compile_stage()
          ? "preforked_run_stage and preforked_compile_stage"
      : config_.experimental().preforked_run_stage() ? "preforked_run_stage"
                                                     : "preforked_compile_stage";
  if (!sandbox_.settings) {
    std::cerr << "kboxd: " << flags << " ignored: it needs the sandbox" << std::endl;
    return;
  }
  const fs::path library =
      fs::path(sandbox_.settings->binary).parent_path() / "libkbox_sandbox_enter.so";
  if (!fs::exists(library)) {
    std::cerr << "kboxd: " << flags << " ignored: " << library.string() << " is missing" << std::endl;
    return;
  }
  runner_.EnablePrefork(library.string(), [this](const std::string& slot, ZygoteEvent event) {
    metrics_.RecordZygoteEvent(slot, event);
  });
  if (config_.experimental().preforked_run_stage()) {
    // Every GPU lane's first zygote now, so that no early job waits for a
    // torch import; CPU lanes start theirs at their first stage. After that
    // each stage's successor starts beside it (single use, docs/prefork.md).
    std::vector<std::string> lanes;
    for (uint32_t g : gpus_) {
      for (uint32_t k = 0; k <= RunStagesAhead(config_, /*gpu=*/true); ++k) {
        lanes.push_back(LaneName::Of("gpu" + std::to_string(g), k));
      }
    }
    runner_.PrestartZygotes(lanes, /*run_stages=*/true);
    std::cerr << "kboxd: run stages start from single-use pre-forked zygotes, one per device lane"
              << std::endl;
  }
  if (config_.experimental().preforked_compile_stage()) {
    // Started now, not at each worker's first build: otherwise the first
    // wave of builds would wait for as many torch imports at once.
    std::vector<std::string> slots;
    for (uint32_t i = 0; i < config_.scheduling().compile_workers(); ++i)
      slots.push_back(CompileZygoteSlot(i));
    runner_.PrestartZygotes(slots, /*run_stages=*/false);
    std::cerr << "kboxd: compile stages start from a pre-forked zygote per compile worker"
              << std::endl;
  }
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
  spec.set_speedup_precision(s.speedup_precision());
  spec.set_warmup_calls(config_.limits().warmup_calls());
  spec.set_max_log_bytes(config_.limits().max_log_bytes());
  // The light header only changes how long a build takes, never what runs
  // (docs/compile-speed.md); the run stage only loads what was built.
  if (stage == v1::STAGE_COMPILE) {
    spec.set_light_headers(config_.experimental().light_headers());
    spec.set_cuda_per_operator_headers(config_.experimental().light_headers() &&
                                       config_.experimental().cuda_per_operator_headers());
  }
  // pch_ is set only when light_headers is on (PrecompiledHeaderWanted).
  if (stage == v1::STAGE_COMPILE && pch_ != nullptr) {
    spec.set_pch_dir(pch_->dir());  // Empty until its start-up build is done.
  }
  if (stage == v1::STAGE_RUN) {
    spec.set_exchange_arena_bytes(uint64_t{config_.scheduling().exchange_arena_mib()} << 20);
    // The harness checks that one of them launched (run.kernel-not-launched).
    for (const std::string& name : candidate_kernels) spec.add_candidate_kernels(name);
    if (!sandbox_.launch_probe_library.empty() && s.backend() != v1::BACKEND_CPU) {
      spec.set_launch_probe_library(sandbox_.launch_probe_library);
    }
  }
  if (stage == v1::STAGE_RUN && sandbox_.settings) {
    spec.set_strict_seccomp_bpf(sandbox_.strict_filter_path);
    if (s.backend() == v1::BACKEND_TRITON) spec.set_ptxas_path(sandbox_.settings->ptxas_path);
  }
  return spec;
}

WorkspaceOptions Evaluator::JobWorkspaceOptions() const {
  WorkspaceOptions options;
  options.keep = config_.store().keep_job_dirs();
  if (sandbox_.settings) {
    options.owner_uid = sandbox_.settings->uid;
    options.owner_gid = sandbox_.settings->gid;
  }
  if (sandbox_.scratch_capped) options.scratch_bytes = config_.limits().job_scratch_bytes();
  return options;
}

StageOutcome Evaluator::RunCompileStage(const JobWorkspace& ws, const v1::EffectiveSettings& settings,
                                        const std::string& cuda_arch, bool report_sources,
                                        uint32_t worker, const std::atomic<bool>& cancel) {
  StagePlacement placement;
  placement.cancel = &cancel;
  placement.cuda_arch = cuda_arch;
  placement.wall_limit = std::chrono::seconds(config_.limits().compile_time_limit_s());
  if (config_.experimental().preforked_compile_stage()) placement.zygote_slot = CompileZygoteSlot(worker);
  v1::StageSpec spec = MakeSpec(ws, settings, v1::STAGE_COMPILE);
  spec.set_report_extension_sources(report_sources);
  return runner_.Run(ws, spec, placement);
}

std::string Evaluator::OfferCachedReference(const v1::EvaluateRequest& request,
                                            const v1::EffectiveSettings& settings,
                                            std::optional<uint32_t> gpu, v1::StageSpec& spec) {
  if (!reference_cache_ || !settings.measure_performance() || settings.performance_trials() == 0) {
    return "";
  }
  const v1::ProbeReport& probe = host_.probe;
  // The CPU's figure also depends on how many cores the stage may use.
  std::string device =
      "cpu " + host_.cpu_model + " cores=" + std::to_string(config_.limits().job_cpu_cores());
  if (gpu) {
    for (const auto& g : probe.gpus()) {
      if (g.index() == *gpu) device = g.name() + " sm_" + g.compute_capability();
    }
  }
  const std::string key = ReferenceCacheKey(
      ReferenceKeyInputs{.reference_source = request.reference_source(),
                         .backend = v1::Backend_Name(settings.backend()),
                         .precision = v1::Precision_Name(settings.precision()),
                         .performance_trials = settings.performance_trials(),
                         .warmup_calls = config_.limits().warmup_calls(),
                         .device = device,
                         .driver = probe.driver_version(),
                         .cuda = probe.cuda_version(),
                         .torch = probe.torch_version(),
                         .python = config_.sandbox().python() + " " + probe.python_version(),
                         .harness = reference_harness_});
  spec.set_live_recheck_speedup(config_.caches().live_recheck_speedup());
  spec.set_reference_cache_max_relative_ci(config_.caches().reference_cache_max_relative_ci());
  spec.set_fresh_reference_timing(request.fresh_reference_timing());
  // A fresh measurement is asked for: the entry is not even looked at (the
  // live figure then replaces it).
  if (!request.fresh_reference_timing()) {
    if (auto entry = reference_cache_->Lookup(key, Clock::now())) {
      *spec.mutable_cached_reference() = std::move(*entry);
    }
  }
  return key;
}

void Evaluator::RecordReferenceTiming(const std::string& key, const v1::EvaluateResult& result,
                                      const v1::StageReport* report) {
  if (key.empty() || result.status() != v1::CORRECT || !result.has_reference_timing()) return;
  const bool hit = result.reference_timing().source() == "cache";
  metrics_.RecordReferenceCacheLookup(hit);
  if (hit || report == nullptr || !report->has_reference_for_cache()) return;
  for (const auto& v : result.verdicts()) {
    if (v.severity() == v1::Verdict::REJECT) return;
  }
  reference_cache_->Insert(key, report->reference_for_cache(), Clock::now());
  metrics_.SetReferenceCacheEntries(reference_cache_->size());
}

v1::EvaluateResult Evaluator::Evaluate(const v1::EvaluateRequest& request,
                                       const v1::EffectiveSettings& settings,
                                       const static_check::AnticheatProfile& anticheat,
                                       Clock::time_point received, const std::string& job_id,
                                       const std::string& tenant, bool* held_back,
                                       std::shared_ptr<JobCancel> cancel) {
  v1::EvaluateResult result;
  result.set_job_id(job_id.empty() ? NextJobId() : job_id);
  if (!cancel) cancel = cancels_.Open(result.job_id());
  result.set_client_request_id(request.client_request_id());
  *result.mutable_settings() = settings;
  *result.mutable_fingerprint() = HostFingerprint(host_);
  result.mutable_fingerprint()->set_device_name("cpu");
  const v1::EvaluateResult fresh = result;
  JobTrace trace;
  bool not_started = false;
  for (uint32_t attempt = 0;; ++attempt) {
    // A retry gets its own workspace (and so its own cgroups): the failed
    // attempt's may be kept (keep_job_dirs) for a post-mortem.
    const std::string workspace =
        attempt == 0 ? result.job_id() : result.job_id() + "-retry" + std::to_string(attempt);
    try {
      RunJob(request, settings, anticheat, tenant, workspace, *cancel, result, trace, not_started);
    } catch (const std::exception& e) {
      result.set_status(v1::INFRA_ERROR);
      result.set_message(std::string("kboxd internal error: ") + e.what());
      trace.cause.infra = InfraCause::kInternal;
    }
    if (attempt >= config_.scheduling().infra_retries())
      CompilerKillOnLastAttemptIsTheCandidates(result, trace.cause);
    // Ended by its client's cancel; a job that had reached its own end
    // before the cancel took hold keeps that result.
    if (cancel->by_client.load() && result.status() == v1::INFRA_ERROR &&
        trace.cause.infra == InfraCause::kCancelled) {
      result.set_status(v1::CANCELLED);
      result.set_message("cancelled by its client (DELETE /v1/jobs/" + result.job_id() +
                         "): its stages were stopped");
    }
    // A failure the device may explain is final: its GPU's probe has run
    // (evaluator's run stage), and the same job would meet the same device.
    const bool gpu_suspect = trace.cause.device_suspect && settings.backend() != v1::BACKEND_CPU;
    // A job held back by a drain is not retried: it runs after the restart.
    if (not_started || result.status() != v1::INFRA_ERROR || !RetryableInfraCause(trace.cause.infra) ||
        gpu_suspect || attempt >= config_.scheduling().infra_retries() || cancel->stop.load()) {
      // kbox's own failure, final: the operator's log says why.
      if (result.status() == v1::INFRA_ERROR && !not_started) {
        std::cerr << "kboxd: job " << result.job_id() << " ended INFRA_ERROR ("
                  << InfraCauseName(trace.cause.infra) << "): " << result.message() << std::endl;
      }
      break;
    }
    std::cerr << "kboxd: job " << result.job_id() << " ended INFRA_ERROR ("
              << InfraCauseName(trace.cause.infra) << "): " << result.message()
              << "; running it again" << std::endl;
    metrics_.RecordInfraRetry(trace.cause.infra);
    // Nothing of the failed attempt reaches the answer.
    result = fresh;
    trace = JobTrace{};
  }
  result.mutable_durations()->set_total_ms(MsBetween(received, Clock::now()));
  SanitizeResultText(result, 2 * static_cast<size_t>(config_.limits().max_log_bytes()));
  FinalizeRewardable(result);
  if (held_back) *held_back = not_started;
  // A held-back job is not a result yet: it runs again after the restart.
  if (!not_started) metrics_.RecordJob(result, trace, tenant);
  return result;
}

bool Evaluator::Cancel(const std::string& job_id) {
  if (!cancels_.Cancel(job_id)) return false;
  WakeQueuedJobs();
  return true;
}

void Evaluator::CancelAll() {
  cancels_.CancelAll();
  WakeQueuedJobs();
}

void Evaluator::WakeQueuedJobs() {
  // Jobs queued for a worker or a lane (a quarantined GPU's too) look at
  // their flags again; the cancelled ones leave the queue.
  compile_slots_.WakeWaiters();
  cpu_slots_.WakeWaiters();
  gpu_slots_.WakeWaiters();
}

void Evaluator::PublishGauges() const {
  metrics_.SetQueueDepth("compile", compile_slots_.waiting());
  metrics_.SetQueueDepth("run_cpu", cpu_slots_.waiting());
  metrics_.SetQueueDepth("run_gpu", gpu_slots_.waiting());
  metrics_.SetCompileSlots(compile_slots_.busy(), compile_slots_.idle());
  // Slots, not lanes: a slot is busy while any stage holds or prepares for it.
  size_t cpu_busy = 0;
  for (uint32_t slot = 0; slot < config_.scheduling().cpu_run_slots(); ++slot)
    cpu_busy += cpu_slots_.IsBusy(slot);
  metrics_.SetRunSlots("cpu", cpu_busy, config_.scheduling().cpu_run_slots() - cpu_busy, 0);
  for (uint32_t gpu : gpus_) {
    const bool busy = gpu_slots_.IsBusy(gpu);
    const bool healthy = device_health_.Healthy(gpu);
    metrics_.SetRunSlots(DeviceLabel(gpu), busy, !busy && healthy, !busy && !healthy);
    metrics_.SetDeviceHealthy(DeviceLabel(gpu), healthy);
  }
}

bool Evaluator::HasServingRunSlot(bool cpu, bool gpu) const {
  if (cpu && cpu_slots_.size() > 0) return true;
  if (gpu) {
    for (uint32_t g : gpus_) {
      if (device_health_.Healthy(g)) return true;
    }
  }
  return false;
}

void Evaluator::RunJob(const v1::EvaluateRequest& request, const v1::EffectiveSettings& settings,
                       const static_check::AnticheatProfile& anticheat, const std::string& tenant,
                       const std::string& workspace, JobCancel& cancel, v1::EvaluateResult& result,
                       JobTrace& trace, bool& held_back) {
  // Static checks first: a rejected candidate is never written to disk,
  // compiled or run. The verdicts of one that goes on ride along.
  const static_check::CheckInput check_input{.candidate_source = request.candidate_source(),
                                             .reference_source = request.reference_source(),
                                             .backend = TaskBackendOf(settings.backend()),
                                             .precision = TaskPrecisionOf(settings.precision())};
  const StaticPhase checked = RunStaticCheck(check_input, anticheat);
  result.mutable_durations()->set_static_ms(checked.ms);
  trace.checked = checked.ran;
  if (checked.ran) metrics_.RecordStaticCheck(checked.report, checked.ms / 1000.0);
  if (!ApplyStaticCheck(checked.report, result)) return;
  // C++ the static checks could not read as text: the compile stage reports
  // what its load_inline/load calls really received, and those strings are
  // checked before anything runs (docs/anticheat.md). Such a job never uses
  // the build cache: a restored build comes with no sources to check.
  const bool deferred = !checked.report.deferred.empty();
  std::vector<std::string> kernel_names = checked.report.kernel_names;

  const WorkspaceOptions options = JobWorkspaceOptions();
  auto ws = JobWorkspace::Create(config_.store().work_dir(), workspace, request.reference_source(),
                                 request.candidate_source(), options);
  if (!ws) {
    result.set_status(v1::INFRA_ERROR);
    result.set_message("cannot prepare the job directory: " + ws.error().message);
    trace.cause.infra = InfraCause::kWorkspace;
    return;
  }
  const bool gpu_backend = settings.backend() != v1::BACKEND_CPU;
  const std::string compile_arch = gpu_backend ? cuda_arch_list_ : "";
  auto* durations = result.mutable_durations();
  std::string output;

  // Draining: a job that has not begun compiling or running yet stays
  // unstarted (checked after each wait, since draining may begin during it).
  bool began = false;
  // A job its client cancelled is not kept for the restart: it ends here.
  auto hold_back = [&] {
    if (began || !stop_starting_.load() || cancel.by_client.load()) return false;
    result.set_status(v1::INFRA_ERROR);
    result.set_message("kboxd is draining (shutting down) and the job did not start; retry it");
    trace.cause.infra = InfraCause::kCancelled;
    held_back = true;
    return true;
  };
  // Cancelled by its client or by kboxd's shutdown deadline: ends before
  // the next thing it would start (Evaluate names which).
  auto shutting_down = [&] {
    if (!cancel.stop.load()) return false;
    result.set_status(v1::INFRA_ERROR);
    result.set_message("kboxd is shutting down; retry the job");
    trace.cause.infra = InfraCause::kCancelled;
    return true;
  };

  // The build cache (docs/build-cache.md): a verified build of the same
  // inputs replaces the compile stage. Jobs with the same key wait in
  // Acquire while one of them compiles (never holding a compile slot).
  std::optional<BuildCache::Flight> flight;
  std::string cache_key;
  if ((build_cache_ || tier_) && !deferred) {
    cache_key = BuildCacheKey(BuildKeyInputs{.candidate_source = request.candidate_source(),
                                             .reference_source = request.reference_source(),
                                             .backend = v1::Backend_Name(settings.backend()),
                                             .precision = v1::Precision_Name(settings.precision()),
                                             .cuda_arch_list = compile_arch,
                                             .toolchain = toolchain_});
  }
  bool restored = false;
  if (build_cache_ && !deferred) {
    const auto looked_up = Clock::now();
    flight.emplace(build_cache_->Acquire(cache_key));
    if (hold_back() || shutting_down()) return;
    if (flight->role() == BuildCache::Flight::Role::kHit) {
      // On failure the build dir is empty again and the job compiles.
      const auto error = build_cache_->Restore(*flight->entry(), ws->build_dir(),
                                               options.owner_uid, options.owner_gid);
      if (!error) {
        restored = true;
        durations->set_compile_ms(MsBetween(looked_up, Clock::now()));
        output = flight->entry()->compile_output();
        result.set_build_cache_hit(true);
        trace.compiled = true;
      }
      flight->entry().reset();  // Unpinned: evictable again.
    }
    metrics_.RecordBuildCacheLookup(restored);
  }
  // The compile tier (compile_tier.cc): a build from there is written into
  // the build dir as a restored one is, and cached here as a local one.
  // A job whose sources are checked as its compile stage reports them
  // builds here, where that report is read.
  bool built_on_tier = false;
  if (!restored && tier_ && !deferred) {
    if (hold_back() || shutting_down()) return;
    began = true;
    switch (BuildOnTier(request, compile_arch, cache_key, *ws, cancel, options.owner_uid, options.owner_gid,
                        result, output)) {
      case TierOutcome::kEnded:
        trace.compiled = true;
        return;
      case TierOutcome::kBuilt:
        built_on_tier = true;
        trace.compiled = true;
        if (flight) flight->Finish(build_cache_->Insert(cache_key, ws->build_dir(), output).stored());
        break;
      case TierOutcome::kFallback:
        break;
    }
  }
  if (!restored && !built_on_tier) {
    auto compile_slot = compile_slots_.Acquire(tenant, cancel.stop);
    if (hold_back() || shutting_down()) return;
    began = true;
    StageOutcome compiled =
        RunCompileStage(*ws, settings, compile_arch, deferred, compile_slot->slot(), cancel.stop);
    durations->set_compile_ms(compiled.process.wall_ms);
    trace.compile_cpu_ms = compiled.process.cpu_ms;
    output = compiled.process.output_tail;
    trace.compiled = true;
    if (!ApplyCompileStage(compiled, result, &trace.cause)) {
      // Not cached: a failed compile's result is its log, not a build (the
      // flight ends uncached; jobs waiting for it compile on their own).
      result.set_output_tail(output);
      return;
    }
    if (deferred) {
      const static_check::CheckReport read =
          CheckCompiledSources(check_input, compiled.report ? &*compiled.report : nullptr, anticheat);
      metrics_.RecordVerdicts(read);
      kernel_names = read.kernel_names;
      if (!ApplyCompiledSources(read, result)) return;
    }
    if (flight) {
      const bool cached = ws->OnlyBuildDirWritten() &&
                          build_cache_->Insert(cache_key, ws->build_dir(), output).stored();
      flight->Finish(cached);
    }
  }
  flight.reset();

  const auto queued = Clock::now();
  SlotPool& lanes = gpu_backend ? gpu_slots_ : cpu_slots_;
  DeviceTurns& turns = gpu_backend ? gpu_turns_ : cpu_turns_;
  StageOutcome ran;
  std::string reference_key;
  // A stage prepared ahead whose turn was withdrawn (its GPU left service
  // while it waited) queues again for a lane.
  for (;;) {
    auto device = lanes.Acquire(tenant, cancel.stop);
    const double lane_wait_ms = MsBetween(queued, Clock::now());
    durations->set_queue_wait_ms(lane_wait_ms);
    trace.queued = true;
    if (hold_back() || shutting_down()) return;
    const uint32_t slot = device->slot();

    const std::string device_name = (gpu_backend ? "gpu" : "cpu") + std::to_string(slot);
    const LaneName lane = TakeLane(device_name);
    StagePlacement placement;
    placement.cancel = &cancel.stop;
    if (gpu_backend) {
      // Same arch list as the build: load_inline re-derives its flags in the
      // run stage, and different flags would make ninja rebuild on the GPU.
      placement.cuda_arch = cuda_arch_list_;
      placement.gpu = slot;
      result.mutable_fingerprint()->set_device_index(slot);
    }
    // Each lane has its own zygote: a zygote serves one stage at a time.
    if (config_.experimental().preforked_run_stage()) placement.zygote_slot = lane.name();
    placement.wall_limit = std::chrono::seconds(settings.time_limit_s());
    placement.mask_toolchain = settings.backend() != v1::BACKEND_TRITON;
    v1::StageSpec run_spec = MakeSpec(*ws, settings, v1::STAGE_RUN, kernel_names);
    reference_key = OfferCachedReference(
        request, settings, gpu_backend ? std::optional<uint32_t>(slot) : std::nullopt, run_spec);

    // The device's turn (docs/run-stages-ahead.md). With stages ahead, the
    // stage starts now and its judge waits on the gate before the
    // candidate's code loads; the turn comes when the job ahead has ended
    // (and its device probe, if any, passed).
    // `turn` before `gate`: the gate's notes' reader calls into the ticket,
    // and the gate (stopping its reader) goes first however the scope ends.
    std::optional<DeviceTurns::Ticket> turn;
    std::unique_ptr<TurnGate> gate;
    const auto gate_failed = [&](const std::string& error) {
      result.set_status(v1::INFRA_ERROR);
      result.set_message("cannot prepare the job's device turn: " + error);
      trace.cause.infra = InfraCause::kWorkspace;
    };
    // The judge's own directory, fresh for every attempt (a stage queued
    // again, one run again): its seed file and its FIFOs are made in it with
    // O_EXCL by kboxd, where nothing the job ran can have put anything.
    const std::optional<uid_t> judge_uid =
        sandbox_.settings ? std::optional<uid_t>(sandbox_.settings->judge_uid) : std::nullopt;
    const std::optional<gid_t> judge_gid =
        sandbox_.settings ? std::optional<gid_t>(sandbox_.settings->judge_gid) : std::nullopt;
    fs::path turn_path, notes_path;
    const auto new_judge_dir = [&]() -> bool {
      auto dir = ws->CreateJudgeDir(judge_uid, judge_gid);
      if (!dir) {
        gate_failed(dir.error().message);
        return false;
      }
      placement.judge_dir = *dir;
      turn_path = *dir / "kbox_turn";
      notes_path = *dir / "kbox_turn_notes";
      return true;
    };
    if (!new_judge_dir()) return;
    // The judge's notes move its ticket: set-up over, quiet asked, quiet over.
    const auto open_notes = [&] {
      TurnGate* const g = gate.get();
      return gate->OpenNotes(notes_path, judge_uid, judge_gid,
                             [&turn, g](v1::DeviceTurnNote note) {
        if (note == v1::SET_UP_DONE) {
          turn->SetUpDone();
        } else if (note == v1::QUIET_ASKED) {
          turn->AskQuiet([g] { g->GiveQuiet(); });
        } else if (note == v1::QUIET_OVER) {
          turn->EndQuiet();
        } else if (note == v1::DONE_WITH_DEVICE) {
          // Done with the device: its verdict needs no device probe (the
          // judge sends it only for a correct or incorrect candidate) and
          // the candidate's process is gone. If kboxd still finds something
          // to probe for at the stage's end, the probe runs beside the next
          // holder's correctness trials; the next holder's timing waits for
          // this stage to leave (device_turns.h).
          turn->HandOver();
        }
      });
    };
    const uint32_t stages_ahead = RunStagesAhead(config_, gpu_backend);
    if (stages_ahead > 0) {
      gate = std::make_unique<TurnGate>();
      if (auto error = gate->Open(turn_path, judge_uid, judge_gid)) {
        gate_failed(*error);
        return;
      }
      run_spec.set_device_turn_path(turn_path.string());
      run_spec.set_device_notes_path(notes_path.string());
      run_spec.set_hand_over_turn(true);
      placement.turn_granted_ns = gate->granted_ns();
      // time_limit_s is the candidate's: it counts once the judge's set-up
      // is over too, which has its own limit (a busy host's slow start).
      placement.set_up_done_ns = gate->set_up_done_ns();
      placement.turn_due_ns = gate->due_ns();
      placement.set_up_limit = std::chrono::seconds(config_.limits().run_set_up_limit_s());
      // Each stage ahead may run to the longest time limit, plus its probe.
      placement.turn_wait_limit =
          std::chrono::seconds((config_.limits().max_time_limit_s() + 60) * stages_ahead);
    }
    // A holder's quiet pauses this stage while it sets up, rather than
    // waiting for it (device_turns.h).
    const auto pausable = std::make_shared<PausableGroup>();
    DeviceTurns::Pauser pauser;
    if (gate) {
      placement.pausable = pausable.get();
      const std::optional<uint32_t> metric_gpu =
          gpu_backend ? std::optional<uint32_t>(slot) : std::nullopt;
      pauser.pause = [this, pausable, metric_gpu, job_id = result.job_id()] {
        std::string running;
        const bool stopped = pausable->Pause(kSetUpPauseLimit, &running);
        metrics_.RecordSetUpPause(metric_gpu, stopped);
        if (!stopped && !running.empty()) {
          std::cerr << "kboxd: job " << job_id << ": its stage setting up did not stop within "
                    << kSetUpPauseLimit.count() << " ms (" << running << "); waited for instead"
                    << std::endl;
        }
        return stopped;
      };
      pauser.resume = [pausable] { pausable->Resume(); };
    }
    const auto started = Clock::now();
    TurnGate* const gate_ptr = gate.get();
    // A stage prepared ahead counts as setting up on the device until its
    // judge's SET_UP_DONE; Enqueue waits while the holder times (device_turns.h).
    // The turn is given once: a stage run again below holds it already.
    turn.emplace(turns.Enqueue(
        slot,
        [this, gate_ptr, gpu_backend, slot] {
          if (!gate_ptr) return;
          // A GPU quarantined by the job ahead: this job goes back to the queue.
          if (gpu_backend && !device_health_.Healthy(slot)) {
            gate_ptr->Withdraw();
          } else {
            gate_ptr->Give();
          }
        },
        /*sets_up=*/gate != nullptr, std::move(pauser),
        // First in line on a free device, waiting for its own set-up: its
        // set-up limit counts from now, as from a turn.
        [gate_ptr](bool due) {
          if (gate_ptr) gate_ptr->MarkDue(due);
        }));
    if (gate) {
      if (auto error = open_notes()) {
        gate_failed(*error);
        return;
      }
    }
    ran = runner_.Run(*ws, run_spec, placement);
    if (gate && gate->withdrawn()) {
      std::cerr << "kboxd: job " << result.job_id() << ": " << device_name
                << " left service before its turn; queueing it again" << std::endl;
      continue;
    }
    double waited_ms = 0;
    if (gate && gate->given()) {
      waited_ms = std::max(0.0, MsBetween(started, AtNs(gate->device_time_from_ns())));
      durations->set_device_turn_ms(TurnHeldMs(*gate));
      durations->set_turn_set_up_wait_ms(TurnSetUpWaitMs(*gate));
    }
    double run_ms = ran.process.wall_ms - waited_ms;
    if (gate && gate->given() && ran.report && ran.report->set_up_again()) {
      // Set-up failed before the turn (the job then holding the device may
      // have filled its memory): once more, now holding the turn. The first
      // judge unlinked its FIFOs: the stage run again gets new ones (the old
      // gate goes first, unlinking what is left of its own), the turn given
      // at once, its notes to the same ticket (its quiet too).
      gate.reset();
      gate = std::make_unique<TurnGate>();
      if (!new_judge_dir()) return;
      run_spec.set_device_turn_path(turn_path.string());
      run_spec.set_device_notes_path(notes_path.string());
      auto error = gate->Open(turn_path, judge_uid, judge_gid);
      if (!error) {
        gate->Give();
        error = open_notes();
      }
      if (error) {
        gate_failed(*error);
        return;
      }
      // Given at once: the limit counts from this run's set-up's end.
      placement.turn_granted_ns = gate->granted_ns();
      placement.set_up_done_ns = gate->set_up_done_ns();
      placement.turn_due_ns = gate->due_ns();
      placement.run_again = true;
      run_spec.set_run_again(true);
      metrics_.RecordSetUpAgain(gpu_backend ? std::optional<uint32_t>(slot) : std::nullopt);
      trace.run_cpu_ms += ran.process.cpu_ms;
      ran = runner_.Run(*ws, run_spec, placement);
      run_ms += ran.process.wall_ms;
      durations->set_device_turn_ms(durations->device_turn_ms() + TurnHeldMs(*gate));
      durations->set_turn_set_up_wait_ms(durations->turn_set_up_wait_ms() + TurnSetUpWaitMs(*gate));
    }
    trace.run_cpu_ms += ran.process.cpu_ms;
    durations->set_queue_wait_ms(lane_wait_ms + waited_ms);
    durations->set_run_ms(std::max(0.0, run_ms));
    trace.ran = true;
    ApplyRunStage(ran, result, &trace.cause);
    // Timed out waiting for a turn that never came. A stage whose turn was
    // due (first in line on a free device) and whose set-up ran past its
    // limit keeps that verdict: the device was waiting on it.
    if (gate && !gate->given() && gate->due_ns()->load() == 0 &&
        ran.process.end == ProcessOutcome::End::kTimedOut) {
      result.set_status(v1::INFRA_ERROR);
      result.set_message("the job's run stage waited longer than " +
                         std::to_string(placement.turn_wait_limit.count() / 1000) +
                         " s for its turn on " + device_name + "; retry it");
      trace.cause.infra = InfraCause::kHarnessTimeout;
    }
    // A failure the device could explain (device_suspect) is an INFRA_ERROR, probed as every fault is.
    if (gpu_backend && MayHaveBrokenTheDevice(result.status())) {
      // Still holding the turn: the next job on this GPU starts only after
      // the probe passed (or finds the GPU quarantined and queues again).
      // Only kbox's own probe takes a GPU out of service, never a job's
      // failure alone, which a candidate may have brought about: the jobs
      // queued and set up for it keep their places.
      const std::string why = trace.cause.device_suspect
                                  ? "job " + result.job_id() + ": " + result.message()
                                  : "after job " + result.job_id() + " (" +
                                        v1::Status_Name(result.status()) + ")";
      const bool passed = !device_health_.CheckNow(slot, why).has_value();
      metrics_.RecordDeviceProbe(slot, passed);
    }
    break;
  }
  if (ran.report) {
    const static_check::CheckReport graded = GradeRunFindings(ran.report->verdicts(), anticheat);
    metrics_.RecordVerdicts(graded);
    ApplyRunFindings(graded, result);
  }
  RecordReferenceTiming(reference_key, result, ran.report ? &*ran.report : nullptr);
  output += ran.process.output_tail;
  result.set_output_tail(output);
}

}  // namespace kbox
