#include "worker/zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "policy/status.h"
#include "worker/process_supervision.h"
#include "worker/sandbox/fd_passing.h"

namespace kbox {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kZygoteSocketFd = 3;  // Where the zygote finds its end of the socket.
// How long a healthy zygote takes to fork and answer with the child's pid.
constexpr auto kForkReplyTimeout = std::chrono::milliseconds(30'000);
constexpr size_t kMaxMessage = 4096;
// How often a wait for the zygote looks whether this object is going away.
constexpr auto kStopCheck = std::chrono::milliseconds(100);

// Between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecZygote(char* const* argv, char* const* envp, int socket_fd, pid_t parent) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // stdout/stderr stay kboxd's: the zygote's own messages go to kboxd's log.
  if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(socket_fd, kZygoteSocketFd) < 0) ::_exit(127);
  ::close_range(kZygoteSocketFd + 1, ~0U, 0);
  RestoreSignalsForExec();
  if (::chdir("/") != 0) ::_exit(127);
  ::execve(argv[0], argv, envp);
  ::_exit(127);
}

}  // namespace

Zygote::~Zygote() {
  // A start in progress notices within kStopCheck (Receive); the lock is
  // taken once so that the starter is either waiting (and woken) or sees it.
  stopping_ = true;
  { std::lock_guard lock(mu_); }
  start_cv_.notify_all();
  if (starter_.joinable()) starter_.join();
  std::lock_guard lock(mu_);
  StopLocked();
}

void Zygote::StartInBackground() {
  std::lock_guard lock(mu_);
  RequestStartLocked();
}

void Zygote::RequestStartLocked() {
  start_wanted_ = true;
  if (!starter_.joinable()) starter_ = std::thread([this] { StarterLoop(); });
  start_cv_.notify_one();
}

void Zygote::StarterLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [this] { return stopping_ || start_wanted_; });
    if (stopping_) return;
    start_wanted_ = false;
    (void)StartLocked();  // A failure is kept in start_error_ for the next Run.
  }
}

pid_t Zygote::pid() const {
  std::lock_guard lock(mu_);
  return pid_;
}

pid_t Zygote::last_child() const {
  std::lock_guard lock(mu_);
  return last_child_;
}

Status Zygote::Start() {
  std::lock_guard lock(mu_);
  return StartLocked();
}

std::string Zygote::start_error() const {
  std::lock_guard lock(mu_);
  return start_error_;
}

void Zygote::StopLocked() {
  socket_.reset();
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

void Zygote::Notify(ZygoteEvent event) const {
  if (settings_.observer) settings_.observer(settings_.slot, event);
}

Status Zygote::StartLocked() {
  if (pid_ > 0) {
    // Still ours and alive? A zygote that died between jobs is replaced.
    if (::waitpid(pid_, nullptr, WNOHANG) == 0 && socket_.get() >= 0) return Status::Ok();
    pid_ = -1;
    socket_.reset();
    died_ = true;
    Notify(ZygoteEvent::kDied);
  }
  if (!start_error_.empty() && Clock::now() - start_failed_at_ < kStartRetryDelay) {
    return Status::Error(start_error_);
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return Status::Error(std::string("socketpair: ") + std::strerror(errno));
  }
  // Their end above fd 3, so the child's dup2 onto 3 always makes a copy
  // without close-on-exec (it would be a no-op if the end were fd 3 itself).
  Fd ours(pair[0]), spare(pair[1]);
  Fd theirs(::fcntl(spare.get(), F_DUPFD_CLOEXEC, kZygoteSocketFd + 1));
  spare.reset();
  if (theirs.get() < 0) return Status::Error(std::string("fcntl: ") + std::strerror(errno));
  const std::vector<std::string> args = {settings_.python, "-s", "-B", settings_.script,
                                         "--socket-fd", std::to_string(kZygoteSocketFd),
                                         "--enter-lib", settings_.enter_library};
  const auto argv = CStrings(args);
  std::vector<std::string> env = settings_.env;
  if (stage_threads_ > 0) env.push_back("KBOX_STAGE_THREADS=" + std::to_string(stage_threads_));
  const auto envp = CStrings(env);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) ExecZygote(argv.data(), envp.data(), theirs.get(), parent);
  theirs.reset();
  pid_ = pid;
  socket_ = std::move(ours);
  const auto ready = Receive(socket_, settings_.start_timeout);
  if (!ready || !ready->starts_with("ready ")) {
    StopLocked();
    if (stopping_) return Status::Error(std::string("kboxd is stopping the zygote"));
    start_error_ = "the zygote exited or did not report ready within " +
                   std::to_string(settings_.start_timeout.count()) +
                   " ms (its stderr is in kboxd's log)";
    start_failed_at_ = Clock::now();
    Notify(ZygoteEvent::kStartFailed);
    return Status::Error(start_error_);
  }
  int threads = 0;
  if (std::sscanf(ready->c_str(), "ready %*d %d", &threads) == 1 && threads > 0) {
    stage_threads_ = threads;
  }
  start_error_.clear();
  Notify(ZygoteEvent::kStarted);
  if (died_) Notify(ZygoteEvent::kRestarted);
  died_ = false;
  return Status::Ok();
}

std::optional<std::string> Zygote::Receive(const Fd& socket,
                                           std::chrono::milliseconds timeout) const {
  pollfd p{socket.get(), POLLIN, 0};
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (stopping_) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    const int n = ::poll(&p, 1, static_cast<int>(std::min(left, kStopCheck).count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n > 0) break;
  }
  char buffer[kMaxMessage];
  const ssize_t got = ::recv(socket.get(), buffer, sizeof buffer, MSG_DONTWAIT);
  if (got <= 0) return std::nullopt;
  return std::string(buffer, static_cast<size_t>(got));
}

bool Zygote::ReadExit(const Fd& socket, pid_t child, ProcessOutcome& out) const {
  const auto message = Receive(socket, kReapGrace);
  if (!message) return false;
  long pid = 0;
  int status = 0;
  double cpu_ms = 0;
  if (std::sscanf(message->c_str(), "exit %ld %d %lf", &pid, &status, &cpu_ms) != 3 ||
      pid != child) {
    return false;
  }
  out.cpu_ms = cpu_ms;
  RecordWaitStatus(status, out);
  return true;
}

std::optional<ProcessOutcome> Zygote::Run(const std::string& sandbox_spec,
                                          const ProcessSpec& limits) {
  // The stage's wall time counts from the request, a zygote still importing
  // (a lane's first, a successor not ready yet) included, as a fork+exec'd
  // stage's counts its interpreter's start; its limits count from the fork.
  const auto asked = Clock::now();
  std::unique_lock lock(mu_);
  if (!StartLocked().ok()) return std::nullopt;
  const auto start = Clock::now();
  ProcessOutcome out;
  int output[2], result[2];
  if (::pipe2(output, O_CLOEXEC) != 0) {
    out.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  Fd output_r(output[0]), output_w(output[1]);
  if (::pipe2(result, O_CLOEXEC) != 0) {
    out.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  Fd result_r(result[0]), result_w(result[1]);
  const std::string request = "fork " + sandbox_spec;
  const int fds[] = {output_w.get(), result_w.get()};
  const bool sent = sandbox::SendFds(socket_.get(), fds, request);
  output_w.reset();
  result_w.reset();
  const auto reply = sent ? Receive(socket_, kForkReplyTimeout) : std::nullopt;
  long child = 0;
  if (!reply || std::sscanf(reply->c_str(), "pid %ld", &child) != 1 || child <= 0) {
    out.spawn_error = "the zygote (pid " + std::to_string(pid_) + ") did not fork the stage: " +
                      (reply ? *reply : std::string("no reply"));
    StopLocked();
    died_ = true;
    Notify(ZygoteEvent::kDied);
    if (settings_.single_use) RequestStartLocked();
    return out;
  }
  // The child's pid is the job's process group (the zygote set it before
  // answering), which the sandbox's launcher, init and program all belong to.
  const pid_t group = static_cast<pid_t>(child);
  last_child_ = group;
  pid_t zygote = pid_;
  Fd socket;
  if (settings_.single_use) {
    // This zygote serves this stage alone: it leaves the slot, and its
    // successor imports beside the stage, outside the lock.
    socket = std::move(socket_);
    pid_ = -1;
    RequestStartLocked();
    lock.unlock();
  }
  const Fd& channel = settings_.single_use ? socket : socket_;
  const bool zygote_failed =
      Supervise(channel, group, limits, start, std::move(output_r), std::move(result_r), out);
  if (settings_.single_use) {
    socket.reset();
    ::kill(zygote, SIGKILL);
    ::waitpid(zygote, nullptr, 0);
    lock.lock();
  } else if (zygote_failed) {
    StopLocked();
    died_ = true;
  }
  if (zygote_failed) {
    Notify(ZygoteEvent::kDied);
    out.spawn_error = "the zygote (pid " + std::to_string(zygote) +
                      ") died or broke its protocol during the stage; " +
                      (settings_.single_use ? "a fresh one serves the next" : "it will be restarted");
  }
  out.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - asked).count();
  return out;
}

bool Zygote::Supervise(const Fd& socket, pid_t group, const ProcessSpec& limits,
                       Clock::time_point start, Fd output_r, Fd result_r,
                       ProcessOutcome& out) const {
  bool zygote_failed = false;
  const MainProcess main{.ended_fd = socket.get(),
                         .reap = [&](ProcessOutcome& o) {
                           if (!ReadExit(socket, group, o)) zygote_failed = true;
                         },
                         .kill_group = [group] { ::kill(-group, SIGKILL); },
                         .group = group};
  SuperviseProcess(limits, start, std::move(output_r), std::move(result_r), main, out);
  if (zygote_failed) {
    ::kill(-group, SIGKILL);
    // Nothing it reported counts: not the status, not the result channel.
    ProcessOutcome failed;
    failed.output_tail = std::move(out.output_tail);
    failed.output_bytes = out.output_bytes;
    out = std::move(failed);
  }
  return zygote_failed;
}

void ZygotePool::Prestart(const std::vector<std::string>& slots, bool single_use) {
  for (const auto& slot : slots) For(slot, single_use).StartInBackground();
}

Zygote& ZygotePool::For(const std::string& slot, bool single_use) {
  std::lock_guard lock(mu_);
  auto& zygote = zygotes_[slot];
  if (!zygote) {
    ZygoteSettings settings = settings_;
    settings.slot = slot;
    settings.single_use = single_use;
    zygote = std::make_unique<Zygote>(std::move(settings));
  }
  return *zygote;
}

}  // namespace kbox
