#include "daemon/metrics.h"

#include <prometheus/text_serializer.h>

#include "policy/static_check/rule_catalog.h"

namespace kbox {
namespace {

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

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_total_(prometheus::BuildCounter()
                      .Name("kbox_jobs_total")
                      .Help("Evaluation jobs finished, by backend and status.")
                      .Register(*registry_)),
      phase_seconds_(prometheus::BuildHistogram()
                         .Name("kbox_job_phase_duration_seconds")
                         .Help("Wall-clock duration of each phase of a job.")
                         .Register(*registry_)),
      responses_total_(prometheus::BuildCounter()
                           .Name("kbox_http_responses_total")
                           .Help("HTTP responses sent, by status class.")
                           .Register(*registry_)),
      anticheat_verdicts_total_(prometheus::BuildCounter()
                                    .Name("kbox_anticheat_verdicts_total")
                                    .Help("Static anti-cheat findings (evaluations and checks), by "
                                          "rule and severity.")
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
      insecure_mode_(prometheus::BuildGauge()
                         .Name("kbox_insecure_mode")
                         .Help("1 while candidates run WITHOUT the sandbox (development mode).")
                         .Register(*registry_)
                         .Add({})),
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
                             .Add({})) {}

void Metrics::RecordJob(const v1::EvaluateResult& result) {
  const std::string backend = Lower(v1::Backend_Name(result.settings().backend()));
  jobs_total_.Add({{"backend", backend}, {"status", Lower(v1::Status_Name(result.status()))}})
      .Increment();
  const auto& d = result.durations();
  const std::pair<const char*, double> phases[] = {{"compile", d.compile_ms()},
                                                   {"queue_wait", d.queue_wait_ms()},
                                                   {"run", d.run_ms()},
                                                   {"total", d.total_ms()}};
  for (const auto& [phase, ms] : phases) {
    phase_seconds_.Add({{"phase", phase}}, PhaseBuckets()).Observe(ms / 1000.0);
  }
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
  const std::string cls = std::to_string(std::min(status_code / 100, 5u)) + "xx";
  responses_total_.Add({{"code", cls}}).Increment();
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kbox
