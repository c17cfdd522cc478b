#pragma once

// The namespaces every sandboxed process tree gets, and the user-namespace
// id maps that make its one uid an unprivileged host uid.

#include <sys/types.h>

#include <string>
#include <vector>

#include "worker/sandbox/sandbox_step.h"

namespace kbox::sandbox {

// user, pid, mount, network (no interfaces), ipc, uts, cgroup.
int NamespaceCloneFlags();

// Names of the namespaces above, for messages ("user", "pid", ...).
std::vector<std::string> NamespaceNames();

// Written by the parent for its child `pid`: setgroups "deny", then one-line
// uid and gid maps `inside outside 1`.
StepError WriteIdMaps(pid_t pid, unsigned inside, unsigned outside_uid, unsigned outside_gid);

// Checks that this host lets kbox create every namespace it needs, by
// creating them once in a short-lived child. Returns which one failed and how
// to allow it.
StepError ProbeNamespaces();

}  // namespace kbox::sandbox
