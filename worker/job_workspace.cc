#include "worker/job_workspace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace kbox {
namespace fs = std::filesystem;

boost::system::result<JobWorkspace, std::string> JobWorkspace::Create(
    const fs::path& work_dir, const std::string& job_id, const std::string& reference_source,
    const std::string& candidate_source, bool keep) {
  std::error_code ec;
  const fs::path jobs = work_dir / "jobs";
  fs::create_directories(jobs, ec);
  if (ec) return "cannot create " + jobs.string() + ": " + ec.message();
  const fs::path root = jobs / job_id;
  if (::mkdir(root.c_str(), 0700) != 0) {
    return "cannot create " + root.string() + ": " + std::strerror(errno);
  }
  JobWorkspace ws(root, keep);
  for (const char* dir : {"build", "home", "tmp", "triton"}) {
    if (::mkdir((root / dir).c_str(), 0700) != 0) {
      return "cannot create " + (root / dir).string() + ": " + std::strerror(errno);
    }
  }
  if (auto e = ws.WriteFile("reference.py", reference_source)) return *e;
  if (auto e = ws.WriteFile("candidate.py", candidate_source)) return *e;
  return ws;
}

JobWorkspace::JobWorkspace(JobWorkspace&& other) noexcept
    : root_(std::move(other.root_)), keep_(other.keep_) {
  other.root_.clear();
}

JobWorkspace::~JobWorkspace() {
  if (root_.empty() || keep_) return;
  // remove_all removes symbolic links themselves, never their targets.
  std::error_code ec;
  fs::remove_all(root_, ec);
}

std::optional<std::string> JobWorkspace::WriteFile(const std::string& name,
                                                   const std::string& content) const {
  const fs::path path = root_ / name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path.string() + ": " + std::strerror(errno);
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return "cannot write " + path.string() + ": " + err;
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return "cannot close " + path.string() + ": " + std::strerror(errno);
  return std::nullopt;
}

}  // namespace kbox
