// kbox-sandboxee: tries ONE forbidden thing, named by its first argument, and
// exits with kGotThrough only if it succeeded. Run under kbox-sandbox by
// sandbox_test.cc; a seccomp kill shows up as death by SIGSYS.
//
//   read PATH        open and read a file (e.g. /etc/shadow, another job's scratch)
//   list PATH        list a directory (the host's /root, /home)
//   connect          TCP connect to 127.0.0.1:47631
//   ptrace-parent    PTRACE_ATTACH to the parent
//   vm-read-parent   process_vm_readv from the parent
//   fork N           fork N children that sleep (past the process limit)
//   fill PATH BYTES  write BYTES to PATH (past the disk cap)
//   mount            mount a tmpfs
//   unshare          create a new user namespace
//   keyctl           read the session keyring
//   setuid0          become uid 0 of the host
//   kill-init        SIGKILL pid 1 of the sandbox (its init)
//   exec PATH        execve PATH (e.g. a compiler hidden from run stages)
//   whoami           print "pid P uid U fds F..." (honest; exits 0)
//   spin-past-xcpu MS ignore SIGXCPU and spin until MS milliseconds of CPU
//                    time are used; exits 0 if nothing killed it on the way
//   split UID        as the run stage's judge does (docs/judge-boundary.md):
//                    fork a child that takes UID and drops every capability,
//                    keep CAP_KILL and start a thread; the child then tries
//                    to reach this process (signal it, read its /proc
//                    entries, find it in /proc) and names its own thread
//                    through /proc/<getpid()>/task/<gettid()>/comm as libcuda
//                    does at cuInit. Exits 0 when the child got nowhere and
//                    could name its thread, kGotThrough when it got through,
//                    and another code when a step failed
//
// kbox-sandboxee-enter is the same program for the return mode
// (libkbox_sandbox_enter.so): `kbox-sandboxee-enter SPEC WHAT...` enters the
// sandbox of SPEC in place, then tries WHAT inside it.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/capability.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr int kGotThrough = 42;  // The forbidden thing worked.
constexpr int kRefused = 0;      // It failed with an error, as it must.
constexpr int kUsage = 2;

int Refused(const char* what) {
  std::fprintf(stderr, "sandboxee: %s refused: %s\n", what, std::strerror(errno));
  return kRefused;
}

int Read(const char* path) {
  const int fd = ::open(path, O_RDONLY);
  if (fd < 0) return Refused(path);
  char buf[64];
  return ::read(fd, buf, sizeof buf) >= 0 ? kGotThrough : Refused(path);
}

int List(const char* path) {
  DIR* dir = ::opendir(path);
  if (!dir) return Refused(path);
  int entries = 0;
  while (dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++entries;
  }
  ::closedir(dir);
  // An empty mount point reveals nothing of the host.
  return entries > 0 ? kGotThrough : kRefused;
}

int Connect() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return Refused("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(47631);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? kGotThrough
                                                                             : Refused("connect");
}

int Fork(int n) {
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) return Refused("fork");
    if (pid == 0) {
      ::sleep(30);
      ::_exit(0);
    }
  }
  return kGotThrough;
}

int Fill(const char* path, long long bytes) {
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Refused(path);
  std::vector<char> block(1 << 20, 'x');
  for (long long done = 0; done < bytes; done += static_cast<long long>(block.size())) {
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      return Refused("write");
    }
  }
  return kGotThrough;
}

// Who the process is inside the sandbox, and which descriptors it holds.
int WhoAmI() {
  std::string fds;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(dir);
    std::vector<int> open;
    while (dirent* e = ::readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const int fd = std::atoi(e->d_name);
      if (fd != own) open.push_back(fd);
    }
    ::closedir(dir);
    std::sort(open.begin(), open.end());
    for (int fd : open) fds += " " + std::to_string(fd);
  }
  std::printf("pid %d uid %d fds%s\n", static_cast<int>(::getpid()), static_cast<int>(::getuid()),
              fds.c_str());
  return 0;
}

// The capability sets of this thread (effective, permitted).
std::pair<uint64_t, uint64_t> Caps() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  ::syscall(SYS_capget, &header, data);
  return {data[0].effective | (uint64_t{data[1].effective} << 32),
          data[0].permitted | (uint64_t{data[1].permitted} << 32)};
}

bool SetCaps(uint64_t caps) {
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; ++i) {
    data[i].effective = data[i].permitted = static_cast<uint32_t>(caps >> (32 * i));
  }
  return ::syscall(SYS_capset, &header, data) == 0;
}

int Split(unsigned uid) {
  const uint64_t judge_caps = (1ull << CAP_SETUID) | (1ull << CAP_SETGID) | (1ull << CAP_KILL);
  if (Caps().first != judge_caps) {
    std::fprintf(stderr, "split: the judge started with capabilities %llx\n",
                 static_cast<unsigned long long>(Caps().first));
    return 3;
  }
  const pid_t judge = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return Refused("fork");
  if (child == 0) {
    if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0 || !SetCaps(0)) _exit(4);
    if (Caps().second != 0 || ::getuid() != uid) _exit(5);
    // libcuda names its threads at cuInit by writing
    // /proc/<getpid()>/task/<gettid()>/comm; CUDA fails to start (error 304)
    // where that path is not this thread's.
    char comm[96];
    std::snprintf(comm, sizeof comm, "/proc/%d/task/%d/comm", static_cast<int>(::getpid()),
                  static_cast<int>(::gettid()));
    const int comm_fd = ::open(comm, O_WRONLY);
    if (comm_fd < 0 || ::write(comm_fd, "kbox-named", 10) != 10) {
      std::fprintf(stderr, "split: the candidate cannot name its thread through %s\n", comm);
      _exit(6);
    }
    ::close(comm_fd);
    // No signal reaches a process of the judge's uid or the sandbox's init.
    int reached = 0;
    const auto got = [&](bool through, const char* what) {
      if (through) std::fprintf(stderr, "split: the candidate got through: %s\n", what);
      reached += through;
    };
    got(::kill(judge, SIGTERM) == 0, "kill(judge)");
    got(::kill(1, SIGTERM) == 0, "kill(1)");
    // kill(-1) returns 0 even when every process it found refused
    // (EPERM): the judge alive to report below is what shows it got nowhere.
    ::kill(-1, SIGTERM);
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(judge));
    const int fd = ::open(path, O_RDONLY);
    char byte;
    got(fd >= 0 && ::read(fd, &byte, 1) >= 0, "/proc/<judge>/environ");
    // Its /proc lists no process but its own.
    const std::string self = std::to_string(::getpid());
    if (DIR* dir = ::opendir("/proc")) {
      while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && self != e->d_name) {
          std::fprintf(stderr, "split: the candidate sees /proc/%s\n", e->d_name);
          got(true, "another process in /proc");
        }
      }
      ::closedir(dir);
    }
    _exit(reached == 0 ? 0 : kGotThrough);
  }
  if (!SetCaps(1ull << CAP_KILL) || Caps().first != (1ull << CAP_KILL)) return 7;
  // A thread starts (the judge's pools do).
  pthread_t thread;
  if (::pthread_create(&thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr) != 0) return 10;
  ::pthread_join(thread, nullptr);
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return 8;
  // The judge alive to see it, and the child's verdict.
  return WIFEXITED(status) ? WEXITSTATUS(status) : 9;
}

int Sandboxee(int argc, char** argv) {
  if (argc < 2) return kUsage;
  const std::string what = argv[1];
  if (what == "read" && argc == 3) return Read(argv[2]);
  if (what == "list" && argc == 3) return List(argv[2]);
  if (what == "connect") return Connect();
  if (what == "ptrace-parent") {
    return ::ptrace(PTRACE_ATTACH, ::getppid(), nullptr, nullptr) == 0 ? kGotThrough
                                                                        : Refused("ptrace");
  }
  if (what == "vm-read-parent") {
    char local[16];
    char* remote = reinterpret_cast<char*>(&local);  // Same layout in the parent: a valid address.
    iovec l{local, sizeof local}, r{remote, sizeof local};
    return ::process_vm_readv(::getppid(), &l, 1, &r, 1, 0) > 0 ? kGotThrough
                                                                : Refused("process_vm_readv");
  }
  if (what == "fork" && argc == 3) return Fork(std::atoi(argv[2]));
  if (what == "fill" && argc == 4) return Fill(argv[2], std::atoll(argv[3]));
  if (what == "mount") {
    return ::mount("tmpfs", "/tmp", "tmpfs", 0, nullptr) == 0 ? kGotThrough : Refused("mount");
  }
  if (what == "unshare") return ::unshare(CLONE_NEWUSER) == 0 ? kGotThrough : Refused("unshare");
  if (what == "keyctl") {
    return ::syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0) >= 0
               ? kGotThrough
               : Refused("keyctl");
  }
  if (what == "setuid0") return ::setuid(0) == 0 && ::getuid() == 0 ? kGotThrough : Refused("setuid");
  if (what == "kill-init") {
    ::kill(1, SIGKILL);
    ::usleep(200 * 1000);
    return ::kill(1, 0) != 0 ? kGotThrough : kRefused;  // Init still there: refused.
  }
  if (what == "exec" && argc >= 3) {
    ::execv(argv[2], argv + 2);
    return Refused("execv");
  }
  if (what == "whoami") return WhoAmI();
  if (what == "spin-past-xcpu" && argc == 3) {
    ::signal(SIGXCPU, SIG_IGN);
    const long long limit_ms = std::atoll(argv[2]) ;
    volatile uint64_t spins = 0;
    for (;;) {
      for (int i = 0; i < 1'000'000; ++i) spins = spins + 1;
      timespec cpu{};
      ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
      if (static_cast<long long>(cpu.tv_sec) * 1000 + cpu.tv_nsec / 1'000'000 >= limit_ms) return 0;
    }
  }
  if (what == "split" && argc == 3) return Split(static_cast<unsigned>(std::atoi(argv[2])));
  return kUsage;
}

}  // namespace

#ifdef KBOX_SANDBOXEE_ENTERS
#include "worker/sandbox/kbox_sandbox_enter.h"

int main(int argc, char** argv) {
  if (argc < 3) return kUsage;
  char err[512] = "";
  if (kbox_sandbox_enter(argv[1], err, sizeof err) != 0) {
    std::fprintf(stderr, "kbox-sandbox: %s\n", err);
    return 125;
  }
  // Only the sandboxed program process gets here.
  return Sandboxee(argc - 1, argv + 1);
}
#else
int main(int argc, char** argv) { return Sandboxee(argc, argv); }
#endif
