#pragma once

// Bounded pools of the things jobs wait for: compile workers (CPU only) and
// device slots (one job per GPU at a time; a configured number of CPU slots).
// A lease gives its slot back when destroyed, so an exception or an early
// return can never leak a GPU. A slot can be taken out of service (a
// quarantined GPU, daemon/device_health.h): it is handed out again only once
// it is put back; a job holding it keeps it until the lease ends.
//
// Fair share: every waiter names its tenant (the API token's name; "" when
// authentication is off). Free slots go to the tenants with waiters in turn,
// one slot each, round robin, and first come first served within a tenant, so
// a tenant with a thousand queued jobs delays another tenant's next job by at
// most one job per tenant ahead of it, never by its whole backlog.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kbox {

class SlotPool {
 public:
  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), slot_(other.slot_) {
      other.pool_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (pool_) pool_->Release(slot_);
    }
    // The slot's id: a GPU index, or 0..n-1 for anonymous slots.
    uint32_t slot() const { return slot_; }

   private:
    friend class SlotPool;
    Lease(SlotPool* pool, uint32_t slot) : pool_(pool), slot_(slot) {}
    SlotPool* pool_;
    uint32_t slot_;
  };

  // A pool of the given slot ids, all free.
  explicit SlotPool(std::vector<uint32_t> slots);
  // A pool of `count` anonymous slots 0..count-1.
  static SlotPool Anonymous(uint32_t count);

  SlotPool(SlotPool&& other) noexcept;
  SlotPool(const SlotPool&) = delete;

  // Blocks until a slot in service is given to this caller: tenants with
  // waiters take turns, and each tenant's waiters are served in arrival order.
  Lease Acquire(const std::string& tenant = "");
  // As Acquire, but gives up (nullopt, its place in the queue gone) once
  // `cancel` is set and WakeWaiters is called.
  std::optional<Lease> Acquire(const std::string& tenant, const std::atomic<bool>& cancel);
  // Has every waiter look at its cancel flag again.
  void WakeWaiters();

  // Takes `slot` out of service or puts it back; unknown slots are ignored.
  void SetInService(uint32_t slot, bool in_service);

  size_t size() const { return total_; }
  size_t busy() const;
  // True when `slot` is leased now.
  bool IsBusy(uint32_t slot) const;
  bool InService(uint32_t slot) const;
  // Callers blocked in Acquire now (the queue in front of the pool).
  size_t waiting() const;
  // Of them, those of `tenant`.
  size_t waiting(const std::string& tenant) const;
  // Free slots in service.
  size_t idle() const;

 private:
  // One caller blocked in Acquire; `slot` is set when one is handed to it.
  struct Waiter {
    std::optional<uint32_t> slot;
  };

  void Release(uint32_t slot);
  // Hands free slots in service to waiters, tenants in turn; with mu_ held.
  // Returns whether any waiter got one.
  bool DispatchLocked();

  mutable std::mutex mu_;
  std::condition_variable handed_;
  std::deque<uint32_t> free_;
  std::vector<uint32_t> busy_;
  std::vector<uint32_t> out_of_service_;
  size_t total_ = 0;
  // Waiters by tenant in arrival order, and the tenants with waiters in the
  // order of their next turn.
  std::map<std::string, std::deque<Waiter*>> waiters_;
  std::deque<std::string> turns_;
  size_t waiting_ = 0;
};

}  // namespace kbox
