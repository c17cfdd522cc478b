#pragma once

// A job's private directory under kboxd's work dir: the two sources, the build
// directory both stages share, and HOME/TMPDIR for the stage processes. The
// directory is removed, without following any link a job left in it, when the
// workspace is destroyed.

#include <filesystem>
#include <optional>
#include <string>

#include <boost/system/result.hpp>

namespace kbox {

class JobWorkspace {
 public:
  // Creates <work_dir>/jobs/<job_id> (mode 0700) and writes the sources.
  static boost::system::result<JobWorkspace, std::string> Create(
      const std::filesystem::path& work_dir, const std::string& job_id,
      const std::string& reference_source, const std::string& candidate_source, bool keep);

  JobWorkspace(JobWorkspace&& other) noexcept;
  JobWorkspace& operator=(JobWorkspace&&) = delete;
  JobWorkspace(const JobWorkspace&) = delete;
  ~JobWorkspace();

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path reference_path() const { return root_ / "reference.py"; }
  std::filesystem::path candidate_path() const { return root_ / "candidate.py"; }
  std::filesystem::path build_dir() const { return root_ / "build"; }
  std::filesystem::path home_dir() const { return root_ / "home"; }
  std::filesystem::path tmp_dir() const { return root_ / "tmp"; }
  std::filesystem::path triton_dir() const { return root_ / "triton"; }

  // Writes `content` to a new file `name` in the root (no links followed).
  // Returns an error message, or nothing on success.
  std::optional<std::string> WriteFile(const std::string& name,
                                       const std::string& content) const;

 private:
  JobWorkspace(std::filesystem::path root, bool keep) : root_(std::move(root)), keep_(keep) {}

  std::filesystem::path root_;
  bool keep_ = false;
};

}  // namespace kbox
