#pragma once

// kboxd's Prometheus metrics, every one declared in metrics.cc's constructor
// and documented in docs/metrics.md. Names are kbox_<what>_<unit>, counters
// end in _total, and every label value comes from a closed set: backend and
// status enum names, the device list of the configuration ("cpu", "gpu0"..),
// HTTP status classes, the anti-cheat rule catalogue and its severities, the
// failure causes of daemon/failure_cause.h, the API token names of the
// operator's tokens file, and the GPUs' UUIDs and models. Every series of those sets
// exists from start-up (at 0), so rate() and absent-series alerts work from
// the first scrape.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "daemon/failure_cause.h"
#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"
#include "policy/static_check/static_checker.h"
#include "worker/zygote.h"

namespace kbox {

// The label value of a device: "cpu", or "gpu<index>".
std::string DeviceLabel(std::optional<uint32_t> gpu);
// The device a run slot belongs to: "cpu1" -> "cpu", "gpu2" -> "gpu2".
std::string DeviceOfSlot(const std::string& slot);
// The label value of a backend: "cpu", "cuda", "triton".
std::string BackendLabel(v1::Backend backend);

// The closed label sets that depend on the configuration.
struct MetricLabelSets {
  std::vector<v1::Backend> backends = {v1::BACKEND_CPU};  // Served backends.
  std::vector<uint32_t> gpus;                              // GPU indices in use.
  std::vector<v1::GpuInfo> gpu_info;  // The probe's view of those GPUs (kbox_gpu_info).
  std::vector<std::string> tokens;    // API token names (per-token job counts).
};

// What the evaluator saw of a finished job besides its public result.
struct JobTrace {
  bool checked = false;   // The static checker ran.
  bool compiled = false;  // The compile stage ran, or a cached build was restored.
  bool queued = false;    // It waited for, and got, a run slot.
  bool ran = false;       // Its run stage ran.
  // CPU time of the stages' process trees (user + system, reaped
  // descendants included), milliseconds; 0 where a stage did not run.
  double compile_cpu_ms = 0;
  double run_cpu_ms = 0;
  FailureCause cause = {};
};

class Metrics {
 public:
  explicit Metrics(const MetricLabelSets& sets = {});

  // Counts a finished job; observes the durations of the phases it went
  // through; counts its infra cause or sandbox violation.
  // `token`: the API token's name that submitted it ("" when
  // authentication is off: no per-token count).
  void RecordJob(const v1::EvaluateResult& result, const JobTrace& trace, const std::string& token = "");
  // A job's attempt that ended INFRA_ERROR for `cause` and is run again
  // (infra_retries); the job itself is counted once, by RecordJob.
  void RecordInfraRetry(InfraCause cause);
  // Counts the findings of one run of the static checker (POST /v1/evaluate
  // and /v1/check alike) by rule and severity, and observes how long it took.
  void RecordStaticCheck(const static_check::CheckReport& report, double seconds);
  // Counts verdicts by rule and severity (the run stage's, graded).
  void RecordVerdicts(const static_check::CheckReport& report);
  // Counts an HTTP response by its status code class ("2xx", "4xx", ...).
  void RecordResponse(unsigned status_code);
  // A zygote's start, restart, death or failed start (worker/zygote.h).
  void RecordZygoteEvent(const std::string& slot, ZygoteEvent event);
  // A GPU taken out of service (daemon/device_health.h).
  void RecordQuarantine(uint32_t gpu);
  // A probe run after a job that may have left the GPU broken.
  void RecordDeviceProbe(uint32_t gpu, bool passed);
  // A run stage prepared ahead whose set-up failed before its turn, run
  // again holding the turn (docs/run-stages-ahead.md); nullopt: a CPU slot.
  void RecordSetUpAgain(std::optional<uint32_t> gpu);
  // A stage setting up was paused for another job's timing (stopped) or
  // could not be and was waited for (not_stopped).
  void RecordSetUpPause(std::optional<uint32_t> gpu, bool stopped);
  // 1 while kboxd runs candidates without the sandbox.
  void SetInsecureMode(bool insecure) { insecure_mode_.Set(insecure ? 1 : 0); }
  // Jobs accepted and not finished.
  void SetJobsInFlight(double value) { jobs_in_flight_.Set(value); }
  // max_in_flight_jobs: past it, submissions are refused (saturation).
  void SetJobsInFlightLimit(double value) { jobs_in_flight_limit_.Set(value); }

  // Point-in-time state, set just before each scrape (Evaluator::PublishGauges).
  // `queue`: "compile", "run_cpu" or "run_gpu".
  void SetQueueDepth(const std::string& queue, size_t jobs);
  void SetRunSlots(const std::string& device, size_t busy, size_t idle, size_t quarantined);
  void SetCompileSlots(size_t busy, size_t idle);
  void SetDeviceHealthy(const std::string& device, bool healthy);

  // The build cache (docs/build-cache.md): a job that restored its build
  // from the cache (hit) or ran its compile stage with the cache on (miss).
  void RecordBuildCacheLookup(bool hit) { (hit ? build_cache_hits_ : build_cache_misses_).Increment(); }
  // Entries evicted for space; entries found corrupt (and deleted).
  void RecordBuildCacheEvictions(uint64_t entries) {
    build_cache_evictions_.Increment(static_cast<double>(entries));
  }
  void RecordBuildCacheCorruptEntry() { build_cache_corrupt_.Increment(); }
  // Bytes of all cache entries.
  void SetBuildCacheBytes(uint64_t bytes) { build_cache_bytes_.Set(static_cast<double>(bytes)); }

  // The compile tier (docs/compile-tier.md). On a run node, what became of a
  // job's build sent to the tier: "built" (a build came back), "failed" (the
  // job ended at its compile there: COMPILE_ERROR, REJECTED, ...) or
  // "fallback" (no answer it could use: built locally). On a compile node,
  // each POST /v1/builds: "built", "cached" (from its build cache),
  // "failed" (the job's result went back) or "refused" (an error status).
  void RecordRemoteBuild(const std::string& outcome) {
    remote_builds_total_.Add({{"outcome", outcome}}).Increment();
  }
  void RecordBuildServed(const std::string& outcome) {
    builds_served_total_.Add({{"outcome", outcome}}).Increment();
  }
  // A compile node's compile stage (it records no jobs): its CPU time under
  // kbox_stage_cpu_seconds_total{stage="compile"}, as a job's would be.
  void RecordBuildCpu(v1::Backend backend, double cpu_ms);

  // The reference timing cache (docs/reference-cache.md): a job whose
  // reference figure came from the cache (hit) or was timed live with the
  // cache on (miss: no entry, another input signature, a live recheck of a
  // fast candidate, or fresh_reference_timing).
  void RecordReferenceCacheLookup(bool hit) {
    (hit ? reference_cache_hits_ : reference_cache_misses_).Increment();
  }
  void SetReferenceCacheEntries(size_t entries) {
    reference_cache_entries_.Set(static_cast<double>(entries));
  }

  // The durable job journal (daemon/job_journal.h).
  void ObserveJournalWrite(double seconds) { journal_write_seconds_.Observe(seconds); }
  void RecordJournalWriteFailure() { journal_write_failures_.Increment(); }
  void RecordJournalCorruptRecords(uint64_t n) { journal_corrupt_.Increment(static_cast<double>(n)); }
  // Jobs found in the journal at start-up: served again ("done") or run
  // again ("requeued").
  void RecordJournalRestored(uint64_t done, uint64_t requeued) {
    journal_restored_done_.Increment(static_cast<double>(done));
    journal_restored_requeued_.Increment(static_cast<double>(requeued));
  }

  // The text exposition format for GET /metrics.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& jobs_total_;
  prometheus::Family<prometheus::Counter>& token_jobs_total_;
  prometheus::Family<prometheus::Gauge>& gpu_info_;
  prometheus::Family<prometheus::Histogram>& phase_seconds_;
  prometheus::Family<prometheus::Counter>& responses_total_;
  prometheus::Family<prometheus::Counter>& anticheat_verdicts_total_;
  prometheus::Family<prometheus::Counter>& infra_errors_total_;
  prometheus::Family<prometheus::Counter>& sandbox_violations_total_;
  prometheus::Family<prometheus::Counter>& worker_crashes_total_;
  prometheus::Family<prometheus::Counter>& infra_retries_total_;
  prometheus::Family<prometheus::Counter>& remote_builds_total_;
  prometheus::Family<prometheus::Counter>& builds_served_total_;
  prometheus::Family<prometheus::Counter>& zygote_restarts_total_;
  prometheus::Family<prometheus::Counter>& zygote_start_failures_total_;
  prometheus::Family<prometheus::Counter>& device_quarantines_total_;
  prometheus::Family<prometheus::Counter>& device_probes_total_;
  prometheus::Family<prometheus::Counter>& set_up_again_total_;
  prometheus::Family<prometheus::Counter>& set_up_pauses_total_;
  prometheus::Family<prometheus::Counter>& stage_cpu_seconds_total_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& run_slots_;
  prometheus::Family<prometheus::Gauge>& compile_slots_;
  prometheus::Family<prometheus::Gauge>& device_healthy_;
  prometheus::Histogram& static_check_seconds_;
  prometheus::Gauge& jobs_in_flight_;
  prometheus::Gauge& jobs_in_flight_limit_;
  prometheus::Gauge& insecure_mode_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Histogram>& speedup_;
  prometheus::Counter& build_cache_hits_;
  prometheus::Counter& build_cache_misses_;
  prometheus::Counter& build_cache_evictions_;
  prometheus::Counter& build_cache_corrupt_;
  prometheus::Gauge& build_cache_bytes_;
  prometheus::Counter& reference_cache_hits_;
  prometheus::Counter& reference_cache_misses_;
  prometheus::Gauge& reference_cache_entries_;
  prometheus::Histogram& journal_write_seconds_;
  prometheus::Counter& journal_write_failures_;
  prometheus::Counter& journal_corrupt_;
  prometheus::Family<prometheus::Counter>& journal_restored_;
  prometheus::Counter& journal_restored_done_;
  prometheus::Counter& journal_restored_requeued_;
};

}  // namespace kbox
