#include "daemon/slot_pool.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kbox {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) until thread `tid` of this process is asleep in the kernel.
// A waiter thread's only blocking call is the pool's condition variable, so
// once it sleeps it holds its place in the queue. Polls /proc: the pool offers
// no hook, and this avoids guessing with a fixed sleep.
bool WaitUntilBlocked(pid_t tid) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  const std::string stat = "/proc/self/task/" + std::to_string(tid) + "/stat";
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(stat);
    std::string line;
    std::getline(in, line);
    const auto paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S') {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

pid_t CurrentTid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

TEST(SlotPoolTest, AnonymousPoolHandsOutEverySlotOnce) {
  SlotPool pool = SlotPool::Anonymous(3);
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_EQ(pool.busy(), 0u);
  auto a = pool.Acquire();
  auto b = pool.Acquire();
  auto c = pool.Acquire();
  EXPECT_EQ(std::set<uint32_t>({a.slot(), b.slot(), c.slot()}), std::set<uint32_t>({0, 1, 2}));
  EXPECT_EQ(pool.busy(), 3u);
}

TEST(SlotPoolTest, LeaseDestructorReleasesSlot) {
  SlotPool pool = SlotPool::Anonymous(1);
  {
    auto lease = pool.Acquire();
    EXPECT_EQ(lease.slot(), 0u);
    EXPECT_TRUE(pool.IsBusy(0));
    EXPECT_EQ(pool.busy(), 1u);
  }
  EXPECT_FALSE(pool.IsBusy(0));
  EXPECT_EQ(pool.busy(), 0u);
  auto again = pool.Acquire();  // Would block forever had the slot leaked.
  EXPECT_EQ(again.slot(), 0u);
}

TEST(SlotPoolTest, MovedLeaseReleasesOnce) {
  SlotPool pool = SlotPool::Anonymous(2);
  std::optional<SlotPool::Lease> outer;
  {
    auto lease = pool.Acquire();
    outer.emplace(std::move(lease));
  }  // The moved-from lease is destroyed here and must not release.
  EXPECT_EQ(pool.busy(), 1u);
  EXPECT_TRUE(pool.IsBusy(outer->slot()));
  outer.reset();
  EXPECT_EQ(pool.busy(), 0u);
}

TEST(SlotPoolTest, GpuPoolHandsOutGivenIds) {
  SlotPool pool({4, 7});
  EXPECT_EQ(pool.size(), 2u);
  auto first = pool.Acquire();
  auto second = pool.Acquire();
  EXPECT_EQ(first.slot(), 4u);
  EXPECT_EQ(second.slot(), 7u);
  EXPECT_TRUE(pool.IsBusy(4));
  EXPECT_TRUE(pool.IsBusy(7));
  EXPECT_FALSE(pool.IsBusy(0));
  EXPECT_FALSE(pool.IsBusy(5));
}

TEST(SlotPoolTest, ReleasedSlotIsReused) {
  SlotPool pool({4, 7});
  std::optional<SlotPool::Lease> first(pool.Acquire());
  auto second = pool.Acquire();
  EXPECT_EQ(second.slot(), 7u);
  first.reset();
  EXPECT_FALSE(pool.IsBusy(4));
  auto third = pool.Acquire();
  EXPECT_EQ(third.slot(), 4u);
}

TEST(SlotPoolTest, AcquireBlocksUntilLeaseIsDestroyed) {
  SlotPool pool = SlotPool::Anonymous(1);
  std::optional<SlotPool::Lease> held(pool.Acquire());
  std::atomic<bool> acquired{false};
  std::promise<pid_t> tid;
  std::thread waiter([&] {
    tid.set_value(CurrentTid());
    auto lease = pool.Acquire();
    acquired = true;
    EXPECT_EQ(lease.slot(), 0u);
  });
  ASSERT_TRUE(WaitUntilBlocked(tid.get_future().get()));
  EXPECT_FALSE(acquired.load());
  EXPECT_TRUE(pool.IsBusy(0));
  held.reset();
  waiter.join();  // Returns only if the release woke the waiter.
  EXPECT_TRUE(acquired.load());
  EXPECT_EQ(pool.busy(), 0u);
}

TEST(SlotPoolTest, WaitersAreServedInArrivalOrder) {
  SlotPool pool = SlotPool::Anonymous(1);
  std::optional<SlotPool::Lease> held(pool.Acquire());
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  constexpr int kWaiters = 4;
  for (int i = 0; i < kWaiters; ++i) {
    std::promise<pid_t> tid;
    auto tid_future = tid.get_future();
    waiters.emplace_back([&, i, tid = std::move(tid)]() mutable {
      tid.set_value(CurrentTid());
      auto lease = pool.Acquire();
      std::lock_guard lock(mu);
      order.push_back(i);
    });
    // Waiter i takes its ticket before waiter i+1 is started.
    ASSERT_TRUE(WaitUntilBlocked(tid_future.get())) << "waiter " << i;
  }
  held.reset();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(SlotPoolTest, ManyThreadsNeverExceedPoolSize) {
  SlotPool pool = SlotPool::Anonymous(2);
  std::atomic<int> inside{0};
  std::atomic<int> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto lease = pool.Acquire();
        const int now = ++inside;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        EXPECT_LT(lease.slot(), 2u);
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 2);
  EXPECT_GE(peak.load(), 1);
  EXPECT_EQ(pool.busy(), 0u);
}

// The queue depth kboxd exports: callers blocked in Acquire.
TEST(SlotPoolTest, WaitingCountsBlockedCallers) {
  SlotPool pool = SlotPool::Anonymous(1);
  auto held = std::make_optional(pool.Acquire());
  EXPECT_EQ(pool.waiting(), 0u);
  EXPECT_EQ(pool.idle(), 0u);
  std::promise<pid_t> tid;
  std::thread waiter([&] {
    tid.set_value(CurrentTid());
    auto lease = pool.Acquire();
  });
  ASSERT_TRUE(WaitUntilBlocked(tid.get_future().get()));
  EXPECT_EQ(pool.waiting(), 1u);
  held.reset();
  waiter.join();
  EXPECT_EQ(pool.waiting(), 0u);
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(SlotPoolTest, SlotOutOfServiceIsNotHandedOutUntilPutBack) {
  SlotPool pool({4, 7});
  pool.SetInService(4, false);
  pool.SetInService(99, false);  // Unknown: ignored.
  EXPECT_FALSE(pool.InService(4));
  EXPECT_TRUE(pool.InService(99));
  EXPECT_EQ(pool.idle(), 1u);
  auto only = std::make_optional(pool.Acquire());
  EXPECT_EQ(only->slot(), 7u);
  std::promise<pid_t> tid;
  std::optional<uint32_t> got;
  std::thread waiter([&] {
    tid.set_value(CurrentTid());
    got = pool.Acquire().slot();
  });
  // Slot 4 is free but out of service: the waiter blocks.
  ASSERT_TRUE(WaitUntilBlocked(tid.get_future().get()));
  EXPECT_EQ(pool.waiting(), 1u);
  pool.SetInService(4, true);
  waiter.join();
  EXPECT_EQ(got, 4u);
  // A leased slot taken out of service stays with its holder, then rests.
  pool.SetInService(7, false);
  EXPECT_TRUE(pool.IsBusy(7));
  only.reset();
  EXPECT_EQ(pool.idle(), 1u);  // Slot 4 only.
}

// Waits (bounded) until `pool` counts `n` waiters of `tenant`.
bool WaitForWaiters(const SlotPool& pool, const std::string& tenant, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pool.waiting(tenant) == n) return true;
    std::this_thread::yield();
  }
  return false;
}

// One tenant's backlog must not starve another: with "bulk" queued first and
// deep, "small"'s jobs are served in alternation with it, and each tenant's
// own jobs in their arrival order.
TEST(SlotPoolTest, BackloggedTenantsTakeTurns) {
  SlotPool pool = SlotPool::Anonymous(1);
  auto held = std::make_optional(pool.Acquire("bulk"));
  std::mutex mu;
  std::vector<std::string> served;
  std::vector<std::thread> threads;
  auto enqueue = [&](const std::string& tenant, int index) {
    threads.emplace_back([&, tenant, index] {
      auto lease = pool.Acquire(tenant);
      std::lock_guard lock(mu);
      served.push_back(tenant + std::to_string(index));
    });
  };
  for (int i = 0; i < 5; ++i) {
    enqueue("bulk", i);
    ASSERT_TRUE(WaitForWaiters(pool, "bulk", static_cast<size_t>(i + 1)));
  }
  for (int i = 0; i < 2; ++i) {
    enqueue("small", i);
    ASSERT_TRUE(WaitForWaiters(pool, "small", static_cast<size_t>(i + 1)));
  }
  EXPECT_EQ(pool.waiting(), 7u);
  held.reset();
  for (auto& t : threads) t.join();
  EXPECT_EQ(served, (std::vector<std::string>{"bulk0", "small0", "bulk1", "small1", "bulk2",
                                              "bulk3", "bulk4"}));
  EXPECT_EQ(pool.waiting(), 0u);
  EXPECT_EQ(pool.idle(), 1u);
}

// Three tenants and two slots: at every point, the tenants' counts of
// served jobs differ by at most one (round robin), plus one more for the two
// holders recording concurrently out of grant order.
TEST(SlotPoolTest, FairShareHoldsWithSeveralSlots) {
  SlotPool pool = SlotPool::Anonymous(2);
  auto a = std::make_optional(pool.Acquire("x"));
  auto b = std::make_optional(pool.Acquire("x"));
  std::mutex mu;
  std::vector<std::string> served;
  std::vector<std::thread> threads;
  const std::vector<std::string> tenants = {"t0", "t1", "t2"};
  for (const auto& tenant : tenants) {
    for (int i = 0; i < 6; ++i) {
      threads.emplace_back([&, tenant] {
        auto lease = pool.Acquire(tenant);
        std::lock_guard lock(mu);
        served.push_back(tenant);
      });
    }
    ASSERT_TRUE(WaitForWaiters(pool, tenant, 6));
  }
  a.reset();
  b.reset();
  for (auto& t : threads) t.join();
  ASSERT_EQ(served.size(), 18u);
  std::map<std::string, int> counts = {{"t0", 0}, {"t1", 0}, {"t2", 0}};
  for (size_t k = 0; k < served.size(); ++k) {
    ++counts[served[k]];
    const auto [lo, hi] = std::minmax({counts["t0"], counts["t1"], counts["t2"]});
    EXPECT_LE(hi - lo, 2) << "after " << k + 1 << " grants";
  }
}

TEST(SlotPoolTest, ACancelledWaiterLeavesTheQueueAndOthersKeepTheirPlaces) {
  SlotPool pool = SlotPool::Anonymous(1);
  auto held = pool.Acquire();
  std::atomic<bool> cancel_a{false};
  const std::atomic<bool> cancel_b{false};
  std::atomic<pid_t> tid_a{0};
  auto a = std::async(std::launch::async, [&] {
    tid_a = CurrentTid();
    return pool.Acquire("t", cancel_a).has_value();
  });
  while (tid_a.load() == 0) std::this_thread::yield();
  ASSERT_TRUE(WaitUntilBlocked(tid_a.load()));
  std::atomic<pid_t> tid_b{0};
  auto b = std::async(std::launch::async, [&] {
    tid_b = CurrentTid();
    auto lease = pool.Acquire("t", cancel_b);
    return lease.has_value();
  });
  while (tid_b.load() == 0) std::this_thread::yield();
  ASSERT_TRUE(WaitUntilBlocked(tid_b.load()));
  EXPECT_EQ(pool.waiting(), 2u);

  // Setting the flag alone wakes nobody; WakeWaiters makes the waiter look.
  cancel_a = true;
  pool.WakeWaiters();
  EXPECT_FALSE(a.get());
  EXPECT_EQ(pool.waiting(), 1u);
  EXPECT_EQ(pool.waiting("t"), 1u);
  EXPECT_EQ(pool.busy(), 1u);

  // The one still waiting gets the slot next; nothing leaked to the cancelled one.
  { auto released = std::move(held); }
  EXPECT_TRUE(b.get());
  EXPECT_EQ(pool.waiting(), 0u);
  EXPECT_EQ(pool.busy(), 0u);
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(SlotPoolTest, AWaiterCancelledBeforeItAsksGetsAFreeSlotOrNothing) {
  SlotPool pool = SlotPool::Anonymous(1);
  const std::atomic<bool> cancelled{true};
  // A free slot is handed over even so: the caller sees its flag and gives it back.
  auto lease = pool.Acquire("", cancelled);
  ASSERT_TRUE(lease.has_value());
  EXPECT_FALSE(pool.Acquire("", cancelled).has_value());
  EXPECT_EQ(pool.waiting(), 0u);
}

}  // namespace
}  // namespace kbox
