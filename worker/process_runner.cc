#include "worker/process_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "worker/elapsed.h"
#include "worker/process_supervision.h"
#include "worker/unique_fd.h"

namespace kbox {
namespace {

using Clock = std::chrono::steady_clock;

// Descriptor numbers inside the child. The parent first moves every
// descriptor it hands over to kHighFd or above, so the dup2() calls below can
// never clobber one another.
constexpr int kHighFd = 10;
constexpr int kExecErrorFd = 4;  // CLOEXEC: closes itself on a successful exec.

// A pipe whose both ends sit at kHighFd or above, close-on-exec.
bool MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  Fd r(fds[0]), w(fds[1]);
  read_end = Fd(::fcntl(r.get(), F_DUPFD_CLOEXEC, kHighFd));
  write_end = Fd(::fcntl(w.get(), F_DUPFD_CLOEXEC, kHighFd));
  return read_end.get() >= 0 && write_end.get() >= 0;
}

// Tells the parent why the child could not exec, then exits.
[[noreturn]] void ExecFailed(int exec_error_w) {
  const int err = errno;
  (void)!::write(exec_error_w, &err, sizeof err);
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(const ProcessSpec& spec, char* const* argv, char* const* envp,
                            int devnull, int output_w, int result_w, int exec_error_w,
                            pid_t parent) {
  ::setpgid(0, 0);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ExecFailed(exec_error_w);
  if (::getppid() != parent) ::_exit(127);  // kboxd died before prctl took hold.
  if (::dup2(devnull, 0) < 0 || ::dup2(output_w, 1) < 0 || ::dup2(output_w, 2) < 0 ||
      ::dup2(result_w, spec.result_fd) < 0 ||
      ::dup3(exec_error_w, kExecErrorFd, O_CLOEXEC) < 0) {
    ExecFailed(exec_error_w);
  }
  exec_error_w = kExecErrorFd;
  // Nothing of kboxd's (sockets, other jobs' pipes) reaches the child.
  ::close_range(static_cast<unsigned>(kExecErrorFd + 1), ~0U, 0);
  RestoreSignalsForExec();  // what kboxd may have changed for itself
  if (::chdir(spec.cwd.c_str()) != 0) ExecFailed(exec_error_w);
  ::execve(argv[0], argv, envp);
  ExecFailed(exec_error_w);
}

void KillGroup(pid_t pgid) { ::kill(-pgid, SIGKILL); }

// Reaps the main process; fills exit status and CPU time.
void Reap(pid_t pid, int pidfd, ProcessOutcome& out) {
  pollfd p{pidfd, POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(kReapGrace.count()));
  int status = 0;
  rusage usage{};
  if (::wait4(pid, &status, 0, &usage) != pid) return;
  out.cpu_ms = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
               static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
  RecordWaitStatus(status, out);
}

}  // namespace

ProcessOutcome RunProcess(const ProcessSpec& spec) {
  ProcessOutcome out;
  const auto start = Clock::now();
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    out.spawn_error = "argv[0] must be an absolute path";
    return out;
  }
  if (spec.result_fd < 3 || spec.result_fd >= kExecErrorFd) {
    out.spawn_error = "result_fd must be 3";
    return out;
  }

  Fd output_r, output_w, result_r, result_w, error_r, error_w;
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0 || !MakePipe(output_r, output_w) || !MakePipe(result_r, result_w) ||
      !MakePipe(error_r, error_w)) {
    out.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  const std::vector<char*> argv = CStrings(spec.argv);
  const std::vector<char*> envp = CStrings(spec.env);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    out.spawn_error = std::string("fork: ") + std::strerror(errno);
    return out;
  }
  if (pid == 0) {
    ExecChild(spec, argv.data(), envp.data(), devnull.get(), output_w.get(), result_w.get(),
              error_w.get(), parent);
  }
  ::setpgid(pid, pid);  // Also in the child: whichever runs first wins the race.
  // glibc 2.36's <sys/pidfd.h> lacks C linkage for C++; call the syscall.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  output_w.reset();
  result_w.reset();
  error_w.reset();

  int exec_errno = 0;
  if (::read(error_r.get(), &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
    KillGroup(pid);
    ::waitpid(pid, nullptr, 0);
    out.spawn_error = "exec " + spec.argv[0] + ": " + std::strerror(exec_errno);
    out.end = ProcessOutcome::End::kSpawnFailed;
    return out;
  }
  if (pidfd.get() < 0) {
    KillGroup(pid);
    ::waitpid(pid, nullptr, 0);
    out.spawn_error = std::string("pidfd_open: ") + std::strerror(errno);
    return out;
  }

  const int pidfd_number = pidfd.get();
  const MainProcess main{.ended_fd = pidfd_number,
                         .reap = [&](ProcessOutcome& o) { Reap(pid, pidfd_number, o); },
                         .kill_group = [pid] { KillGroup(pid); },
                         .group = pid};
  SuperviseProcess(spec, start, std::move(output_r), std::move(result_r), main, out);
  out.wall_ms = MsSince(start);
  return out;
}

std::string DescribeEnd(const ProcessOutcome& outcome) {
  switch (outcome.end) {
    case ProcessOutcome::End::kExited:
      return "exited with status " + std::to_string(outcome.exit_code);
    case ProcessOutcome::End::kSignaled: {
      const char* name = ::sigabbrev_np(outcome.term_signal);
      return std::string("killed by SIG") + (name ? name : std::to_string(outcome.term_signal));
    }
    case ProcessOutcome::End::kTimedOut:
      return "killed at the wall-clock limit";
    case ProcessOutcome::End::kOutputLimit:
      return "killed after writing more than the output limit";
    case ProcessOutcome::End::kSpawnFailed:
      return "could not be started: " + outcome.spawn_error;
    case ProcessOutcome::End::kCancelled:
      return "killed because kboxd is shutting down";
  }
  return "unknown";
}

}  // namespace kbox
