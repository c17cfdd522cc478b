#pragma once

// Whose turn it is on each device (docs/run-stages-ahead.md). With
// run_stages_ahead, a device (a GPU, a CPU run slot) has more run stages
// than the one running: the others prepare (fork, CUDA start, the
// reference's import) and then wait for their turn before the candidate's
// code loads. Turns are exclusive and given in the order the stages asked;
// the device's lanes (SlotPool) bound how many stages ask at once.

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>

namespace kbox {

class DeviceTurns {
 public:
  // Gives a ticket its turn. Runs with the turns' lock held, on the thread
  // that freed the device (or in Enqueue when it was free): it must be quick
  // and must not call back into DeviceTurns.
  using Give = std::function<void()>;

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

   private:
    friend class DeviceTurns;
    Ticket(DeviceTurns* turns, uint32_t device, uint64_t id)
        : turns_(turns), device_(device), id_(id) {}
    DeviceTurns* turns_;
    uint32_t device_;
    uint64_t id_;
  };

  // Queues for `device`'s turn; `give` runs once, when the turn is this
  // ticket's (before Enqueue returns when nobody holds or waits for it).
  Ticket Enqueue(uint32_t device, Give give);

  // Whether some ticket holds `device`'s turn; tickets waiting for it.
  bool Held(uint32_t device) const;
  size_t Waiting(uint32_t device) const;

 private:
  struct Entry {
    uint64_t id;
    Give give;
  };
  void Leave(uint32_t device, uint64_t id);

  mutable std::mutex mu_;
  // Per device, the ticket holding the turn first, then those waiting.
  std::map<uint32_t, std::list<Entry>> queues_;
  uint64_t next_id_ = 1;
};

}  // namespace kbox
