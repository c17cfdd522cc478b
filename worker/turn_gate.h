#pragma once

// kboxd's end of a run stage's device turn (docs/run-stages-ahead.md): a FIFO
// in the job's home. The stage's judge opens it after forking the
// candidate's process (so that process never holds it) and, once set-up is
// done, reads one byte before the candidate's code loads. kboxd writes the
// byte when the device is the job's (Give), or closes its end instead
// (Withdraw: the judge reads end-of-file and ends the stage).

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kbox/v1/harness.pb.h"
#include "policy/status.h"
#include "worker/unique_fd.h"

namespace kbox {

class TurnGate {
 public:
  TurnGate() = default;
  ~TurnGate();
  TurnGate(const TurnGate&) = delete;
  TurnGate& operator=(const TurnGate&) = delete;

  // Creates the FIFO at `path` (mode 0600, owned by `owner` when given: the
  // sandbox's user) and opens kboxd's end read-write, so that the judge's
  // open never blocks and its read sees end-of-file once this end closes.
  // Returns why not on failure.
  Status Open(const std::filesystem::path& path, std::optional<uid_t> owner_uid = std::nullopt,
              std::optional<gid_t> owner_gid = std::nullopt);

  // The judge's notes to kboxd (v1::DeviceTurnNote, one byte each),
  // through a second FIFO at `path` that it writes. A thread of this gate
  // reads them and calls `on_note` for each, until StopNotes (or the
  // destructor); a byte that is no DeviceTurnNote is skipped.
  Status OpenNotes(const std::filesystem::path& path, std::optional<uid_t> owner_uid,
                   std::optional<gid_t> owner_gid, std::function<void(v1::DeviceTurnNote)> on_note);
  // Joins the notes' reader; on_note is not called after it returns.
  void StopNotes();

  // The turn is the job's: stores the time (steady_clock, ns since its
  // epoch; the stage's wall limit counts from it) and writes the byte.
  void Give();
  // The device is the holder's alone while it times: writes QUIET_GIVEN
  // (after the turn's TURN_GIVEN) into the turn FIFO.
  void GiveQuiet();
  // No turn after all: closes kboxd's end. Once only; Give after it, or it
  // after Give, does nothing.
  void Withdraw();
  // due: the turn is due, i.e. the stage is first in line on a free device
  // and only its set-up keeps it from the turn (DeviceTurns gives turns
  // only to stages done setting up); !due: another stage took the turn
  // first. The first due time is kept, as granted_ns (the set-up limit
  // counts from it, as from a turn); the device's wait for this set-up runs
  // from the latest due time unless another stage took the turn since.
  void MarkDue(bool due);
  // 0 until the first MarkDue(true).
  const std::atomic<int64_t>* due_ns() const { return &due_ns_; }
  // When this job's time on the device began, as granted_ns: the turn, or
  // earlier, since the device was free and waiting for this stage's set-up
  // (then the turn came at the set-up's end). 0 until Give.
  int64_t device_time_from_ns() const;

  const std::filesystem::path& path() const { return path_; }
  // 0 until Give.
  const std::atomic<int64_t>* granted_ns() const { return &granted_ns_; }
  bool given() const { return granted_ns_.load() != 0; }
  // 0 until the judge's first SET_UP_DONE note (its set-up is over): then its time,
  // as granted_ns. Stored before on_note sees the note.
  const std::atomic<int64_t>* set_up_done_ns() const { return &set_up_done_ns_; }
  // 0 until the judge's first DONE_WITH_DEVICE note (done with the device), then its
  // time, as granted_ns.
  int64_t done_with_device_ns() const { return done_with_device_ns_.load(); }
  bool withdrawn() const { return withdrawn_.load(); }

 private:
  std::filesystem::path path_;
  std::filesystem::path notes_path_;
  std::mutex mu_;
  Fd fd_;
  Fd notes_fd_;
  Fd wake_r_, wake_w_;  // Wakes the notes' reader to stop.
  std::thread notes_reader_;
  std::atomic<int64_t> granted_ns_{0};
  std::atomic<int64_t> due_ns_{0};
  std::atomic<int64_t> waited_for_since_ns_{0};
  std::atomic<int64_t> set_up_done_ns_{0};
  std::atomic<int64_t> done_with_device_ns_{0};
  std::atomic<bool> withdrawn_{false};
};

}  // namespace kbox
