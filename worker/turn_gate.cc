#include "worker/turn_gate.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>

namespace kbox {

TurnGate::~TurnGate() {
  fd_.reset();
  if (!path_.empty()) ::unlink(path_.c_str());
}

std::optional<std::string> TurnGate::Open(const std::filesystem::path& path,
                                          std::optional<uid_t> owner_uid,
                                          std::optional<gid_t> owner_gid) {
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return "mkfifo " + path.string() + ": " + std::strerror(errno);
  }
  path_ = path;
  // O_RDWR on a FIFO never blocks (Linux) and keeps a writer open, so the
  // judge's reader sees data or, once this end is closed, end-of-file.
  fd_.reset(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW));
  if (fd_.get() < 0) return "open " + path.string() + ": " + std::strerror(errno);
  if (owner_uid && ::fchown(fd_.get(), *owner_uid, owner_gid.value_or(static_cast<gid_t>(-1))) != 0) {
    return "chown " + path.string() + ": " + std::strerror(errno);
  }
  return std::nullopt;
}

void TurnGate::Give() {
  std::lock_guard lock(mu_);
  if (fd_.get() < 0 || withdrawn_.load() || given()) return;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  granted_ns_.store(std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  // One byte into an empty pipe of 64 KiB: never blocks, never short.
  const char go = 'g';
  (void)!::write(fd_.get(), &go, 1);
}

void TurnGate::Withdraw() {
  std::lock_guard lock(mu_);
  if (given() || withdrawn_.load()) return;
  withdrawn_.store(true);
  fd_.reset();
}

}  // namespace kbox
