// Replays the inputs the decoding fuzzers once crashed on
// (tests/fuzz/regressions/request_decode-*, config-*), and their seeds,
// through the same checks the fuzzers make (tests/fuzz/*_check.h), linking
// kboxd's own library: each finding stays fixed without clang or libFuzzer.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/config_parse_check.h"
#include "tests/fuzz/request_decode_check.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Files of tests/fuzz/<dir> whose names start with `prefix`, sorted.
std::vector<fs::path> Inputs(const std::string& dir, const std::string& prefix) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(fs::path(KBOX_SOURCE_DIR) / "tests" / "fuzz" / dir)) {
    if (entry.path().filename().string().starts_with(prefix)) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

TEST(RequestDecodeRegressionTest, FuzzFindingsStayFixed) {
  const auto inputs = Inputs("regressions", "request_decode-");
  for (const auto& path : inputs) {
    EXPECT_EQ(fuzz::RequestDecodeViolation(Read(path)), "") << path;
  }
  EXPECT_GE(inputs.size(), 1u);
}

// Bodies kboxd once accepted and must refuse (request_decode-refused-*: a
// string for a bool or a 32-bit integer, found by review, not by the fuzzer,
// whose invariants cannot tell a lenient decode from a right one): no
// request message takes them.
TEST(RequestDecodeRegressionTest, RefusedBodiesStayRefused) {
  const auto inputs = Inputs("regressions", "request_decode-refused-");
  for (const auto& path : inputs) {
    const std::string body = Read(path);
    v1::EvaluateRequest evaluate;
    v1::SubmitRequest submit;
    v1::CheckRequest check;
    EXPECT_FALSE(DecodeMessage(body, Encoding::kJson, evaluate)) << path;
    EXPECT_FALSE(DecodeMessage(body, Encoding::kJson, submit)) << path;
    EXPECT_FALSE(DecodeMessage(body, Encoding::kJson, check)) << path;
  }
  EXPECT_GE(inputs.size(), 2u);
}

TEST(RequestDecodeRegressionTest, SeedsAreAcceptedAndKeepTheirInvariants) {
  const auto seeds = Inputs("seeds/requests", "");
  for (const auto& path : seeds) {
    const std::string body = Read(path);
    EXPECT_EQ(fuzz::RequestDecodeViolation(body), "") << path;
    // Each seed is a real request: one of the three messages takes it.
    v1::EvaluateRequest evaluate;
    v1::SubmitRequest submit;
    v1::CheckRequest check;
    EXPECT_TRUE(DecodeMessage(body, Encoding::kJson, evaluate) ||
                DecodeMessage(body, Encoding::kJson, submit) ||
                DecodeMessage(body, Encoding::kJson, check))
        << path;
  }
  EXPECT_GE(seeds.size(), 5u);
}

TEST(ConfigParseRegressionTest, FuzzFindingsAndSeedsStayFixed) {
  auto inputs = Inputs("regressions", "config-");
  const auto seeds = Inputs("seeds/config", "");
  EXPECT_GE(seeds.size(), 3u);
  inputs.insert(inputs.end(), seeds.begin(), seeds.end());
  for (const auto& path : inputs) {
    EXPECT_EQ(fuzz::ConfigParseViolation(Read(path)), "") << path;
  }
}

}  // namespace
}  // namespace kbox
