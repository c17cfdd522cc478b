#include "daemon/metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>

#include "daemon/version.h"
#include "policy/static_check/rule_catalog.h"

namespace kbox {
namespace {

const prometheus::Histogram::BucketBoundaries& SpeedupBuckets() {
  // Most candidates are slower than PyTorch; a few are much faster.
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.1, 0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 100};
  return buckets;
}

const prometheus::Histogram::BucketBoundaries& PhaseBuckets() {
  // From a static check (sub-millisecond) to a cold CUDA build (minutes).
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600};
  return buckets;
}

prometheus::Histogram::BucketBoundaries StaticCheckBuckets() {
  // The checker is linear in the source: tens of microseconds for a typical
  // candidate, up to ~100 ms for one at max_source_bytes.
  return {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3};
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The `status` label of every job status (kbox.v1.Status, lower case).
const std::vector<std::string>& StatusLabels() {
  static const std::vector<std::string> labels = [] {
    std::vector<std::string> out;
    for (int s = v1::Status_MIN; s <= v1::Status_MAX; ++s) {
      if (v1::Status_IsValid(s) && s != v1::STATUS_UNSPECIFIED) {
        out.push_back(Lower(v1::Status_Name(static_cast<v1::Status>(s))));
      }
    }
    return out;
  }();
  return labels;
}

constexpr const char* kPhases[] = {"static", "compile", "queue_wait", "run", "total"};
constexpr const char* kQueues[] = {"compile", "run_cpu", "run_gpu"};
constexpr const char* kWorkers[] = {"harness", "zygote"};
constexpr static_check::Severity kCountedSeverities[] = {
    static_check::Severity::kInfo, static_check::Severity::kSuspicious,
    static_check::Severity::kReject};

// Causes in which a stage harness died under kbox's own code or was killed
// from outside: kbox_worker_crashes_total{worker="harness"}.
bool HarnessDied(InfraCause cause) {
  return cause == InfraCause::kHarnessCrash || cause == InfraCause::kStageKilled;
}

std::vector<std::string> Devices(const MetricLabelSets& sets) {
  std::vector<std::string> out = {"cpu"};
  for (uint32_t g : sets.gpus) out.push_back(DeviceLabel(g));
  return out;
}

}  // namespace

std::string DeviceLabel(std::optional<uint32_t> gpu) {
  return gpu ? "gpu" + std::to_string(*gpu) : "cpu";
}

std::string DeviceOfSlot(const std::string& slot) {
  // A lane's zygote is named after its device plus ".N" (run_stages_ahead);
  // a compile worker's is "compileN" (no device: "compile").
  if (slot.starts_with("compile")) return "compile";
  return slot.starts_with("gpu") ? slot.substr(0, slot.find('.')) : "cpu";
}

std::string BackendLabel(v1::Backend backend) {
  std::string name = Lower(v1::Backend_Name(backend));
  constexpr std::string_view kPrefix = "backend_";
  return name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name;
}

Metrics::Metrics(const MetricLabelSets& sets)
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_total_(prometheus::BuildCounter()
                      .Name("kbox_jobs_total")
                      .Help("Evaluation jobs finished, by backend and status.")
                      .Register(*registry_)),
      token_jobs_total_(prometheus::BuildCounter()
                            .Name("kbox_token_jobs_total")
                            .Help("Evaluation jobs finished, by the API token that submitted them "
                                  "and status (only with api_tokens_file).")
                            .Register(*registry_)),
      gpu_info_(prometheus::BuildGauge()
                    .Name("kbox_gpu_info")
                    .Help("1 per GPU in use, labelled with its index, UUID and model as NVIDIA's "
                          "DCGM exporter labels them: join on UUID.")
                    .Register(*registry_)),
      phase_seconds_(prometheus::BuildHistogram()
                         .Name("kbox_job_phase_duration_seconds")
                         .Help("Wall-clock duration of each phase a job went through, by backend "
                               "(static, compile, queue_wait, run; total: received to result).")
                         .Register(*registry_)),
      responses_total_(prometheus::BuildCounter()
                           .Name("kbox_http_responses_total")
                           .Help("HTTP responses sent, by status class.")
                           .Register(*registry_)),
      anticheat_verdicts_total_(prometheus::BuildCounter()
                                    .Name("kbox_anticheat_verdicts_total")
                                    .Help("Anti-cheat findings (static checks and run stages), by "
                                          "rule and severity.")
                                    .Register(*registry_)),
      infra_errors_total_(prometheus::BuildCounter()
                              .Name("kbox_infra_errors_total")
                              .Help("Jobs that ended as INFRA_ERROR (kbox's own failure), by cause.")
                              .Register(*registry_)),
      sandbox_violations_total_(prometheus::BuildCounter()
                                    .Name("kbox_sandbox_violations_total")
                                    .Help("Candidates stopped by a limit of the sandbox, by kind.")
                                    .Register(*registry_)),
      worker_crashes_total_(prometheus::BuildCounter()
                                .Name("kbox_worker_crashes_total")
                                .Help("kbox worker processes that died unexpectedly: a stage "
                                      "harness without a report, or a pre-forked zygote.")
                                .Register(*registry_)),
      infra_retries_total_(prometheus::BuildCounter()
                               .Name("kbox_infra_retries_total")
                               .Help("Job attempts that ended INFRA_ERROR and were run again "
                                     "(infra_retries), by cause.")
                               .Register(*registry_)),
      remote_builds_total_(prometheus::BuildCounter()
                               .Name("kbox_remote_builds_total")
                               .Help("Run node: jobs whose build was asked of the compile tier, "
                                     "by outcome (built, failed, fallback).")
                               .Register(*registry_)),
      builds_served_total_(prometheus::BuildCounter()
                               .Name("kbox_builds_served_total")
                               .Help("Compile node: POST /v1/builds answered, by outcome "
                                     "(built, cached, failed, refused).")
                               .Register(*registry_)),
      zygote_restarts_total_(prometheus::BuildCounter()
                                 .Name("kbox_zygote_restarts_total")
                                 .Help("Pre-forked zygotes started again after one died, by device.")
                                 .Register(*registry_)),
      zygote_start_failures_total_(prometheus::BuildCounter()
                                       .Name("kbox_zygote_start_failures_total")
                                       .Help("Pre-forked zygotes that did not start, by device.")
                                       .Register(*registry_)),
      device_quarantines_total_(prometheus::BuildCounter()
                                    .Name("kbox_device_quarantines_total")
                                    .Help("Times a GPU was taken out of service after a failure "
                                          "that a broken device explains.")
                                    .Register(*registry_)),
      device_probes_total_(prometheus::BuildCounter()
                               .Name("kbox_device_probes_total")
                               .Help("Device probes run after a GPU job that ended in a fault of "
                                     "its own, by device and result (pass, fail).")
                               .Register(*registry_)),
      set_up_again_total_(prometheus::BuildCounter()
                              .Name("kbox_set_up_again_total")
                              .Help("Run stages prepared ahead whose set-up failed before their "
                                    "device turn and were run again holding it, by device.")
                              .Register(*registry_)),
      set_up_pauses_total_(prometheus::BuildCounter()
                               .Name("kbox_set_up_pauses_total")
                               .Help("Run stages setting up ahead that another job's timing "
                                     "paused (result stopped) or, failing to stop, waited for "
                                     "(not_stopped), by device.")
                               .Register(*registry_)),
      stage_cpu_seconds_total_(prometheus::BuildCounter()
                                   .Name("kbox_stage_cpu_seconds_total")
                                   .Help("CPU time of compile and run stages' sandboxed processes "
                                         "(user + system), by backend and stage.")
                                   .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("kbox_queue_depth")
                       .Help("Jobs waiting for a compile worker or a run slot, by queue.")
                       .Register(*registry_)),
      run_slots_(prometheus::BuildGauge()
                     .Name("kbox_run_slots")
                     .Help("Run slots by device and state (busy, idle, quarantined).")
                     .Register(*registry_)),
      compile_slots_(prometheus::BuildGauge()
                         .Name("kbox_compile_slots")
                         .Help("Compile workers by state (busy, idle).")
                         .Register(*registry_)),
      device_healthy_(prometheus::BuildGauge()
                          .Name("kbox_device_healthy")
                          .Help("1 while a device serves jobs, 0 while it is quarantined.")
                          .Register(*registry_)),
      static_check_seconds_(prometheus::BuildHistogram()
                                .Name("kbox_static_check_duration_seconds")
                                .Help("Time the static anti-cheat checker took per request.")
                                .Register(*registry_)
                                .Add({}, StaticCheckBuckets())),
      jobs_in_flight_(prometheus::BuildGauge()
                          .Name("kbox_jobs_in_flight")
                          .Help("Jobs accepted and not yet finished.")
                          .Register(*registry_)
                          .Add({})),
      jobs_in_flight_limit_(prometheus::BuildGauge()
                                .Name("kbox_jobs_in_flight_limit")
                                .Help("max_in_flight_jobs: jobs kboxd accepts at once before "
                                      "refusing submissions.")
                                .Register(*registry_)
                                .Add({})),
      insecure_mode_(prometheus::BuildGauge()
                         .Name("kbox_insecure_mode")
                         .Help("1 while candidates run WITHOUT the sandbox (development mode).")
                         .Register(*registry_)
                         .Add({})),
      build_info_(prometheus::BuildGauge()
                      .Name("kbox_build_info")
                      .Help("1, labelled with kboxd's version (join on it in queries).")
                      .Register(*registry_)),
      speedup_(prometheus::BuildHistogram()
                   .Name("kbox_speedup")
                   .Help("Speedups of timed, correct and rewardable jobs, by backend.")
                   .Register(*registry_)),
      build_cache_hits_(prometheus::BuildCounter()
                            .Name("kbox_build_cache_hits_total")
                            .Help("Jobs whose build came from the build cache (compile stage skipped).")
                            .Register(*registry_)
                            .Add({})),
      build_cache_misses_(prometheus::BuildCounter()
                              .Name("kbox_build_cache_misses_total")
                              .Help("Jobs that ran their compile stage with the build cache on.")
                              .Register(*registry_)
                              .Add({})),
      build_cache_evictions_(prometheus::BuildCounter()
                                 .Name("kbox_build_cache_evictions_total")
                                 .Help("Build cache entries evicted (least recently used) for space.")
                                 .Register(*registry_)
                                 .Add({})),
      build_cache_corrupt_(prometheus::BuildCounter()
                               .Name("kbox_build_cache_corrupt_entries_total")
                               .Help("Build cache entries that failed verification and were deleted.")
                               .Register(*registry_)
                               .Add({})),
      build_cache_bytes_(prometheus::BuildGauge()
                             .Name("kbox_build_cache_bytes")
                             .Help("Bytes of all build cache entries.")
                             .Register(*registry_)
                             .Add({})),
      reference_cache_hits_(prometheus::BuildCounter()
                                .Name("kbox_reference_cache_hits_total")
                                .Help("Timed jobs whose reference figure came from the reference cache.")
                                .Register(*registry_)
                                .Add({})),
      reference_cache_misses_(prometheus::BuildCounter()
                                  .Name("kbox_reference_cache_misses_total")
                                  .Help("Timed jobs that timed their reference live with the reference "
                                        "cache on.")
                                  .Register(*registry_)
                                  .Add({})),
      reference_cache_entries_(prometheus::BuildGauge()
                                   .Name("kbox_reference_cache_entries")
                                   .Help("Entries in the reference timing cache.")
                                   .Register(*registry_)
                                   .Add({})),
      journal_write_seconds_(prometheus::BuildHistogram()
                                 .Name("kbox_job_journal_write_duration_seconds")
                                 .Help("Time to make one submission's (or one result's) journal "
                                       "records durable: write, fsync, rename, directory fsync.")
                                 .Register(*registry_)
                                 .Add({}, prometheus::Histogram::BucketBoundaries{
                                              0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                              0.01, 0.025, 0.05, 0.1, 0.25, 1})),
      journal_write_failures_(prometheus::BuildCounter()
                                  .Name("kbox_job_journal_write_failures_total")
                                  .Help("Journal writes that failed (a submission refused with 503, "
                                        "or a result kept in memory only).")
                                  .Register(*registry_)
                                  .Add({})),
      journal_corrupt_(prometheus::BuildCounter()
                           .Name("kbox_job_journal_corrupt_records_total")
                           .Help("Journal records found torn or with a bad checksum at start-up "
                                 "(skipped and deleted).")
                           .Register(*registry_)
                           .Add({})),
      journal_restored_(prometheus::BuildCounter()
                            .Name("kbox_job_journal_restored_jobs_total")
                            .Help("Jobs reloaded from the journal at start-up, by what became of "
                                  "them: done (result served again), requeued (run again).")
                            .Register(*registry_)),
      journal_restored_done_(journal_restored_.Add({{"state", "done"}})),
      journal_restored_requeued_(journal_restored_.Add({{"state", "requeued"}})) {
  build_info_.Add({{"version", kVersion}}).Set(1);
  for (const v1::GpuInfo& gpu : sets.gpu_info) {
    gpu_info_.Add({{"device", DeviceLabel(gpu.index())}, {"gpu", std::to_string(gpu.index())},
                   {"UUID", gpu.uuid()}, {"modelName", gpu.name()}})
        .Set(1);
  }
  for (const std::string& token : sets.tokens) {
    for (const std::string& status : StatusLabels()) token_jobs_total_.Add({{"token", token}, {"status", status}});
  }
  // Every series of the closed sets, at 0, so that rate() sees a job's
  // first increment and a dashboard finds every name from the first scrape.
  for (v1::Backend b : sets.backends) {
    for (const std::string& status : StatusLabels()) {
      jobs_total_.Add({{"backend", BackendLabel(b)}, {"status", status}});
    }
    for (const char* phase : kPhases) {
      phase_seconds_.Add({{"backend", BackendLabel(b)}, {"phase", phase}}, PhaseBuckets());
    }
    speedup_.Add({{"backend", BackendLabel(b)}}, SpeedupBuckets());
    for (const char* stage : {"compile", "run"}) {
      stage_cpu_seconds_total_.Add({{"backend", BackendLabel(b)}, {"stage", stage}});
    }
  }
  for (unsigned cls = 1; cls <= 5; ++cls) responses_total_.Add({{"code", std::to_string(cls) + "xx"}});
  for (const auto& rule : static_check::RuleCatalog()) {
    for (auto severity : kCountedSeverities) {
      anticheat_verdicts_total_.Add({{"rule", std::string(rule.id)},
                                     {"severity", std::string(static_check::SeverityName(severity))}});
    }
  }
  for (InfraCause c : kAllInfraCauses) infra_errors_total_.Add({{"cause", std::string(InfraCauseName(c))}});
  for (ViolationKind k : kAllViolationKinds) {
    sandbox_violations_total_.Add({{"kind", std::string(ViolationKindName(k))}});
  }
  for (const char* worker : kWorkers) worker_crashes_total_.Add({{"worker", worker}});
  for (InfraCause c : kAllInfraCauses) {
    if (RetryableInfraCause(c)) infra_retries_total_.Add({{"cause", std::string(InfraCauseName(c))}});
  }
  for (const char* outcome : {"built", "failed", "fallback"}) remote_builds_total_.Add({{"outcome", outcome}});
  for (const char* outcome : {"built", "cached", "failed", "refused"}) {
    builds_served_total_.Add({{"outcome", outcome}});
  }
  for (const char* queue : kQueues) queue_depth_.Add({{"queue", queue}});
  for (const char* state : {"busy", "idle"}) compile_slots_.Add({{"state", state}});
  // Compile workers' zygotes count under "compile" (DeviceOfSlot).
  for (const char* device : {"compile"}) {
    zygote_restarts_total_.Add({{"device", device}});
    zygote_start_failures_total_.Add({{"device", device}});
  }
  for (const std::string& device : Devices(sets)) {
    zygote_restarts_total_.Add({{"device", device}});
    zygote_start_failures_total_.Add({{"device", device}});
    for (const char* state : {"busy", "idle", "quarantined"}) {
      run_slots_.Add({{"device", device}, {"state", state}});
    }
    device_healthy_.Add({{"device", device}}).Set(1);
    // The CPU is never quarantined; its series (always 0) keeps the family
    // present on a CPU-only kboxd, where dashboards and alerts still name it.
    device_quarantines_total_.Add({{"device", device}});
    for (const char* result : {"pass", "fail"}) {
      device_probes_total_.Add({{"device", device}, {"result", result}});
    }
    for (const char* result : {"stopped", "not_stopped"}) {
      set_up_pauses_total_.Add({{"device", device}, {"result", result}});
    }
  }
}

void Metrics::RecordJob(const v1::EvaluateResult& result, const JobTrace& trace,
                        const std::string& token) {
  const std::string backend = BackendLabel(result.settings().backend());
  const std::string status = Lower(v1::Status_Name(result.status()));
  jobs_total_.Add({{"backend", backend}, {"status", status}}).Increment();
  // A token added to the file since start-up (SIGHUP) gets its series now.
  if (!token.empty()) token_jobs_total_.Add({{"token", token}, {"status", status}}).Increment();
  if (result.status() == v1::CORRECT && result.rewardable() && result.speedup() > 0) {
    speedup_.Add({{"backend", backend}}, SpeedupBuckets()).Observe(result.speedup());
  }
  const auto& d = result.durations();
  const struct {
    const char* phase;
    bool happened;
    double ms;
  } phases[] = {{"static", trace.checked, d.static_ms()},
                {"compile", trace.compiled, d.compile_ms()},
                {"queue_wait", trace.queued, d.queue_wait_ms()},
                {"run", trace.ran, d.run_ms()},
                {"total", true, d.total_ms()}};
  // A phase the job never reached is not a zero-second observation.
  for (const auto& p : phases) {
    if (!p.happened) continue;
    phase_seconds_.Add({{"backend", backend}, {"phase", p.phase}}, PhaseBuckets())
        .Observe(p.ms / 1000.0);
  }
  // How much of the host a job took: the figure that sizes compile_workers
  // against the run stages sharing the cores (docs/benchmarks.md).
  for (const auto& [stage, ms] : {std::pair{"compile", trace.compile_cpu_ms}, std::pair{"run", trace.run_cpu_ms}}) {
    if (ms > 0) stage_cpu_seconds_total_.Add({{"backend", backend}, {"stage", stage}}).Increment(ms / 1000.0);
  }
  if (result.status() == v1::INFRA_ERROR) {
    // Every INFRA_ERROR path names its cause; one that did not is a kboxd bug.
    const InfraCause cause =
        trace.cause.infra == InfraCause::kNone ? InfraCause::kInternal : trace.cause.infra;
    infra_errors_total_.Add({{"cause", std::string(InfraCauseName(cause))}}).Increment();
    if (HarnessDied(cause)) worker_crashes_total_.Add({{"worker", "harness"}}).Increment();
  }
  if (trace.cause.violation != ViolationKind::kNone) {
    sandbox_violations_total_.Add({{"kind", std::string(ViolationKindName(trace.cause.violation))}})
        .Increment();
  }
}

void Metrics::RecordBuildCpu(v1::Backend backend, double cpu_ms) {
  if (cpu_ms > 0) {
    stage_cpu_seconds_total_.Add({{"backend", BackendLabel(backend)}, {"stage", "compile"}})
        .Increment(cpu_ms / 1000.0);
  }
}

void Metrics::RecordInfraRetry(InfraCause cause) {
  infra_retries_total_.Add({{"cause", std::string(InfraCauseName(cause))}}).Increment();
  if (HarnessDied(cause)) worker_crashes_total_.Add({{"worker", "harness"}}).Increment();
}

void Metrics::RecordStaticCheck(const static_check::CheckReport& report, double seconds) {
  static_check_seconds_.Observe(seconds);
  RecordVerdicts(report);
}

void Metrics::RecordVerdicts(const static_check::CheckReport& report) {
  for (const auto& f : report.findings) {
    if (f.severity == static_check::Severity::kOff) continue;  // Never reported.
    // The label comes from the catalogue, never from the finding's text.
    const static_check::RuleInfo* rule = static_check::FindRule(f.rule_id);
    anticheat_verdicts_total_
        .Add({{"rule", rule ? std::string(rule->id) : "unknown"},
              {"severity", std::string(static_check::SeverityName(f.severity))}})
        .Increment();
  }
}

void Metrics::RecordResponse(unsigned status_code) {
  const std::string cls = std::to_string(std::clamp(status_code / 100, 1u, 5u)) + "xx";
  responses_total_.Add({{"code", cls}}).Increment();
}

void Metrics::RecordZygoteEvent(const std::string& slot, ZygoteEvent event) {
  const std::string device = DeviceOfSlot(slot);
  switch (event) {
    case ZygoteEvent::kStarted:
      break;
    case ZygoteEvent::kRestarted:
      zygote_restarts_total_.Add({{"device", device}}).Increment();
      break;
    case ZygoteEvent::kDied:
      worker_crashes_total_.Add({{"worker", "zygote"}}).Increment();
      break;
    case ZygoteEvent::kStartFailed:
      zygote_start_failures_total_.Add({{"device", device}}).Increment();
      break;
  }
}

void Metrics::RecordQuarantine(uint32_t gpu) {
  device_quarantines_total_.Add({{"device", DeviceLabel(gpu)}}).Increment();
}

void Metrics::RecordDeviceProbe(uint32_t gpu, bool passed) {
  device_probes_total_.Add({{"device", DeviceLabel(gpu)}, {"result", passed ? "pass" : "fail"}})
      .Increment();
}

void Metrics::RecordSetUpAgain(std::optional<uint32_t> gpu) {
  set_up_again_total_.Add({{"device", DeviceLabel(gpu)}}).Increment();
}

void Metrics::RecordSetUpPause(std::optional<uint32_t> gpu, bool stopped) {
  set_up_pauses_total_.Add({{"device", DeviceLabel(gpu)}, {"result", stopped ? "stopped" : "not_stopped"}})
      .Increment();
}

void Metrics::SetQueueDepth(const std::string& queue, size_t jobs) {
  queue_depth_.Add({{"queue", queue}}).Set(static_cast<double>(jobs));
}

void Metrics::SetRunSlots(const std::string& device, size_t busy, size_t idle, size_t quarantined) {
  run_slots_.Add({{"device", device}, {"state", "busy"}}).Set(static_cast<double>(busy));
  run_slots_.Add({{"device", device}, {"state", "idle"}}).Set(static_cast<double>(idle));
  run_slots_.Add({{"device", device}, {"state", "quarantined"}}).Set(static_cast<double>(quarantined));
}

void Metrics::SetCompileSlots(size_t busy, size_t idle) {
  compile_slots_.Add({{"state", "busy"}}).Set(static_cast<double>(busy));
  compile_slots_.Add({{"state", "idle"}}).Set(static_cast<double>(idle));
}

void Metrics::SetDeviceHealthy(const std::string& device, bool healthy) {
  device_healthy_.Add({{"device", device}}).Set(healthy ? 1 : 0);
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kbox
