// kbox-sandbox: runs one program inside kbox's sandbox.
//
//   kbox-sandbox --spec FILE      (FILE: a binary kbox.v1.SandboxSpec)
//
// kboxd starts it (through worker/process_runner.cc) for every stage. It is
// single-threaded, so each step may allocate and report errors freely; the
// same steps apply to a child forked from a pre-forked parent.
//
//   kbox-sandbox (host namespaces; joins the job's cgroups)
//    └─ init: pid 1 of new user/pid/mount/net/ipc/uts/cgroup namespaces;
//       builds the root file system, reaps orphans, reports the program's
//       wait status; when it exits the kernel kills everything left inside
//        └─ program: rlimits, unprivileged uid, no capabilities,
//           no_new_privs, descriptors closed, seccomp, execve
//
// Exit status: the program's own (exit code, or death by the same signal);
// 125 with a message on stderr when the sandbox could not be set up, which
// kboxd reports as INFRA_ERROR, never against the candidate.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <grp.h>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kbox/v1/sandbox.pb.h"
#include "policy/seccomp_policy.h"
#include "worker/sandbox/filesystem.h"
#include "worker/sandbox/namespaces.h"
#include "worker/sandbox/process_limits.h"

namespace {

using kbox::sandbox::Errno;
using kbox::sandbox::StepError;

constexpr int kSetupFailed = 125;

// What init tells the launcher when the program has ended.
struct ProgramEnd {
  int wait_status = 0;
  int forbidden_syscall = -1;  // The call the seccomp listener held, or -1.
};

struct Context {
  kbox::v1::SandboxSpec spec;
  kbox::sandbox::HostSources sources;  // Opened by init, before it drops to the mapped id.
  const kbox::SeccompPolicy* policy = nullptr;
  int go_read = -1;       // Init blocks on it until its id maps are written.
  int status_write = -1;  // Init sends the program's ProgramEnd here.
  int listener_socket[2] = {-1, -1};  // The program hands its seccomp listener to init.
};

// Sends descriptor `fd` over the AF_UNIX socket `sock`.
bool SendFd(int sock, int fd) {
  char byte = 'L';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  return ::sendmsg(sock, &msg, 0) == 1;
}

// Receives a descriptor sent by SendFd, or -1.
int ReceiveFd(int sock) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (!cmsg || cmsg->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
  return fd;
}

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

[[noreturn]] void RunProgram(const Context& ctx) {
  const auto& spec = ctx.spec;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die(Errno("PR_SET_PDEATHSIG"));
  std::vector<int> keep(spec.keep_fds().begin(), spec.keep_fds().end());
  keep.push_back(ctx.listener_socket[1]);
  auto argv = CStrings(spec.argv());
  auto envp = CStrings(spec.env());
  for (const StepError& e :
       {kbox::sandbox::ApplyRlimits(spec.rlimits()), kbox::sandbox::BecomeSandboxUser(spec.inside_id()),
        kbox::sandbox::SetNoNewPrivs(), kbox::sandbox::CloseOtherFds(keep)}) {
    if (e) Die(*e);
  }
  if (::chdir(spec.cwd().c_str()) != 0) Die(Errno("chdir " + spec.cwd()));
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // Init blocks SIGCHLD for its signalfd.
  // Last step before exec: from here on every system call is filtered. A
  // call the profile does not allow is held for init, which names it and
  // kills the sandbox; the listener goes to init, never across exec.
  auto listener = ctx.policy->InstallWithListener();
  if (!listener) Die("seccomp: " + listener.error().message);
  if (!SendFd(ctx.listener_socket[1], *listener)) Die(Errno("hand the seccomp listener to init"));
  ::close(*listener);
  ::close(ctx.listener_socket[1]);
  ::execve(argv[0], argv.data(), envp.data());
  Die(Errno("execve " + spec.argv(0)));
}

int InitMain(void* arg) {
  Context& ctx = *static_cast<Context*>(arg);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die(Errno("PR_SET_PDEATHSIG"));
  char go = 0;
  if (::read(ctx.go_read, &go, 1) != 1) Die("the launcher died before mapping ids");
  ::close(ctx.go_read);
  // Open what the sandbox will show while still the host's root uid (which
  // may walk private directories such as /root that the mapped id cannot),
  // and inside the new mount namespace (a bind's source must belong to it).
  ctx.sources = kbox::sandbox::OpenHostSources(ctx.spec);
  // Become the one mapped id now: files the setup creates must belong to an
  // id the namespace knows (else EOVERFLOW). Host root is not "root" in the
  // new namespace, so this keeps the namespace's capabilities for the mounts.
  const unsigned id = ctx.spec.inside_id();
  if (::setresgid(id, id, id) != 0 || ::setresuid(id, id, id) != 0) Die(Errno("set the inside id"));
  if (auto e = kbox::sandbox::BuildRootFilesystem(ctx.spec, ctx.sources)) Die(*e);
  for (const auto& [path, source] : ctx.sources) {
    if (source.fd >= 0) ::close(source.fd);
  }
  const std::string& host = ctx.spec.hostname();
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
    RunProgram(ctx);
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
      end.forbidden_syscall = kbox::SeccompPolicy::ReceiveHeldCall(listener);
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
          return 0;
        }
      }
    }
  }
}

bool ReadSpec(const char* path, kbox::v1::SandboxSpec& spec) {
  std::ifstream in(path, std::ios::binary);
  return in && spec.ParseFromIstream(&in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--spec") {
    std::cerr << "usage: kbox-sandbox --spec FILE\n";
    return 2;
  }
  // Dying by the program's signal below must not leave a core file behind.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  Context ctx;
  if (!ReadSpec(argv[2], ctx.spec)) Die(std::string("cannot read the spec ") + argv[2]);
  if (ctx.spec.argv().empty() || ctx.spec.argv(0).empty() || ctx.spec.argv(0)[0] != '/') {
    Die("argv[0] must be an absolute path");
  }
  auto policy = kbox::SeccompPolicy::LoadFile(ctx.spec.seccomp_policy());
  if (!policy) Die("seccomp policy " + policy.error().field + ": " + policy.error().message);
  ctx.policy = &*policy;

  // kboxd runs as root: drop root's supplementary groups, which a process in
  // a user namespace could not drop later (setgroups is denied there).
  if (::setgroups(0, nullptr) != 0) Die(Errno("setgroups"));
  for (const auto& procs : ctx.spec.cgroup().procs_files()) {
    std::ofstream out(procs);
    out << ::getpid() << std::flush;
    if (!out) Die("cannot join cgroup " + procs);
  }

  int go[2], status[2];
  if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(status, O_CLOEXEC) != 0) Die(Errno("pipe2"));
  ctx.go_read = go[0];
  ctx.status_write = status[1];
  static char stack[1 << 20];
  const pid_t init = ::clone(InitMain, stack + sizeof stack,
                             kbox::sandbox::NamespaceCloneFlags() | SIGCHLD, &ctx);
  if (init < 0) Die(Errno("clone into new namespaces"));
  ::close(go[0]);
  ::close(status[1]);
  if (auto e = kbox::sandbox::WriteIdMaps(init, ctx.spec.inside_id(), ctx.spec.outside_uid(),
                                          ctx.spec.outside_gid())) {
    ::kill(init, SIGKILL);
    Die(*e);
  }
  if (::write(go[1], "g", 1) != 1) Die(Errno("release init"));
  ::close(go[1]);

  ProgramEnd end;
  const bool reported = ::read(status[0], &end, sizeof end) == static_cast<ssize_t>(sizeof end);
  const int program_status = end.wait_status;
  int init_status = 0;
  ::waitpid(init, &init_status, 0);
  if (!reported) {
    // Init failed (its message is on stderr) or was killed.
    if (WIFEXITED(init_status)) return WEXITSTATUS(init_status);
    Die("sandbox init was killed by signal " + std::to_string(WTERMSIG(init_status)));
  }
  if (end.forbidden_syscall >= 0) {
    // kboxd reads this line from the output and reports the call by name.
    const std::string line = "kbox-sandbox: killed: forbidden system call " +
                             kbox::SeccompPolicy::SyscallName(end.forbidden_syscall) + "\n";
    (void)!::write(2, line.data(), line.size());
  }
  if (WIFEXITED(program_status) && end.forbidden_syscall < 0) return WEXITSTATUS(program_status);
  // Die the way the program died, so kboxd sees the signal (SIGSYS: seccomp).
  const int sig = end.forbidden_syscall >= 0 ? SIGSYS : WTERMSIG(program_status);
  ::signal(sig, SIG_DFL);
  ::kill(::getpid(), sig);
  return 128 + sig;
}
