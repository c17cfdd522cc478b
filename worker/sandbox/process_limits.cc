#include "worker/sandbox/process_limits.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace kbox::sandbox {
namespace {

StepError SetLimit(int resource, const char* name, uint64_t soft, uint64_t hard) {
  if (soft == 0) return std::nullopt;
  const rlimit limit{static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)};
  if (::setrlimit(resource, &limit) != 0) return Errno(std::string("setrlimit ") + name);
  return std::nullopt;
}

}  // namespace

StepError ApplyRlimits(const v1::SandboxRlimits& l) {
  // No core files: they would land in the job's directory and leak memory.
  const rlimit zero{0, 0};
  if (::setrlimit(RLIMIT_CORE, &zero) != 0) return Errno("setrlimit CORE");
  if (auto e = SetLimit(RLIMIT_NOFILE, "NOFILE", l.nofile(), l.nofile())) return e;
  if (auto e = SetLimit(RLIMIT_FSIZE, "FSIZE", l.fsize_bytes(), l.fsize_bytes())) return e;
  if (auto e = SetLimit(RLIMIT_NPROC, "NPROC", l.nproc(), l.nproc())) return e;
  // SIGXCPU at the soft limit, and no hard limit: the kernel's SIGKILL at a
  // hard CPU limit would read, to kboxd, as a kill from outside the job
  // (kbox's fault, retried), so a process that ignores SIGXCPU runs on into
  // the stage's wall-clock limit instead, which ends it as a TIMEOUT. The
  // soft limit cannot be raised by candidate code: the run stage's strict
  // filter kills setrlimit/prlimit64, and the no-SIGKILL filter refuses
  // RLIMIT_CPU changes where candidate code runs before it (the compile
  // stage's import). SandboxTest.TheCpuLimitNeverEndsInTheKernelsSigkill.
  if (auto e = SetLimit(RLIMIT_CPU, "CPU", l.cpu_seconds(), RLIM_INFINITY)) return e;
  if (auto e = SetLimit(RLIMIT_STACK, "STACK", l.stack_bytes(), l.stack_bytes())) return e;
  // Locked memory would escape the memory cgroup's reclaim.
  return SetLimit(RLIMIT_MEMLOCK, "MEMLOCK", 64 << 10, 64 << 10);
}

namespace {

constexpr int kJudgeCaps[] = {CAP_SETUID, CAP_SETGID, CAP_KILL};

bool IsJudgeCap(int cap) {
  for (int kept : kJudgeCaps) {
    if (cap == kept) return true;
  }
  return false;
}

// Empties the bounding set but for `keep` (it needs CAP_SETPCAP, gone after
// setresuid), switches to `id`, and sets every other capability set to `keep`.
StepError BecomeUserKeeping(unsigned id, bool keep_judge_caps) {
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (keep_judge_caps && IsJudgeCap(cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      return Errno("PR_CAPBSET_DROP " + std::to_string(cap));
    }
  }
  if (keep_judge_caps && ::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return Errno("PR_SET_KEEPCAPS");
  if (::setresgid(id, id, id) != 0) return Errno("setresgid");
  if (::setresuid(id, id, id) != 0) return Errno("setresuid");
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (keep_judge_caps) {
    for (int cap : kJudgeCaps) {
      data[cap / 32].effective |= 1u << (cap % 32);
      data[cap / 32].permitted |= 1u << (cap % 32);
      data[cap / 32].inheritable |= 1u << (cap % 32);
    }
  }
  if (::syscall(SYS_capset, &header, data) != 0) return Errno("capset");
  if (keep_judge_caps) {
    for (int cap : kJudgeCaps) {
      if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
        return Errno("PR_CAP_AMBIENT_RAISE " + std::to_string(cap));
      }
    }
  }
  return std::nullopt;
}

}  // namespace

StepError BecomeSandboxUser(unsigned id) { return BecomeUserKeeping(id, false); }

StepError BecomeJudgeUser(unsigned id) { return BecomeUserKeeping(id, true); }

StepError SetNoNewPrivs() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("PR_SET_NO_NEW_PRIVS");
  return std::nullopt;
}

StepError CloseOtherFds(const std::vector<int>& keep) {
  std::vector<int> sorted = keep;
  sorted.push_back(2);
  std::sort(sorted.begin(), sorted.end());
  int next = 3;
  for (int fd : sorted) {
    if (fd < next) continue;
    if (fd > next && ::close_range(static_cast<unsigned>(next), static_cast<unsigned>(fd - 1), 0) != 0) {
      return Errno("close_range");
    }
    next = fd + 1;
  }
  if (::close_range(static_cast<unsigned>(next), ~0U, 0) != 0) return Errno("close_range");
  return std::nullopt;
}

}  // namespace kbox::sandbox

