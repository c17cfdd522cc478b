#pragma once

// One run stage's turn on its device (docs/run-stages-ahead.md), as one
// object: the judge's own directory, with stages ahead the gate's FIFOs in
// it (worker/turn_gate.h) and the judge's notes moving the stage's ticket in
// the device's queue (device_turns.h), the pause of its set-up for another
// holder's timing, and how long it held the device. Evaluator::RunOnDevice
// makes one per attempt on a lane; a stage whose set-up failed before its
// turn runs once more holding it (RunAgainHoldingTheTurn).

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "daemon/device_turns.h"
#include "kbox/v1/harness.pb.h"
#include "policy/status.h"
#include "worker/job_workspace.h"
#include "worker/process_group_pause.h"
#include "worker/stage_runner.h"
#include "worker/turn_gate.h"

namespace kbox {

class StageTurn {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a holder's quiet waits for this stage's set-up to stop: a
  // thread stops on its way back from the kernel, and the CUDA driver's
  // ioctls (a context's creation, pinning host memory) may keep one there
  // for a while (an H100 run with 1 s saw 10 of 37 stages not stopped).
  // Past it the stage is continued and waited for instead.
  static constexpr auto kSetUpPauseLimit = std::chrono::milliseconds(5000);

  struct Settings {
    // Stages per device that set up ahead of their turn; 0: no gate, the
    // stage has the device from its start (it queues for the turn before
    // it starts).
    uint32_t stages_ahead = 0;
    std::chrono::seconds set_up_limit{0};     // config limits.run_set_up_limit_s
    std::chrono::seconds max_time_limit{0};   // config limits.max_time_limit_s
    std::optional<uid_t> judge_uid;           // Owner of the judge's directory and FIFOs.
    std::optional<gid_t> judge_gid;
  };
  // Called after each pause of the stage's set-up for another holder's
  // timing: whether every thread stopped, and (when not) what still ran.
  using OnPause = std::function<void(bool stopped, const std::string& running)>;

  StageTurn(JobWorkspace& workspace, Settings settings);
  StageTurn(const StageTurn&) = delete;
  StageTurn& operator=(const StageTurn&) = delete;
  ~StageTurn();

  // The judge's directory (fresh, made with O_EXCL by kboxd) and, with
  // stages ahead, the gate in it; the spec's and the placement's turn fields
  // set.
  Status Prepare(v1::StageSpec& spec, StagePlacement& placement);
  // Queues the stage for `slot`'s turn on `turns`. When the turn comes,
  // `device_serves()` decides: true gives it, false withdraws it (a GPU
  // quarantined by the job ahead: the job queues again).
  Status Enqueue(DeviceTurns& turns, uint32_t slot, std::function<bool()> device_serves, OnPause on_pause);
  // A stage whose set-up failed before its turn (StageReport.set_up_again)
  // runs once more holding the turn: a new judge directory and gate (the
  // first judge unlinked its FIFOs), the turn given at once, its notes to
  // the same ticket. Needs a gated, given turn.
  Status RunAgainHoldingTheTurn(v1::StageSpec& spec, StagePlacement& placement);

  // With stages ahead: whether the stage ran with a gate, its turn came, or
  // was withdrawn before it came.
  bool gated() const { return gate_ != nullptr; }
  bool given() const { return gate_ && gate_->given(); }
  bool withdrawn() const { return gate_ && gate_->withdrawn(); }
  // Whether the stage was first in line on a free device, only its own
  // set-up keeping it from the turn (its set-up limit then applies).
  bool due() const { return gate_ && gate_->due_ns()->load() != 0; }
  // When the device began waiting for this stage (its set-up, with no other
  // stage ready; else the turn). Needs given().
  Clock::time_point device_time_from() const;
  // How long the stage had its device: to the hand-over (the judge's
  // DONE_WITH_DEVICE) or, without one, now. Needs given().
  double HeldMs() const;
  // How long the device, free and due to this stage, waited for its set-up
  // to end (turns go only to stages done setting up). 0 without a turn.
  double SetUpWaitMs() const;

 private:
  Status NewJudgeDir(StagePlacement& placement);
  // A new gate in the judge's directory, its FIFOs named in the spec and
  // its clocks in the placement.
  Status OpenGate(v1::StageSpec& spec, StagePlacement& placement);
  Status OpenNotes();

  JobWorkspace& workspace_;
  const Settings settings_;
  std::filesystem::path turn_path_, notes_path_;
  // A holder's quiet pauses this stage while it sets up (device_turns.h).
  const std::shared_ptr<PausableGroup> pausable_ = std::make_shared<PausableGroup>();
  // The ticket before the gate: the gate's notes reader calls into the
  // ticket, and the gate (stopping its reader) goes first however the scope
  // ends.
  std::optional<DeviceTurns::Ticket> ticket_;
  std::unique_ptr<TurnGate> gate_;
};

}  // namespace kbox
