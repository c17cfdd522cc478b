#pragma once

// kboxd's Prometheus metrics, declared in one place. Label values come from
// closed sets only (backend and status enum names, HTTP status classes, the
// anti-cheat rule catalogue and its severities).

#include <cstdint>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "kbox/v1/evaluation.pb.h"
#include "policy/static_check/static_checker.h"

namespace kbox {

class Metrics {
 public:
  Metrics();

  // Counts a finished job and observes its phase durations.
  void RecordJob(const v1::EvaluateResult& result);
  // Counts the findings of one run of the static checker (POST /v1/evaluate
  // and /v1/check alike) by rule and severity, and observes how long it took.
  void RecordStaticCheck(const static_check::CheckReport& report, double seconds);
  // Counts verdicts by rule and severity (the run stage's, graded).
  void RecordVerdicts(const static_check::CheckReport& report);
  // Counts an HTTP response by its status code class ("2xx", "4xx", ...).
  void RecordResponse(unsigned status_code);
  // 1 while kboxd runs candidates without the sandbox.
  void SetInsecureMode(bool insecure) { insecure_mode_.Set(insecure ? 1 : 0); }
  // Jobs accepted and not finished.
  void SetJobsInFlight(double value) { jobs_in_flight_.Set(value); }
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

  // The text exposition format for GET /metrics.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& jobs_total_;
  prometheus::Family<prometheus::Histogram>& phase_seconds_;
  prometheus::Family<prometheus::Counter>& responses_total_;
  prometheus::Family<prometheus::Counter>& anticheat_verdicts_total_;
  prometheus::Histogram& static_check_seconds_;
  prometheus::Gauge& jobs_in_flight_;
  prometheus::Gauge& insecure_mode_;
  prometheus::Counter& build_cache_hits_;
  prometheus::Counter& build_cache_misses_;
  prometheus::Counter& build_cache_evictions_;
  prometheus::Counter& build_cache_corrupt_;
  prometheus::Gauge& build_cache_bytes_;
};

}  // namespace kbox
