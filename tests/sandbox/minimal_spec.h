#pragma once

// The smallest useful SandboxSpec: system binaries read-only, one writable
// scratch directory, the run profile. Shared by sandbox_test and the
// set-up-cost benchmark so both measure the same sandbox.

#include <filesystem>
#include <string>
#include <vector>

#include "kbox/v1/sandbox.pb.h"

namespace kbox {

inline v1::SandboxSpec MinimalSandboxSpec(const std::vector<std::string>& argv,
                                          const std::filesystem::path& root_mount_point,
                                          const std::filesystem::path& scratch,
                                          const std::string& policy_dir,
                                          const std::vector<std::string>& extra_ro = {}) {
  v1::SandboxSpec spec;
  for (const auto& a : argv) spec.add_argv(a);
  spec.add_env("PATH=/usr/bin:/bin");
  spec.set_cwd(scratch.string());
  spec.set_root_mount_point(root_mount_point.string());
  spec.set_root_tmpfs_bytes(4 << 20);
  for (const char* p : {"/usr", "/bin", "/lib", "/lib64", "/etc/ld.so.cache"}) spec.add_ro_paths(p);
  for (const auto& p : extra_ro) spec.add_ro_paths(p);
  spec.add_rw_paths(scratch.string());
  spec.set_tmp_bytes(16 << 20);
  for (const char* d : {"/dev/null", "/dev/zero", "/dev/urandom"}) spec.add_devices(d);
  spec.set_outside_uid(65534);
  spec.set_outside_gid(65534);
  spec.set_inside_id(1000);
  spec.set_hostname("kbox");
  spec.set_seccomp_policy(policy_dir + "/run.policy");
  spec.add_keep_fds(3);
  return spec;
}

}  // namespace kbox
