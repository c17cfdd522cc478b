#pragma once

// Defaults and bounds for evaluation requests. Every request passes through
// RequestPolicy::Resolve before any process is started, so the rest of kboxd
// only ever sees EffectiveSettings within the operator's limits.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <boost/system/result.hpp>

#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"
#include "policy/field_error.h"
#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/static_checker.h"

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

// The anti-cheat profiles a request may name, loaded once at start-up.
struct AnticheatProfiles {
  std::map<std::string, static_check::AnticheatProfile, std::less<>> by_name;
  // The profile of a request that names none; always a key of by_name.
  std::string default_name;

  // Just the built-in "off" profile (every rule off), the default: for tools
  // and tests that do not load a profile directory.
  static AnticheatProfiles OffOnly();
  // Loads every `*.profile` in `dir`. Fails, naming the file and line, when
  // one does not load, and when `default_name` is not among them.
  static boost::system::result<AnticheatProfiles, FieldError> LoadDir(
      const std::filesystem::path& dir, const std::string& default_name);
  // Sorted names.
  std::vector<std::string> names() const;
};

// A job's speedup_precision when it sets none: timing stops once the speedup's
// ~95 % interval is within 5 % of it either way (docs/performance.md, "The
// device turn": a tighter default cost most jobs their round cap).
inline constexpr double kDefaultSpeedupPrecision = 0.05;

// Default allclose tolerance of a precision (KernelBench's current values).
double DefaultTolerance(v1::Precision precision);

// The checker's view of a job's backend and precision (UNSPECIFIED precision
// is fp32).
static_check::TaskBackend TaskBackendOf(v1::Backend backend);
static_check::TaskPrecision TaskPrecisionOf(v1::Precision precision);

// An evaluation request after validation: its settings, and the anti-cheat
// profile (with the request's overrides applied) its static checks run under.
struct ResolvedJob {
  v1::EffectiveSettings settings;
  static_check::AnticheatProfile anticheat;
};

// A /v1/check request after validation.
struct ResolvedCheck {
  v1::Backend backend = v1::BACKEND_UNSPECIFIED;
  v1::Precision precision = v1::PRECISION_FP32;
  static_check::AnticheatProfile anticheat;
};

class RequestPolicy {
 public:
  explicit RequestPolicy(RequestLimits limits,
                         AnticheatProfiles profiles = AnticheatProfiles::OffOnly());

  // Validates `request` and fills in every default. The seed, when absent, is
  // drawn from the OS CSPRNG. Returns the first offending field otherwise.
  boost::system::result<ResolvedJob, FieldError> ResolveJob(
      const v1::EvaluateRequest& request) const;
  // ResolveJob's settings alone.
  boost::system::result<v1::EffectiveSettings, FieldError> Resolve(
      const v1::EvaluateRequest& request) const;
  // Validates a /v1/check request: candidate_source required, reference_source
  // optional (both within max_source_bytes), backend required (any known one),
  // profile and overrides as for evaluation.
  boost::system::result<ResolvedCheck, FieldError> ResolveCheck(
      const v1::CheckRequest& request) const;

  // The named profile (empty: the default) with `overrides` applied. Errors
  // name `anticheat_profile` or `anticheat_overrides[<rule id>]`.
  boost::system::result<static_check::AnticheatProfile, FieldError> ResolveAnticheat(
      const std::string& profile, const google::protobuf::Map<std::string, std::string>& overrides)
      const;

  const RequestLimits& limits() const { return limits_; }
  const AnticheatProfiles& profiles() const { return profiles_; }

 private:
  RequestLimits limits_;
  AnticheatProfiles profiles_;
};

}  // namespace kbox
