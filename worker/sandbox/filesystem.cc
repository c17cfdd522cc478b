#include "worker/sandbox/filesystem.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace kbox::sandbox {
namespace fs = std::filesystem;
namespace {

// Flags a bind mount inherits from its source that a user namespace may not
// clear (the kernel "locks" them); a read-only remount must repeat them.
unsigned long LockedFlags(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return 0;
  unsigned long flags = 0;
  if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

StepError MakeParents(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return "mkdir " + path.parent_path().string() + ": " + ec.message();
  return std::nullopt;
}

// Creates the mount point `target`, a directory or an empty file.
StepError MakeMountPoint(bool is_dir, const fs::path& target) {
  if (auto e = MakeParents(target)) return e;
  std::error_code ec;
  if (is_dir) {
    fs::create_directories(target, ec);
    if (ec) return "mkdir " + target.string() + ": " + ec.message();
    return std::nullopt;
  }
  const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create " + target.string());
  ::close(fd);
  return std::nullopt;
}

std::string FdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Mount points at or below `target`, from this namespace's mount table.
std::vector<std::string> MountsUnder(const fs::path& target) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  const std::string prefix = target.string();
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    if (!(fields >> id >> parent >> dev >> root >> mount_point)) continue;
    if (mount_point == prefix ||
        (mount_point.size() > prefix.size() && mount_point.compare(0, prefix.size(), prefix) == 0 &&
         mount_point[prefix.size()] == '/')) {
      out.push_back(mount_point);  // Octal escapes (\040) do not occur in system paths.
    }
  }
  return out;
}

// Binds `source` with everything mounted below it (in a user namespace a
// plain bind of a tree with submounts is refused: it would uncover what they
// hide), then applies `extra_flags` (read-only) to every mount of the copy.
StepError Bind(const std::string& name, const HostSource& source, const fs::path& target,
               unsigned long extra_flags) {
  if (auto e = MakeMountPoint(source.is_dir, target)) return e;
  if (::mount(FdPath(source.fd).c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    return Errno("bind " + name);
  }
  for (const auto& mount_point : MountsUnder(target)) {
    const unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | extra_flags |
                                LockedFlags(mount_point);
    if (::mount(nullptr, mount_point.c_str(), nullptr, flags, nullptr) != 0) {
      return Errno("remount " + mount_point);
    }
  }
  return std::nullopt;
}

// A host path that is a symbolic link (/lib -> usr/lib on merged-/usr
// systems) becomes the same link inside, never a bind of its target.
StepError BindOrLink(const std::string& name, const HostSources& sources, const fs::path& root,
                     unsigned long flags) {
  const auto it = sources.find(name);
  if (it == sources.end()) return std::nullopt;  // Missing on this host: skipped.
  const fs::path target = root / fs::path(name).relative_path();
  if (it->second.is_symlink) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(target, ec))) return std::nullopt;
    if (auto e = MakeParents(target)) return e;
    fs::create_symlink(it->second.link_target, target, ec);
    if (ec) return "symlink " + target.string() + ": " + ec.message();
    return std::nullopt;
  }
  return Bind(name, it->second, target, flags);
}

StepError MountTmpfs(const fs::path& target, uint64_t bytes, const char* mode) {
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return "mkdir " + target.string() + ": " + ec.message();
  const std::string options = "size=" + std::to_string(bytes) + ",mode=" + mode;
  if (::mount("tmpfs", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return Errno("mount tmpfs on " + target.string());
  }
  return std::nullopt;
}

StepError WriteFile(const fs::path& path, const std::string& content) {
  if (auto e = MakeParents(path)) return e;
  std::ofstream out(path);
  out << content;
  if (!out) return "write " + path.string() + " failed";
  return std::nullopt;
}

StepError BuildDev(const fs::path& root, const v1::SandboxSpec& spec, const HostSources& sources) {
  const fs::path dev = root / "dev";
  if (auto e = MountTmpfs(dev, 1 << 20, "0755")) return e;
  for (const auto& node : spec.devices()) {
    const auto it = sources.find(node);
    if (it == sources.end()) continue;  // e.g. no GPU on this host.
    const fs::path target = root / fs::path(node).relative_path();
    if (auto e = MakeMountPoint(false, target)) return e;
    // Device nodes need a bind without MS_NODEV.
    if (::mount(FdPath(it->second.fd).c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Errno("bind " + node);
    }
  }
  std::error_code ec;
  fs::create_symlink("/proc/self/fd", dev / "fd", ec);
  fs::create_symlink("/proc/self/fd/0", dev / "stdin", ec);
  fs::create_symlink("/proc/self/fd/1", dev / "stdout", ec);
  fs::create_symlink("/proc/self/fd/2", dev / "stderr", ec);
  // PyTorch and Python's multiprocessing use POSIX shared memory here.
  return MountTmpfs(dev / "shm", spec.tmp_bytes(), "1777");
}

StepError BuildEtc(const fs::path& root, const v1::SandboxSpec& spec) {
  // Python, compilers and ctypes look up the current user; nothing of the
  // host's account database is needed or shown. A run stage's program is the
  // judge; the candidate's process has the name every other stage's has.
  std::string passwd = "root:x:0:0::/:/bin/false\n";
  std::string group = "root:x:0:\n";
  const auto add = [&](const std::string& name, unsigned id) {
    const std::string n = std::to_string(id);
    passwd += name + ":x:" + n + ":" + n + "::/tmp:/bin/false\n";
    group += name + ":x:" + n + ":\n";
  };
  if (spec.has_candidate()) {
    add("kbox", spec.candidate().inside_id());
    add("kbox-judge", spec.inside_id());
  } else {
    add("kbox", spec.inside_id());
  }
  if (auto e = WriteFile(root / "etc/passwd", passwd)) return e;
  if (auto e = WriteFile(root / "etc/group", group)) return e;
  return WriteFile(root / "etc/hostname", spec.hostname() + "\n");
}

}  // namespace

HostSources OpenHostSources(const v1::SandboxSpec& spec) {
  HostSources sources;
  auto open = [&](const std::string& name) {
    if (sources.count(name)) return;
    struct stat st {};
    if (::lstat(name.c_str(), &st) != 0) return;
    HostSource s;
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      s.is_symlink = true;
      s.link_target = fs::read_symlink(name, ec).string();
      if (ec) return;
    } else {
      s.fd = ::open(name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
      if (s.fd < 0) return;
      s.is_dir = S_ISDIR(st.st_mode);
    }
    std::error_code ec;
    s.real_path = fs::canonical(name, ec).string();
    sources[name] = s;
  };
  for (const auto& p : spec.ro_paths()) open(p);
  for (const auto& p : spec.rw_paths()) open(p);
  for (const auto& p : spec.devices()) open(p);
  for (const auto& p : spec.masked_paths()) open(p);
  return sources;
}

StepError BuildRootFilesystem(const v1::SandboxSpec& spec, const HostSources& sources) {
  // Nothing done below may propagate back to the host's mounts.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Errno("make / private");
  }
  const fs::path root = spec.root_mount_point();
  if (auto e = MountTmpfs(root, spec.root_tmpfs_bytes(), "0755")) return e;
  // /tmp first: a job directory below the host's /tmp is bound on top of it.
  if (auto e = MountTmpfs(root / "tmp", spec.tmp_bytes(), "1777")) return e;
  for (const auto& path : spec.ro_paths()) {
    if (auto e = BindOrLink(path, sources, root, MS_RDONLY)) return e;
  }
  for (const auto& path : spec.rw_paths()) {
    const auto it = sources.find(path);
    if (it == sources.end()) return "read-write path " + path + " does not exist";
    if (auto e = Bind(path, it->second, root / fs::path(path).relative_path(), 0)) return e;
  }
  for (const auto& path : spec.masked_paths()) {
    // Resolved on the host: the same path is bound inside, and a symbolic
    // link must not lead the mount outside the new root.
    const auto it = sources.find(path);
    if (it == sources.end() || it->second.real_path.empty()) continue;
    std::error_code ec;
    const fs::path target = root / fs::path(it->second.real_path).relative_path();
    if (!fs::is_directory(target, ec)) continue;
    if (auto e = MountTmpfs(target, 4096, "0755")) return e;
    if (::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                "size=4096") != 0) {
      return Errno("mask " + path);
    }
  }
  if (auto e = BuildDev(root, spec, sources)) return e;
  if (auto e = BuildEtc(root, spec)) return e;
  const fs::path proc = root / "proc";
  std::error_code ec;
  fs::create_directories(proc, ec);
  // A fresh procfs of the new pid namespace: only the sandbox's processes,
  // and of those only the ones a process may ptrace-read (hidepid=invisible,
  // per mount since Linux 5.8): a run stage's candidate process, of another
  // uid than its judge, finds no /proc/<pid> of the judge's or of init's.
  // The candidate shares the judge's pid namespace (not one of its own)
  // because libcuda names its threads through /proc/<getpid()>/task/<tid>/comm
  // at cuInit: in a nested namespace without a procfs of its own those pids
  // name other processes and CUDA fails to start (error 304).
  if (::mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "hidepid=invisible") != 0) {
    return Errno("mount /proc");
  }

  // pivot_root(".", ".") stacks the old root under the new one; detaching it
  // leaves no path back to the host's tree.
  if (::chdir(root.c_str()) != 0) return Errno("chdir " + root.string());
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return Errno("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return Errno("detach the old root");
  if (::chdir("/") != 0) return Errno("chdir /");
  // The skeleton (mount points, /etc) is fixed from here on.
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0) {
    return Errno("remount / read-only");
  }
  return std::nullopt;
}

}  // namespace kbox::sandbox
