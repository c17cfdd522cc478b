#include "worker/job_cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <fstream>
#include <sstream>
#include <thread>

namespace kbox {
namespace fs = std::filesystem;
namespace {

constexpr const char* kCgroupFs = "/sys/fs/cgroup";

bool WriteValue(const fs::path& file, const std::string& value) {
  std::ofstream out(file);
  out << value << std::flush;
  return static_cast<bool>(out);
}

std::string ReadValue(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The value of `key` in a flat-keyed file such as memory.events.
uint64_t KeyedValue(const fs::path& file, const std::string& key) {
  std::istringstream in(ReadValue(file));
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

// This process's cgroup path in the hierarchy whose /proc/self/cgroup line
// matches `controller` ("" for the v2 line "0::/path").
std::optional<std::string> OwnCgroupPath(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::istringstream list(controllers);
    std::string c;
    bool match = controller.empty() ? controllers.empty() : false;
    while (!controller.empty() && std::getline(list, c, ',')) match |= c == controller;
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

std::vector<pid_t> Procs(const fs::path& group) {
  std::istringstream in(ReadValue(group / "cgroup.procs"));
  std::vector<pid_t> pids;
  long pid = 0;
  while (in >> pid) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

bool RemoveWhenEmpty(const fs::path& dir) {
  // rmdir fails with EBUSY until the last killed task has been reaped.
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

StatusOr<CgroupRoot> CgroupRoot::Create(const std::string& name) {
  CgroupRoot root;
  std::error_code ec;
  if (fs::exists(fs::path(kCgroupFs) / "cgroup.controllers", ec)) {
    const auto own = OwnCgroupPath("");
    if (!own) return Status::Error("no cgroup v2 entry in /proc/self/cgroup");
    fs::path parent = fs::path(kCgroupFs) / fs::path(*own).relative_path();
    // cgroup v2 forbids processes in a group that delegates controllers:
    // kboxd moves itself into a leaf of its own group first (as nsjail does).
    // That fails when other processes share kboxd's group (a shell that
    // started it); the root group, exempt from the rule, is the fallback
    // where kboxd may write it (it runs as root on a machine of its own).
    if (!WriteValue(parent / "cgroup.subtree_control", "+memory +pids")) {
      const fs::path self = parent / "kboxd";
      fs::create_directory(self, ec);
      const bool moved = WriteValue(self / "cgroup.procs", std::to_string(::getpid())) &&
                         WriteValue(parent / "cgroup.subtree_control", "+memory +pids");
      if (!moved) {
        WriteValue(parent / "cgroup.procs", std::to_string(::getpid()));  // Back where it was.
        ::rmdir(self.c_str());
        parent = kCgroupFs;
        if (!WriteValue(parent / "cgroup.subtree_control", "+memory +pids")) {
          return Status::Error("cgroup v2 at /sys/fs/cgroup" + *own +
                               " does not delegate the memory and pids controllers to kboxd");
        }
      }
    }
    const fs::path base = parent / name;
    fs::create_directory(base, ec);
    if (ec || !WriteValue(base / "cgroup.subtree_control", "+memory +pids")) {
      return Status::Error("cannot create " + base.string() + ": " + ec.message());
    }
    // The cpu controller is optional: without it cpu.max is not applied.
    root.cpu_ = WriteValue(parent / "cgroup.subtree_control", "+cpu") &&
                WriteValue(base / "cgroup.subtree_control", "+cpu");
    root.version_ = 2;
    root.bases_ = {base};
    return root;
  }
  // cgroup v1: one hierarchy per controller; freezer and cpuacct only for
  // the candidate's group (optional: without a freezer it is not frozen).
  for (const char* controller : {"freezer", "cpuacct"}) {
    const auto own = OwnCgroupPath(controller);
    const fs::path mount = fs::path(kCgroupFs) / controller;
    if (!own || !fs::exists(mount / "cgroup.procs", ec)) break;
    const fs::path base = mount / fs::path(*own).relative_path() / name;
    fs::create_directories(base, ec);
    if (ec) break;
    root.freezer_bases_.push_back(base);
  }
  for (const char* controller : {"memory", "pids"}) {
    const auto own = OwnCgroupPath(controller);
    const fs::path mount = fs::path(kCgroupFs) / controller;
    if (!own || !fs::exists(mount / "cgroup.procs", ec)) {
      return Status::Error(std::string("no cgroup v1 ") + controller + " hierarchy at " + mount.string());
    }
    const fs::path base = mount / fs::path(*own).relative_path() / name;
    fs::create_directories(base, ec);
    if (ec) return Status::Error("cannot create " + base.string() + ": " + ec.message());
    root.bases_.push_back(base);
  }
  root.version_ = 1;
  return root;
}

CgroupRoot::CgroupRoot(CgroupRoot&& other) noexcept
    : version_(other.version_),
      cpu_(other.cpu_),
      bases_(std::move(other.bases_)),
      freezer_bases_(std::move(other.freezer_bases_)) {
  other.bases_.clear();
  other.freezer_bases_.clear();
}

CgroupRoot::~CgroupRoot() {
  for (const auto& base : bases_) ::rmdir(base.c_str());
  for (const auto& base : freezer_bases_) ::rmdir(base.c_str());
}

std::string CgroupRoot::Describe() const {
  if (version_ == 2) return cpu_ ? "cgroup v2 (memory, pids, cpu)" : "cgroup v2 (memory, pids)";
  return freezer_bases_.empty() ? "cgroup v1 (memory, pids)" : "cgroup v1 (memory, pids, freezer)";
}

StatusOr<JobCgroup> CgroupRoot::CreateJob(const std::string& name, const CgroupLimits& limits) const {
  JobCgroup job;
  job.version_ = version_;
  job.freezer_bases_ = freezer_bases_;
  job.name_ = name;
  for (const auto& base : bases_) {
    const fs::path dir = base / name;
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return Status::Error("cannot create " + dir.string() + ": " + std::strerror(errno));
    }
    job.dirs_.push_back(dir);
  }
  const auto set = [&](const fs::path& file, const std::string& value, bool required) {
    return WriteValue(file, value) || !required;
  };
  bool ok = true;
  if (version_ == 2) {
    const fs::path& d = job.dirs_[0];
    ok = set(d / "memory.max", std::to_string(limits.memory_bytes), true) &&
         set(d / "memory.swap.max", "0", false) &&  // Absent when swap accounting is off.
         set(d / "memory.oom.group", "1", false) &&
         set(d / "pids.max", std::to_string(limits.pids), true);
    if (ok && cpu_ && limits.cpu_cores > 0) {
      constexpr uint64_t kPeriodUs = 100'000;
      const auto quota = static_cast<uint64_t>(limits.cpu_cores * kPeriodUs);
      ok = set(d / "cpu.max", std::to_string(quota) + " " + std::to_string(kPeriodUs), true);
    }
  } else {
    const fs::path& mem = job.dirs_[0];
    ok = set(mem / "memory.limit_in_bytes", std::to_string(limits.memory_bytes), true) &&
         set(mem / "memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes), false) &&
         set(job.dirs_[1] / "pids.max", std::to_string(limits.pids), true);
  }
  if (!ok) return Status::Error("cannot set the limits of cgroup " + name);
  return job;
}

JobCgroup::JobCgroup(JobCgroup&& other) noexcept
    : version_(other.version_),
      dirs_(std::move(other.dirs_)),
      freezer_bases_(std::move(other.freezer_bases_)),
      name_(std::move(other.name_)),
      candidate_dirs_(std::move(other.candidate_dirs_)) {
  other.dirs_.clear();
  other.candidate_dirs_.clear();
}

JobCgroup::~JobCgroup() {
  if (dirs_.empty()) return;
  KillAll();
  for (const auto& dir : candidate_dirs_) RemoveWhenEmpty(dir);
  for (const auto& dir : dirs_) RemoveWhenEmpty(dir);
}

StatusOr<CandidateCgroupFiles> JobCgroup::AddCandidateGroup() {
  CandidateCgroupFiles files;
  files.version = version_;
  const auto make = [&](const fs::path& dir) -> Status {
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return Status::Error("cannot create " + dir.string() + ": " + std::strerror(errno));
    }
    candidate_dirs_.push_back(dir);
    return Status::Ok();
  };
  if (version_ == 2) {
    const fs::path dir = dirs_.at(0) / "candidate";
    if (Status made = make(dir); !made.ok()) return made;
    files.procs = {(dir / "cgroup.procs").string()};
    files.freeze = (dir / "cgroup.freeze").string();
    files.state = (dir / "cgroup.events").string();
    files.cpu = (dir / "cpu.stat").string();  // usage_usec is there without the cpu controller
    files.threads = (dir / "cgroup.threads").string();
    return files;
  }
  if (freezer_bases_.empty()) return Status::Error("no cgroup v1 freezer hierarchy");
  const fs::path freezer = freezer_bases_[0] / (name_ + ".candidate");
  if (Status made = make(freezer); !made.ok()) return made;
  files.procs = {(freezer / "cgroup.procs").string()};
  files.freeze = (freezer / "freezer.state").string();
  files.state = files.freeze;
  files.threads = (freezer / "tasks").string();
  if (freezer_bases_.size() > 1) {
    const fs::path cpuacct = freezer_bases_[1] / (name_ + ".candidate");
    if (Status made = make(cpuacct); !made.ok()) return made;
    files.procs.push_back((cpuacct / "cgroup.procs").string());
    files.cpu = (cpuacct / "cpuacct.usage").string();
  }
  return files;
}

std::vector<std::string> JobCgroup::ProcsFiles() const {
  std::vector<std::string> files;
  for (const auto& dir : dirs_) files.push_back((dir / "cgroup.procs").string());
  return files;
}

void JobCgroup::KillAll() const {
  if (dirs_.empty()) return;
  if (version_ == 1 && !candidate_dirs_.empty()) {
    // A frozen task takes a v1 SIGKILL only once thawed.
    WriteValue(candidate_dirs_[0] / "freezer.state", "THAWED");
  }
  if (version_ == 2 && WriteValue(dirs_[0] / "cgroup.kill", "1")) return;
  // v1 (or a kernel before 5.14): kill what is listed until nothing is.
  for (int round = 0; round < 100; ++round) {
    bool any = false;
    for (const auto& dir : dirs_) {
      for (pid_t pid : Procs(dir)) {
        ::kill(pid, SIGKILL);
        any = true;
      }
    }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool JobCgroup::MemoryLimitHit() const {
  if (dirs_.empty()) return false;
  if (version_ == 2) return KeyedValue(dirs_[0] / "memory.events", "oom_kill") > 0;
  return KeyedValue(dirs_[0] / "memory.oom_control", "oom_kill") > 0;
}

bool JobCgroup::PidsLimitHit() const {
  if (dirs_.empty()) return false;
  return KeyedValue(dirs_.back() / "pids.events", "max") > 0;
}

}  // namespace kbox
