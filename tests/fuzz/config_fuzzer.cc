// libFuzzer target: kboxd's configuration, a text-format DaemonConfig with
// command-line flags on top, through ParseCommandLine and ApplyConfigDefaults
// as kboxd starts; config_parse_check.h gives the input layout and what must
// hold. A violation is a __builtin_trap(), a crash to libFuzzer. Seeds are
// real configs (tests/fuzz/seeds/config). scripts/fuzz runs it.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <google/protobuf/stubs/logging.h>
#include <string_view>

#include "tests/fuzz/config_parse_check.h"

// protobuf logs every malformed message it is handed; millions of lines would
// only slow the run (the verdict is the return value, not the log).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string violation = kbox::fuzz::ConfigParseViolation(input);
  if (!violation.empty()) {
    std::fprintf(stderr, "config_fuzzer: invariant violated: %s\n", violation.c_str());
    __builtin_trap();
  }
  return 0;
}
