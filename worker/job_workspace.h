#pragma once

// A job's private directory under kboxd's work dir:
//
//   <work_dir>/jobs/<job_id>/     a size-capped tmpfs when kboxd may mount one
//     src/     reference.py, candidate.py, stage specs — kboxd's, read-only to the job
//     build/   TORCH_EXTENSIONS_DIR, shared by the compile and run stages
//     home/    HOME and working directory of the stage processes
//     tmp/     TMPDIR when running without the sandbox
//     triton/  TRITON_CACHE_DIR
//     judge-N/ the run stage's judge: its HOME, TMPDIR and caches, the seed
//              file and the device turn's FIFOs; one per run-stage attempt,
//              owned by the judge's uid, 0700 (docs/judge-boundary.md)
//
// build/, home/ and triton/ belong to the sandbox's uid (everything the
// candidate controls); build/ is readable by the judge, which reads what the
// compile stage built but never loads it. Everything is removed, without
// following any link a job left in it, when the workspace is destroyed.

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "policy/status.h"

namespace kbox {

struct WorkspaceOptions {
  bool keep = false;  // Leave the directory behind (debugging).
  // Owner of the writable directories; absent: kboxd's own uid.
  std::optional<uid_t> owner_uid;
  std::optional<gid_t> owner_gid;
  // Mount a tmpfs of this many bytes on the job directory, so a job cannot
  // fill the host's disk; 0: a plain directory.
  uint64_t scratch_bytes = 0;
};

class JobWorkspace {
 public:
  static StatusOr<JobWorkspace> Create(const std::filesystem::path& work_dir, const std::string& job_id,
                                       const std::string& reference_source,
                                       const std::string& candidate_source,
                                       const WorkspaceOptions& options = {});

  JobWorkspace(JobWorkspace&& other) noexcept;
  JobWorkspace& operator=(JobWorkspace&&) = delete;
  JobWorkspace(const JobWorkspace&) = delete;
  ~JobWorkspace();

  const std::string& job_id() const { return job_id_; }
  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path src_dir() const { return root_ / "src"; }
  std::filesystem::path reference_path() const { return src_dir() / "reference.py"; }
  std::filesystem::path candidate_path() const { return src_dir() / "candidate.py"; }
  std::filesystem::path build_dir() const { return root_ / "build"; }
  std::filesystem::path home_dir() const { return root_ / "home"; }
  std::filesystem::path tmp_dir() const { return root_ / "tmp"; }
  std::filesystem::path triton_dir() const { return root_ / "triton"; }
  // Whether the compile stage wrote nothing but the build directory. Its
  // other writable directories are not cached or sent, so a build that left
  // anything there (for the run stage to find) is neither.
  bool OnlyBuildDirWritten() const;

  // Writes `content` to a new file `name` in src/ (no links followed,
  // world-readable, never overwriting). Returns an error message on failure.
  Status WriteFile(const std::string& name, const std::string& content) const;

  // A fresh directory for one run stage's judge (judge-1, judge-2, ...):
  // made by kboxd in the job's root, which no stage can write, so nothing a
  // job did can have made or replaced it; 0700, owned by uid/gid when given.
  StatusOr<std::filesystem::path> CreateJudgeDir(std::optional<uid_t> uid, std::optional<gid_t> gid) const;

  // Whether a tmpfs caps the job's disk use.
  bool scratch_capped() const { return mounted_; }

 private:
  JobWorkspace(std::filesystem::path root, std::string job_id, bool keep)
      : root_(std::move(root)), job_id_(std::move(job_id)), keep_(keep) {}

  std::filesystem::path root_;
  std::string job_id_;
  bool keep_ = false;
  bool mounted_ = false;
};

}  // namespace kbox
