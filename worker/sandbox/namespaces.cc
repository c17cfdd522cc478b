#include "worker/sandbox/namespaces.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <utility>

namespace kbox::sandbox {
namespace {

const std::pair<int, const char*> kNamespaces[] = {
    {CLONE_NEWUSER, "user"}, {CLONE_NEWPID, "pid"}, {CLONE_NEWNS, "mount"},
    {CLONE_NEWNET, "network"}, {CLONE_NEWIPC, "ipc"}, {CLONE_NEWUTS, "uts"},
    {CLONE_NEWCGROUP, "cgroup"}};

StepError WriteProcFile(pid_t pid, const char* name, const std::string& content) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path);
  const ssize_t n = ::write(fd, content.data(), content.size());
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (n != static_cast<ssize_t>(content.size())) return Errno("write " + path);
  return std::nullopt;
}

int ExitAtOnce(void*) { return 0; }

}  // namespace

int NamespaceCloneFlags() {
  int flags = 0;
  for (const auto& [flag, name] : kNamespaces) flags |= flag;
  return flags;
}

std::vector<std::string> NamespaceNames() {
  std::vector<std::string> names;
  for (const auto& [flag, name] : kNamespaces) names.emplace_back(name);
  return names;
}

StepError WriteIdMaps(pid_t pid, const std::vector<IdMapping>& ids) {
  if (auto e = WriteProcFile(pid, "setgroups", "deny")) return e;
  std::string uids, gids;
  for (const IdMapping& id : ids) {
    uids += std::to_string(id.inside) + " " + std::to_string(id.outside_uid) + " 1\n";
    gids += std::to_string(id.inside) + " " + std::to_string(id.outside_gid) + " 1\n";
  }
  // Each map is one write: the kernel takes a map whole or not at all.
  if (auto e = WriteProcFile(pid, "uid_map", uids)) return e;
  return WriteProcFile(pid, "gid_map", gids);
}

StepError ProbeNamespaces() {
  alignas(16) static char stack[64 * 1024];
  for (const auto& [flag, name] : kNamespaces) {
    // The user namespace comes first so the others can be made without
    // host privileges, as the sandbox itself does.
    const int flags = flag | (flag == CLONE_NEWUSER ? 0 : CLONE_NEWUSER);
    const pid_t pid = ::clone(ExitAtOnce, stack + sizeof stack, flags | SIGCHLD, nullptr);
    if (pid < 0) {
      return Errno(std::string("cannot create a ") + name + " namespace (clone)") +
             ". kbox needs user, pid, mount, network, ipc, uts and cgroup namespaces: run kboxd "
             "as root or with CAP_SYS_ADMIN, allow unprivileged user namespaces "
             "(sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1), and in "
             "Kubernetes give the pod the securityContext in docs/sandbox.md";
    }
    ::waitpid(pid, nullptr, 0);
  }
  return std::nullopt;
}

}  // namespace kbox::sandbox
