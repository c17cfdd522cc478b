#include "daemon/device_turns.h"

#include <algorithm>

namespace kbox {

DeviceTurns::Ticket DeviceTurns::Enqueue(uint32_t device, Give give, bool sets_up, Pauser pauser,
                                         Due due) {
  uint64_t id = 0;
  {
    std::unique_lock lock(mu_);
    auto& queue = queues_[device];
    // A stage prepared ahead starts CUDA at once: not while the holder times.
    if (sets_up) quiet_over_.wait(lock, [&] { return !QuietHeld(queue); });
    id = next_id_++;
    Entry entry;
    entry.id = id;
    entry.give = std::move(give);
    entry.setting_up = sets_up;
    entry.pauser = std::move(pauser);
    entry.due = std::move(due);
    queue.push_back(std::move(entry));
    if (!Holding(queue)) GiveNext(queue);
  }
  // A quiet asked but not yet granted (waiting for a stage setting up, or
  // for one that handed its turn over to leave): this stage is paused too
  // rather than waited for.
  if (sets_up) PauseForQuiet(device);
  return Ticket(this, device, id);
}

DeviceTurns::Entry* DeviceTurns::Find(uint32_t device, uint64_t id) {
  auto& queue = queues_[device];
  const auto it = std::find_if(queue.begin(), queue.end(), [&](const Entry& e) { return e.id == id; });
  return it == queue.end() ? nullptr : &*it;
}

bool DeviceTurns::Holding(const std::list<Entry>& queue) {
  return !queue.empty() && queue.front().holding;
}

bool DeviceTurns::QuietHeld(const std::list<Entry>& queue) {
  return std::any_of(queue.begin(), queue.end(), [](const Entry& e) { return e.quiet; });
}

void DeviceTurns::GrantQuietIfClear(uint32_t device) {
  auto& queue = queues_[device];
  if (!Holding(queue) || !queue.front().quiet_grant) return;
  if (!leaving_[device].empty()) return;  // Its exit may still touch the device.
  const bool clear = std::none_of(std::next(queue.begin()), queue.end(),
                                  [](const Entry& e) { return e.setting_up && !e.paused; });
  if (!clear) return;
  Entry& holder = queue.front();
  holder.quiet = true;
  const Give grant = std::move(holder.quiet_grant);
  holder.quiet_grant = nullptr;
  grant();
}

void DeviceTurns::GiveNext(std::list<Entry>& queue) {
  // The first in line done setting up goes first. One still setting up gets
  // no turn: it would hold the device idle until its CUDA start is over, and
  // a stage behind it might be done sooner. With none done, the device stays
  // free until a set-up ends (SetUpDone) or a stage that does not set up
  // queues.
  if (queue.empty()) return;
  const auto ready = std::find_if(queue.begin(), queue.end(), [](const Entry& e) { return !e.setting_up; });
  if (ready == queue.end()) {
    Entry& first = queue.front();
    if (first.due && !first.due_told) {
      first.due_told = true;
      first.due(true);
    }
    return;
  }
  // A stage told its turn was due is passed over: the device no longer waits for it.
  for (Entry& e : queue) {
    if (&e == &*ready || !e.due_told) continue;
    e.due_told = false;
    e.due(false);
  }
  if (ready != queue.begin()) queue.splice(queue.begin(), queue, ready);
  queue.front().holding = true;
  queue.front().give();
}

std::vector<std::function<void()>> DeviceTurns::TakePaused(std::list<Entry>& queue) {
  std::vector<std::function<void()>> resumes;
  for (Entry& e : queue) {
    e.pause_failed = false;  // The next quiet tries again.
    if (!e.paused) continue;
    e.paused = false;
    if (e.pauser.resume) resumes.push_back(e.pauser.resume);
  }
  return resumes;
}

void DeviceTurns::Leave(uint32_t device, uint64_t id) {
  std::vector<std::function<void()>> resumes;
  {
    std::lock_guard lock(mu_);
    auto& queue = queues_[device];
    if (leaving_[device].erase(id) > 0) {
      GrantQuietIfClear(device);  // The last one leaving clears the way.
    } else {
      const auto it = std::find_if(queue.begin(), queue.end(), [&](const Entry& e) { return e.id == id; });
      if (it == queue.end()) return;
      const bool held = it == queue.begin() && it->holding;
      const bool had_quiet = it->quiet;
      queue.erase(it);
      // The holder's quiet ends with it (a new holder asks for its own).
      if (held) resumes = TakePaused(queue);
      // The turn, or (nobody being done setting up) the next one's due.
      if (!Holding(queue)) GiveNext(queue);
      // One setting up fewer, or a new holder that asked before its turn.
      GrantQuietIfClear(device);
      if (had_quiet) quiet_over_.notify_all();
    }
  }
  for (const auto& resume : resumes) resume();
  PauseForQuiet(device);
}

void DeviceTurns::PauseForQuiet(uint32_t device) {
  for (;;) {
    std::vector<std::pair<uint64_t, std::function<bool()>>> batch;
    {
      std::lock_guard lock(mu_);
      auto& queue = queues_[device];
      if (!Holding(queue) || !queue.front().quiet_grant) return;
      for (auto it = std::next(queue.begin()); it != queue.end(); ++it) {
        if (it->setting_up && !it->paused && !it->pausing && !it->pause_failed && it->pauser.pause) {
          it->pausing = true;
          batch.emplace_back(it->id, it->pauser.pause);
        }
      }
      if (batch.empty()) return;
    }
    std::vector<char> stopped;
    for (const auto& [id, pause] : batch) stopped.push_back(pause() ? 1 : 0);
    std::vector<std::function<void()>> resumes;
    {
      std::lock_guard lock(mu_);
      auto& queue = queues_[device];
      // The quiet may have ended (or its holder left) meanwhile.
      const bool still_asked = Holding(queue) && queue.front().quiet_grant;
      for (size_t i = 0; i < batch.size(); ++i) {
        Entry* e = Find(device, batch[i].first);
        if (!e) continue;  // Its stage ended.
        e->pausing = false;
        if (!stopped[i]) {
          e->pause_failed = true;
        } else if (still_asked) {
          e->paused = true;
        } else if (e->pauser.resume) {
          resumes.push_back(e->pauser.resume);
        }
      }
      GrantQuietIfClear(device);
    }
    for (const auto& resume : resumes) resume();
  }
}

bool DeviceTurns::Ticket::holds() const {
  if (!turns_) return false;
  std::lock_guard lock(turns_->mu_);
  const auto& queue = turns_->queues_[device_];
  return Holding(queue) && queue.front().id == id_;
}

void DeviceTurns::Ticket::SetUpDone() const {
  if (!turns_) return;
  std::lock_guard lock(turns_->mu_);
  if (Entry* e = turns_->Find(device_, id_)) e->setting_up = false;
  auto& queue = turns_->queues_[device_];
  if (!Holding(queue)) GiveNext(queue);  // The device was free, waiting for a set-up to end.
  turns_->GrantQuietIfClear(device_);
}

void DeviceTurns::Ticket::AskQuiet(Give grant) const {
  if (!turns_) return;
  {
    std::lock_guard lock(turns_->mu_);
    Entry* e = turns_->Find(device_, id_);
    if (!e || e->quiet || e->quiet_grant) return;  // Asked once per timing.
    e->quiet_grant = std::move(grant);
    turns_->GrantQuietIfClear(device_);
  }
  turns_->PauseForQuiet(device_);
}

void DeviceTurns::Ticket::EndQuiet() const {
  if (!turns_) return;
  std::vector<std::function<void()>> resumes;
  {
    std::lock_guard lock(turns_->mu_);
    Entry* e = turns_->Find(device_, id_);
    if (!e) return;
    e->quiet_grant = nullptr;
    if (e->quiet) {
      e->quiet = false;
      turns_->quiet_over_.notify_all();
    }
    auto& queue = turns_->queues_[device_];
    if (Holding(queue) && queue.front().id == id_) resumes = TakePaused(queue);
  }
  for (const auto& resume : resumes) resume();
}

void DeviceTurns::Ticket::HandOver() const {
  if (!turns_) return;
  std::vector<std::function<void()>> resumes;
  {
    std::lock_guard lock(turns_->mu_);
    auto& queue = turns_->queues_[device_];
    if (!Holding(queue) || queue.front().id != id_) return;
    const bool had_quiet = queue.front().quiet;
    queue.pop_front();
    turns_->leaving_[device_].insert(id_);
    // A quiet not ended by its holder ends with its turn, as in Leave.
    resumes = TakePaused(queue);
    GiveNext(queue);
    if (had_quiet) turns_->quiet_over_.notify_all();
  }
  for (const auto& resume : resumes) resume();
}

bool DeviceTurns::Held(uint32_t device) const {
  std::lock_guard lock(mu_);
  const auto it = queues_.find(device);
  return it != queues_.end() && Holding(it->second);
}

size_t DeviceTurns::Waiting(uint32_t device) const {
  std::lock_guard lock(mu_);
  const auto it = queues_.find(device);
  if (it == queues_.end()) return 0;
  return it->second.size() - (Holding(it->second) ? 1 : 0);
}

}  // namespace kbox
