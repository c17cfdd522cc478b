#include "worker/job_cgroup.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kbox {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The group directory of each hierarchy a job's processes join.
std::vector<fs::path> Dirs(const JobCgroup& job) {
  std::vector<fs::path> dirs;
  for (const auto& procs : job.ProcsFiles()) dirs.push_back(fs::path(procs).parent_path());
  return dirs;
}

// What kboxd writes into a stage's group, read back from the kernel's files.
// Needs root and a writable cgroup hierarchy (CI's v1, the GPU machine's v2);
// skipped elsewhere. cpu.weight exists only on v2 with the cpu controller:
// run stages outweigh compiles there (config run_stage_cpu_weight).
TEST(JobCgroupTest, LimitsAndCpuWeightAreWritten) {
  auto root = CgroupRoot::Create("kbox-cgroup-test-" + std::to_string(::getpid()));
  if (!root) GTEST_SKIP() << "no cgroups to write here: " << root.error().message;
  const std::string described = root->Describe();
  const CgroupLimits run{.memory_bytes = 512ull << 20, .pids = 128, .cpu_cores = 0, .cpu_weight = 1000};
  CgroupLimits compile = run;
  compile.cpu_weight = 0;
  auto run_group = root->CreateJob("run", run);
  ASSERT_TRUE(run_group) << run_group.error().message;
  auto compile_group = root->CreateJob("compile", compile);
  ASSERT_TRUE(compile_group) << compile_group.error().message;
  const auto run_dirs = Dirs(*run_group);
  const auto compile_dirs = Dirs(*compile_group);
  if (described.rfind("cgroup v2", 0) == 0) {
    ASSERT_EQ(run_dirs.size(), 1u);
    EXPECT_EQ(Read(run_dirs[0] / "memory.max"), std::to_string(512ull << 20));
    EXPECT_EQ(Read(run_dirs[0] / "pids.max"), "128");
    if (described.find("cpu") == std::string::npos) {
      GTEST_SKIP() << "cgroup v2 without the cpu controller: no cpu.weight";
    }
    EXPECT_EQ(Read(run_dirs[0] / "cpu.weight"), "1000");
    EXPECT_EQ(Read(compile_dirs[0] / "cpu.weight"), "100");
  } else {
    ASSERT_EQ(run_dirs.size(), 2u);  // memory, pids
    EXPECT_EQ(Read(run_dirs[0] / "memory.limit_in_bytes"), std::to_string(512ull << 20));
    EXPECT_EQ(Read(run_dirs[1] / "pids.max"), "128");
    EXPECT_EQ(Read(compile_dirs[1] / "pids.max"), "128");
  }
}

}  // namespace
}  // namespace kbox
