#include "daemon/precompiled_header.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/unit/temp_dir.h"

namespace kbox {
namespace {

ProcessOutcome Exited(int code, const std::string& output) {
  ProcessOutcome o;
  o.end = ProcessOutcome::End::kExited;
  o.exit_code = code;
  o.output_tail = output;
  return o;
}

TEST(PrecompiledHeaderTest, ParsesTheDirectoryFromTheLastLine) {
  const auto built = ParsePrecompiledHeaderBuild(
      Exited(0, "No CUDA runtime is found\n{\"dir\": \"/w/pch/0123abcd\"}\n"), "/w/pch");
  ASSERT_TRUE(built) << built.error().message();
  EXPECT_EQ(*built, "/w/pch/0123abcd");
}

TEST(PrecompiledHeaderTest, ReportsTheBuildersError) {
  const auto built = ParsePrecompiledHeaderBuild(
      Exited(1, "{\"error\": \"RuntimeError: O2: exit 1: no space\"}\n"), "/w/pch");
  ASSERT_FALSE(built);
  EXPECT_EQ(built.error().message(), "kbox_pch.py: RuntimeError: O2: exit 1: no space");
}

TEST(PrecompiledHeaderTest, RefusesAFailedRunOrNoAnswer) {
  ProcessOutcome killed;
  killed.end = ProcessOutcome::End::kTimedOut;
  killed.output_tail = "{\"dir\": \"/w/pch/0123abcd\"}";
  EXPECT_FALSE(ParsePrecompiledHeaderBuild(killed, "/w/pch"));
  EXPECT_FALSE(ParsePrecompiledHeaderBuild(Exited(0, "Traceback ...\n"), "/w/pch"));
  EXPECT_FALSE(ParsePrecompiledHeaderBuild(Exited(0, "{\"other\": 1}"), "/w/pch"));
}

// The sandbox binds the root only: any other directory is refused.
TEST(PrecompiledHeaderTest, RefusesADirectoryOutsideTheRoot) {
  for (const char* dir : {"/etc", "/w/pch", "/w/pch/a/b", "/w/other/abc", "/w/pch/.partial-x-1"}) {
    const auto built = ParsePrecompiledHeaderBuild(
        Exited(0, std::string("{\"dir\": \"") + dir + "\"}"), "/w/pch");
    EXPECT_FALSE(built) << dir;
  }
}

// The real builder, with a root it cannot create (below a regular file):
// the build fails, kboxd carries on, and no directory is offered.
TEST(PrecompiledHeaderTest, FailedBuildOffersNothing) {
  testing::TempDir tmp;
  const auto file = tmp.path() / "file";
  std::ofstream(file) << "not a directory";
  PrecompiledHeader pch;
  pch.StartBuild(HarnessSettings{.python = KBOX_TEST_PYTHON, .harness_dir = KBOX_SOURCE_HARNESS_DIR},
                 file / "pch");
  pch.WaitForBuild();
  EXPECT_EQ(pch.dir(), "");
}

}  // namespace
}  // namespace kbox
