#include "policy/request_policy.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <utility>

namespace kbox {
namespace {

using v1::Backend;
using v1::Precision;

constexpr size_t kMaxClientRequestIdBytes = 128;

std::string BackendList(const std::vector<Backend>& backends) {
  std::string out;
  for (Backend b : backends) {
    if (!out.empty()) out += ", ";
    out += v1::Backend_Name(b);
  }
  return out.empty() ? "none" : out;
}

std::optional<FieldError> CheckSource(const std::string& field, const std::string& source,
                                      uint64_t max_bytes) {
  if (source.empty()) return FieldError{field, "is required"};
  if (source.size() > max_bytes) {
    return FieldError{field, "is " + std::to_string(source.size()) + " bytes; the limit is " +
                                 std::to_string(max_bytes)};
  }
  // Python refuses source with NUL bytes; say so here rather than blame a stage.
  if (source.find('\0') != std::string::npos) {
    return FieldError{field, "contains a NUL byte"};
  }
  return std::nullopt;
}

std::optional<FieldError> CheckTolerance(const std::string& field, double value) {
  if (!std::isfinite(value) || value < 0.0) {
    return FieldError{field, "must be a finite number >= 0"};
  }
  return std::nullopt;
}

uint64_t DrawSeed() {
  std::random_device os_random;  // getrandom(2) on Linux.
  const uint64_t high = os_random();
  const uint64_t low = os_random();
  // 63 bits: fits the signed 64-bit seed that torch.manual_seed accepts.
  return ((high << 32) | low) & 0x7fff'ffff'ffff'ffffULL;
}

}  // namespace

double DefaultTolerance(Precision precision) {
  switch (precision) {
    case v1::PRECISION_FP16:
    case v1::PRECISION_BF16:
      return 1e-2;
    default:
      return 1e-4;
  }
}

RequestPolicy::RequestPolicy(RequestLimits limits) : limits_(std::move(limits)) {}

boost::system::result<v1::EffectiveSettings, FieldError> RequestPolicy::Resolve(
    const v1::EvaluateRequest& request) const {
  if (auto e = CheckSource("reference_source", request.reference_source(),
                           limits_.max_source_bytes)) {
    return *e;
  }
  if (auto e = CheckSource("candidate_source", request.candidate_source(),
                           limits_.max_source_bytes)) {
    return *e;
  }

  const Backend backend = request.backend();
  if (backend == v1::BACKEND_UNSPECIFIED) {
    return FieldError{"backend", "is required; served: " + BackendList(limits_.backends)};
  }
  if (!v1::Backend_IsValid(backend)) {
    return FieldError{"backend", "unknown value " + std::to_string(backend)};
  }
  if (std::find(limits_.backends.begin(), limits_.backends.end(), backend) ==
      limits_.backends.end()) {
    return FieldError{"backend", v1::Backend_Name(backend) +
                                     " is not served by this daemon; served: " +
                                     BackendList(limits_.backends)};
  }

  if (!v1::Precision_IsValid(request.precision())) {
    return FieldError{"precision", "unknown value " + std::to_string(request.precision())};
  }
  const Precision precision = request.precision() == v1::PRECISION_UNSPECIFIED
                                  ? v1::PRECISION_FP32
                                  : request.precision();

  v1::EffectiveSettings s;
  s.set_backend(backend);
  s.set_precision(precision);

  const uint32_t trials = request.correctness_trials() == 0 ? limits_.default_correctness_trials
                                                             : request.correctness_trials();
  if (trials > limits_.max_correctness_trials) {
    return FieldError{"correctness_trials",
                      "must be at most " + std::to_string(limits_.max_correctness_trials)};
  }
  s.set_correctness_trials(trials);

  s.set_seed(request.has_seed() ? request.seed() : DrawSeed());
  if (s.seed() > 0x7fff'ffff'ffff'ffffULL) {
    return FieldError{"seed", "must be below 2^63"};
  }

  const double default_tol = DefaultTolerance(precision);
  s.set_atol(request.has_atol() ? request.atol() : default_tol);
  s.set_rtol(request.has_rtol() ? request.rtol() : default_tol);
  if (auto e = CheckTolerance("atol", s.atol())) return *e;
  if (auto e = CheckTolerance("rtol", s.rtol())) return *e;

  s.set_measure_performance(request.has_measure_performance() ? request.measure_performance()
                                                              : true);
  const uint32_t perf_trials = request.performance_trials() == 0
                                   ? limits_.default_performance_trials
                                   : request.performance_trials();
  if (perf_trials > limits_.max_performance_trials) {
    return FieldError{"performance_trials",
                      "must be at most " + std::to_string(limits_.max_performance_trials)};
  }
  s.set_performance_trials(perf_trials);

  const uint32_t time_limit =
      request.time_limit_s() == 0 ? limits_.default_time_limit_s : request.time_limit_s();
  if (time_limit > limits_.max_time_limit_s) {
    return FieldError{"time_limit_s",
                      "must be at most " + std::to_string(limits_.max_time_limit_s)};
  }
  s.set_time_limit_s(time_limit);

  const std::string& id = request.client_request_id();
  if (id.size() > kMaxClientRequestIdBytes) {
    return FieldError{"client_request_id", "must be at most 128 characters"};
  }
  if (!std::all_of(id.begin(), id.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return FieldError{"client_request_id", "must be printable ASCII"};
  }
  return s;
}

}  // namespace kbox
