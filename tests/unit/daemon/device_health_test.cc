// GPU quarantine (daemon/device_health.h): a quarantined GPU leaves the pool
// until its probe passes; the production probe runs a real child process.

#include "daemon/device_health.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace kbox {
namespace {

using namespace std::chrono_literals;

// Polls `done` until it holds or 20 s pass.
template <typename F>
bool WaitFor(F done) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

TEST(DeviceHealthTest, QuarantinedGpuLeavesThePoolUntilItsProbePasses) {
  SlotPool pool({0, 1});
  std::atomic<bool> device_works{false};
  std::atomic<int> probes{0}, recoveries{0}, quarantines{0};
  DeviceHealth health(
      pool,
      [&](uint32_t gpu) -> Status {
        EXPECT_EQ(gpu, 1u);
        ++probes;
        if (device_works) return Status::Ok();
        return Status::Error("CUDA error: unknown error");
      },
      10ms,
      [&](uint32_t gpu, bool healthy, const std::string&) {
        EXPECT_EQ(gpu, 1u);
        ++(healthy ? recoveries : quarantines);
      });
  EXPECT_TRUE(health.Healthy(1));
  // Only a failed probe quarantines (there is no other way in).
  ASSERT_FALSE(health.CheckNow(1, "harness crashed").ok());
  ASSERT_FALSE(health.CheckNow(1, "again").ok());  // Already quarantined: no second event.
  EXPECT_FALSE(health.Healthy(1));
  EXPECT_TRUE(health.Healthy(0));
  EXPECT_EQ(quarantines.load(), 1);
  EXPECT_FALSE(pool.InService(1));
  EXPECT_EQ(pool.idle(), 1u);
  {
    // Only GPU 0 is handed out while GPU 1 is quarantined.
    auto lease = pool.Acquire();
    EXPECT_EQ(lease.slot(), 0u);
    EXPECT_EQ(pool.idle(), 0u);
    // Failing probes keep it out.
    ASSERT_TRUE(WaitFor([&] { return probes.load() >= 2; }));
    EXPECT_FALSE(health.Healthy(1));
    EXPECT_FALSE(pool.InService(1));
    // A job waiting now gets GPU 1 once its probe passes.
    device_works = true;
    auto second = pool.Acquire();
    EXPECT_EQ(second.slot(), 1u);
  }
  EXPECT_TRUE(health.Healthy(1));
  EXPECT_EQ(recoveries.load(), 1);
  EXPECT_EQ(pool.idle(), 2u);
}

TEST(DeviceHealthTest, NoProbeWhileAJobHoldsTheGpu) {
  SlotPool pool({0});
  std::atomic<int> probes{0};
  std::atomic<bool> device_works{false};
  DeviceHealth health(pool,
                      [&](uint32_t) -> Status {
                        ++probes;
                        if (device_works) return Status::Ok();
                        return Status::Error("CUDA error: device busy");
                      },
                      5ms);
  auto lease = std::make_optional(pool.Acquire());
  ASSERT_FALSE(health.CheckNow(0, "run stage hung").ok());  // The job still holds it.
  probes = 0;
  device_works = true;
  // Many intervals pass with the job still holding the GPU: no probe.
  const auto until = std::chrono::steady_clock::now() + 100ms;
  while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(probes.load(), 0);
  lease.reset();
  ASSERT_TRUE(WaitFor([&] { return health.Healthy(0); }));
  EXPECT_EQ(probes.load(), 1);
}

TEST(DeviceHealthTest, CheckNowQuarantinesOnlyWhenTheProbeFails) {
  SlotPool pool({0});
  std::atomic<bool> device_works{true};
  std::atomic<int> probes{0};
  DeviceHealth health(
      pool,
      [&](uint32_t) -> Status {
        ++probes;
        if (device_works) return Status::Ok();
        return Status::Error("CUDA error: an illegal memory access was encountered");
      },
      1h);  // No background re-probe during the test.
  {
    auto lease = pool.Acquire();  // The faulting job still holds the GPU.
    EXPECT_TRUE(health.CheckNow(0, "after job j1 (RUNTIME_ERROR)").ok());
    EXPECT_EQ(probes.load(), 1);  // Probed at once, beside the job's own lease.
    EXPECT_TRUE(health.Healthy(0));
    device_works = false;
    const Status error = health.CheckNow(0, "after job j2 (TIMEOUT)");
    ASSERT_FALSE(error.ok());
    EXPECT_NE(error.message().find("illegal memory access"), std::string::npos);
  }
  EXPECT_FALSE(health.Healthy(0));
  EXPECT_FALSE(pool.InService(0));  // The next job does not get this GPU.
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(DeviceHealthTest, OnlyFaultsOfTheJobTriggerAProbe) {
  for (v1::Status status : {v1::RUNTIME_ERROR, v1::TIMEOUT, v1::SANDBOX_VIOLATION,
                            v1::REFERENCE_ERROR, v1::INFRA_ERROR}) {
    EXPECT_TRUE(MayHaveBrokenTheDevice(status)) << v1::Status_Name(status);
  }
  for (v1::Status status : {v1::CORRECT, v1::INCORRECT, v1::REJECTED, v1::COMPILE_ERROR}) {
    EXPECT_FALSE(MayHaveBrokenTheDevice(status)) << v1::Status_Name(status);
  }
}

// The real probe, on a GPU index no machine has: CUDA finds no device and the
// probe says so (on any host, with or without GPUs).
TEST(DeviceHealthTest, ProductionProbeReportsAMissingDevice) {
  const Status error = ProbeGpu(KBOX_TEST_PYTHON, KBOX_SOURCE_HARNESS_DIR, {"PATH=/usr/bin:/bin"}, 4096,
                                std::chrono::seconds(120));
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.message().find("device check failed"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("exited with status 1"), std::string::npos) << error.message();
}

}  // namespace
}  // namespace kbox
