#include "policy/request_policy.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <utility>

#include "policy/static_check/rule_catalog.h"

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

// A client-supplied name made safe to echo in an error: printable ASCII, bounded.
std::string Echo(std::string_view text) {
  constexpr size_t kMaxEcho = 64;
  std::string out;
  for (char c : text.substr(0, kMaxEcho)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kMaxEcho) out += "...";
  return out;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

std::optional<FieldError> CheckClientRequestId(const std::string& id) {
  if (id.size() > kMaxClientRequestIdBytes) {
    return FieldError{"client_request_id", "must be at most 128 characters"};
  }
  if (!std::all_of(id.begin(), id.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return FieldError{"client_request_id", "must be printable ASCII"};
  }
  return std::nullopt;
}

std::optional<FieldError> CheckBackendGiven(Backend backend, const std::vector<Backend>& served) {
  if (backend == v1::BACKEND_UNSPECIFIED) {
    return FieldError{"backend", "is required; served: " + BackendList(served)};
  }
  if (!v1::Backend_IsValid(backend)) {
    return FieldError{"backend", "unknown value " + std::to_string(backend)};
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

AnticheatProfiles AnticheatProfiles::OffOnly() {
  AnticheatProfiles p;
  p.by_name.emplace("off", static_check::AnticheatProfile::Uniform("off", static_check::Severity::kOff));
  p.default_name = "off";
  return p;
}

boost::system::result<AnticheatProfiles, FieldError> AnticheatProfiles::LoadDir(
    const std::filesystem::path& dir, const std::string& default_name) {
  namespace fs = std::filesystem;
  const std::string where = "anticheat_profile_dir " + dir.string();
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() == ".profile") names.push_back(path.stem().string());
  }
  if (ec) return FieldError{where, "cannot be read: " + ec.message()};
  std::sort(names.begin(), names.end());
  AnticheatProfiles out;
  for (const auto& name : names) {
    auto loaded = static_check::AnticheatProfile::Load(dir, name);
    if (!loaded) {
      // Parse errors name `<name>.profile:<line>`; others (a bad file name)
      // name the field: say which file either way.
      const std::string& f = loaded.error().field;
      const std::string at = f.starts_with(name + ".profile") ? f : name + ".profile (" + f + ")";
      return FieldError{where, at + ": " + loaded.error().message};
    }
    out.by_name.emplace(name, std::move(*loaded));
  }
  if (!out.by_name.contains(default_name)) {
    return FieldError{"default_anticheat_profile",
                      "no profile `" + default_name + ".profile` in " + dir.string() +
                          " (found: " + JoinNames(names) + ")"};
  }
  out.default_name = default_name;
  return out;
}

std::vector<std::string> AnticheatProfiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, profile] : by_name) out.push_back(name);
  return out;
}

static_check::TaskBackend TaskBackendOf(Backend backend) {
  switch (backend) {
    case v1::BACKEND_CUDA: return static_check::TaskBackend::kCuda;
    case v1::BACKEND_TRITON: return static_check::TaskBackend::kTriton;
    default: return static_check::TaskBackend::kCpu;
  }
}

static_check::TaskPrecision TaskPrecisionOf(Precision precision) {
  switch (precision) {
    case v1::PRECISION_FP16: return static_check::TaskPrecision::kFp16;
    case v1::PRECISION_BF16: return static_check::TaskPrecision::kBf16;
    default: return static_check::TaskPrecision::kFp32;
  }
}

double DefaultTolerance(Precision precision) {
  switch (precision) {
    case v1::PRECISION_FP16:
    case v1::PRECISION_BF16:
      return 1e-2;
    default:
      return 1e-4;
  }
}

RequestPolicy::RequestPolicy(RequestLimits limits, AnticheatProfiles profiles)
    : limits_(std::move(limits)), profiles_(std::move(profiles)) {}

boost::system::result<static_check::AnticheatProfile, FieldError> RequestPolicy::ResolveAnticheat(
    const std::string& name, const google::protobuf::Map<std::string, std::string>& overrides) const {
  const std::string& wanted = name.empty() ? profiles_.default_name : name;
  const auto found = profiles_.by_name.find(wanted);
  if (found == profiles_.by_name.end()) {
    return FieldError{"anticheat_profile", "names no profile of this daemon: `" + Echo(wanted) +
                                               "` (it has: " + JoinNames(profiles_.names()) + ")"};
  }
  if (overrides.empty()) return found->second;
  // Map order is unspecified: check in rule-id order so the error is stable.
  std::map<std::string, std::string> sorted(overrides.begin(), overrides.end());
  std::map<std::string, static_check::Severity> parsed;
  for (const auto& [rule, severity_name] : sorted) {
    const std::string field = "anticheat_overrides[" + Echo(rule) + "]";
    if (static_check::FindRule(rule) == nullptr) {
      return FieldError{field, "names no anti-cheat rule (docs/anticheat.md lists them)"};
    }
    static_check::Severity severity;
    if (!static_check::ParseSeverity(severity_name, &severity)) {
      return FieldError{field, "has unknown severity `" + Echo(severity_name) +
                                   "` (reject, suspicious, info or off)"};
    }
    parsed.emplace(rule, severity);
  }
  return found->second.WithOverrides(parsed);
}

boost::system::result<ResolvedCheck, FieldError> RequestPolicy::ResolveCheck(
    const v1::CheckRequest& request) const {
  if (auto e = CheckSource("candidate_source", request.candidate_source(),
                           limits_.max_source_bytes)) {
    return *e;
  }
  if (!request.reference_source().empty()) {
    if (auto e = CheckSource("reference_source", request.reference_source(),
                             limits_.max_source_bytes)) {
      return *e;
    }
  }
  ResolvedCheck out;
  if (auto e = CheckBackendGiven(request.backend(), limits_.backends)) return *e;
  out.backend = request.backend();
  if (!v1::Precision_IsValid(request.precision())) {
    return FieldError{"precision", "unknown value " + std::to_string(request.precision())};
  }
  out.precision = request.precision() == v1::PRECISION_UNSPECIFIED ? v1::PRECISION_FP32
                                                                     : request.precision();
  auto anticheat = ResolveAnticheat(request.anticheat_profile(), request.anticheat_overrides());
  if (!anticheat) return anticheat.error();
  out.anticheat = std::move(*anticheat);
  if (auto e = CheckClientRequestId(request.client_request_id())) return *e;
  return out;
}

boost::system::result<v1::EffectiveSettings, FieldError> RequestPolicy::Resolve(
    const v1::EvaluateRequest& request) const {
  auto job = ResolveJob(request);
  if (!job) return job.error();
  return std::move(job->settings);
}

boost::system::result<ResolvedJob, FieldError> RequestPolicy::ResolveJob(
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
  if (auto e = CheckBackendGiven(backend, limits_.backends)) return *e;
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

  s.set_speedup_precision(request.has_speedup_precision() ? request.speedup_precision()
                                                          : kDefaultSpeedupPrecision);
  if (!std::isfinite(s.speedup_precision()) || s.speedup_precision() < 0.0 ||
      s.speedup_precision() > 1.0) {
    return FieldError{"speedup_precision", "must be a number from 0 to 1"};
  }

  const uint32_t time_limit =
      request.time_limit_s() == 0 ? limits_.default_time_limit_s : request.time_limit_s();
  if (time_limit > limits_.max_time_limit_s) {
    return FieldError{"time_limit_s",
                      "must be at most " + std::to_string(limits_.max_time_limit_s)};
  }
  s.set_time_limit_s(time_limit);

  if (auto e = CheckClientRequestId(request.client_request_id())) return *e;

  auto anticheat = ResolveAnticheat(request.anticheat_profile(), request.anticheat_overrides());
  if (!anticheat) return anticheat.error();
  s.set_anticheat_profile(anticheat->name());
  return ResolvedJob{std::move(s), std::move(*anticheat)};
}

}  // namespace kbox
