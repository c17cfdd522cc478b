#pragma once

// Whose turn it is on each device (docs/run-stages-ahead.md). With
// run_stages_ahead, a device (a GPU, a CPU run slot) has more run stages
// than the one running: the others prepare (fork, CUDA start, the
// reference's import) and then wait for their turn before the candidate's
// code loads. Turns are exclusive and go only to a stage done setting up, in
// the order the stages asked: a stage still setting up would hold the device
// idle through its CUDA start, while one behind it may be done sooner. With
// none done, the device stays free until the first is. The device's lanes
// (SlotPool) bound how many stages ask at once.
//
// A stage prepared ahead starts CUDA (context, cuBLAS, Triton's warm-up)
// while another job holds the device, and that work would disturb the
// holder's timing (a false run.timing-mismatch on a tiny Triton kernel in
// the GPU suite). So the holder asks for the device to itself before it
// times (AskQuiet): that is granted once no stage of the device is still
// setting up, and while it lasts no new stage prepared ahead starts. A stage
// that can be paused (its Pauser, process_group_pause.h: every thread of it
// stopped) no longer counts as setting up while paused: it is paused when the
// quiet is asked and continued when the quiet ends, so the holder times at
// once instead of waiting for the rest of the next stage's CUDA start.
//
// A holder whose candidate's process is gone and whose judge does no more
// device work hands the turn over (HandOver) rather than keeping it through
// its own exit (the judge's CUDA teardown, the sandbox's): the next stage's
// correctness trials start at once. Its exit may still touch the device, so
// until it leaves no holder's quiet is granted: timing never overlaps it.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace kbox {

class DeviceTurns {
 public:
  // Gives a ticket its turn. Runs with the turns' lock held, on the thread
  // that freed the device (or in Enqueue when it was free): it must be quick
  // and must not call back into DeviceTurns.
  using Give = std::function<void()>;

  // Pauses a stage setting up (true once nothing of it runs) and resumes it.
  // Both are called without the turns' lock; pause may take milliseconds.
  struct Pauser {
    std::function<bool()> pause;
    std::function<void()> resume;
  };

  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept : turns_(other.turns_), device_(other.device_), id_(other.id_) {
      other.turns_ = nullptr;
    }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    // Leaves the queue, or ends the turn and gives the next ticket its turn.
    ~Ticket() {
      if (turns_) turns_->Leave(device_, id_);
    }
    // Whether this ticket holds its device's turn now.
    bool holds() const;
    // This stage's set-up on the device is over (or failed): a holder's
    // quiet no longer waits for it.
    void SetUpDone() const;
    // The holder is about to time: `grant` runs once (with the turns' lock
    // held, so it must be quick) when no other stage of the device is
    // setting up, at once when none is; stages that can be paused are paused
    // first (on the calling thread). Asked by a ticket that does not hold the
    // turn, it waits until the ticket does.
    void AskQuiet(Give grant) const;
    // The holder's timing is over: stages paused for it continue, and stages
    // prepared ahead may start again.
    void EndQuiet() const;
    // The holder is done with the device but has not left (its processes
    // are exiting): the next ticket gets the turn now. This ticket no longer
    // holds it, and until it leaves no holder's quiet is granted. Does
    // nothing from a ticket that does not hold the turn.
    void HandOver() const;

   private:
    friend class DeviceTurns;
    Ticket(DeviceTurns* turns, uint32_t device, uint64_t id)
        : turns_(turns), device_(device), id_(id) {}
    DeviceTurns* turns_;
    uint32_t device_;
    uint64_t id_;
  };

  // Queues for `device`'s turn; `give` runs once, when the turn is this
  // ticket's (before Enqueue returns when nobody holds it and the stage does
  // not set up). sets_up: the stage sets up on the device before its turn
  // (prepared ahead), counts as setting up until SetUpDone or it leaves, and
  // gets no turn before SetUpDone; such an
  // Enqueue first waits while the device's holder has its quiet. `pauser`
  // (optional) lets a holder's quiet pause the stage while it sets up.
  // `due` (optional) runs with the turns' lock held: due(true) when the
  // stage is first in line on a free device and only its own set-up keeps
  // it from the turn (its set-up limit counts from the first; the device
  // waits for it from the latest), due(false) when another stage, done
  // setting up first, takes the turn instead.
  using Due = std::function<void(bool)>;
  Ticket Enqueue(uint32_t device, Give give, bool sets_up = false, Pauser pauser = {},
                 Due due = {});

  // Whether some ticket holds `device`'s turn; tickets waiting for it.
  bool Held(uint32_t device) const;
  size_t Waiting(uint32_t device) const;

 private:
  struct Entry {
    uint64_t id = 0;
    Give give;
    bool setting_up = false;
    Give quiet_grant;    // Asked, not yet granted.
    bool quiet = false;  // Granted, not yet ended.
    Pauser pauser;
    bool pausing = false;       // pause() is running.
    bool paused = false;        // Stopped for the holder's quiet.
    bool pause_failed = false;  // Not tried again: waited for instead.
    bool holding = false;       // Has the turn (then it is first in the queue).
    Due due;
    bool due_told = false;      // due(true) said last.
  };
  void Leave(uint32_t device, uint64_t id);
  // With nobody holding the turn: moves the first entry done setting up to
  // the front and gives it the turn; none done, gives none and tells the
  // first in line that its turn is due. With mu_ held.
  static void GiveNext(std::list<Entry>& queue);
  // Whether an entry of the queue holds the turn (the first, if any).
  static bool Holding(const std::list<Entry>& queue);
  // While `device`'s holder has asked for its quiet, pauses the stages
  // setting up that can be paused, then grants the quiet if clear. Without
  // mu_ held.
  void PauseForQuiet(uint32_t device);
  // Marks every paused entry of the queue continued and returns their
  // resume functions, to be called without mu_. With mu_ held.
  static std::vector<std::function<void()>> TakePaused(std::list<Entry>& queue);
  // Entry `id` of `device`, or null. With mu_ held.
  Entry* Find(uint32_t device, uint64_t id);
  // Grants `device`'s holder's asked quiet when no other entry is setting
  // up and no ticket that handed the turn over is still leaving. With mu_
  // held.
  void GrantQuietIfClear(uint32_t device);
  static bool QuietHeld(const std::list<Entry>& queue);

  mutable std::mutex mu_;
  std::condition_variable quiet_over_;
  // Per device, the ticket holding the turn first, then those waiting.
  std::map<uint32_t, std::list<Entry>> queues_;
  // Per device, tickets that handed the turn over and have not left.
  std::map<uint32_t, std::set<uint64_t>> leaving_;
  uint64_t next_id_ = 1;
};

}  // namespace kbox
