#include "worker/process_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kbox {
namespace {

using End = ProcessOutcome::End;
using namespace std::chrono_literals;

ProcessSpec Shell(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.wall_limit = 30s;
  return spec;
}

std::vector<pid_t> ParsePids(const std::string& text) {
  std::vector<pid_t> pids;
  std::istringstream in(text);
  long pid = 0;
  while (in >> pid) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

// Makes this process the reaper of orphaned descendants, so the grandchildren
// a test's shell leaves behind become ours to wait for (rather than init's,
// which may leave them as zombies that kill(pid, 0) still finds).
class SubreaperScope {
 public:
  SubreaperScope() { ok_ = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }
  ~SubreaperScope() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

// Waits (bounded) for `pid`, an orphan reparented to this process, to die and
// reaps it. Returns its wait status, or -1 if it is still alive after 10 s.
int ReapOrphan(pid_t pid) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -1;
  pollfd p{pidfd, POLLIN, 0};
  const int ready = ::poll(&p, 1, 10'000);
  ::close(pidfd);
  if (ready != 1) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

void ExpectKilledAndGone(pid_t pid) {
  const int status = ReapOrphan(pid);
  ASSERT_NE(status, -1) << "pid " << pid << " survived RunProcess";
  EXPECT_TRUE(WIFSIGNALED(status)) << "pid " << pid;
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), SIGKILL) << "pid " << pid;
  }
  errno = 0;
  EXPECT_EQ(::kill(pid, 0), -1) << "pid " << pid;
  EXPECT_EQ(errno, ESRCH) << "pid " << pid;
}

TEST(ProcessRunnerTest, CapturesExitCode) {
  const ProcessOutcome out = RunProcess(Shell("exit 7"));
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.exit_code, 7);
  EXPECT_EQ(out.term_signal, 0);
  EXPECT_EQ(DescribeEnd(out), "exited with status 7");
}

TEST(ProcessRunnerTest, CapturesZeroExitAndTimes) {
  const ProcessOutcome out = RunProcess(Shell("exit 0"));
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_GT(out.wall_ms, 0.0);
  EXPECT_GE(out.cpu_ms, 0.0);
}

TEST(ProcessRunnerTest, ReportsTerminatingSignal) {
  const ProcessOutcome out = RunProcess(Shell("kill -SEGV $$"));
  EXPECT_EQ(out.end, End::kSignaled);
  EXPECT_EQ(out.term_signal, SIGSEGV);
  EXPECT_EQ(DescribeEnd(out), "killed by SIGSEGV");
}

TEST(ProcessRunnerTest, KeepsBoundedTailOfLargeOutput) {
  ProcessSpec spec = Shell("head -c 1048575 /dev/zero | tr '\\0' a; printf END");
  spec.output_tail_bytes = 4096;
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.output_bytes, 1048578u);
  EXPECT_EQ(out.output_tail.size(), 4096u);
  EXPECT_TRUE(out.output_tail.ends_with("aaaEND")) << out.output_tail.substr(4080);
}

TEST(ProcessRunnerTest, InterleavesStdoutAndStderr) {
  const ProcessOutcome out = RunProcess(Shell("echo one; echo two >&2; echo three"));
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.output_tail, "one\ntwo\nthree\n");
  EXPECT_EQ(out.output_bytes, 14u);
}

TEST(ProcessRunnerTest, KillsOutputFlood) {
  ProcessSpec spec;
  spec.argv = {"/usr/bin/yes", "flood"};
  spec.max_output_bytes = 1 << 20;
  spec.wall_limit = 30s;
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kOutputLimit);
  EXPECT_GT(out.output_bytes, spec.max_output_bytes);
  EXPECT_LE(out.output_tail.size(), spec.output_tail_bytes);
  EXPECT_LT(out.wall_ms, 20'000);
  EXPECT_EQ(DescribeEnd(out), "killed after writing more than the output limit");
}

TEST(ProcessRunnerTest, TimesOutQuickly) {
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "30"};
  spec.wall_limit = 500ms;
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kTimedOut);
  EXPECT_GE(out.wall_ms, 500);
  EXPECT_LT(out.wall_ms, 5000);
  EXPECT_EQ(DescribeEnd(out), "killed at the wall-clock limit");
}

TEST(ProcessRunnerTest, TimeoutKillsWholeProcessGroup) {
  SubreaperScope reaper;
  ASSERT_TRUE(reaper.ok());
  ProcessSpec spec = Shell("sleep 300 & echo $! >&3; sleep 300 & echo $! >&3; wait");
  spec.wall_limit = 500ms;
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kTimedOut);
  const std::vector<pid_t> pids = ParsePids(out.result);
  ASSERT_EQ(pids.size(), 2u) << out.result;
  for (pid_t pid : pids) ExpectKilledAndGone(pid);
}

// kboxd's shutdown deadline: a cancel flag set while the job runs kills the
// whole group promptly and says so.
TEST(ProcessRunnerTest, CancelFlagKillsWholeProcessGroup) {
  SubreaperScope reaper;
  ASSERT_TRUE(reaper.ok());
  std::atomic<bool> cancel{false};
  ProcessSpec spec = Shell("sleep 300 & echo $! >&3; echo started; wait");
  spec.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);  // Let the shell start its child.
    cancel.store(true);
  });
  const ProcessOutcome out = RunProcess(spec);
  canceller.join();
  EXPECT_EQ(out.end, End::kCancelled);
  EXPECT_LT(out.wall_ms, 300 + 5 * kCancelPollInterval.count());
  EXPECT_EQ(DescribeEnd(out), "killed because kboxd is shutting down");
  const std::vector<pid_t> pids = ParsePids(out.result);
  ASSERT_EQ(pids.size(), 1u) << out.result;
  ExpectKilledAndGone(pids[0]);
}

TEST(ProcessRunnerTest, KillsBackgroundChildrenOfExitedParent) {
  SubreaperScope reaper;
  ASSERT_TRUE(reaper.ok());
  const ProcessOutcome out = RunProcess(Shell("sleep 300 & echo $! >&3; exit 0"));
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.exit_code, 0);
  // The orphan still holds stdout and the result pipe: RunProcess must kill it
  // rather than wait for it.
  EXPECT_LT(out.wall_ms, 5000);
  const std::vector<pid_t> pids = ParsePids(out.result);
  ASSERT_EQ(pids.size(), 1u) << out.result;
  ExpectKilledAndGone(pids[0]);
}

TEST(ProcessRunnerTest, CapturesResultChannel) {
  const ProcessOutcome out = RunProcess(Shell("printf hello >&3; echo log"));
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.result, "hello");
  EXPECT_FALSE(out.result_truncated);
  EXPECT_EQ(out.output_tail, "log\n");
}

TEST(ProcessRunnerTest, MarksOversizeResultTruncated) {
  ProcessSpec spec = Shell("head -c 100000 /dev/zero >&3 2>/dev/null; exit 0");
  spec.max_result_bytes = 1000;
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_TRUE(out.result_truncated);
  EXPECT_LE(out.result.size(), 1000u);
}

TEST(ProcessRunnerTest, EnvironmentIsExactlySpecEnv) {
  ProcessSpec spec;
  spec.argv = {"/usr/bin/env"};
  spec.env = {"ALPHA=1", "BETA=two words"};
  ASSERT_EQ(::setenv("KBOX_PARENT_ONLY", "leak", 1), 0);
  const ProcessOutcome out = RunProcess(spec);
  ::unsetenv("KBOX_PARENT_ONLY");
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.output_tail, "ALPHA=1\nBETA=two words\n");
}

TEST(ProcessRunnerTest, RunsInRequestedWorkingDirectory) {
  ProcessSpec spec;
  spec.argv = {"/bin/pwd"};
  spec.cwd = "/proc";
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.output_tail, "/proc\n");
}

TEST(ProcessRunnerTest, StdinIsEmpty) {
  const ProcessOutcome out = RunProcess(Shell("wc -c"));
  EXPECT_EQ(out.end, End::kExited);
  EXPECT_EQ(out.output_tail, "0\n");
}

TEST(ProcessRunnerTest, RelativeArgv0IsSpawnFailure) {
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "exit 0"};
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kSpawnFailed);
  EXPECT_NE(out.spawn_error.find("absolute"), std::string::npos) << out.spawn_error;
  EXPECT_EQ(DescribeEnd(out), "could not be started: " + out.spawn_error);
}

TEST(ProcessRunnerTest, EmptyArgvIsSpawnFailure) {
  const ProcessOutcome out = RunProcess(ProcessSpec{});
  EXPECT_EQ(out.end, End::kSpawnFailed);
  EXPECT_FALSE(out.spawn_error.empty());
}

TEST(ProcessRunnerTest, MissingBinaryReportsErrno) {
  ProcessSpec spec;
  spec.argv = {"/nonexistent/kbox-no-such-binary"};
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kSpawnFailed);
  EXPECT_NE(out.spawn_error.find("/nonexistent/kbox-no-such-binary"), std::string::npos);
  EXPECT_NE(out.spawn_error.find(std::strerror(ENOENT)), std::string::npos) << out.spawn_error;
}

TEST(ProcessRunnerTest, MissingWorkingDirectoryIsSpawnFailure) {
  ProcessSpec spec;
  spec.argv = {"/bin/true"};
  spec.cwd = "/nonexistent/kbox-no-such-dir";
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, End::kSpawnFailed);
  EXPECT_NE(out.spawn_error.find(std::strerror(ENOENT)), std::string::npos) << out.spawn_error;
}

TEST(ProcessRunnerTest, ChildDoesNotInheritUnrelatedDescriptors) {
  // Opened without O_CLOEXEC, as a careless library in kboxd might. One at a
  // low number and one high up.
  const int low = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(low, 0);
  const int high = ::dup2(low, 77);
  ASSERT_EQ(high, 77);
  ProcessSpec spec;
  spec.argv = {"/bin/ls", "/proc/self/fd"};
  const ProcessOutcome out = RunProcess(spec);
  ::close(high);
  ::close(low);
  ASSERT_EQ(out.end, End::kExited) << out.output_tail;
  // The child has stdin, stdout, stderr, the result fd and the directory ls
  // itself opened to list /proc/self/fd; nothing else.
  std::vector<int> fds;
  std::istringstream in(out.output_tail);
  int fd = 0;
  while (in >> fd) fds.push_back(fd);
  EXPECT_EQ(fds, (std::vector<int>{0, 1, 2, 3, 4})) << out.output_tail;
}

TEST(ProcessRunnerTest, ConcurrentRunsKeepTheirOwnOutput) {
  // Thread safety: two runs at once never see each other's pipes.
  ProcessOutcome a, b;
  std::thread other([&] { a = RunProcess(Shell("printf A >&3; echo a")); });
  b = RunProcess(Shell("printf B >&3; echo b"));
  other.join();
  EXPECT_EQ(a.result, "A");
  EXPECT_EQ(a.output_tail, "a\n");
  EXPECT_EQ(b.result, "B");
  EXPECT_EQ(b.output_tail, "b\n");
}

TEST(ProcessRunnerTest, DescribeEndCoversEveryEnd) {
  ProcessOutcome out;
  out.end = End::kExited;
  out.exit_code = 3;
  EXPECT_EQ(DescribeEnd(out), "exited with status 3");
  out.end = End::kSignaled;
  out.term_signal = SIGKILL;
  EXPECT_EQ(DescribeEnd(out), "killed by SIGKILL");
  out.end = End::kTimedOut;
  EXPECT_EQ(DescribeEnd(out), "killed at the wall-clock limit");
  out.end = End::kOutputLimit;
  EXPECT_EQ(DescribeEnd(out), "killed after writing more than the output limit");
  out.end = End::kSpawnFailed;
  out.spawn_error = "fork: no";
  EXPECT_EQ(DescribeEnd(out), "could not be started: fork: no");
}

}  // namespace
}  // namespace kbox

namespace kbox {
namespace {

using namespace std::chrono_literals;

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A stage prepared ahead of its device turn: waiting for the turn does not
// use up its wall limit, which counts from the turn.
TEST(ProcessRunnerTest, WallLimitCountsFromTheTurn) {
  std::atomic<int64_t> granted{0};
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "1.5"};
  spec.wall_limit = 1000ms;
  spec.turn_granted_ns = &granted;
  spec.turn_wait_limit = 10s;
  std::thread giver([&] {
    std::this_thread::sleep_for(1000ms);  // Longer than the wall limit.
    granted.store(SteadyNowNs());
  });
  const ProcessOutcome out = RunProcess(spec);
  giver.join();
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << DescribeEnd(out);
  EXPECT_EQ(out.exit_code, 0);
}

TEST(ProcessRunnerTest, WallLimitAfterTheTurnStillKills) {
  std::atomic<int64_t> granted{0};
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "30"};
  spec.wall_limit = 500ms;
  spec.turn_granted_ns = &granted;
  spec.turn_wait_limit = 10s;
  std::thread giver([&] {
    std::this_thread::sleep_for(300ms);
    granted.store(SteadyNowNs());
  });
  const ProcessOutcome out = RunProcess(spec);
  giver.join();
  EXPECT_EQ(out.end, ProcessOutcome::End::kTimedOut);
  EXPECT_GE(out.wall_ms, 800);
  EXPECT_LT(out.wall_ms, 5000);
}

// A turn that never comes: the stage ends at its wait limit plus its wall
// limit, never later.
TEST(ProcessRunnerTest, TurnThatNeverComesEndsTheStage) {
  std::atomic<int64_t> granted{0};
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "30"};
  spec.wall_limit = 300ms;
  spec.turn_granted_ns = &granted;
  spec.turn_wait_limit = 700ms;
  const ProcessOutcome out = RunProcess(spec);
  EXPECT_EQ(out.end, ProcessOutcome::End::kTimedOut);
  EXPECT_GE(out.wall_ms, 1000);
  EXPECT_LT(out.wall_ms, 5000);
}

// A stage whose device turn came at its start and whose set-up ends when the
// test says (ProcessSpec::set_up_done_ns), as kboxd's gate times the judge's 'r'.
struct SetUpStage {
  std::atomic<int64_t> granted{SteadyNowNs()};
  std::atomic<int64_t> set_up_done{0};
  ProcessSpec spec;

  SetUpStage(const char* sleep_s, std::chrono::milliseconds wall, std::chrono::milliseconds set_up_limit) {
    spec.argv = {"/bin/sleep", sleep_s};
    spec.wall_limit = wall;
    spec.turn_granted_ns = &granted;
    spec.set_up_done_ns = &set_up_done;
    spec.set_up_limit = set_up_limit;
  }
  // Runs it; its set-up ends after `set_up` (never when absent).
  ProcessOutcome Run(std::optional<std::chrono::milliseconds> set_up) {
    std::thread ender([&] {
      if (!set_up) return;
      std::this_thread::sleep_for(*set_up);
      set_up_done.store(SteadyNowNs());
    });
    ProcessOutcome out = RunProcess(spec);
    ender.join();
    return out;
  }
};

// A slow set-up (kbox's start on a busy host) takes nothing from the
// candidate's budget: the wall limit counts from the later of the turn and
// the set-up's end.
TEST(ProcessRunnerTest, WallLimitCountsFromTheEndOfSetUp) {
  SetUpStage stage("1.5", 1000ms, 10s);
  const ProcessOutcome out = stage.Run(1000ms);  // As long as the wall limit.
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << DescribeEnd(out);
  EXPECT_EQ(out.exit_code, 0);
}

// After the set-up, the candidate's budget is the wall limit, not more.
TEST(ProcessRunnerTest, WallLimitAfterTheSetUpStillKills) {
  SetUpStage stage("30", 500ms, 10s);
  const ProcessOutcome out = stage.Run(300ms);
  EXPECT_EQ(out.end, ProcessOutcome::End::kTimedOut);
  EXPECT_FALSE(out.timed_out_setting_up);
  EXPECT_EQ(out.expired_limit, 500ms);
  EXPECT_GE(out.wall_ms, 800);
  EXPECT_LT(out.wall_ms, 5000);
}

// A set-up that never ends is killed at its own limit, and says so. Once
// the turn is given the device waits on it: the turn's long wait limit no
// longer adds to it.
TEST(ProcessRunnerTest, SetUpThatNeverEndsIsKilledAtTheSetUpLimit) {
  SetUpStage stage("30", 5000ms, 600ms);
  stage.spec.turn_wait_limit = 20s;
  const ProcessOutcome out = stage.Run(std::nullopt);
  EXPECT_EQ(out.end, ProcessOutcome::End::kTimedOut);
  EXPECT_TRUE(out.timed_out_setting_up);
  EXPECT_EQ(out.expired_limit, 600ms);
  EXPECT_GE(out.wall_ms, 550);
  EXPECT_LT(out.wall_ms, 4000);  // Not the wall limit's 5 s on top.
}

// Turns go only to stages done setting up (daemon/device_turns.h): a stage
// first in line on a free device has its turn due, not given, and its
// set-up limit counts from then, as it would from the turn.
TEST(ProcessRunnerTest, SetUpLimitCountsFromTheTurnBeingDue) {
  SetUpStage stage("30", 5000ms, 600ms);
  stage.granted.store(0);  // Never given: it never finishes setting up.
  std::atomic<int64_t> due{0};
  stage.spec.turn_due_ns = &due;
  stage.spec.turn_wait_limit = 20s;
  std::thread marker([&] {
    std::this_thread::sleep_for(300ms);
    due.store(SteadyNowNs());
  });
  const ProcessOutcome out = stage.Run(std::nullopt);
  marker.join();
  EXPECT_EQ(out.end, ProcessOutcome::End::kTimedOut);
  EXPECT_TRUE(out.timed_out_setting_up);
  EXPECT_EQ(out.expired_limit, 600ms);
  EXPECT_GE(out.wall_ms, 850);
  EXPECT_LT(out.wall_ms, 4000);  // Not the turn's 20 s wait limit.
}

}  // namespace
}  // namespace kbox
