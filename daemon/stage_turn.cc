#include "daemon/stage_turn.h"

#include <algorithm>
#include <utility>

#include "policy/status.h"
#include "worker/elapsed.h"

namespace kbox {
namespace {

// A TurnGate timestamp (steady clock nanoseconds) as a time point.
StageTurn::Clock::time_point AtNs(int64_t ns) {
  return StageTurn::Clock::time_point(std::chrono::nanoseconds(ns));
}

}  // namespace

StageTurn::StageTurn(JobWorkspace& workspace, Settings settings)
    : workspace_(workspace), settings_(std::move(settings)) {}

StageTurn::~StageTurn() = default;

Status StageTurn::NewJudgeDir(StagePlacement& placement) {
  // Fresh for every attempt (a stage queued again, one run again): its seed
  // file and its FIFOs are made in it with O_EXCL by kboxd, where nothing
  // the job ran can have put anything.
  auto dir = workspace_.CreateJudgeDir(settings_.judge_uid, settings_.judge_gid);
  if (!dir) return Status::Error(dir.error().message());
  placement.judge_dir = *dir;
  turn_path_ = *dir / "kbox_turn";
  notes_path_ = *dir / "kbox_turn_notes";
  return Status::Ok();
}

Status StageTurn::Prepare(v1::StageSpec& spec, StagePlacement& placement) {
  if (Status made = NewJudgeDir(placement); !made.ok()) return made;
  if (settings_.stages_ahead == 0) return Status::Ok();
  if (Status opened = OpenGate(spec, placement); !opened.ok()) return opened;
  spec.set_hand_over_turn(true);
  placement.set_up_limit = settings_.set_up_limit;
  // Each stage ahead may run to the longest time limit, plus its probe.
  placement.turn_wait_limit = (settings_.max_time_limit + std::chrono::seconds(60)) * settings_.stages_ahead;
  placement.pausable = pausable_.get();
  return Status::Ok();
}

Status StageTurn::OpenGate(v1::StageSpec& spec, StagePlacement& placement) {
  gate_ = std::make_unique<TurnGate>();
  if (Status opened = gate_->Open(turn_path_, settings_.judge_uid, settings_.judge_gid); !opened.ok()) {
    return opened;
  }
  spec.set_device_turn_path(turn_path_.string());
  spec.set_device_notes_path(notes_path_.string());
  // time_limit_s is the candidate's: it counts from the turn and once the
  // judge's set-up is over, which has its own limit (a busy host's slow
  // start).
  placement.turn_granted_ns = gate_->granted_ns();
  placement.set_up_done_ns = gate_->set_up_done_ns();
  placement.turn_due_ns = gate_->due_ns();
  return Status::Ok();
}

Status StageTurn::OpenNotes() {
  // The judge's notes move the ticket: set-up over, quiet asked, quiet over,
  // done with the device.
  TurnGate* const gate = gate_.get();
  return gate_->OpenNotes(notes_path_, settings_.judge_uid, settings_.judge_gid,
                          [this, gate](v1::DeviceTurnNote note) {
    if (note == v1::SET_UP_DONE) {
      ticket_->SetUpDone();
    } else if (note == v1::QUIET_ASKED) {
      ticket_->AskQuiet([gate] { gate->GiveQuiet(); });
    } else if (note == v1::QUIET_OVER) {
      ticket_->EndQuiet();
    } else if (note == v1::DONE_WITH_DEVICE) {
      // Done with the device: its verdict needs no device probe (the judge
      // sends it only for a correct or incorrect candidate) and the
      // candidate's process is gone. If kboxd still finds something to
      // probe for at the stage's end, the probe runs beside the next
      // holder's correctness trials; the next holder's timing waits for
      // this stage to leave (device_turns.h).
      ticket_->HandOver();
    }
  });
}

Status StageTurn::Enqueue(DeviceTurns& turns, uint32_t slot, std::function<bool()> device_serves,
                          OnPause on_pause) {
  DeviceTurns::Pauser pauser;
  if (gate_) {
    pauser.pause = [pausable = pausable_, on_pause = std::move(on_pause)] {
      std::string running;
      const bool stopped = pausable->Pause(kSetUpPauseLimit, &running);
      if (on_pause) on_pause(stopped, running);
      return stopped;
    };
    pauser.resume = [pausable = pausable_] { pausable->Resume(); };
  }
  // A stage prepared ahead counts as setting up on the device until its
  // judge's SET_UP_DONE; Enqueue waits while the holder times
  // (device_turns.h). The turn is given once: a stage run again holds it
  // already.
  ticket_.emplace(turns.Enqueue(
      slot,
      [this, device_serves = std::move(device_serves)] {
        if (!gate_) return;
        if (device_serves()) {
          gate_->Give();
        } else {
          gate_->Withdraw();
        }
      },
      /*sets_up=*/gate_ != nullptr, std::move(pauser),
      // First in line on a free device, waiting for its own set-up: its
      // set-up limit counts from now, as from a turn.
      [this](bool due) {
        if (gate_) gate_->MarkDue(due);
      }));
  return gate_ ? OpenNotes() : Status::Ok();
}

Status StageTurn::RunAgainHoldingTheTurn(v1::StageSpec& spec, StagePlacement& placement) {
  // The old gate goes first, unlinking what is left of its own FIFOs.
  gate_.reset();
  if (Status made = NewJudgeDir(placement); !made.ok()) return made;
  if (Status opened = OpenGate(spec, placement); !opened.ok()) return opened;
  // Given at once: the limit counts from this run's set-up's end.
  gate_->Give();
  if (Status opened = OpenNotes(); !opened.ok()) return opened;
  placement.run_again = true;
  spec.set_run_again(true);
  return Status::Ok();
}

StageTurn::Clock::time_point StageTurn::device_time_from() const { return AtNs(gate_->device_time_from_ns()); }

double StageTurn::HeldMs() const {
  const int64_t done = gate_->done_with_device_ns();
  return std::max(0.0, MsBetween(device_time_from(), done != 0 ? AtNs(done) : Clock::now()));
}

double StageTurn::SetUpWaitMs() const {
  const int64_t granted = gate_ ? gate_->granted_ns()->load() : 0;
  if (granted == 0) return 0.0;
  return std::max(0.0, MsBetween(device_time_from(), AtNs(granted)));
}

}  // namespace kbox
