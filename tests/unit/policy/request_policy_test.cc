#include "policy/request_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace kbox {
namespace {

RequestLimits TestLimits() {
  RequestLimits limits;
  limits.max_source_bytes = 1024;
  limits.backends = {v1::BACKEND_CPU, v1::BACKEND_CUDA};
  return limits;
}

v1::EvaluateRequest ValidRequest() {
  v1::EvaluateRequest request;
  request.set_reference_source("class Model: pass\n");
  request.set_candidate_source("class ModelNew: pass\n");
  request.set_backend(v1::BACKEND_CPU);
  return request;
}

// Resolves `request` and returns the error's field, or "" when it resolved.
std::string ErrorField(const v1::EvaluateRequest& request,
                       const RequestLimits& limits = TestLimits()) {
  const auto result = RequestPolicy(limits).Resolve(request);
  return result ? std::string() : result.error().field;
}

TEST(RequestPolicyTest, AcceptsMinimalRequest) {
  const auto result = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(result) << result.error().field << ": " << result.error().message;
  EXPECT_EQ(result->backend(), v1::BACKEND_CPU);
}

TEST(RequestPolicyTest, MissingReferenceNamesField) {
  auto request = ValidRequest();
  request.clear_reference_source();
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "reference_source");
  EXPECT_NE(result.error().message.find("required"), std::string::npos);
}

TEST(RequestPolicyTest, MissingCandidateNamesField) {
  auto request = ValidRequest();
  request.clear_candidate_source();
  EXPECT_EQ(ErrorField(request), "candidate_source");
}

TEST(RequestPolicyTest, RejectsOversizeSource) {
  auto request = ValidRequest();
  request.set_candidate_source(std::string(1025, 'x'));
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "candidate_source");
  EXPECT_NE(result.error().message.find("1025"), std::string::npos) << result.error().message;
  EXPECT_NE(result.error().message.find("1024"), std::string::npos) << result.error().message;
}

TEST(RequestPolicyTest, AcceptsSourceAtExactLimit) {
  auto request = ValidRequest();
  request.set_reference_source(std::string(1024, 'x'));
  EXPECT_EQ(ErrorField(request), "");
}

TEST(RequestPolicyTest, RejectsNulByte) {
  auto request = ValidRequest();
  request.set_reference_source(std::string("import torch\0", 13));
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "reference_source");
  EXPECT_NE(result.error().message.find("NUL"), std::string::npos);
}

TEST(RequestPolicyTest, RejectsUnspecifiedBackendListingServedOnes) {
  auto request = ValidRequest();
  request.clear_backend();
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "backend");
  EXPECT_NE(result.error().message.find("BACKEND_CPU, BACKEND_CUDA"), std::string::npos)
      << result.error().message;
}

TEST(RequestPolicyTest, RejectsBackendNotServed) {
  auto request = ValidRequest();
  request.set_backend(v1::BACKEND_TRITON);
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "backend");
  EXPECT_NE(result.error().message.find("BACKEND_TRITON is not served"), std::string::npos)
      << result.error().message;
}

TEST(RequestPolicyTest, RejectsInvalidBackendNumber) {
  auto request = ValidRequest();
  request.set_backend(static_cast<v1::Backend>(42));
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "backend");
  EXPECT_NE(result.error().message.find("42"), std::string::npos) << result.error().message;
}

TEST(RequestPolicyTest, RejectsEveryBackendWhenNoneServed) {
  RequestLimits limits = TestLimits();
  limits.backends.clear();
  const auto result = RequestPolicy(limits).Resolve(ValidRequest());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "backend");
  EXPECT_NE(result.error().message.find("served: none"), std::string::npos);
}

TEST(RequestPolicyTest, RejectsInvalidPrecisionNumber) {
  auto request = ValidRequest();
  request.set_precision(static_cast<v1::Precision>(17));
  EXPECT_EQ(ErrorField(request), "precision");
}

TEST(RequestPolicyTest, PrecisionDefaultsToFp32WithFp32Tolerance) {
  const auto result = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->precision(), v1::PRECISION_FP32);
  EXPECT_DOUBLE_EQ(result->atol(), 1e-4);
  EXPECT_DOUBLE_EQ(result->rtol(), 1e-4);
}

TEST(RequestPolicyTest, HalfPrecisionsDefaultToLooserTolerance) {
  for (const v1::Precision precision : {v1::PRECISION_FP16, v1::PRECISION_BF16}) {
    auto request = ValidRequest();
    request.set_precision(precision);
    const auto result = RequestPolicy(TestLimits()).Resolve(request);
    ASSERT_TRUE(result) << v1::Precision_Name(precision);
    EXPECT_EQ(result->precision(), precision);
    EXPECT_DOUBLE_EQ(result->atol(), 1e-2) << v1::Precision_Name(precision);
    EXPECT_DOUBLE_EQ(result->rtol(), 1e-2) << v1::Precision_Name(precision);
  }
}

TEST(RequestPolicyTest, DefaultToleranceMatchesPrecision) {
  EXPECT_DOUBLE_EQ(DefaultTolerance(v1::PRECISION_FP32), 1e-4);
  EXPECT_DOUBLE_EQ(DefaultTolerance(v1::PRECISION_UNSPECIFIED), 1e-4);
  EXPECT_DOUBLE_EQ(DefaultTolerance(v1::PRECISION_FP16), 1e-2);
  EXPECT_DOUBLE_EQ(DefaultTolerance(v1::PRECISION_BF16), 1e-2);
}

TEST(RequestPolicyTest, KeepsExplicitTolerances) {
  auto request = ValidRequest();
  request.set_precision(v1::PRECISION_FP16);
  request.set_atol(0.5);
  request.set_rtol(0.0);  // Present at zero: kept, not replaced by the default.
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(result);
  EXPECT_DOUBLE_EQ(result->atol(), 0.5);
  EXPECT_DOUBLE_EQ(result->rtol(), 0.0);
}

TEST(RequestPolicyTest, RejectsNegativeAtol) {
  auto request = ValidRequest();
  request.set_atol(-1e-3);
  EXPECT_EQ(ErrorField(request), "atol");
}

TEST(RequestPolicyTest, RejectsNanRtol) {
  auto request = ValidRequest();
  request.set_rtol(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(ErrorField(request), "rtol");
}

TEST(RequestPolicyTest, RejectsInfiniteAtol) {
  auto request = ValidRequest();
  request.set_atol(std::numeric_limits<double>::infinity());
  EXPECT_EQ(ErrorField(request), "atol");
}

TEST(RequestPolicyTest, TrialsDefaultToFive) {
  const auto result = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->correctness_trials(), 5u);
}

TEST(RequestPolicyTest, TrialsAtMaxAcceptedAboveMaxRejected) {
  auto request = ValidRequest();
  request.set_correctness_trials(100);
  const auto at_max = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(at_max);
  EXPECT_EQ(at_max->correctness_trials(), 100u);

  request.set_correctness_trials(101);
  const auto above = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(above);
  EXPECT_EQ(above.error().field, "correctness_trials");
  EXPECT_NE(above.error().message.find("100"), std::string::npos);
}

TEST(RequestPolicyTest, PerformanceTrialsDefaultAndMax) {
  const auto defaulted = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(defaulted);
  EXPECT_EQ(defaulted->performance_trials(), 20u);

  auto request = ValidRequest();
  request.set_performance_trials(1001);
  EXPECT_EQ(ErrorField(request), "performance_trials");
}

TEST(RequestPolicyTest, SpeedupPrecisionDefaultAndBounds) {
  const auto defaulted = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(defaulted);
  EXPECT_DOUBLE_EQ(defaulted->speedup_precision(), 0.05);

  auto request = ValidRequest();
  request.set_speedup_precision(0.0);  // Present at zero: every round to the cap.
  const auto zero = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->speedup_precision(), 0.0);

  for (double bad : {-0.01, 1.5, std::nan("")}) {
    request.set_speedup_precision(bad);
    EXPECT_EQ(ErrorField(request), "speedup_precision") << bad;
  }
}

TEST(RequestPolicyTest, KeepsGivenSeed) {
  auto request = ValidRequest();
  request.set_seed(0);  // Present at zero: kept, not drawn.
  const auto zero = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->seed(), 0u);

  request.set_seed(123456789);
  const auto given = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(given);
  EXPECT_EQ(given->seed(), 123456789u);
}

TEST(RequestPolicyTest, DrawsSeedBelow2To63WhenAbsent) {
  const RequestPolicy policy(TestLimits());
  const auto first = policy.Resolve(ValidRequest());
  const auto second = policy.Resolve(ValidRequest());
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  EXPECT_LT(first->seed(), 1ULL << 63);
  EXPECT_LT(second->seed(), 1ULL << 63);
  // 63 random bits each: a collision has probability 2^-63.
  EXPECT_NE(first->seed(), second->seed());
}

TEST(RequestPolicyTest, RejectsGivenSeedAtOrAbove2To63) {
  auto request = ValidRequest();
  request.set_seed(1ULL << 63);
  EXPECT_EQ(ErrorField(request), "seed");
  request.set_seed((1ULL << 63) - 1);
  EXPECT_EQ(ErrorField(request), "");
}

TEST(RequestPolicyTest, MeasurePerformanceDefaultsTrue) {
  const auto result = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->measure_performance());
}

TEST(RequestPolicyTest, KeepsExplicitMeasurePerformanceFalse) {
  auto request = ValidRequest();
  request.set_measure_performance(false);
  const auto result = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(result);
  EXPECT_FALSE(result->measure_performance());
}

TEST(RequestPolicyTest, TimeLimitDefaultsAndIsBounded) {
  const auto defaulted = RequestPolicy(TestLimits()).Resolve(ValidRequest());
  ASSERT_TRUE(defaulted);
  EXPECT_EQ(defaulted->time_limit_s(), 120u);

  auto request = ValidRequest();
  request.set_time_limit_s(900);
  const auto at_max = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_TRUE(at_max);
  EXPECT_EQ(at_max->time_limit_s(), 900u);

  request.set_time_limit_s(901);
  const auto above = RequestPolicy(TestLimits()).Resolve(request);
  ASSERT_FALSE(above);
  EXPECT_EQ(above.error().field, "time_limit_s");
  EXPECT_NE(above.error().message.find("900"), std::string::npos);
}

TEST(RequestPolicyTest, ClientRequestIdLengthBoundedAt128) {
  auto request = ValidRequest();
  request.set_client_request_id(std::string(128, 'a'));
  EXPECT_EQ(ErrorField(request), "");
  request.set_client_request_id(std::string(129, 'a'));
  EXPECT_EQ(ErrorField(request), "client_request_id");
}

TEST(RequestPolicyTest, ClientRequestIdMustBePrintableAscii) {
  const std::vector<std::string> ids = {"run\n1", std::string("a\0b", 3), "tab\there",
                                       "del\x7f", "caf\xc3\xa9"};
  for (const std::string& id : ids) {
    auto request = ValidRequest();
    request.set_client_request_id(id);
    EXPECT_EQ(ErrorField(request), "client_request_id") << "id of " << id.size() << " bytes";
  }
}

TEST(RequestPolicyTest, LimitsAccessorReturnsConfiguredLimits) {
  const RequestPolicy policy(TestLimits());
  EXPECT_EQ(policy.limits().max_source_bytes, 1024u);
  EXPECT_EQ(policy.limits().backends.size(), 2u);
}

// -- anti-cheat profile and overrides ------------------------------------------------

using static_check::AnticheatProfile;
using static_check::Severity;

// "strict" (every rule rejects, the default) and "off", without files.
AnticheatProfiles TwoProfiles() {
  AnticheatProfiles p;
  p.by_name.emplace("strict", AnticheatProfile::Uniform("strict", Severity::kReject));
  p.by_name.emplace("off", AnticheatProfile::Uniform("off", Severity::kOff));
  p.default_name = "strict";
  return p;
}

RequestPolicy PolicyWithProfiles() { return RequestPolicy(TestLimits(), TwoProfiles()); }

TEST(RequestPolicyTest, EmptyProfileMeansTheDefault) {
  const auto job = PolicyWithProfiles().ResolveJob(ValidRequest());
  ASSERT_TRUE(job) << job.error().field << ": " << job.error().message;
  EXPECT_EQ(job->settings.anticheat_profile(), "strict");
  EXPECT_EQ(job->anticheat.name(), "strict");
  EXPECT_EQ(job->anticheat.severity("py.matmul-operator"), Severity::kReject);
}

TEST(RequestPolicyTest, NamedProfileIsUsed) {
  auto request = ValidRequest();
  request.set_anticheat_profile("off");
  const auto job = PolicyWithProfiles().ResolveJob(request);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->settings.anticheat_profile(), "off");
  EXPECT_TRUE(job->anticheat.all_off());
}

TEST(RequestPolicyTest, UnknownProfileNamesFieldAndListsProfiles) {
  auto request = ValidRequest();
  request.set_anticheat_profile("paranoid");
  const auto result = PolicyWithProfiles().Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "anticheat_profile");
  EXPECT_NE(result.error().message.find("paranoid"), std::string::npos) << result.error().message;
  EXPECT_NE(result.error().message.find("off, strict"), std::string::npos) << result.error().message;
}

TEST(RequestPolicyTest, ProfileNameIsEchoedSafely) {
  auto request = ValidRequest();
  request.set_anticheat_profile("bad\nname" + std::string(200, 'x'));
  const auto result = PolicyWithProfiles().Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "anticheat_profile");
  EXPECT_EQ(result.error().message.find('\n'), std::string::npos);
  EXPECT_LT(result.error().message.size(), 200u);
}

TEST(RequestPolicyTest, OverrideChangesOneRule) {
  auto request = ValidRequest();
  (*request.mutable_anticheat_overrides())["py.matmul-operator"] = "suspicious";
  (*request.mutable_anticheat_overrides())["kernel.none"] = "off";
  const auto job = PolicyWithProfiles().ResolveJob(request);
  ASSERT_TRUE(job) << job.error().field << ": " << job.error().message;
  EXPECT_EQ(job->anticheat.severity("py.matmul-operator"), Severity::kSuspicious);
  EXPECT_EQ(job->anticheat.severity("kernel.none"), Severity::kOff);
  EXPECT_EQ(job->anticheat.severity("py.file-io"), Severity::kReject);
  // The settings name the profile, not the overrides.
  EXPECT_EQ(job->settings.anticheat_profile(), "strict");
}

TEST(RequestPolicyTest, OverrideOfUnknownRuleNamesTheRule) {
  auto request = ValidRequest();
  (*request.mutable_anticheat_overrides())["py.no-such-rule"] = "off";
  const auto result = PolicyWithProfiles().Resolve(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "anticheat_overrides[py.no-such-rule]");
}

TEST(RequestPolicyTest, OverrideWithBadSeverityNamesTheRule) {
  for (const char* severity : {"REJECT", "warn", "", "off "}) {
    auto request = ValidRequest();
    (*request.mutable_anticheat_overrides())["py.matmul-operator"] = severity;
    const auto result = PolicyWithProfiles().Resolve(request);
    ASSERT_FALSE(result) << severity;
    EXPECT_EQ(result.error().field, "anticheat_overrides[py.matmul-operator]") << severity;
    EXPECT_NE(result.error().message.find("reject, suspicious, info or off"), std::string::npos);
  }
}

TEST(RequestPolicyTest, FirstBadOverrideInRuleOrderIsReported) {
  auto request = ValidRequest();
  (*request.mutable_anticheat_overrides())["zz.unknown"] = "off";
  (*request.mutable_anticheat_overrides())["aa.unknown"] = "off";
  (*request.mutable_anticheat_overrides())["kernel.none"] = "bogus";
  for (int i = 0; i < 5; ++i) {
    const auto result = PolicyWithProfiles().Resolve(request);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().field, "anticheat_overrides[aa.unknown]");
  }
}

TEST(RequestPolicyTest, DefaultPolicyHasOnlyTheOffProfile) {
  const RequestPolicy policy(TestLimits());
  EXPECT_EQ(policy.profiles().names(), std::vector<std::string>{"off"});
  const auto job = policy.ResolveJob(ValidRequest());
  ASSERT_TRUE(job);
  EXPECT_TRUE(job->anticheat.all_off());
}

v1::CheckRequest ValidCheck() {
  v1::CheckRequest request;
  request.set_candidate_source("class ModelNew: pass\n");
  request.set_backend(v1::BACKEND_CPU);
  return request;
}

std::string CheckErrorField(const v1::CheckRequest& request) {
  const auto result = PolicyWithProfiles().ResolveCheck(request);
  return result ? std::string() : result.error().field;
}

TEST(RequestPolicyTest, CheckNeedsOnlyCandidateAndBackend) {
  const auto result = PolicyWithProfiles().ResolveCheck(ValidCheck());
  ASSERT_TRUE(result) << result.error().field << ": " << result.error().message;
  EXPECT_EQ(result->backend, v1::BACKEND_CPU);
  EXPECT_EQ(result->precision, v1::PRECISION_FP32);
  EXPECT_EQ(result->anticheat.name(), "strict");
}

TEST(RequestPolicyTest, CheckValidatesLikeEvaluate) {
  auto request = ValidCheck();
  request.clear_candidate_source();
  EXPECT_EQ(CheckErrorField(request), "candidate_source");

  request = ValidCheck();
  request.set_reference_source(std::string(1025, 'x'));
  EXPECT_EQ(CheckErrorField(request), "reference_source");

  request = ValidCheck();
  request.clear_backend();
  EXPECT_EQ(CheckErrorField(request), "backend");

  request = ValidCheck();
  request.set_backend(static_cast<v1::Backend>(42));
  EXPECT_EQ(CheckErrorField(request), "backend");

  request = ValidCheck();
  request.set_precision(static_cast<v1::Precision>(42));
  EXPECT_EQ(CheckErrorField(request), "precision");

  request = ValidCheck();
  request.set_anticheat_profile("nope");
  EXPECT_EQ(CheckErrorField(request), "anticheat_profile");

  request = ValidCheck();
  (*request.mutable_anticheat_overrides())["py.matmul-operator"] = "loud";
  EXPECT_EQ(CheckErrorField(request), "anticheat_overrides[py.matmul-operator]");

  request = ValidCheck();
  request.set_client_request_id(std::string(129, 'a'));
  EXPECT_EQ(CheckErrorField(request), "client_request_id");
}

TEST(RequestPolicyTest, CheckAcceptsBackendTheDaemonDoesNotServe) {
  auto request = ValidCheck();
  request.set_backend(v1::BACKEND_TRITON);  // TestLimits serves cpu and cuda.
  request.set_precision(v1::PRECISION_BF16);
  const auto result = PolicyWithProfiles().ResolveCheck(request);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->backend, v1::BACKEND_TRITON);
  EXPECT_EQ(result->precision, v1::PRECISION_BF16);
}

TEST(RequestPolicyTest, TaskBackendAndPrecisionMapping) {
  EXPECT_EQ(TaskBackendOf(v1::BACKEND_CPU), static_check::TaskBackend::kCpu);
  EXPECT_EQ(TaskBackendOf(v1::BACKEND_CUDA), static_check::TaskBackend::kCuda);
  EXPECT_EQ(TaskBackendOf(v1::BACKEND_TRITON), static_check::TaskBackend::kTriton);
  EXPECT_EQ(TaskPrecisionOf(v1::PRECISION_UNSPECIFIED), static_check::TaskPrecision::kFp32);
  EXPECT_EQ(TaskPrecisionOf(v1::PRECISION_FP16), static_check::TaskPrecision::kFp16);
  EXPECT_EQ(TaskPrecisionOf(v1::PRECISION_BF16), static_check::TaskPrecision::kBf16);
}

// -- loading a profile directory -------------------------------------------------------

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(AnticheatProfilesTest, LoadsEveryProfileOfTheDirectory) {
  kbox::testing::TempDir dir;
  WriteFile(dir.path() / "strict.profile", "default reject\n");
  WriteFile(dir.path() / "quiet.profile", "extends strict\npy.matmul-operator info\n");
  WriteFile(dir.path() / "README", "not a profile\n");
  const auto loaded = AnticheatProfiles::LoadDir(dir.path(), "strict");
  ASSERT_TRUE(loaded) << loaded.error().field << ": " << loaded.error().message;
  EXPECT_EQ(loaded->names(), (std::vector<std::string>{"quiet", "strict"}));
  EXPECT_EQ(loaded->default_name, "strict");
  EXPECT_EQ(loaded->by_name.at("quiet").severity("py.matmul-operator"), Severity::kInfo);
}

TEST(AnticheatProfilesTest, BrokenProfileNamesFileAndLine) {
  kbox::testing::TempDir dir;
  WriteFile(dir.path() / "strict.profile", "default reject\n");
  WriteFile(dir.path() / "broken.profile", "default off\n# fine\npy.no-such-rule reject\n");
  const auto loaded = AnticheatProfiles::LoadDir(dir.path(), "strict");
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().field.find(dir.path().string()), std::string::npos)
      << loaded.error().field;
  EXPECT_NE(loaded.error().message.find("broken.profile:3"), std::string::npos)
      << loaded.error().message;
}

TEST(AnticheatProfilesTest, MissingDefaultIsAnError) {
  kbox::testing::TempDir dir;
  WriteFile(dir.path() / "lenient.profile", "default info\n");
  const auto loaded = AnticheatProfiles::LoadDir(dir.path(), "strict");
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().field, "default_anticheat_profile");
  EXPECT_NE(loaded.error().message.find("strict"), std::string::npos);
  EXPECT_NE(loaded.error().message.find("lenient"), std::string::npos);
}

TEST(AnticheatProfilesTest, MissingDirectoryIsAnError) {
  kbox::testing::TempDir dir;
  const auto loaded = AnticheatProfiles::LoadDir(dir.path() / "nope", "strict");
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().field.find("anticheat_profile_dir"), std::string::npos);
}

TEST(AnticheatProfilesTest, ShippedProfilesLoad) {
  const auto loaded = AnticheatProfiles::LoadDir(KBOX_SOURCE_ANTICHEAT_DIR, "strict");
  ASSERT_TRUE(loaded) << loaded.error().field << ": " << loaded.error().message;
  for (const char* name : {"strict", "lenient", "off"}) {
    EXPECT_TRUE(loaded->by_name.contains(name)) << name;
  }
  EXPECT_TRUE(loaded->by_name.at("off").all_off());
  EXPECT_EQ(loaded->by_name.at("strict").severity("py.matmul-operator"), Severity::kReject);
}

}  // namespace
}  // namespace kbox
