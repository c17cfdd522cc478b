// libFuzzer target: request bodies through kboxd's decoders (DecodeMessage
// as JSON and as binary protobuf, into EvaluateRequest, SubmitRequest and
// CheckRequest, then the request policy); request_decode_check.h says what
// must hold. A violation is a __builtin_trap(), a crash to libFuzzer.
// The input is the body whole; seeds are real request bodies
// (tests/fuzz/seeds/requests). scripts/fuzz runs it.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "tests/fuzz/request_decode_check.h"

// protobuf logs every malformed message it is handed; millions of lines would
// only slow the run (the verdict is the return value, not the log).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  const std::string violation = kbox::fuzz::RequestDecodeViolation(body);
  if (!violation.empty()) {
    std::fprintf(stderr, "request_decode_fuzzer: invariant violated: %s\n", violation.c_str());
    __builtin_trap();
  }
  return 0;
}
