#pragma once

// The part of running a job's process that does not depend on how it was
// started: the wall-clock limit, the output flood limit, the cancel flag, the
// output tail and the result channel, and killing the job's process group.
// RunProcess (fork+exec by kboxd) and Zygote::Run (a child forked by a
// pre-forked zygote) both end here, so both give the same guarantees.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "worker/process_runner.h"
#include "worker/unique_fd.h"

namespace kbox {

// Time allowed after the main process exits for the pipes to drain.
inline constexpr auto kDrainGrace = std::chrono::milliseconds(1000);
// Time allowed for a SIGKILLed process to be reaped.
inline constexpr auto kReapGrace = std::chrono::milliseconds(10'000);

// How the supervisor watches and ends the job's main process.
struct MainProcess {
  // Readable once the main process has ended (a pidfd, or the zygote's socket).
  int ended_fd = -1;
  // Collects the main process's end into `out` (exit status, CPU time),
  // waiting up to kReapGrace; leaves out.end alone when it is already set.
  std::function<void(ProcessOutcome& out)> reap;
  // SIGKILLs the job's whole process group.
  std::function<void()> kill_group;
  // The job's process group (published to ProcessSpec::pausable).
  pid_t group = 0;
};

// Reads `output_r` and `result_r` until both are closed and the main process
// ended, enforcing the limits of `spec` counted from `start`.
void SuperviseProcess(const ProcessSpec& spec, std::chrono::steady_clock::time_point start,
                      Fd output_r, Fd result_r, const MainProcess& main, ProcessOutcome& out);

// Fills exit_code/term_signal and out.end (when unset) from a wait status.
void RecordWaitStatus(int status, ProcessOutcome& out);

// argv/envp for execve: pointers into `strings`, null-terminated.
std::vector<char*> CStrings(const std::vector<std::string>& strings);

// Between fork and exec (async-signal-safe): default dispositions for the
// signals kboxd handles or ignores for itself, and an empty signal mask.
void RestoreSignalsForExec();

}  // namespace kbox
