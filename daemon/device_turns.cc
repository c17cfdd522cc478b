#include "daemon/device_turns.h"

#include <algorithm>

namespace kbox {

DeviceTurns::Ticket DeviceTurns::Enqueue(uint32_t device, Give give) {
  std::lock_guard lock(mu_);
  auto& queue = queues_[device];
  const uint64_t id = next_id_++;
  queue.push_back(Entry{id, std::move(give)});
  if (queue.size() == 1) queue.front().give();
  return Ticket(this, device, id);
}

void DeviceTurns::Leave(uint32_t device, uint64_t id) {
  std::lock_guard lock(mu_);
  auto& queue = queues_[device];
  const auto it = std::find_if(queue.begin(), queue.end(), [&](const Entry& e) { return e.id == id; });
  if (it == queue.end()) return;
  const bool held = it == queue.begin();
  queue.erase(it);
  if (held && !queue.empty()) queue.front().give();
}

bool DeviceTurns::Ticket::holds() const {
  if (!turns_) return false;
  std::lock_guard lock(turns_->mu_);
  const auto& queue = turns_->queues_[device_];
  return !queue.empty() && queue.front().id == id_;
}

bool DeviceTurns::Held(uint32_t device) const {
  std::lock_guard lock(mu_);
  const auto it = queues_.find(device);
  return it != queues_.end() && !it->second.empty();
}

size_t DeviceTurns::Waiting(uint32_t device) const {
  std::lock_guard lock(mu_);
  const auto it = queues_.find(device);
  return it == queues_.end() || it->second.empty() ? 0 : it->second.size() - 1;
}

}  // namespace kbox
