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
#include "worker/elapsed.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;

// How often a quarantined GPU is probed, and how long one probe may take
// (CUDA initialisation on a cold driver takes seconds; a hung one, forever).
constexpr auto kDeviceProbeInterval = std::chrono::seconds(30);
constexpr auto kDeviceProbeLimit = std::chrono::seconds(120);

// A compile worker's zygote (preforked_compile_stage): metrics read the
// "compile" prefix (DeviceOfSlot).
std::string CompileZygoteSlot(uint32_t worker) { return "compile" + std::to_string(worker); }

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

}  // namespace kbox
