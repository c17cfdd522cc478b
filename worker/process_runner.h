#pragma once

// Runs one child process to completion under a wall-clock limit, capturing its
// output and a private result channel. Every stage of a job goes through here:
// kboxd never runs candidate or harness code in its own process.
//
// The child gets its own process group; on timeout, on an output flood, and
// after the main process exits, the whole group is killed with SIGKILL, so no
// process the job started in that group outlives it. (A process that leaves
// the group with setsid() is out of reach here; the sandbox's pid namespace
// closes that gap.)

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kbox {

class PausableGroup;

struct ProcessSpec {
  // argv[0] must be an absolute path: no PATH search happens.
  std::vector<std::string> argv;
  // The complete environment ("NAME=value"); nothing is inherited.
  std::vector<std::string> env;
  // Working directory of the child.
  std::string cwd = "/";
  // Wall-clock limit from fork to exit (but see turn_granted_ns and
  // set_up_done_ns).
  std::chrono::milliseconds wall_limit{60'000};
  // Bytes of stdout+stderr after which the job is killed (an output flood).
  uint64_t max_output_bytes = 8ull << 20;
  // Bytes of the end of stdout+stderr kept for the result.
  size_t output_tail_bytes = 8 << 10;
  // Bytes accepted on the result channel; more marks it truncated.
  size_t max_result_bytes = 16 << 20;
  // File descriptor number at which the child finds the write end of the
  // result channel.
  int result_fd = 3;
  // When set and it becomes true, the group is killed and the run ends as
  // kCancelled within kCancelPollInterval (kboxd's shutdown deadline).
  const std::atomic<bool>* cancel = nullptr;
  // A run stage prepared ahead of its device turn (docs/run-stages-ahead.md):
  // while this holds 0 the job waits for the device and wall_limit has not
  // begun; kboxd stores the turn's steady_clock time (nanoseconds since its
  // epoch) when it gives the turn, and wall_limit counts from then. The wait
  // itself may last up to turn_wait_limit. Null: wall_limit counts from fork.
  const std::atomic<int64_t>* turn_granted_ns = nullptr;
  std::chrono::milliseconds turn_wait_limit{0};
  // A stage that reports the end of its set-up (kbox's own start: CUDA,
  // the reference's import; no candidate code has run): kboxd stores the
  // time (as turn_granted_ns) when the report comes. wall_limit then counts
  // from the later of the turn and that time, so a slow start on a busy host
  // takes nothing from the candidate's budget; the set-up itself may last up
  // to set_up_limit (besides the turn's wait). Null: wall_limit counts from
  // the turn (or fork).
  const std::atomic<int64_t>* set_up_done_ns = nullptr;
  std::chrono::milliseconds set_up_limit{0};
  // When the turn became due (TurnGate::due_ns): first in line on a free
  // device, waiting only for its own set-up. set_up_limit counts from the
  // earlier of that and the turn. Null or 0: from the turn.
  const std::atomic<int64_t>* turn_due_ns = nullptr;
  // When set, receives the job's process group while its main process runs,
  // withdrawn before the main process is reaped: a stage prepared ahead is
  // paused through it during another job's timing (process_group_pause.h).
  PausableGroup* pausable = nullptr;
};

// How often a running process checks ProcessSpec::cancel.
inline constexpr std::chrono::milliseconds kCancelPollInterval{200};

struct ProcessOutcome {
  enum class End {
    kExited,        // The main process exited; see exit_code.
    kSignaled,      // The main process was killed by term_signal.
    kTimedOut,      // The wall-clock limit expired; the group was killed.
    kOutputLimit,   // stdout+stderr passed max_output_bytes; the group was killed.
    kSpawnFailed,   // fork or exec failed; see spawn_error. kbox's fault.
    kCancelled,     // ProcessSpec::cancel was set; the group was killed. kbox's doing.
  };
  End end = End::kSpawnFailed;
  int exit_code = -1;
  int term_signal = 0;
  std::string spawn_error;
  // The last output_tail_bytes of stdout and stderr, interleaved as written.
  std::string output_tail;
  uint64_t output_bytes = 0;
  // Everything written to the result channel (up to max_result_bytes).
  std::string result;
  bool result_truncated = false;
  // kTimedOut only: the limit that expired, and whether it was the set-up's
  // (ProcessSpec::set_up_limit) rather than wall_limit.
  std::chrono::milliseconds expired_limit{0};
  bool timed_out_setting_up = false;
  double wall_ms = 0;
  double cpu_ms = 0;  // User + system time of the main process and its reaped children.
};

// Blocks until the child and its group are gone. Thread-safe; each call uses
// only its own descriptors.
ProcessOutcome RunProcess(const ProcessSpec& spec);

// Short human-readable description ("exited 1", "killed by SIGSEGV", ...).
std::string DescribeEnd(const ProcessOutcome& outcome);

}  // namespace kbox
