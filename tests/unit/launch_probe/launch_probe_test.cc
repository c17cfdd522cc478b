// libkbox_launch_probe.so against a stand-in CUPTI (fake_cupti.cc): which
// callbacks count as launches, the bounds, and the start/stop errors the
// harness maps to "probe unavailable" (2) and "refused" (1).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kDriver = 1, kRuntime = 2, kResource = 3;
constexpr int kEnter = 0, kExit = 1;

class LaunchProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_ = dlopen(KBOX_LAUNCH_PROBE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(probe_, nullptr) << dlerror();
    cupti_ = dlopen(KBOX_FAKE_CUPTI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(cupti_, nullptr) << dlerror();
    start_ = reinterpret_cast<decltype(start_)>(dlsym(probe_, "kbox_launch_probe_start"));
    stop_ = reinterpret_cast<decltype(stop_)>(dlsym(probe_, "kbox_launch_probe_stop"));
    names_ = reinterpret_cast<decltype(names_)>(dlsym(probe_, "kbox_launch_probe_names"));
    call_ = reinterpret_cast<decltype(call_)>(dlsym(cupti_, "fake_cupti_call"));
    fail_ = reinterpret_cast<decltype(fail_)>(dlsym(cupti_, "fake_cupti_fail_subscribe"));
    domains_ = reinterpret_cast<decltype(domains_)>(dlsym(cupti_, "fake_cupti_enabled_domains"));
    ASSERT_TRUE(start_ && stop_ && names_ && call_ && fail_ && domains_);
    fail_(0);
  }
  void TearDown() override {
    if (stop_) stop_();
  }

  int Start(std::string* error = nullptr, const char* path = KBOX_FAKE_CUPTI_LIBRARY) {
    char buf[512] = {0};
    const int r = start_(path, buf, sizeof buf);
    if (error) *error = buf;
    return r;
  }

  struct Seen {
    std::vector<std::string> names;
    uint64_t launches = 0, graphs = 0;
    int dropped = 0;
  };
  Seen Result(std::size_t len = 1 << 16) {
    std::string buf(len, '\0');
    Seen s;
    names_(buf.data(), buf.size(), &s.launches, &s.graphs, &s.dropped);
    std::string text(buf.c_str());
    for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
      s.names.push_back(text.substr(at, nl - at));
    }
    return s;
  }

  void* probe_ = nullptr;
  void* cupti_ = nullptr;
  int (*start_)(const char*, char*, std::size_t) = nullptr;
  int (*stop_)() = nullptr;
  int (*names_)(char*, std::size_t, uint64_t*, uint64_t*, int*) = nullptr;
  void (*call_)(uint32_t, int, const char*, const char*, int) = nullptr;
  void (*fail_)(int) = nullptr;
  uint32_t (*domains_)() = nullptr;
};

TEST_F(LaunchProbeTest, RecordsSuccessfulLaunchesOnceEach) {
  ASSERT_EQ(Start(), 0);
  EXPECT_EQ(domains_(), (1u << kDriver) | (1u << kRuntime));
  call_(kRuntime, kExit, "cudaLaunchKernel", "_Z10add_kernelPKfS0_Pfi", 0);
  call_(kDriver, kExit, "cuLaunchKernel", "_Z10add_kernelPKfS0_Pfi", 0);
  call_(kDriver, kExit, "cuLaunchKernelEx", "triton_add_kernel", 0);
  call_(kDriver, kExit, "cuMemAlloc_v2", nullptr, 0);  // not a launch
  const auto seen = Result();
  EXPECT_EQ(seen.names, (std::vector<std::string>{"_Z10add_kernelPKfS0_Pfi", "triton_add_kernel"}));
  EXPECT_EQ(seen.launches, 3u);
  EXPECT_EQ(seen.dropped, 0);
}

TEST_F(LaunchProbeTest, AFailedOrUnfinishedLaunchDoesNotCount) {
  ASSERT_EQ(Start(), 0);
  call_(kDriver, kEnter, "cuLaunchKernel", "entered_only", 0);
  call_(kDriver, kExit, "cuLaunchKernel", "invalid_config", 1);  // CUDA_ERROR_INVALID_VALUE
  call_(kRuntime, kExit, "cudaLaunchKernel", "also_failed", 9);  // cudaErrorInvalidConfiguration
  call_(kResource, kExit, "whatever", "other_domain", 0);
  EXPECT_TRUE(Result().names.empty());
  EXPECT_EQ(Result().launches, 0u);
}

TEST_F(LaunchProbeTest, CountsGraphLaunchesApart) {
  ASSERT_EQ(Start(), 0);
  call_(kDriver, kExit, "cuGraphLaunch", nullptr, 0);
  call_(kRuntime, kExit, "cudaGraphLaunch_ptsz", nullptr, 0);
  const auto seen = Result();
  EXPECT_TRUE(seen.names.empty());
  EXPECT_EQ(seen.graphs, 2u);
}

TEST_F(LaunchProbeTest, NothingIsRecordedAfterStop) {
  ASSERT_EQ(Start(), 0);
  call_(kDriver, kExit, "cuLaunchKernel", "before", 0);
  EXPECT_EQ(stop_(), 0);
  EXPECT_EQ(domains_(), 0u);
  call_(kDriver, kExit, "cuLaunchKernel", "after", 0);
  EXPECT_EQ(Result().names, std::vector<std::string>{"before"});
  // A second start begins empty.
  ASSERT_EQ(Start(), 0);
  EXPECT_TRUE(Result().names.empty());
}

TEST_F(LaunchProbeTest, BoundsWhatACandidateCanMakeItHold) {
  ASSERT_EQ(Start(), 0);
  const std::string long_name(5000, 'k');
  call_(kDriver, kExit, "cuLaunchKernel", long_name.c_str(), 0);
  for (int i = 0; i < 5000; ++i) {
    call_(kDriver, kExit, "cuLaunchKernel", ("kernel_" + std::to_string(i)).c_str(), 0);
  }
  auto seen = Result(1 << 20);
  ASSERT_FALSE(seen.names.empty());
  EXPECT_EQ(seen.names[0].size(), 1024u);  // truncated
  EXPECT_EQ(seen.names.size(), 4096u);     // capped
  EXPECT_EQ(seen.dropped, 1);
  EXPECT_EQ(seen.launches, 5001u);
  // A buffer too small for every name: what fits, and "dropped".
  seen = Result(64);
  EXPECT_TRUE(seen.names.empty());  // the first name alone is 1,024 bytes
  EXPECT_EQ(seen.dropped, 1);
}

TEST_F(LaunchProbeTest, ASubscriberAlreadyThereIsARefusal) {
  fail_(39);  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
  std::string error;
  EXPECT_EQ(Start(&error), 1);
  EXPECT_NE(error.find("cuptiSubscribe failed"), std::string::npos) << error;
  EXPECT_NE(error.find("39"), std::string::npos) << error;
}

TEST_F(LaunchProbeTest, NoCuptiIsUnavailable) {
  std::string error;
  EXPECT_EQ(Start(&error, "/nonexistent/libcupti.so.13"), 2);
  EXPECT_NE(error.find("cannot load CUPTI"), std::string::npos) << error;
}

TEST_F(LaunchProbeTest, ASecondStartWhileRunningIsRefused) {
  ASSERT_EQ(Start(), 0);
  std::string error;
  EXPECT_EQ(Start(&error), 1);
  EXPECT_NE(error.find("already running"), std::string::npos) << error;
}

}  // namespace
