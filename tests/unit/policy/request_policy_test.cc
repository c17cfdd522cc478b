#include "policy/request_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace kbox
