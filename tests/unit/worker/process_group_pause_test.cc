#include "worker/process_group_pause.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "worker/process_runner.h"

namespace kbox {
namespace {

using namespace std::chrono_literals;

// A process group of two processes (leader and child), each with a second
// thread, all counting in shared memory as fast as they can.
struct CountingGroup {
  std::atomic<long>* counters = nullptr;  // Four: two processes x two threads.
  pid_t leader = 0;

  CountingGroup() {
    void* shared = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    counters = new (shared) std::atomic<long>[4]();
    leader = ::fork();
    if (leader == 0) {
      ::setpgid(0, 0);
      const int base = ::fork() == 0 ? 2 : 0;
      std::thread other([&] {
        for (;;) counters[base + 1]++;
      });
      for (;;) counters[base]++;
    }
    ::setpgid(leader, leader);
  }
  ~CountingGroup() {
    ::kill(-leader, SIGKILL);
    ::waitpid(leader, nullptr, 0);
  }
  long Total() const {
    long total = 0;
    for (int i = 0; i < 4; ++i) total += counters[i].load();
    return total;
  }
  bool AllCounting() const {
    long before[4];
    for (int i = 0; i < 4; ++i) before[i] = counters[i].load();
    std::this_thread::sleep_for(50ms);
    for (int i = 0; i < 4; ++i) {
      if (counters[i].load() == before[i]) return false;
    }
    return true;
  }
};

TEST(ProcessGroupPauseTest, StopsEveryThreadOfEveryProcessAndContinuesThem) {
  CountingGroup group;
  for (int i = 0; i < 100 && !group.AllCounting(); ++i) {
  }
  ASSERT_TRUE(group.AllCounting());
  ASSERT_TRUE(StopProcessGroup(group.leader, 2000ms));
  EXPECT_TRUE(ProcessGroupStopped(group.leader));
  const long stopped_at = group.Total();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(group.Total(), stopped_at) << "a thread ran while the group was stopped";
  ContinueProcessGroup(group.leader);
  EXPECT_TRUE(group.AllCounting());
  EXPECT_FALSE(ProcessGroupStopped(group.leader));
}

TEST(ProcessGroupPauseTest, NoSuchGroupIsNotStopped) {
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  EXPECT_FALSE(StopProcessGroup(gone, 100ms));
  EXPECT_FALSE(ProcessGroupStopped(gone));
  EXPECT_FALSE(StopProcessGroup(0, 100ms));
  EXPECT_FALSE(StopProcessGroup(1, 100ms));
}

// The supervisor publishes the running job's group and withdraws it before
// the reap: a pause reaches the job while it runs, and nothing after.
TEST(ProcessGroupPauseTest, RunProcessPublishesItsGroupOnlyWhileItRuns) {
  PausableGroup pausable;
  ProcessSpec spec;
  // Fifty short sleeps, not one: a stopped process's sleep goes on counting
  // wall time (one `sleep 0.5` stopped early for 0.7 s ends when resumed,
  // 0.8 s after its start), while a stopped loop takes no further step.
  spec.argv = {"/bin/sh", "-c", "i=0; while [ $i -lt 50 ]; do sleep 0.01; i=$((i+1)); done; echo done"};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.wall_limit = 30s;
  spec.pausable = &pausable;
  std::atomic<bool> paused{false};
  std::thread pauser([&] {
    for (int i = 0; i < 200 && !paused; ++i) {
      std::this_thread::sleep_for(5ms);
      paused = pausable.Pause(1000ms);
    }
    // Stopped: the job cannot end until resumed.
    std::this_thread::sleep_for(700ms);
    pausable.Resume();
  });
  const auto start = std::chrono::steady_clock::now();
  const ProcessOutcome out = RunProcess(spec);
  const auto took = std::chrono::steady_clock::now() - start;
  pauser.join();
  ASSERT_TRUE(paused.load());
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited);
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.output_tail, "done\n");
  EXPECT_GE(took, 1000ms) << "the 0.5 s job ended while stopped for 0.7 s";  // >= 0.5 + 0.7 - 0.01
  EXPECT_FALSE(pausable.Pause(100ms));  // Withdrawn once reaped.
}

// Paused before its process exists, a job is stopped as soon as it starts and
// runs only once resumed.
TEST(ProcessGroupPauseTest, APauseAskedBeforeTheStartStopsTheJobAsItStarts) {
  PausableGroup pausable;
  EXPECT_TRUE(pausable.Pause(100ms));  // Nothing runs yet: paused already.
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "sleep 0.1; echo started"};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.wall_limit = 30s;
  spec.pausable = &pausable;
  std::thread resumer([&] {
    std::this_thread::sleep_for(800ms);
    pausable.Resume();
  });
  const auto start = std::chrono::steady_clock::now();
  const ProcessOutcome out = RunProcess(spec);
  const auto took = std::chrono::steady_clock::now() - start;
  resumer.join();
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited);
  EXPECT_EQ(out.output_tail, "started\n");
  EXPECT_GE(took, 700ms) << "the job ran before it was resumed";
  EXPECT_FALSE(pausable.Pause(100ms));  // Reaped: nothing left to pause.
}

}  // namespace
}  // namespace kbox
