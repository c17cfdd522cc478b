#include "daemon/sandbox_setup.h"

#include "daemon/precompiled_header.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "policy/seccomp_policy.h"
#include "worker/sandbox/namespaces.h"

namespace kbox {
namespace fs = std::filesystem;
namespace {

// What every stage may read: the system's programs and libraries, and the few
// /etc files the dynamic linker, Python and compilers consult. Never /etc as
// a whole (kboxd's config and tokens may live there), /home, /root or /var.
const char* const kDefaultReadOnly[] = {
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/nsswitch.conf", "/etc/localtime", "/etc/os-release",
    "/etc/python3", "/etc/python3.11", "/etc/python3.12"};

// The toolchain, hidden from run stages: they load what the compile stage built.
const char* const kRunMaskedPaths[] = {"/usr/lib/gcc", "/usr/libexec/gcc", "/usr/local/cuda/bin",
                                       "/usr/local/cuda/nvvm"};

std::string FirstExisting(const std::vector<fs::path>& candidates) {
  std::error_code ec;
  for (const auto& c : candidates) {
    if (fs::exists(c, ec)) return fs::canonical(c, ec).string();
  }
  return "";
}

// Whether kboxd may mount a tmpfs (it is root, or has CAP_SYS_ADMIN).
bool CanMountTmpfs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=4096") != 0) return false;
  ::umount2(dir.c_str(), MNT_DETACH);
  ::rmdir(dir.c_str());
  return true;
}

}  // namespace

std::vector<std::string> NormalizeReadOnlyPaths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& p : paths) {
    const fs::path path = fs::path(p).lexically_normal();
    if (!fs::exists(fs::symlink_status(path, ec))) continue;
    out.push_back(fs::is_symlink(fs::symlink_status(path, ec)) ? path.string()
                                                                : fs::canonical(path, ec).string());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::vector<std::string> kept;
  for (const auto& p : out) {
    const bool covered = std::any_of(kept.begin(), kept.end(), [&](const std::string& k) {
      return p.size() > k.size() && p.compare(0, k.size(), k) == 0 && (k == "/" || p[k.size()] == '/');
    });
    if (!covered) kept.push_back(p);
  }
  return kept;
}

StatusOr<SandboxRuntime> SetUpSandbox(const v1::DaemonConfig& config, const HostInfo& host,
                                      const std::string& exe_dir) {
  SandboxRuntime rt;
  if (config.sandbox().danger_insecure_no_sandbox()) {
    rt.description = "NONE: insecure development mode (danger_insecure_no_sandbox)";
    return rt;
  }
  if (auto e = sandbox::ProbeNamespaces()) {
    return Status::Error(*e + "; for development only, --danger-insecure-no-sandbox runs without it");
  }
  SandboxSettings s;
  s.binary = config.sandbox().sandbox_binary().empty() ? FirstExisting({fs::path(exe_dir) / "kbox-sandbox"})
                                                       : config.sandbox().sandbox_binary();
  if (s.binary.empty() || ::access(s.binary.c_str(), X_OK) != 0) {
    return Status::Error("kbox-sandbox not found beside kboxd (" + exe_dir + "); set sandbox_binary");
  }
  s.policy_dir =
      config.sandbox().seccomp_policy_dir().empty()
          ? FirstExisting({fs::path(exe_dir) / "../share/kbox/seccomp",
                           fs::path(exe_dir) / "../../policy/seccomp", fs::path(KBOX_SOURCE_POLICY_DIR)})
          : config.sandbox().seccomp_policy_dir();
  for (const char* profile : {"compile.policy", "run.policy"}) {
    auto loaded = SeccompPolicy::LoadFile(s.policy_dir / profile);
    if (!loaded) return Status::Error("seccomp " + loaded.error().field + ": " + loaded.error().message);
  }
  const fs::path work = config.store().work_dir();
  const fs::path policy_out = work / "policy";
  std::error_code ec;
  fs::create_directories(policy_out, ec);
  ::chmod(policy_out.c_str(), 0755);
  rt.strict_filter_path = (policy_out / "run_strict.bpf").string();
  {
    auto strict = SeccompPolicy::LoadFile(s.policy_dir / "run_strict.policy");
    if (!strict) return Status::Error("seccomp " + strict.error().field + ": " + strict.error().message);
    const int fd = ::open(rt.strict_filter_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Status::Error("cannot write " + rt.strict_filter_path);
    const Status exported = strict->ExportBpf(fd);
    ::close(fd);
    if (!exported.ok()) return Status::Error("cannot export the strict filter: " + exported.message());
  }
  s.spec_dir = work / "sandbox-specs";
  // Any empty directory the sandbox's unprivileged init can reach (binds
  // themselves go through descriptors kbox-sandbox opened as root, so the
  // work dir may sit below a private directory such as /root).
  s.root_mount_point = "/tmp/kbox-root-" + std::to_string(::getpid());
  fs::create_directories(s.spec_dir, ec);
  fs::create_directories(s.root_mount_point, ec);
  ::chmod(s.spec_dir.c_str(), 0700);
  s.uid = config.sandbox().sandbox_uid();
  s.gid = config.sandbox().sandbox_gid();
  s.judge_uid = config.sandbox().judge_uid();
  s.judge_gid = config.sandbox().judge_gid();
  s.ptxas_path = host.probe.ptxas_path();

  std::vector<std::string> ro(std::begin(kDefaultReadOnly), std::end(kDefaultReadOnly));
  ro.insert(ro.end(), host.probe.python_paths().begin(), host.probe.python_paths().end());
  ro.insert(ro.end(), config.sandbox().sandbox_ro_paths().begin(), config.sandbox().sandbox_ro_paths().end());
  ro.push_back(config.sandbox().harness_dir());
  {
    // The one file, not kboxd's directory: the candidate's process loads it.
    const fs::path probe = fs::path(s.binary).parent_path() / "libkbox_launch_probe.so";
    if (fs::exists(probe, ec)) {
      rt.launch_probe_library = probe.string();
      ro.push_back(rt.launch_probe_library);
    } else {
      std::cerr << "kboxd: " << probe.string()
                << " is missing; the kernel-launch probe uses torch.profiler" << std::endl;
    }
  }
  ro.push_back(policy_out.string());
  if (PrecompiledHeaderWanted(config)) {
    // Written by kboxd's start-up build only; compile stages read it and
    // must not be able to replace it (docs/compile-speed.md).
    const fs::path pch_root = PrecompiledHeaderRoot(config);
    fs::create_directories(pch_root, ec);
    ::chmod(pch_root.c_str(), 0755);
    ro.push_back(pch_root.string());
  }
  s.ro_paths = NormalizeReadOnlyPaths(ro);
  s.run_masked_paths.assign(std::begin(kRunMaskedPaths), std::end(kRunMaskedPaths));
  s.limits = CgroupLimits{.memory_bytes = config.limits().job_memory_bytes(),
                          .pids = config.limits().job_pids(),
                          .cpu_cores = config.limits().job_cpu_cores()};

  rt.description = "namespaces (user, pid, mount, network, ipc, uts, cgroup), seccomp";
  auto cgroups = CgroupRoot::Create("kbox-" + std::to_string(::getpid()));
  if (cgroups) {
    rt.cgroups = std::make_unique<CgroupRoot>(std::move(*cgroups));
    s.cgroups = rt.cgroups.get();
    rt.description += ", " + rt.cgroups->Describe();
  } else {
    rt.description += ", NO cgroup limits (" + cgroups.error().message() + ")";
  }
  rt.scratch_capped = CanMountTmpfs(work / "mount-probe");
  rt.description += rt.scratch_capped ? ", job scratch on a capped tmpfs"
                                      : ", job scratch NOT size-capped (kboxd cannot mount tmpfs)";
  rt.settings = std::move(s);
  return rt;
}

}  // namespace kbox
