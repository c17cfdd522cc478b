#include "daemon/json_type_check.h"

#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/wrappers.pb.h>

#include <limits>
#include <memory>
#include <string>

#include "daemon/message_codec.h"
#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"

namespace kbox {
namespace {

// A message with one field of every JSON-relevant kind, so each rule is
// tested once without depending on which kinds kboxd's own requests use.
constexpr const char* kEveryKind = R"pb(
  name: "every_kind.proto"
  package: "kbox.test"
  dependency: "google/protobuf/wrappers.proto"
  dependency: "google/protobuf/duration.proto"
  message_type {
    name: "EveryKind"
    field { name: "flag" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL }
    field { name: "i32" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 }
    field { name: "u32" number: 3 label: LABEL_OPTIONAL type: TYPE_UINT32 }
    field { name: "s32" number: 4 label: LABEL_OPTIONAL type: TYPE_SINT32 }
    field { name: "f32" number: 5 label: LABEL_OPTIONAL type: TYPE_FIXED32 }
    field { name: "i64" number: 6 label: LABEL_OPTIONAL type: TYPE_INT64 }
    field { name: "u64" number: 7 label: LABEL_OPTIONAL type: TYPE_UINT64 }
    field { name: "sf64" number: 8 label: LABEL_OPTIONAL type: TYPE_SFIXED64 }
    field { name: "real" number: 9 label: LABEL_OPTIONAL type: TYPE_DOUBLE }
    field { name: "real32" number: 10 label: LABEL_OPTIONAL type: TYPE_FLOAT }
    field { name: "text" number: 11 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "blob" number: 12 label: LABEL_OPTIONAL type: TYPE_BYTES }
    field { name: "flags" number: 13 label: LABEL_REPEATED type: TYPE_BOOL }
    field { name: "wrapped_flag" number: 14 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".google.protobuf.BoolValue" }
    field { name: "wrapped_u32" number: 15 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".google.protobuf.UInt32Value" }
    field { name: "wait" number: 16 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".google.protobuf.Duration" }
    field { name: "child" number: 17 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".kbox.test.EveryKind" }
    field { name: "counts" number: 18 label: LABEL_REPEATED type: TYPE_MESSAGE
            type_name: ".kbox.test.EveryKind.CountsEntry" }
    nested_type {
      name: "CountsEntry"
      options { map_entry: true }
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
      field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_UINT32 }
    }
  }
)pb";

class EveryKindTest : public testing::Test {
 protected:
  void SetUp() override {
    // Links the well-known types into the generated pool the new file builds on.
    google::protobuf::BoolValue::descriptor();
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kEveryKind, &file));
    type_ = pool_.BuildFile(file) == nullptr ? nullptr : pool_.FindMessageTypeByName("kbox.test.EveryKind");
    ASSERT_NE(type_, nullptr);
  }

  // What DecodeMessage does: protobuf's parser, then the type check.
  boost::system::result<void, FieldError> Decode(const std::string& body) {
    std::unique_ptr<google::protobuf::Message> message(factory_.GetPrototype(type_)->New());
    return DecodeMessage(body, Encoding::kJson, *message);
  }

  void ExpectRefused(const std::string& body, const std::string& field) {
    const auto checked = CheckJsonTypes(body, *type_);
    ASSERT_FALSE(checked) << body;
    EXPECT_EQ(checked.error().field, field) << body << ": " << checked.error().message;
    EXPECT_NE(checked.error().message.find("must be"), std::string::npos) << checked.error().message;
    const auto decoded = Decode(body);
    ASSERT_FALSE(decoded) << body;
    EXPECT_EQ(decoded.error().field, field) << body << ": " << decoded.error().message;
  }

  void ExpectAccepted(const std::string& body) {
    const auto checked = CheckJsonTypes(body, *type_);
    EXPECT_TRUE(checked) << body << ": " << checked.error().field << " " << checked.error().message;
    const auto decoded = Decode(body);
    EXPECT_TRUE(decoded) << body << ": " << decoded.error().field << " " << decoded.error().message;
  }

  google::protobuf::DescriptorPool pool_{google::protobuf::DescriptorPool::generated_pool()};
  google::protobuf::DynamicMessageFactory factory_{&pool_};
  const google::protobuf::Descriptor* type_ = nullptr;
};

TEST_F(EveryKindTest, BoolTakesOnlyTrueOrFalse) {
  ExpectAccepted(R"({"flag": true})");
  ExpectAccepted(R"({"flag": false})");
  for (const char* value : {R"("true")", R"("yes")", R"("1")", R"("")"}) {
    ExpectRefused(std::string(R"({"flag": )") + value + "}", "flag");
  }
}

TEST_F(EveryKindTest, ThirtyTwoBitIntegersTakeOnlyNumbers) {
  for (const char* field : {"i32", "u32", "s32", "f32"}) {
    ExpectAccepted(std::string(R"({")") + field + R"(": 7})");
    ExpectRefused(std::string(R"({")") + field + R"(": "7"})", field);
  }
}

TEST_F(EveryKindTest, SixtyFourBitIntegersTakeNumbersAndDigitStrings) {
  for (const char* field : {"i64", "u64", "sf64"}) {
    ExpectAccepted(std::string(R"({")") + field + R"(": 7})");
    // Past 2^53, where a JSON number loses precision: the mapping prints a string.
    ExpectAccepted(std::string(R"({")") + field + R"(": "9007199254740993"})");
  }
}

TEST_F(EveryKindTest, FloatingPointTakesNumbersAndTheThreeSpecialStrings) {
  for (const char* field : {"real", "real32"}) {
    ExpectAccepted(std::string(R"({")") + field + R"(": 0.5})");
    for (const char* special : {"NaN", "Infinity", "-Infinity"}) {
      ExpectAccepted(std::string(R"({")") + field + R"(": ")" + special + R"("})");
    }
    ExpectRefused(std::string(R"({")") + field + R"(": "0.5"})", field);
    ExpectRefused(std::string(R"({")") + field + R"(": "nan"})", field);
  }
}

TEST_F(EveryKindTest, StringsAndBytesTakeStrings) {
  ExpectAccepted(R"({"text": "x", "blob": "eA=="})");
  // The parser refuses these itself; the check agrees on its own.
  EXPECT_FALSE(CheckJsonTypes(R"({"text": 5})", *type_));
  EXPECT_FALSE(CheckJsonTypes(R"({"blob": true})", *type_));
}

TEST_F(EveryKindTest, RepeatedElementsAreCheckedEach) {
  ExpectAccepted(R"({"flags": [true, false]})");
  ExpectRefused(R"({"flags": [true, "false"]})", "flags[1]");
}

TEST_F(EveryKindTest, WrappersTakeWhatTheirValueTakes) {
  ExpectAccepted(R"({"wrapped_flag": true, "wrapped_u32": 3})");
  ExpectRefused(R"({"wrapped_flag": "true"})", "wrapped_flag");
  ExpectRefused(R"({"wrapped_u32": "3"})", "wrapped_u32");
}

TEST_F(EveryKindTest, WellKnownTypesKeepTheirOwnJsonForm) {
  ExpectAccepted(R"({"wait": "1.5s"})");
}

TEST_F(EveryKindTest, NestedMessagesAndMapValuesAreChecked) {
  ExpectAccepted(R"({"child": {"child": {"flag": true}}, "counts": {"a": 1}})");
  ExpectRefused(R"({"child": {"child": {"flag": "1"}}})", "child.child.flag");
  ExpectRefused(R"({"counts": {"a": 1, "b": "2"}})", "counts[b]");
}

TEST_F(EveryKindTest, NullIsTheDefaultForAnyField) {
  ExpectAccepted(R"({"flag": null, "i32": null, "child": null, "counts": null, "flags": null})");
}

TEST_F(EveryKindTest, JsonNamesAreCheckedLikeProtoNames) {
  ExpectRefused(R"({"wrappedFlag": "true"})", "wrapped_flag");
}

TEST_F(EveryKindTest, ShapeOfContainersIsChecked) {
  // The parser refuses these first; the walk does not rely on it.
  EXPECT_EQ(CheckJsonTypes(R"({"flags": true})", *type_).error().field, "flags");
  EXPECT_EQ(CheckJsonTypes(R"({"counts": [1]})", *type_).error().field, "counts");
  EXPECT_EQ(CheckJsonTypes(R"({"child": 1})", *type_).error().field, "child");
  EXPECT_EQ(CheckJsonTypes(R"([])", *type_).error().field, "body");
  EXPECT_EQ(CheckJsonTypes(R"({"flag": )", *type_).error().field, "body");
}

// kboxd's own requests, through DecodeMessage as the server calls it.

TEST(JsonTypeCheckTest, EvaluateRequestRefusesAStringForABool) {
  for (const char* body : {R"({"fresh_reference_timing": "yes"})",
                           R"({"fresh_reference_timing": "1"})",
                           R"({"fresh_reference_timing": "true"})"}) {
    v1::EvaluateRequest request;
    const auto decoded = DecodeMessage(body, Encoding::kJson, request);
    ASSERT_FALSE(decoded) << body;
    EXPECT_EQ(decoded.error().field, "fresh_reference_timing");
    EXPECT_NE(decoded.error().message.find("true or false"), std::string::npos)
        << decoded.error().message;
  }
  v1::EvaluateRequest request;
  const auto decoded = DecodeMessage(R"({"measure_performance": "false"})", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "measure_performance");
}

TEST(JsonTypeCheckTest, EvaluateRequestNumbersAndEnums) {
  v1::EvaluateRequest request;
  auto decoded = DecodeMessage(R"({"correctness_trials": "5"})", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "correctness_trials");
  decoded = DecodeMessage(R"({"atol": "0.01"})", Encoding::kJson, request);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "atol");
  // Enums by name or by number, the 64-bit seed as a string: all in the mapping.
  decoded = DecodeMessage(
      R"({"backend": 1, "precision": "PRECISION_FP16", "seed": "18446744073709551615",)"
      R"( "correctness_trials": 5, "atol": 0.01, "rtol": "Infinity"})",
      Encoding::kJson, request);
  ASSERT_TRUE(decoded) << decoded.error().field << " " << decoded.error().message;
  EXPECT_EQ(request.backend(), 1);
  EXPECT_EQ(request.seed(), 18446744073709551615u);
}

TEST(JsonTypeCheckTest, SubmitRequestNamesTheJobAndField) {
  v1::SubmitRequest submit;
  const auto decoded = DecodeMessage(
      R"({"jobs": [{"request": {"fresh_reference_timing": true}},)"
      R"( {"idempotency_key": "k", "request": {"time_limit_s": "60"}}]})",
      Encoding::kJson, submit);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().field, "jobs[1].request.time_limit_s");
}

TEST(JsonTypeCheckTest, CheckRequestIsCheckedToo) {
  const auto& type = *v1::CheckRequest::descriptor();
  EXPECT_TRUE(CheckJsonTypes(R"({"candidate_source": "x", "backend": "BACKEND_CPU",)"
                             R"( "precision": 2, "anticheat_overrides": {"r": "off"}})",
                             type));
  // The parser refuses a number in a map<string, string>; the walk names the entry itself.
  const auto checked = CheckJsonTypes(R"({"anticheat_overrides": {"a": "off", "r": 1}})", type);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().field, "anticheat_overrides[r]");
  EXPECT_EQ(checked.error().message, "must be a string, not a number");
}

TEST(JsonTypeCheckTest, EncodedResultsDecodeAgain) {
  // kboxd's own JSON (64-bit ints as strings, NaN as "NaN") passes the check.
  v1::EvaluateResult result;
  result.set_status(v1::INCORRECT);
  result.set_speedup(std::numeric_limits<double>::quiet_NaN());
  auto* trial = result.add_trials();
  trial->set_seed(18446744073709551615u);
  const std::string body = EncodeMessage(result, Encoding::kJson);
  v1::EvaluateResult decoded;
  const auto status = DecodeMessage(body, Encoding::kJson, decoded);
  ASSERT_TRUE(status) << status.error().field << " " << status.error().message << "\n" << body;
  EXPECT_EQ(decoded.trials(0).seed(), 18446744073709551615u);
}

}  // namespace
}  // namespace kbox
