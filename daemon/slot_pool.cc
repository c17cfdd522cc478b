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
  // Only ever moved before any caller waits on it (in the owner's constructor).
  std::lock_guard lock(other.mu_);
  free_ = std::move(other.free_);
  busy_ = std::move(other.busy_);
  out_of_service_ = std::move(other.out_of_service_);
  total_ = other.total_;
}

SlotPool::Lease SlotPool::Acquire(const std::string& tenant) {
  static const std::atomic<bool> never{false};
  return std::move(*Acquire(tenant, never));
}

std::optional<SlotPool::Lease> SlotPool::Acquire(const std::string& tenant,
                                                 const std::atomic<bool>& cancel) {
  std::unique_lock lock(mu_);
  Waiter me;
  auto& queue = waiters_[tenant];
  // A tenant that had no waiter joins the end of the turn order.
  if (queue.empty()) turns_.push_back(tenant);
  queue.push_back(&me);
  ++waiting_;
  if (DispatchLocked()) handed_.notify_all();
  handed_.wait(lock, [&] { return me.slot.has_value() || cancel.load(); });
  // A slot handed over as the flag was set is taken: the caller, seeing the
  // flag, gives it back at once through the lease.
  if (me.slot) return Lease(this, *me.slot);
  auto it = waiters_.find(tenant);
  it->second.erase(std::find(it->second.begin(), it->second.end(), &me));
  if (it->second.empty()) {
    waiters_.erase(it);
    turns_.erase(std::find(turns_.begin(), turns_.end(), tenant));
  }
  --waiting_;
  return std::nullopt;
}

void SlotPool::WakeWaiters() {
  // Taking the lock orders this after a waiter's check of its flag.
  { std::lock_guard lock(mu_); }
  handed_.notify_all();
}

bool SlotPool::DispatchLocked() {
  bool handed = false;
  while (!turns_.empty()) {
    const auto usable = std::find_if(free_.begin(), free_.end(),
                                     [&](uint32_t s) { return !Contains(out_of_service_, s); });
    if (usable == free_.end()) break;
    const std::string tenant = std::move(turns_.front());
    turns_.pop_front();
    auto it = waiters_.find(tenant);
    Waiter* next = it->second.front();
    it->second.pop_front();
    // Served one: to the back of the turn order while it still waits.
    if (it->second.empty()) {
      waiters_.erase(it);
    } else {
      turns_.push_back(tenant);
    }
    --waiting_;
    next->slot = *usable;
    busy_.push_back(*usable);
    free_.erase(usable);
    handed = true;
  }
  return handed;
}

void SlotPool::Release(uint32_t slot) {
  bool handed = false;
  {
    std::lock_guard lock(mu_);
    busy_.erase(std::find(busy_.begin(), busy_.end(), slot));
    free_.push_back(slot);
    handed = DispatchLocked();
  }
  if (handed) handed_.notify_all();
}

void SlotPool::SetInService(uint32_t slot, bool in_service) {
  bool handed = false;
  {
    std::lock_guard lock(mu_);
    if (!Contains(busy_, slot) && std::find(free_.begin(), free_.end(), slot) == free_.end()) return;
    const bool out = Contains(out_of_service_, slot);
    if (in_service && out) {
      out_of_service_.erase(std::find(out_of_service_.begin(), out_of_service_.end(), slot));
    } else if (!in_service && !out) {
      out_of_service_.push_back(slot);
    }
    handed = DispatchLocked();
  }
  if (handed) handed_.notify_all();
}

bool SlotPool::InService(uint32_t slot) const {
  std::lock_guard lock(mu_);
  return !Contains(out_of_service_, slot);
}

size_t SlotPool::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

size_t SlotPool::waiting(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  const auto it = waiters_.find(tenant);
  return it == waiters_.end() ? 0 : it->second.size();
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
