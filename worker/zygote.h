#pragma once

// A pre-forked run-stage parent (worker/harness/kbox_zygote.py,
// docs/prefork.md): a Python process that imported PyTorch and the harness
// once and forks a fresh child per run stage; the child enters the sandbox
// itself (libkbox_sandbox_enter.so). This is kboxd's end of it: start,
// restart, ask for one job, and supervise that job exactly as RunProcess
// supervises a fork+exec'd one (same limits, same group kill, same capture).

#include <sys/types.h>

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
};

// One zygote; one job at a time (a device slot runs one job at a time).
class Zygote {
 public:
  explicit Zygote(ZygoteSettings settings) : settings_(std::move(settings)) {}
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Starts the zygote unless it runs; the error says why it cannot.
  std::optional<std::string> Start();

  // Runs one sandboxed stage: `sandbox_spec` is the SandboxSpec file,
  // `limits` the wall/output/result limits and cancel flag of RunProcess
  // (its argv, env and cwd are unused). nullopt: the zygote could not be
  // started (nothing ran; the caller may fall back to fork+exec). A zygote
  // that dies or breaks the protocol mid-job ends the job as kSpawnFailed
  // (kbox's failure, never the candidate's) and is restarted next time.
  std::optional<ProcessOutcome> Run(const std::string& sandbox_spec, const ProcessSpec& limits);

  // The zygote's pid, or -1; the pid of the last child it forked (tests).
  pid_t pid() const;
  pid_t last_child() const;

 private:
  std::optional<std::string> StartLocked();
  void StopLocked();
  void Notify(ZygoteEvent event) const;
  // Receives one protocol message within `timeout`; nullopt on EOF, error or timeout.
  std::optional<std::string> Receive(std::chrono::milliseconds timeout);
  // Reads "exit PID STATUS CPU_MS" for `child` into `out`; false if the zygote failed.
  bool ReadExit(pid_t child, ProcessOutcome& out);

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
};

inline constexpr std::chrono::seconds kStartRetryDelay{60};

// One zygote per slot, started on first use or by Prestart.
class ZygotePool {
 public:
  explicit ZygotePool(ZygoteSettings settings) : settings_(std::move(settings)) {}
  // Joins the pre-starts (each ends within the start timeout).
  ~ZygotePool();
  ZygotePool(const ZygotePool&) = delete;
  ZygotePool& operator=(const ZygotePool&) = delete;
  // The zygote of `slot` ("gpu0", "cpu1", "compile3", ...), created on first use.
  Zygote& For(const std::string& slot);
  // Starts the zygotes of `slots` now, each on a thread of its own (which
  // stays, as the zygote's parent, until the pool goes), rather than at the
  // slot's first stage (which waits for a start in progress).
  void Prestart(const std::vector<std::string>& slots);

 private:
  const ZygoteSettings settings_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Zygote>> zygotes_;
  // Each pre-started zygote's parent thread, kept until the pool goes (its
  // exit would kill the zygote: PR_SET_PDEATHSIG); joined before zygotes_.
  std::vector<std::thread> prestarts_;
  std::condition_variable stopping_cv_;
  bool stopping_ = false;
};

}  // namespace kbox
