#pragma once

// Bounded pools of the things jobs wait for: compile workers (CPU only) and
// device slots (one job per GPU at a time; a configured number of CPU slots).
// A lease gives its slot back when destroyed, so an exception or an early
// return can never leak a GPU.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
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

  // Blocks until a slot is free; slots are handed out first come, first served.
  Lease Acquire();

  size_t size() const { return total_; }
  size_t busy() const;
  // True when `slot` is leased now.
  bool IsBusy(uint32_t slot) const;

 private:
  void Release(uint32_t slot);

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::deque<uint32_t> free_;
  std::vector<uint32_t> busy_;
  size_t total_ = 0;
  uint64_t next_ticket_ = 0;     // FIFO fairness among waiters.
  uint64_t serving_ticket_ = 0;
};

}  // namespace kbox
