#pragma once

// The sandbox's file system: a fresh root on a size-capped tmpfs holding only
// read-only binds of what the process needs, the job's own directory
// read-write, private /tmp and /dev/shm with size caps, a minimal /dev, a
// synthetic /etc/passwd and /etc/group, and a procfs of the sandbox's pid
// namespace. The host's tree is detached (pivot_root) before the program runs.

#include "kbox/v1/sandbox.pb.h"
#include "worker/sandbox/sandbox_step.h"

namespace kbox::sandbox {

// Precondition: the caller is in fresh user, mount and pid namespaces (and is
// that pid namespace's first process), with capabilities in the user
// namespace. Leaves the caller in the new root, cwd "/".
StepError BuildRootFilesystem(const v1::SandboxSpec& spec);

}  // namespace kbox::sandbox
