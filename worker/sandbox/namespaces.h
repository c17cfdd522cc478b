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

// One mapped identity: `inside` in the user namespace is the host's
// outside_uid / outside_gid.
struct IdMapping {
  unsigned inside = 0;
  unsigned outside_uid = 0;
  unsigned outside_gid = 0;
};

// Written by the parent for its child `pid`: setgroups "deny", then uid and
// gid maps with one line `inside outside 1` per mapping (the run stage maps
// the judge's and the candidate's ids, docs/judge-boundary.md).
StepError WriteIdMaps(pid_t pid, const std::vector<IdMapping>& ids);

// Checks that this host lets kbox create every namespace it needs, by
// creating them once in a short-lived child. Returns which one failed and how
// to allow it.
StepError ProbeNamespaces();

}  // namespace kbox::sandbox
