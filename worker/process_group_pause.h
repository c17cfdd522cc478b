#pragma once

// Pausing a stage's whole process group (SIGSTOP/SIGCONT), for the device's
// quiet (docs/run-stages-ahead.md): a stage prepared ahead whose CUDA start
// would run beside the holder's timing is stopped instead, and continued once
// the timing is over, so the holder need not wait for its set-up to finish.
//
// Only kbox's own harness runs in a stage that is still setting up (the
// candidate's code loads after its turn), and a stopped process neither runs
// code nor submits GPU work; what it already submitted finishes within the
// ioctl that submitted it, and a thread is only stopped once it is back in
// user space. So "every thread of the group is stopped" is the condition
// under which nothing of the stage can touch the device.

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <string>

namespace kbox {

// Sends SIGSTOP to `group` and waits until every thread of every process in
// it is stopped (or gone), for at most `limit`. False when the group does not
// exist, or some thread was still running at the limit (the group is then
// continued again, as if never stopped; `running`, when given, then
// describes those threads: state and kernel wait channel). A thread in an
// uninterruptible wait (a driver's ioctl) stops only once it returns.
bool StopProcessGroup(pid_t group, std::chrono::milliseconds limit, std::string* running = nullptr);

// SIGCONT to `group`.
void ContinueProcessGroup(pid_t group);

// Whether every thread of every process in `group` is stopped, and the group
// has at least one process. Reads /proc.
bool ProcessGroupStopped(pid_t group);

// The process group of one running stage, from its start until its main
// process ends: the supervisor publishes it (SuperviseProcess) and withdraws it
// before reaping, so a pause never reaches a group number the kernel reused.
//
// A stage asked to pause before its process exists (a lane's zygote still
// starting, the fork not yet done) runs nothing yet: Pause says so, and the
// group is stopped the moment it is published, long before its first GPU
// call (which comes after the sandbox's set-up and the interpreter's
// imports). Without this, such a stage could not be paused and its holder
// waited for its whole start (an integration run saw quiet_wait > 3 s).
class PausableGroup {
 public:
  // Stops the group at once when a pause is pending.
  void Publish(pid_t group);
  void Withdraw();
  // StopProcessGroup on the published group; true with nothing published
  // yet (the pause waits for it); false once the process has been reaped.
  bool Pause(std::chrono::milliseconds limit, std::string* running = nullptr);
  // Continues the group if Pause stopped it, or cancels a pending pause.
  void Resume();

 private:
  std::mutex mu_;
  pid_t group_ = 0;
  bool reaped_ = false;
  bool paused_ = false;
};

}  // namespace kbox
