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
// skipped elsewhere. Every stage keeps the kernel's cpu.weight (100).
TEST(JobCgroupTest, LimitsAreWritten) {
  auto root = CgroupRoot::Create("kbox-cgroup-test-" + std::to_string(::getpid()));
  if (!root) GTEST_SKIP() << "no cgroups to write here: " << root.error().message();
  const std::string described = root->Describe();
  const CgroupLimits limits{.memory_bytes = 512ull << 20, .pids = 128, .cpu_cores = 0};
  auto group = root->CreateJob("stage", limits);
  ASSERT_TRUE(group) << group.error().message();
  const auto dirs = Dirs(*group);
  if (described.rfind("cgroup v2", 0) == 0) {
    ASSERT_EQ(dirs.size(), 1u);
    EXPECT_EQ(Read(dirs[0] / "memory.max"), std::to_string(512ull << 20));
    EXPECT_EQ(Read(dirs[0] / "pids.max"), "128");
    if (described.find("cpu") != std::string::npos) {
      EXPECT_EQ(Read(dirs[0] / "cpu.weight"), "100");
    }
  } else {
    ASSERT_EQ(dirs.size(), 2u);  // memory, pids
    EXPECT_EQ(Read(dirs[0] / "memory.limit_in_bytes"), std::to_string(512ull << 20));
    EXPECT_EQ(Read(dirs[1] / "pids.max"), "128");
  }
}

}  // namespace
}  // namespace kbox
