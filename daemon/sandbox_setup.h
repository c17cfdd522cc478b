#pragma once

// Everything kboxd prepares once for the sandbox (docs/sandbox.md): checks
// that the host allows the namespaces, finds kbox-sandbox and the seccomp
// profiles, exports the strict run filter for the harness, creates kboxd's
// cgroup, and decides what every sandbox sees read-only.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/host_probe.h"
#include "kbox/v1/config.pb.h"
#include "policy/status.h"
#include "worker/job_cgroup.h"
#include "worker/stage_runner.h"

namespace kbox {

struct SandboxRuntime {
  // Absent only in the insecure development mode.
  std::optional<SandboxSettings> settings;
  std::unique_ptr<CgroupRoot> cgroups;  // Stable address: settings point at it.
  std::string strict_filter_path;       // BPF of run_strict.policy, read by the harness.
  // libkbox_launch_probe.so beside kbox-sandbox, bound read-only into the
  // sandboxes, when it is there; else empty.
  std::string launch_probe_library;
  bool scratch_capped = false;          // Jobs get a size-capped tmpfs.
  std::string description;              // For /v1/info and the log.
};

// `exe_dir` is where kboxd's binary lives (kbox-sandbox is looked up beside it).
StatusOr<SandboxRuntime> SetUpSandbox(const v1::DaemonConfig& config, const HostInfo& host,
                                      const std::string& exe_dir);

// Sorts `paths`, keeps symbolic links as they are (they are recreated as
// links), and drops every path below another kept directory: a bind inside a
// read-only bind could not be mounted.
std::vector<std::string> NormalizeReadOnlyPaths(const std::vector<std::string>& paths);

}  // namespace kbox
