#pragma once

// What must hold for any request body, whatever its bytes: the checks of
// request_decode_fuzzer and of the replay of its regression inputs
// (tests/unit/daemon/decode_regression_test.cc), in one place so both check
// the same thing. The body goes, as JSON and as binary protobuf, into each
// message a POST decodes (EvaluateRequest for /v1/evaluate, SubmitRequest for
// /v1/jobs single and batch, CheckRequest for /v1/check) through
// DecodeMessage, the function the server decodes with, then through the
// request policy, as ApiHandler does.
//  - a refusal names a field and says something, and its ErrorResponse
//    encodes as JSON (a client gets the 400 it was sent, not the encoder's
//    fallback body);
//  - an accepted message survives JSON and binary round trips unchanged.

#include <string>
#include <string_view>

#include <google/protobuf/stubs/common.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "daemon/message_codec.h"
#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"
#include "policy/request_policy.h"

namespace kbox::fuzz {

// "" when the refusal is one a client can read, else what is wrong with it.
inline std::string RefusalViolation(const FieldError& error) {
  if (error.field.empty()) return "refusal names no field";
  if (error.message.empty()) return "refusal with an empty message";
  // Checked with protobuf's own validator, not kboxd's ClientText.
  if (!google::protobuf::internal::IsStructurallyValidUTF8(error.field) ||
      !google::protobuf::internal::IsStructurallyValidUTF8(error.message)) {
    return "refusal's field or message is not valid UTF-8";
  }
  v1::ErrorResponse body;
  body.set_code(400);
  body.set_field(error.field);
  body.set_message(error.message);
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(body, &json).ok()) {
    return "refusal's ErrorResponse does not encode as JSON (field or message not UTF-8)";
  }
  return "";
}

template <class Message>
std::string RoundTripViolation(const Message& decoded) {
  for (Encoding encoding : {Encoding::kJson, Encoding::kProtobuf}) {
    Message again;
    const std::string encoded = EncodeMessage(decoded, encoding);
    if (!DecodeMessage(encoded, encoding, again)) return "accepted message does not decode again";
    // NaN tolerances ("atol": "NaN") are accepted here and refused by the
    // policy; a NaN equals itself for this comparison.
    google::protobuf::util::DefaultFieldComparator comparator;
    comparator.set_treat_nan_as_equal(true);
    google::protobuf::util::MessageDifferencer differencer;
    differencer.set_field_comparator(&comparator);
    if (!differencer.Compare(decoded, again)) {
      return "accepted message changes in a round trip";
    }
  }
  return "";
}

inline RequestPolicy& FuzzPolicy() {
  static RequestPolicy policy(RequestLimits{.backends = {v1::BACKEND_CPU, v1::BACKEND_CUDA}});
  return policy;
}

// "" when every decoder treated `body` as it must, else the first violation.
inline std::string RequestDecodeViolation(const std::string& body) {
  for (Encoding encoding : {Encoding::kJson, Encoding::kProtobuf}) {
    {
      v1::EvaluateRequest request;
      auto decoded = DecodeMessage(body, encoding, request);
      if (!decoded) {
        if (auto v = RefusalViolation(decoded.error()); !v.empty()) return "evaluate: " + v;
      } else {
        if (auto v = RoundTripViolation(request); !v.empty()) return "evaluate: " + v;
        auto job = FuzzPolicy().ResolveJob(request);
        if (!job) {
          if (auto v = RefusalViolation(job.error()); !v.empty()) return "evaluate policy: " + v;
        }
      }
    }
    {
      v1::SubmitRequest submit;
      auto decoded = DecodeMessage(body, encoding, submit);
      if (!decoded) {
        if (auto v = RefusalViolation(decoded.error()); !v.empty()) return "submit: " + v;
      } else {
        if (auto v = RoundTripViolation(submit); !v.empty()) return "submit: " + v;
        for (const v1::SubmitItem& item : submit.jobs()) {
          auto job = FuzzPolicy().ResolveJob(item.request());
          if (!job) {
            if (auto v = RefusalViolation(job.error()); !v.empty()) return "submit policy: " + v;
          }
        }
      }
    }
    {
      v1::CheckRequest check;
      auto decoded = DecodeMessage(body, encoding, check);
      if (!decoded) {
        if (auto v = RefusalViolation(decoded.error()); !v.empty()) return "check: " + v;
      } else {
        if (auto v = RoundTripViolation(check); !v.empty()) return "check: " + v;
        auto resolved = FuzzPolicy().ResolveCheck(check);
        if (!resolved) {
          if (auto v = RefusalViolation(resolved.error()); !v.empty()) return "check policy: " + v;
        }
      }
    }
  }
  // The Content-Type parser sees client bytes too.
  auto content_type = EncodingFromContentType(body.substr(0, 256));
  if (!content_type) {
    if (auto v = RefusalViolation(content_type.error()); !v.empty()) return "content type: " + v;
  }
  return "";
}

}  // namespace kbox::fuzz
