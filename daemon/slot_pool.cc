#include "daemon/slot_pool.h"

#include <algorithm>
#include <numeric>

namespace kbox {
namespace {

bool Contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

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
  out_of_service_ = std::move(other.out_of_service_);
  total_ = other.total_;
}

SlotPool::Lease SlotPool::Acquire() {
  std::unique_lock lock(mu_);
  const uint64_t ticket = next_ticket_++;
  auto usable = free_.end();
  freed_.wait(lock, [&] {
    if (ticket != serving_ticket_) return false;
    usable = std::find_if(free_.begin(), free_.end(),
                          [&](uint32_t s) { return !Contains(out_of_service_, s); });
    return usable != free_.end();
  });
  ++serving_ticket_;
  const uint32_t slot = *usable;
  free_.erase(usable);
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

void SlotPool::SetInService(uint32_t slot, bool in_service) {
  {
    std::lock_guard lock(mu_);
    if (!Contains(busy_, slot) && std::find(free_.begin(), free_.end(), slot) == free_.end()) return;
    const bool out = Contains(out_of_service_, slot);
    if (in_service && out) {
      out_of_service_.erase(std::find(out_of_service_.begin(), out_of_service_.end(), slot));
    } else if (!in_service && !out) {
      out_of_service_.push_back(slot);
    }
  }
  freed_.notify_all();
}

bool SlotPool::InService(uint32_t slot) const {
  std::lock_guard lock(mu_);
  return !Contains(out_of_service_, slot);
}

size_t SlotPool::waiting() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(next_ticket_ - serving_ticket_);
}

size_t SlotPool::idle() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(std::count_if(
      free_.begin(), free_.end(), [&](uint32_t s) { return !Contains(out_of_service_, s); }));
}

size_t SlotPool::busy() const {
  std::lock_guard lock(mu_);
  return busy_.size();
}

bool SlotPool::IsBusy(uint32_t slot) const {
  std::lock_guard lock(mu_);
  return Contains(busy_, slot);
}

}  // namespace kbox
