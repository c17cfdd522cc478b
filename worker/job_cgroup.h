#pragma once

// Per-stage cgroups: a memory limit without swap and a process limit for
// everything a stage starts, a reliable way to kill all of it, and whether a
// limit was hit. cgroup v2 where the host delegates it (the GPU machine and
// current Kubernetes nodes), cgroup v1 otherwise (this project's CI).

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "policy/status.h"

namespace kbox {

struct CgroupLimits {
  uint64_t memory_bytes = 16ull << 30;
  uint32_t pids = 1024;
  // cpu.max as a number of cores (cgroup v2 only); 0: no CPU limit.
  double cpu_cores = 0;
};

class JobCgroup;

// The run stage's candidate process's own group (docs/judge-boundary.md):
// the judge freezes it while it works and reads its threads and CPU time.
// v2: a child "candidate" of the stage's group (memory and pids stay the
// stage's); v1: groups in the freezer and cpuacct hierarchies. Paths the
// sandbox's launcher opens for the judge.
struct CandidateCgroupFiles {
  int version = 0;
  std::vector<std::string> procs;  // The candidate's process writes "0" to each to join.
  std::string freeze;              // v2 cgroup.freeze, v1 freezer.state (written).
  std::string state;               // v2 cgroup.events, v1 freezer.state (read).
  std::string cpu;                 // v2 cpu.stat, v1 cpuacct.usage; empty: none.
  std::string threads;             // v2 cgroup.threads, v1 tasks.
};

// kboxd's own group of job cgroups ("kbox-<pid>" beside or below kboxd).
class CgroupRoot {
 public:
  // Detects the host's cgroup version and creates the base group(s). Errors
  // say what the host does not delegate.
  static StatusOr<CgroupRoot> Create(const std::string& name);

  CgroupRoot(CgroupRoot&& other) noexcept;
  CgroupRoot(const CgroupRoot&) = delete;
  ~CgroupRoot();

  // "cgroup v2 (memory, pids[, cpu])" or "cgroup v1 (memory, pids[, freezer])".
  std::string Describe() const;

  // Whether a candidate's group can be frozen here (v2, or v1 with a
  // freezer hierarchy).
  bool CanFreeze() const { return version_ == 2 || !freezer_bases_.empty(); }
  int version() const { return version_; }

  // A fresh group `name` with `limits`, removed (after killing what is left
  // in it) when the returned object is destroyed.
  StatusOr<JobCgroup> CreateJob(const std::string& name, const CgroupLimits& limits) const;

 private:
  CgroupRoot() = default;
  int version_ = 0;
  bool cpu_ = false;  // v2 with the cpu controller delegated.
  std::vector<std::filesystem::path> bases_;
  // v1 only, each optional: the freezer's base, then cpuacct's.
  std::vector<std::filesystem::path> freezer_bases_;
};

class JobCgroup {
 public:
  JobCgroup(JobCgroup&& other) noexcept;
  JobCgroup(const JobCgroup&) = delete;
  ~JobCgroup();

  // The cgroup.procs files a process writes its pid to, to join.
  std::vector<std::string> ProcsFiles() const;
  // SIGKILLs every process in the group (cgroup.kill on v2).
  void KillAll() const;
  // Whether the memory limit killed a process / the pids limit refused a fork.
  bool MemoryLimitHit() const;
  bool PidsLimitHit() const;

  // Creates the candidate's group of a run stage (removed with this one);
  // an error where the host cannot freeze one.
  StatusOr<CandidateCgroupFiles> AddCandidateGroup();

 private:
  friend class CgroupRoot;
  JobCgroup() = default;
  int version_ = 0;
  std::vector<std::filesystem::path> dirs_;  // v1: memory, pids; v2: one.
  // v1: where the candidate's freezer and cpuacct groups go (CgroupRoot's).
  std::vector<std::filesystem::path> freezer_bases_;
  std::string name_;
  // The candidate's groups, removed (thawed first) before dirs_.
  std::vector<std::filesystem::path> candidate_dirs_;
};

}  // namespace kbox
