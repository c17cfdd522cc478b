#include "worker/turn_gate.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "policy/status.h"

namespace kbox {

namespace {

// A FIFO at `path` for a judge running as `owner`, and kboxd's end of it.
// O_RDWR on a FIFO never blocks (Linux) and keeps both a reader and a
// writer open: the judge's open never blocks, its read sees data or, once
// this end is closed, end-of-file, and its writes always find a reader.
// `created` names it once it exists (for the destructor to unlink).
Status MakeFifo(const std::filesystem::path& path, std::optional<uid_t> owner_uid,
                std::optional<gid_t> owner_gid, Fd& fd, std::filesystem::path& created) {
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return Status::Error("mkfifo " + path.string() + ": " + std::strerror(errno));
  }
  created = path;
  fd.reset(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return Status::Error("open " + path.string() + ": " + std::strerror(errno));
  if (owner_uid && ::fchown(fd.get(), *owner_uid, owner_gid.value_or(static_cast<gid_t>(-1))) != 0) {
    return Status::Error("chown " + path.string() + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

// steady_clock's now in nanoseconds since its epoch; never 0 (0 means "not yet").
int64_t NowNs() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

}  // namespace

TurnGate::~TurnGate() {
  StopNotes();
  fd_.reset();
  notes_fd_.reset();
  // The judge unlinks both once it holds them; these find nothing then.
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!notes_path_.empty()) ::unlink(notes_path_.c_str());
}

Status TurnGate::Open(const std::filesystem::path& path, std::optional<uid_t> owner_uid,
                      std::optional<gid_t> owner_gid) {
  return MakeFifo(path, owner_uid, owner_gid, fd_, path_);
}

Status TurnGate::OpenNotes(const std::filesystem::path& path, std::optional<uid_t> owner_uid,
                           std::optional<gid_t> owner_gid, std::function<void(v1::DeviceTurnNote)> on_note) {
  if (Status made = MakeFifo(path, owner_uid, owner_gid, notes_fd_, notes_path_); !made.ok()) return made;
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
    return Status::Error(std::string("pipe2: ") + std::strerror(errno));
  wake_r_.reset(wake[0]);
  wake_w_.reset(wake[1]);
  notes_reader_ = std::thread([this, on_note = std::move(on_note)] {
    for (;;) {
      pollfd fds[2] = {{notes_fd_.get(), POLLIN, 0}, {wake_r_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      char notes[64];
      const ssize_t n = ::read(notes_fd_.get(), notes, sizeof notes);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return;  // Cannot happen while this end holds the FIFO open.
      for (ssize_t i = 0; i < n; ++i) {
        const int byte = static_cast<unsigned char>(notes[i]);
        if (byte == 0 || !v1::DeviceTurnNote_IsValid(byte)) continue;
        const auto note = static_cast<v1::DeviceTurnNote>(byte);
        if (note == v1::SET_UP_DONE && set_up_done_ns_.load() == 0) set_up_done_ns_.store(NowNs());
        if (note == v1::DONE_WITH_DEVICE && done_with_device_ns_.load() == 0) {
          done_with_device_ns_.store(NowNs());
        }
        on_note(note);
      }
    }
  });
  return Status::Ok();
}

void TurnGate::StopNotes() {
  if (!notes_reader_.joinable()) return;
  const char stop = 's';
  (void)!::write(wake_w_.get(), &stop, 1);
  notes_reader_.join();
}

void TurnGate::GiveQuiet() {
  std::lock_guard lock(mu_);
  if (fd_.get() < 0 || !given()) return;
  const char quiet = static_cast<char>(v1::QUIET_GIVEN);
  (void)!::write(fd_.get(), &quiet, 1);
}

void TurnGate::Give() {
  std::lock_guard lock(mu_);
  if (fd_.get() < 0 || withdrawn_.load() || given()) return;
  granted_ns_.store(NowNs());
  // One byte into an empty pipe of 64 KiB: never blocks, never short.
  const char go = static_cast<char>(v1::TURN_GIVEN);
  (void)!::write(fd_.get(), &go, 1);
}

void TurnGate::MarkDue(bool due) {
  if (!due) {
    waited_for_since_ns_.store(0);
    return;
  }
  const int64_t now = NowNs();
  int64_t unset = 0;
  due_ns_.compare_exchange_strong(unset, now);
  waited_for_since_ns_.store(now);
}

int64_t TurnGate::device_time_from_ns() const {
  const int64_t granted = granted_ns_.load(), since = waited_for_since_ns_.load();
  return since != 0 && since < granted ? since : granted;
}

void TurnGate::Withdraw() {
  std::lock_guard lock(mu_);
  if (given() || withdrawn_.load()) return;
  withdrawn_.store(true);
  fd_.reset();
}

}  // namespace kbox
