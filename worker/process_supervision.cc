#include "worker/process_supervision.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>

#include "worker/process_group_pause.h"

namespace kbox {

using Clock = std::chrono::steady_clock;

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void RestoreSignalsForExec() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

void RecordWaitStatus(int status, ProcessOutcome& out) {
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
    if (out.end == ProcessOutcome::End::kSpawnFailed) out.end = ProcessOutcome::End::kExited;
  } else if (WIFSIGNALED(status)) {
    out.term_signal = WTERMSIG(status);
    if (out.end == ProcessOutcome::End::kSpawnFailed) out.end = ProcessOutcome::End::kSignaled;
  }
}

void SuperviseProcess(const ProcessSpec& spec, Clock::time_point start, Fd output_r, Fd result_r,
                      const MainProcess& main, ProcessOutcome& out) {
  std::optional<Clock::time_point> drain_deadline;
  bool main_exited = false;
  std::array<char, 64 * 1024> buffer;
  // wall_limit is the candidate's budget. It begins once the stage may run
  // candidate code: at its device turn (a stage prepared ahead may wait for
  // it as long as turn_wait_limit) and after its set-up, when the stage
  // reports that. The set-up may take set_up_limit besides the wait, and no
  // more than that once the turn is given (the device waits on it then).
  const auto time_of = [](const std::atomic<int64_t>* event) -> std::optional<Clock::time_point> {
    if (event == nullptr) return Clock::time_point{};
    const int64_t ns = event->load();
    if (ns == 0) return std::nullopt;
    return Clock::time_point(std::chrono::nanoseconds(ns));
  };
  const bool reports_set_up = spec.set_up_done_ns != nullptr;
  const auto before_budget = reports_set_up ? spec.set_up_limit : spec.wall_limit;
  auto deadline = start + spec.turn_wait_limit + before_budget;
  bool budget_begun = false;
  // Whether the set-up limit has begun to count (at the turn, or when it
  // became due); without a turn, from the start.
  bool set_up_clock_started = spec.turn_granted_ns == nullptr;
  // Withdrawn before every reap: once reaped, the group's number may be reused.
  if (spec.pausable) spec.pausable->Publish(main.group);
  const auto reap = [&] {
    if (spec.pausable) spec.pausable->Withdraw();
    main.reap(out);
  };

  while (output_r.get() >= 0 || result_r.get() >= 0 || !main_exited) {
    const auto now = Clock::now();
    if (!budget_begun) {
      const auto turn = time_of(spec.turn_granted_ns);
      const auto set_up = time_of(spec.set_up_done_ns);
      // The set-up limit counts from the turn, or from when it became due
      // (the turn waits for this set-up alone), whichever came first.
      const auto due = spec.turn_due_ns ? time_of(spec.turn_due_ns) : std::nullopt;
      const auto clock = turn ? turn : due;
      if (turn && set_up) {
        budget_begun = true;
        deadline = std::max({start, *turn, *set_up}) + spec.wall_limit;
      } else if (clock && !set_up_clock_started) {
        set_up_clock_started = true;
        deadline = std::min(deadline, std::max(start, *clock) + before_budget);
      }
    }
    const auto limit = drain_deadline ? std::min(*drain_deadline, deadline) : deadline;
    if (now >= limit) {
      if (!main_exited) {
        out.end = ProcessOutcome::End::kTimedOut;
        out.expired_limit = budget_begun ? spec.wall_limit : before_budget;
        out.timed_out_setting_up = !budget_begun && spec.set_up_done_ns != nullptr &&
                                   spec.set_up_done_ns->load() == 0;
        main.kill_group();
        reap();
      }
      break;  // Drain grace over: a process that escaped the group holds a pipe.
    }
    std::array<pollfd, 3> fds{{{output_r.get(), POLLIN, 0},
                               {result_r.get(), POLLIN, 0},
                               {main_exited ? -1 : main.ended_fd, POLLIN, 0}}};
    if (spec.cancel && spec.cancel->load() && !main_exited) {
      out.end = ProcessOutcome::End::kCancelled;
      main.kill_group();
      reap();
      break;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(limit - now) +
                std::chrono::milliseconds(1);
    if (spec.cancel || !budget_begun) wait = std::min(wait, kCancelPollInterval);
    const auto wait_ms = wait.count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) {
      const ssize_t n = ::read(output_r.get(), buffer.data(), buffer.size());
      if (n <= 0) {
        output_r.reset();
      } else {
        out.output_bytes += static_cast<uint64_t>(n);
        out.output_tail.append(buffer.data(), static_cast<size_t>(n));
        if (out.output_tail.size() > 2 * spec.output_tail_bytes) {
          out.output_tail.erase(0, out.output_tail.size() - spec.output_tail_bytes);
        }
        if (out.output_bytes > spec.max_output_bytes && !main_exited) {
          out.end = ProcessOutcome::End::kOutputLimit;
          main.kill_group();
          reap();
          main_exited = true;
          drain_deadline = Clock::now() + kDrainGrace;
        }
      }
    }
    if (fds[1].revents != 0) {
      const ssize_t n = ::read(result_r.get(), buffer.data(), buffer.size());
      if (n <= 0) {
        result_r.reset();
      } else if (out.result.size() + static_cast<size_t>(n) > spec.max_result_bytes) {
        out.result_truncated = true;
        result_r.reset();  // The child now gets EPIPE; its report is void anyway.
      } else {
        out.result.append(buffer.data(), static_cast<size_t>(n));
      }
    }
    if (fds[2].revents != 0 && !main_exited) {
      reap();
      main_exited = true;
      // The job is over: whatever it left running in its group goes too.
      main.kill_group();
      drain_deadline = Clock::now() + kDrainGrace;
    }
  }
  if (spec.pausable) spec.pausable->Withdraw();
  if (out.output_tail.size() > spec.output_tail_bytes) {
    out.output_tail.erase(0, out.output_tail.size() - spec.output_tail_bytes);
  }
}

}  // namespace kbox
