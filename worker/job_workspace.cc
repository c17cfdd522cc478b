#include "worker/job_workspace.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "policy/status.h"

namespace kbox {
namespace fs = std::filesystem;
namespace {

std::string ErrnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

StatusOr<JobWorkspace> JobWorkspace::Create(const fs::path& work_dir, const std::string& job_id,
                                            const std::string& reference_source,
                                            const std::string& candidate_source,
                                            const WorkspaceOptions& options) {
  std::error_code ec;
  const fs::path jobs = work_dir / "jobs";
  fs::create_directories(jobs, ec);
  if (ec) return Status::Error("cannot create " + jobs.string() + ": " + ec.message());
  // Searchable, not listable: a job reaches its own directory, never sees others'.
  ::chmod(jobs.c_str(), 0711);
  const fs::path root = jobs / job_id;
  if (::mkdir(root.c_str(), 0755) != 0) return Status::Error(ErrnoText("cannot create " + root.string()));
  JobWorkspace ws(root, job_id, options.keep);
  if (options.scratch_bytes > 0) {
    const std::string opts = "size=" + std::to_string(options.scratch_bytes) + ",mode=0755";
    if (::mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      return Status::Error(ErrnoText("cannot mount the job's scratch tmpfs on " + root.string()));
    }
    ws.mounted_ = true;
  }
  if (::mkdir(ws.src_dir().c_str(), 0755) != 0) {
    return Status::Error(ErrnoText("cannot create " + ws.src_dir().string()));
  }
  for (const char* dir : {"build", "home", "tmp", "triton"}) {
    const fs::path path = root / dir;
    // build/ is read by the run stage's judge (another uid): the libraries'
    // imports are checked before the candidate's process loads them.
    const mode_t mode = std::string(dir) == "build" ? 0755 : 0700;
    if (::mkdir(path.c_str(), mode) != 0) return Status::Error(ErrnoText("cannot create " + path.string()));
    ::chmod(path.c_str(), mode);  // Past the umask.
    if (options.owner_uid &&
        ::chown(path.c_str(), *options.owner_uid, options.owner_gid.value_or(0)) != 0) {
      return Status::Error(ErrnoText("cannot chown " + path.string()));
    }
  }
  if (Status e = ws.WriteFile("reference.py", reference_source); !e.ok()) return Status::Error(e.message());
  if (Status e = ws.WriteFile("candidate.py", candidate_source); !e.ok()) return Status::Error(e.message());
  return ws;
}

JobWorkspace::JobWorkspace(JobWorkspace&& other) noexcept
    : root_(std::move(other.root_)),
      job_id_(std::move(other.job_id_)),
      keep_(other.keep_),
      mounted_(other.mounted_) {
  other.root_.clear();
}

JobWorkspace::~JobWorkspace() {
  if (root_.empty() || keep_) return;
  std::error_code ec;
  if (mounted_) {
    // Unmounting drops every file the job wrote at once.
    ::umount2(root_.c_str(), MNT_DETACH);
  } else {
    // remove_all removes symbolic links themselves, never their targets.
    fs::remove_all(root_, ec);
  }
  ::rmdir(root_.c_str());
}

StatusOr<fs::path> JobWorkspace::CreateJudgeDir(std::optional<uid_t> uid, std::optional<gid_t> gid) const {
  for (int n = 1; n <= 1000; ++n) {
    const fs::path dir = root_ / ("judge-" + std::to_string(n));
    if (::mkdir(dir.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      return Status::Error(ErrnoText("cannot create " + dir.string()));
    }
    if (uid && ::chown(dir.c_str(), *uid, gid.value_or(0)) != 0) {
      return Status::Error(ErrnoText("cannot chown " + dir.string()));
    }
    return StatusOr<fs::path>(boost::system::in_place_value, dir);
  }
  return Status::Error("too many run stages in " + root_.string());
}

Status JobWorkspace::WriteFile(const std::string& name, const std::string& content) const {
  const fs::path path = src_dir() / name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(ErrnoText("cannot create " + path.string()));
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = ErrnoText("cannot write " + path.string());
      ::close(fd);
      return Status::Error(err);
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return Status::Error(ErrnoText("cannot close " + path.string()));
  return Status::Ok();
}

bool JobWorkspace::OnlyBuildDirWritten() const {
  for (const std::filesystem::path& dir : {home_dir(), triton_dir(), tmp_dir()}) {
    std::error_code ec;
    if (!std::filesystem::is_empty(dir, ec) || ec) return false;
  }
  return true;
}

}  // namespace kbox
