#pragma once

// Defaults and bounds for evaluation requests. Every request passes through
// RequestPolicy::Resolve before any process is started, so the rest of kboxd
// only ever sees EffectiveSettings within the operator's limits.

#include <cstdint>
#include <vector>

#include <boost/system/result.hpp>

#include "kbox/v1/evaluation.pb.h"
#include "policy/field_error.h"

namespace kbox {

// Operator-set bounds (from DaemonConfig) that requests are checked against.
struct RequestLimits {
  uint64_t max_source_bytes = 1 << 20;
  uint32_t default_correctness_trials = 5;
  uint32_t max_correctness_trials = 100;
  uint32_t default_performance_trials = 20;
  uint32_t max_performance_trials = 1000;
  uint32_t default_time_limit_s = 120;
  uint32_t max_time_limit_s = 900;
  std::vector<v1::Backend> backends;  // Served backends; others are refused.
};

// Default allclose tolerance of a precision (KernelBench's current values).
double DefaultTolerance(v1::Precision precision);

class RequestPolicy {
 public:
  explicit RequestPolicy(RequestLimits limits);

  // Validates `request` and fills in every default. The seed, when absent, is
  // drawn from the OS CSPRNG. Returns the first offending field otherwise.
  boost::system::result<v1::EffectiveSettings, FieldError> Resolve(
      const v1::EvaluateRequest& request) const;

  const RequestLimits& limits() const { return limits_; }

 private:
  RequestLimits limits_;
};

}  // namespace kbox
