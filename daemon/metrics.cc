#include "daemon/metrics.h"

#include <prometheus/text_serializer.h>

namespace kbox {
namespace {

const prometheus::Histogram::BucketBoundaries& PhaseBuckets() {
  // From a static check (sub-millisecond) to a cold CUDA build (minutes).
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600};
  return buckets;
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
      jobs_in_flight_(prometheus::BuildGauge()
                          .Name("kbox_jobs_in_flight")
                          .Help("Jobs accepted and not yet finished.")
                          .Register(*registry_)
                          .Add({})),
      insecure_mode_(prometheus::BuildGauge()
                         .Name("kbox_insecure_mode")
                         .Help("1 while candidates run WITHOUT the sandbox (development mode).")
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

void Metrics::RecordResponse(unsigned status_code) {
  const std::string cls = std::to_string(std::min(status_code / 100, 5u)) + "xx";
  responses_total_.Add({{"code", cls}}).Increment();
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kbox
