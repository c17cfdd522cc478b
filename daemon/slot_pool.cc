#include "daemon/slot_pool.h"

#include <algorithm>
#include <numeric>

namespace kbox {

SlotPool::SlotPool(std::vector<uint32_t> slots)
    : free_(slots.begin(), slots.end()), total_(slots.size()) {}

SlotPool SlotPool::Anonymous(uint32_t count) {
  std::vector<uint32_t> ids(count);
  std::iota(ids.begin(), ids.end(), 0u);
  return SlotPool(std::move(ids));
}

SlotPool::SlotPool(SlotPool&& other) noexcept {
  std::lock_guard lock(other.mu_);
  free_ = std::move(other.free_);
  busy_ = std::move(other.busy_);
  total_ = other.total_;
}

SlotPool::Lease SlotPool::Acquire() {
  std::unique_lock lock(mu_);
  const uint64_t ticket = next_ticket_++;
  freed_.wait(lock, [&] { return ticket == serving_ticket_ && !free_.empty(); });
  ++serving_ticket_;
  const uint32_t slot = free_.front();
  free_.pop_front();
  busy_.push_back(slot);
  // The next waiter may be able to proceed too (more than one slot free).
  freed_.notify_all();
  return Lease(this, slot);
}

void SlotPool::Release(uint32_t slot) {
  {
    std::lock_guard lock(mu_);
    busy_.erase(std::find(busy_.begin(), busy_.end(), slot));
    free_.push_back(slot);
  }
  freed_.notify_all();
}

size_t SlotPool::busy() const {
  std::lock_guard lock(mu_);
  return busy_.size();
}

bool SlotPool::IsBusy(uint32_t slot) const {
  std::lock_guard lock(mu_);
  return std::find(busy_.begin(), busy_.end(), slot) != busy_.end();
}

}  // namespace kbox
