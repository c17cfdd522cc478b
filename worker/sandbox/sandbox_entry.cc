#include "worker/sandbox/sandbox_entry.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "policy/seccomp_policy.h"
#include "worker/sandbox/fd_passing.h"
#include "worker/sandbox/filesystem.h"
#include "worker/sandbox/namespaces.h"
#include "worker/sandbox/process_limits.h"

namespace kbox::sandbox {
namespace {

// What init tells the launcher when the program has ended.
struct ProgramEnd {
  int wait_status = 0;
  int forbidden_syscall = -1;  // The call the seccomp listener held, or -1.
};

struct Context {
  const v1::SandboxSpec* spec = nullptr;
  const SeccompPolicy* policy = nullptr;
  EntryMode mode = EntryMode::kExec;
  HostSources sources;    // Opened by init, before it drops to the mapped id.
  int go_read = -1;       // Init blocks on it until its id maps are written.
  int status_write = -1;  // Init sends the program's ProgramEnd here.
  int listener_socket[2] = {-1, -1};  // The program hands its seccomp listener to init.
};

[[noreturn]] void Die(const std::string& message) {
  std::string line = "kbox-sandbox: " + message + "\n";
  (void)!::write(2, line.data(), line.size());
  ::_exit(kSetupFailed);
}

std::vector<char*> CStrings(const google::protobuf::RepeatedPtrField<std::string>& strings) {
  std::vector<char*> out;
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Opens the spec's inherited files at their descriptor numbers, as the
// host's root and before any namespace exists (they are host paths: the
// candidate's cgroup controls). Not close-on-exec: the program keeps them.
StepError OpenInheritedFiles(const v1::SandboxSpec& spec) {
  for (const auto& file : spec.inherited_files()) {
    if (file.fd() <= 2 || ::fcntl(file.fd(), F_GETFD) >= 0) {
      return "inherited file " + file.path() + ": descriptor " + std::to_string(file.fd()) +
             " is not free";
    }
    const int fd = ::open(file.path().c_str(),
                          (file.write() ? O_WRONLY : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Errno("open " + file.path());
    const bool moved = ::dup2(fd, file.fd()) == file.fd();
    ::close(fd);
    if (!moved) return Errno("dup2 " + file.path());
  }
  return std::nullopt;
}

// The program's own steps. In kExec mode it ends in execve; in kReturn mode
// it returns, confined exactly as an exec'd program would be from its first
// instruction (the filter and every other step are in force before return).
void ConfineProgram(Context& ctx) {
  const auto& spec = *ctx.spec;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die(Errno("PR_SET_PDEATHSIG"));
  std::vector<int> keep(spec.keep_fds().begin(), spec.keep_fds().end());
  for (const auto& file : spec.inherited_files()) keep.push_back(file.fd());
  keep.push_back(ctx.listener_socket[1]);
  auto argv = CStrings(spec.argv());
  auto envp = CStrings(spec.env());
  const StepError identity = spec.has_candidate() ? BecomeJudgeUser(spec.inside_id())
                                                  : BecomeSandboxUser(spec.inside_id());
  for (const StepError& e : {ApplyRlimits(spec.rlimits()), identity, SetNoNewPrivs(),
                             CloseOtherFds(keep)}) {
    if (e) Die(*e);
  }
  if (::chdir(spec.cwd().c_str()) != 0) Die(Errno("chdir " + spec.cwd()));
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // Init blocks SIGCHLD for its signalfd.
  // Last step: from here on every system call is filtered. A call the
  // profile does not allow is held for init, which names it and kills the
  // sandbox; the listener goes to init and is closed here.
  auto listener = ctx.policy->InstallWithListener();
  if (!listener) Die("seccomp: " + listener.error().message);
  if (!SendFd(ctx.listener_socket[1], *listener)) Die(Errno("hand the seccomp listener to init"));
  ::close(*listener);
  ::close(ctx.listener_socket[1]);
  if (ctx.mode == EntryMode::kReturn) return;
  ::execve(argv[0], argv.data(), envp.data());
  Die(Errno("execve " + spec.argv(0)));
}

// Init's set-up, then the fork of the program. Returns in the program
// process only; init itself reaps and exits.
void RunInit(Context& ctx) {
  const auto& spec = *ctx.spec;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die(Errno("PR_SET_PDEATHSIG"));
  char go = 0;
  if (::read(ctx.go_read, &go, 1) != 1) Die("the launcher died before mapping ids");
  ::close(ctx.go_read);
  // Open what the sandbox will show while still the host's root uid (which
  // may walk private directories such as /root that the mapped id cannot),
  // and inside the new mount namespace (a bind's source must belong to it).
  ctx.sources = OpenHostSources(spec);
  // Become the one mapped id now: files the setup creates must belong to an
  // id the namespace knows (else EOVERFLOW). Host root is not "root" in the
  // new namespace, so this keeps the namespace's capabilities for the mounts.
  const unsigned id = spec.inside_id();
  if (::setresgid(id, id, id) != 0 || ::setresuid(id, id, id) != 0) Die(Errno("set the inside id"));
  if (auto e = BuildRootFilesystem(spec, ctx.sources)) Die(*e);
  for (const auto& [path, source] : ctx.sources) {
    if (source.fd >= 0) ::close(source.fd);
  }
  const std::string& host = spec.hostname();
  if (::sethostname(host.data(), host.size()) != 0) Die(Errno("sethostname"));

  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ctx.listener_socket) != 0) {
    Die(Errno("socketpair"));
  }
  // SIGCHLD through a signalfd, so one poll waits for the program's end and
  // for held system calls alike. Blocked before fork: none can be missed.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC);
  if (sigfd < 0) Die(Errno("signalfd"));

  const pid_t program = ::fork();
  if (program < 0) Die(Errno("fork"));
  if (program == 0) {
    ::close(ctx.status_write);
    ::close(ctx.listener_socket[0]);
    ::close(sigfd);
    return;
  }
  // The inherited files are the program's alone.
  for (const auto& file : spec.inherited_files()) ::close(file.fd());
  if (ctx.mode == EntryMode::kReturn) {
    // Init is a copy of its caller, the zygote's child, with CPython's
    // handlers (SIGINT) and ignored signals. As pid 1 it must have no
    // handler a process inside could trigger, like kbox-sandbox's init.
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGCHLD && sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
  }
  ::close(ctx.listener_socket[1]);
  int socket_fd = ctx.listener_socket[0];
  int listener = -1;
  ProgramEnd end;
  // As pid 1, adopt and reap every orphan until the program itself ends.
  for (;;) {
    pollfd fds[3] = {{sigfd, POLLIN, 0}, {socket_fd, POLLIN, 0}, {listener, POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0 && errno != EINTR) Die(Errno("poll"));
    if (fds[1].revents != 0) {
      listener = ReceiveFd(socket_fd);
      ::close(socket_fd);
      socket_fd = -1;
    }
    if (listener >= 0 && (fds[2].revents & POLLIN) && end.forbidden_syscall < 0) {
      end.forbidden_syscall = SeccompPolicy::ReceiveHeldCall(listener);
      // The held call never completes: everything in the sandbox dies now.
      ::kill(-1, SIGKILL);
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info;
      (void)!::read(sigfd, &info, sizeof info);
      for (;;) {
        int status = 0;
        const pid_t done = ::waitpid(-1, &status, WNOHANG);
        if (done <= 0) break;
        if (done == program) {
          end.wait_status = status;
          (void)!::write(ctx.status_write, &end, sizeof end);
          ::_exit(0);
        }
      }
    }
  }
}

// The launcher, in the host's namespaces: maps init's ids, releases it, and
// ends the way the program ended.
[[noreturn]] void RunLauncher(const v1::SandboxSpec& spec, pid_t init, int go_write,
                              int status_read) {
  for (const auto& file : spec.inherited_files()) ::close(file.fd());  // init has its copies
  std::vector<IdMapping> ids = {{spec.inside_id(), spec.outside_uid(), spec.outside_gid()}};
  if (spec.has_candidate()) {
    ids.push_back({spec.candidate().inside_id(), spec.candidate().outside_uid(),
                   spec.candidate().outside_gid()});
  }
  if (auto e = WriteIdMaps(init, ids)) {
    ::kill(init, SIGKILL);
    Die(*e);
  }
  if (::write(go_write, "g", 1) != 1) Die(Errno("release init"));
  ::close(go_write);

  ProgramEnd end;
  const bool reported = ::read(status_read, &end, sizeof end) == static_cast<ssize_t>(sizeof end);
  const int program_status = end.wait_status;
  int init_status = 0;
  ::waitpid(init, &init_status, 0);
  if (!reported) {
    // Init failed (its message is on stderr) or was killed.
    if (WIFEXITED(init_status)) ::_exit(WEXITSTATUS(init_status));
    if (WTERMSIG(init_status) == SIGKILL) {
      // Nothing inside can SIGKILL its pid namespace's init: someone outside
      // did. End by SIGKILL too, so kboxd reads an outside kill (kbox's
      // fault), not a setup failure or the last party's crash.
      const std::string line = "kbox-sandbox: sandbox init was killed by SIGKILL\n";
      (void)!::write(2, line.data(), line.size());
      ::kill(::getpid(), SIGKILL);
    }
    Die("sandbox init was killed by signal " + std::to_string(WTERMSIG(init_status)));
  }
  if (end.forbidden_syscall >= 0) {
    // kboxd reads this line from the output and reports the call by name.
    const std::string line = "kbox-sandbox: killed: forbidden system call " +
                             SeccompPolicy::SyscallName(end.forbidden_syscall) + "\n";
    (void)!::write(2, line.data(), line.size());
  }
  if (WIFEXITED(program_status) && end.forbidden_syscall < 0) ::_exit(WEXITSTATUS(program_status));
  // Die the way the program died, so kboxd sees the signal (SIGSYS: seccomp).
  const int sig = end.forbidden_syscall >= 0 ? SIGSYS : WTERMSIG(program_status);
  ::signal(sig, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);  // A caller (Python) may have blocked it.
  ::kill(::getpid(), sig);
  ::_exit(128 + sig);
}

}  // namespace

StepError ReadSpecFile(const std::string& path, v1::SandboxSpec& spec) {
  std::ifstream in(path, std::ios::binary);
  if (!in || !spec.ParseFromIstream(&in)) return "cannot read the spec " + path;
  return std::nullopt;
}

StepError EnterSandbox(const v1::SandboxSpec& spec, EntryMode mode) {
  if (mode == EntryMode::kExec &&
      (spec.argv().empty() || spec.argv(0).empty() || spec.argv(0)[0] != '/')) {
    return "argv[0] must be an absolute path";
  }
  auto policy = SeccompPolicy::LoadFile(spec.seccomp_policy());
  if (!policy) return "seccomp policy " + policy.error().field + ": " + policy.error().message;
  // Dying by the program's signal must not leave a core file behind.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  // kboxd runs as root: drop root's supplementary groups, which a process in
  // a user namespace could not drop later (setgroups is denied there).
  if (::setgroups(0, nullptr) != 0) return Errno("setgroups");
  for (const auto& procs : spec.cgroup().procs_files()) {
    std::ofstream out(procs);
    out << ::getpid() << std::flush;
    if (!out) return "cannot join cgroup " + procs;
  }
  if (auto e = OpenInheritedFiles(spec)) return e;
  int go[2], status[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return Errno("pipe2");
  if (::pipe2(status, O_CLOEXEC) != 0) {
    ::close(go[0]);
    ::close(go[1]);
    return Errno("pipe2");
  }
  // A fork-style clone (no new stack): init goes on from here on a copy of
  // this stack, so in kReturn mode the program, forked by init, can return
  // through the caller's frames. Safe because the caller is single-threaded;
  // glibc's cached thread id in init is stale, but init only runs the steps
  // below, and the program is a proper fork() of init with a fresh one.
  const long init = ::syscall(SYS_clone, NamespaceCloneFlags() | SIGCHLD, nullptr, nullptr,
                              nullptr, nullptr);
  if (init < 0) {
    const std::string error = Errno("clone into new namespaces");
    for (int fd : {go[0], go[1], status[0], status[1]}) ::close(fd);
    return error;
  }
  if (init == 0) {
    Context ctx;
    ctx.spec = &spec;
    ctx.policy = &*policy;
    ctx.mode = mode;
    ::close(go[1]);
    ::close(status[0]);
    ctx.go_read = go[0];
    ctx.status_write = status[1];
    RunInit(ctx);        // Returns in the program only.
    ConfineProgram(ctx); // kExec: never returns.
    return std::nullopt;
  }
  ::close(go[0]);
  ::close(status[1]);
  RunLauncher(spec, static_cast<pid_t>(init), go[1], status[0]);
}

}  // namespace kbox::sandbox
