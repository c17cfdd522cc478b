#pragma once

// The sandbox's file system: a fresh root on a size-capped tmpfs holding only
// read-only binds of what the process needs, the job's own directory
// read-write, private /tmp and /dev/shm with size caps, a minimal /dev, a
// synthetic /etc/passwd and /etc/group, and a procfs of the sandbox's pid
// namespace. The host's tree is detached (pivot_root) before the program runs.

#include <map>
#include <string>

#include "kbox/v1/sandbox.pb.h"
#include "worker/sandbox/sandbox_step.h"

namespace kbox::sandbox {

// A host path the sandbox shows, looked at by the launcher while it still has
// the host's view and privileges.
struct HostSource {
  int fd = -1;               // O_PATH descriptor: binds go through /proc/self/fd/N,
                             // so the unprivileged init need not be able to walk to it.
  bool is_dir = false;
  bool is_symlink = false;   // Recreated as the same link, never bound.
  std::string link_target;
  std::string real_path;     // Canonical host path (for masked paths).
};
using HostSources = std::map<std::string, HostSource>;

// Opens every path the spec names (read-only, read-write, devices, masked).
// Missing paths are left out; the caller keeps the descriptors open across
// clone and closes them before exec.
HostSources OpenHostSources(const v1::SandboxSpec& spec);

// Precondition: the caller is in fresh user, mount and pid namespaces (and is
// that pid namespace's first process), with capabilities in the user
// namespace. Leaves the caller in the new root, cwd "/".
StepError BuildRootFilesystem(const v1::SandboxSpec& spec, const HostSources& sources);

}  // namespace kbox::sandbox
