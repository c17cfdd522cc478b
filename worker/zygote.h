#pragma once

// A pre-forked stage parent (worker/harness/kbox_zygote.py, docs/prefork.md):
// a Python process that imported PyTorch and the harness before any job and
// forks a fresh child per stage; the child enters the sandbox itself
// (libkbox_sandbox_enter.so). This is kboxd's end of it: start, restart, ask
// for one job, and supervise that job exactly as RunProcess supervises a
// fork+exec'd one (same limits, same group kill, same capture).
//
// A single-use zygote (run stages) forks one stage only: every stage is then
// a copy of an interpreter no other job ever ran in, with an address-space
// layout of its own, as a fork+exec'd stage is; its interpreter start and
// imports happen before the job arrives, beside the stage before it.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "policy/status.h"
#include "worker/process_runner.h"
#include "worker/unique_fd.h"

namespace kbox {

// What happens to a zygote, for kboxd's metrics.
enum class ZygoteEvent {
  kStarted,      // Started and reported ready (every start, restarts included).
  kRestarted,    // Started again after an earlier one of the same slot died.
  kDied,         // Died, or broke its protocol, during a job or between jobs.
  kStartFailed,  // Exited or stayed silent before reporting ready.
};
// Called with the slot ("gpu0", "cpu1") and the event, on the thread that
// saw it, with the zygote's lock held: it must be quick and must not call
// back into the zygote.
using ZygoteObserver = std::function<void(const std::string& slot, ZygoteEvent event)>;

struct ZygoteSettings {
  std::string python;        // Absolute path of the interpreter.
  std::string script;        // kbox_zygote.py.
  std::string enter_library; // libkbox_sandbox_enter.so.
  // Its complete environment ("NAME=value"): the stage's clean one plus the
  // single-thread settings; nothing job-specific.
  std::vector<std::string> env;
  // How long the imports may take before the zygote counts as not started.
  std::chrono::milliseconds start_timeout{180'000};
  // Hears this zygote's events (may be empty).
  ZygoteObserver observer = {};
  // The device slot it serves, for the observer.
  std::string slot = {};
  // Each zygote forks one stage and leaves the slot; a fresh one is started
  // in the background as soon as it has forked (see above).
  bool single_use = false;
};

// One zygote; one job at a time (a device slot runs one job at a time).
class Zygote {
 public:
  explicit Zygote(ZygoteSettings settings) : settings_(std::move(settings)) {}
  // Ends a start in progress, then the zygote.
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Starts the zygote unless it runs; the error says why it cannot.
  Status Start();
  // Starts it on this zygote's own starter thread and returns at once. The
  // thread lives as long as this object: a zygote dies with the thread that
  // started it (PR_SET_PDEATHSIG follows the parent thread).
  void StartInBackground();

  // Runs one sandboxed stage: `sandbox_spec` is the SandboxSpec file,
  // `limits` the wall/output/result limits and cancel flag of RunProcess
  // (its argv, env and cwd are unused). nullopt: the zygote could not be
  // started (nothing ran; the caller may fall back to fork+exec; start_error
  // says why). The outcome's wall time counts from the call, a start waited
  // for included; its limits count from the fork. A zygote that dies or
  // breaks the protocol mid-job ends the job as kSpawnFailed
  // (kbox's failure, never the candidate's) and is restarted next time.
  // Single use: the zygote that forked the stage is killed once the stage
  // has ended, and its successor starts in the background right after the fork.
  std::optional<ProcessOutcome> Run(const std::string& sandbox_spec, const ProcessSpec& limits);

  // Why the last start failed (empty when it did not).
  std::string start_error() const;

  // The zygote's pid, or -1; the pid of the last child it forked (tests).
  pid_t pid() const;
  pid_t last_child() const;

 private:
  Status StartLocked();
  void StopLocked();
  void Notify(ZygoteEvent event) const;
  // Asks the starter thread for a start (creating the thread on first use).
  void RequestStartLocked();
  void StarterLoop();
  // Receives one protocol message on `socket` within `timeout`; nullopt on
  // EOF, error, timeout or this object's destruction.
  std::optional<std::string> Receive(const Fd& socket, std::chrono::milliseconds timeout) const;
  // Reads "exit PID STATUS CPU_MS" for `child` into `out`; false if the zygote failed.
  bool ReadExit(const Fd& socket, pid_t child, ProcessOutcome& out) const;
  // Supervises the forked stage `group` through the zygote's `socket` until
  // it ends; true when the zygote failed meanwhile (`out` then holds only
  // the output, and kboxd's message).
  bool Supervise(const Fd& socket, pid_t group, const ProcessSpec& limits,
                 std::chrono::steady_clock::time_point start, Fd output_r, Fd result_r,
                 ProcessOutcome& out) const;

  const ZygoteSettings settings_;
  mutable std::mutex mu_;
  pid_t pid_ = -1;
  pid_t last_child_ = -1;
  Fd socket_;
  // A zygote that could not start is not retried for kStartRetryDelay: each
  // try may cost the whole start_timeout, and fork+exec serves meanwhile.
  std::string start_error_;
  std::chrono::steady_clock::time_point start_failed_at_;
  bool died_ = false;  // One died since the last start: the next start is a restart.
  // torch's thread count for a stage, as the first zygote measured it; the
  // later ones are told it (KBOX_STAGE_THREADS) rather than measuring again.
  int stage_threads_ = 0;
  // StartInBackground's thread, and what it is asked.
  std::thread starter_;
  std::condition_variable start_cv_;
  bool start_wanted_ = false;
  std::atomic<bool> stopping_ = false;
};

inline constexpr std::chrono::seconds kStartRetryDelay{60};

// One zygote per slot, started on first use or by Prestart.
class ZygotePool {
 public:
  explicit ZygotePool(ZygoteSettings settings) : settings_(std::move(settings)) {}
  ZygotePool(const ZygotePool&) = delete;
  ZygotePool& operator=(const ZygotePool&) = delete;
  // The zygote of `slot` ("gpu0", "cpu1", "compile3", ...), created on first
  // use as single use or not; a slot keeps the kind it was created with.
  Zygote& For(const std::string& slot, bool single_use = false);
  // Starts the zygotes of `slots` now, in the background (StartInBackground),
  // rather than at the slot's first stage (which waits for a start in progress).
  void Prestart(const std::vector<std::string>& slots, bool single_use = false);

 private:
  const ZygoteSettings settings_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Zygote>> zygotes_;
};

}  // namespace kbox
