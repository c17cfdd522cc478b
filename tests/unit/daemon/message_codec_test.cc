#include "daemon/message_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"

namespace kbox {
namespace {

TEST(MessageCodecTest, JsonContentTypes) {
  for (const char* type : {"application/json", "application/json; charset=utf-8",
                           "Application/JSON ;charset=UTF-8", ""}) {
    const auto encoding = EncodingFromContentType(type);
    ASSERT_TRUE(encoding) << "'" << type << "'";
    EXPECT_EQ(*encoding, Encoding::kJson) << "'" << type << "'";
  }
}

TEST(MessageCodecTest, ProtobufContentTypes) {
  for (const char* type : {"application/x-protobuf", "application/protobuf"}) {
    const auto encoding = EncodingFromContentType(type);
    ASSERT_TRUE(encoding) << type;
    EXPECT_EQ(*encoding, Encoding::kProtobuf) << type;
  }
}

TEST(MessageCodecTest, UnsupportedContentTypeNamesHeader) {
  const auto encoding = EncodingFromContentType("text/plain");
  ASSERT_FALSE(encoding);
  EXPECT_EQ(encoding.error().field, "Content-Type");
  EXPECT_NE(encoding.error().message.find("text/plain"), std::string::npos);
}

TEST(MessageCodecTest, ContentTypeOfEachEncoding) {
  EXPECT_STREQ(ContentTypeOf(Encoding::kJson), "application/json");
  EXPECT_STREQ(ContentTypeOf(Encoding::kProtobuf), "application/x-protobuf");
}

TEST(MessageCodecTest, DecodesJsonRequest) {
  v1::EvaluateRequest request;
  const auto decoded = DecodeMessage(
      R"({"reference_source":"r","candidateSource":"c","backend":"BACKEND_CUDA",)"
      R"("seed":"42","atol":0.5,"measure_performance":false})",
      Encoding::kJson, request);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(request.reference_source(), "r");
  EXPECT_EQ(request.candidate_source(), "c");
  EXPECT_EQ(request.backend(), v1::BACKEND_CUDA);
  ASSERT_TRUE(request.has_seed());
  EXPECT_EQ(request.seed(), 42u);
  EXPECT_DOUBLE_EQ(request.atol(), 0.5);
  ASSERT_TRUE(request.has_measure_performance());
  EXPECT_FALSE(request.measure_performance());
  EXPECT_FALSE(request.has_rtol());
}

TEST(MessageCodecTest, MalformedJsonIsError) {
  v1::EvaluateRequest request;
  const auto decoded = DecodeMessage(R"({"reference_source": "r",)", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_NE(decoded.error().message.find("invalid JSON"), std::string::npos)
      << decoded.error().message;
}

TEST(MessageCodecTest, UnknownFieldIsNamed) {
  v1::EvaluateRequest request;
  const auto decoded = DecodeMessage(R"({"bogus":1})", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "bogus") << decoded.error().message;
}

TEST(MessageCodecTest, UnknownEnumNameNamesField) {
  v1::EvaluateRequest request;
  const auto decoded = DecodeMessage(R"({"backend":"BACKEND_GPU"})", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "backend") << decoded.error().message;
}

TEST(MessageCodecTest, InvalidValueNamesField) {
  for (const auto& [body, field] : {std::pair<const char*, const char*>{R"({"atol":"abc"})", "atol"},
                                    {R"({"seed":-1})", "seed"},
                                    {R"({"reference_source":5})", "reference_source"}}) {
    v1::EvaluateRequest request;
    const auto decoded = DecodeMessage(body, Encoding::kJson, request);
    ASSERT_FALSE(decoded) << body;
    EXPECT_EQ(decoded.error().field, field) << decoded.error().message;
  }
}

TEST(MessageCodecTest, WrongTypeIsError) {
  v1::EvaluateRequest request;
  const auto decoded = DecodeMessage(R"({"correctness_trials":"many"})", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_FALSE(decoded.error().message.empty());
}

TEST(MessageCodecTest, EmptyBodyIsError) {
  for (const char* body : {"", "  \r\n\t"}) {
    v1::EvaluateRequest request;
    const auto decoded = DecodeMessage(body, Encoding::kJson, request);
    ASSERT_FALSE(decoded) << "'" << body << "'";
    EXPECT_EQ(decoded.error().field, "body");
    EXPECT_NE(decoded.error().message.find("empty"), std::string::npos);
  }
}

TEST(MessageCodecTest, BinaryRoundTrip) {
  v1::EvaluateRequest request;
  request.set_reference_source(std::string("ref\0with nul", 12));
  request.set_candidate_source("cand");
  request.set_backend(v1::BACKEND_TRITON);
  request.set_seed(0);
  request.set_client_request_id("id-1");
  const std::string body = EncodeMessage(request, Encoding::kProtobuf);

  v1::EvaluateRequest decoded;
  ASSERT_TRUE(DecodeMessage(body, Encoding::kProtobuf, decoded));
  EXPECT_EQ(decoded.SerializeAsString(), request.SerializeAsString());
  EXPECT_TRUE(decoded.has_seed());
  EXPECT_EQ(decoded.reference_source().size(), 12u);
}

TEST(MessageCodecTest, JsonRoundTrip) {
  v1::EvaluateResult result;
  result.set_status(v1::TIMEOUT);
  result.set_speedup(1.5);
  result.add_trials()->set_seed(9);
  const std::string body = EncodeMessage(result, Encoding::kJson);

  v1::EvaluateResult decoded;
  const auto status = DecodeMessage(body, Encoding::kJson, decoded);
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ(decoded.status(), v1::TIMEOUT);
  EXPECT_DOUBLE_EQ(decoded.speedup(), 1.5);
  ASSERT_EQ(decoded.trials_size(), 1);
  EXPECT_EQ(decoded.trials(0).seed(), 9u);
}

TEST(MessageCodecTest, InvalidBinaryIsError) {
  v1::EvaluateRequest request;
  // Field 1, length 5, but only two bytes follow.
  const auto decoded = DecodeMessage(std::string("\x0a\x05" "ab", 4), Encoding::kProtobuf, request);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "body");
  EXPECT_NE(decoded.error().message.find("kbox.v1.EvaluateRequest"), std::string::npos);
}

TEST(MessageCodecTest, JsonPrintsDefaultsWithProtoFieldNames) {
  v1::EvaluateResult result;
  result.set_client_request_id("abc");
  const std::string json = EncodeMessage(result, Encoding::kJson);
  EXPECT_NE(json.find("\"rewardable\":false"), std::string::npos) << json;
  EXPECT_NE(json.find("\"client_request_id\":\"abc\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"job_id\":\"\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"speedup\":0"), std::string::npos) << json;
  EXPECT_EQ(json.find("clientRequestId"), std::string::npos) << json;
  EXPECT_TRUE(json.ends_with("}\n")) << json;
}

TEST(MessageCodecTest, ErrorResponseEncodesAllFields) {
  v1::ErrorResponse error;
  error.set_code(400);
  const std::string json = EncodeMessage(error, Encoding::kJson);
  EXPECT_EQ(json, "{\"code\":400,\"field\":\"\",\"message\":\"\"}\n");
}

}  // namespace
}  // namespace kbox
