#include "daemon/job_admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

namespace kbox {
namespace {

using Refusal = JobAdmission::Refusal;

TEST(JobAdmissionTest, TokenLimitRefusesOnlyThatToken) {
  JobAdmission admission(10);
  auto a1 = admission.TryAcquire("alice", 1);
  ASSERT_TRUE(a1.has_value());
  auto a2 = admission.TryAcquire("alice", 1);
  ASSERT_FALSE(a2.has_value());
  EXPECT_EQ(a2.error(), Refusal::kTokenFull);
  auto b = admission.TryAcquire("bob", 1);  // Same limit, other token: room.
  EXPECT_TRUE(b.has_value());
  EXPECT_EQ(admission.in_flight("alice"), 1u);
  EXPECT_EQ(admission.in_flight("bob"), 1u);
  EXPECT_EQ(admission.in_flight(), 2u);
}

TEST(JobAdmissionTest, DaemonLimitRefusesEveryToken) {
  JobAdmission admission(2);
  auto a = admission.TryAcquire("alice", 0, 2);  // 0: no per-token limit.
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->size(), 2u);
  auto b = admission.TryAcquire("bob", 5);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error(), Refusal::kDaemonFull);
}

TEST(JobAdmissionTest, AdoptedJobsFromTheJournalTakePlacesPastTheLimits) {
  JobAdmission admission(1);
  std::vector<JobAdmission::Lease> adopted;
  for (int i = 0; i < 3; ++i) adopted.push_back(admission.Adopt("alice"));
  EXPECT_EQ(admission.in_flight(), 3u);
  EXPECT_EQ(admission.in_flight("alice"), 3u);
  // New submissions wait until the restored jobs bring the count back under.
  EXPECT_FALSE(admission.TryAcquire("bob", 0).has_value());
  adopted.clear();
  EXPECT_EQ(admission.in_flight(), 0u);
  EXPECT_TRUE(admission.TryAcquire("bob", 0).has_value());
}

TEST(JobAdmissionTest, TokenLimitIsReportedBeforeDaemonLimit) {
  JobAdmission admission(1);
  auto a = admission.TryAcquire("alice", 1);
  ASSERT_TRUE(a.has_value());
  auto again = admission.TryAcquire("alice", 1);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error(), Refusal::kTokenFull);
}

TEST(JobAdmissionTest, BatchIsAllOrNothing) {
  JobAdmission admission(10);
  auto one = admission.TryAcquire("alice", 3);
  ASSERT_TRUE(one.has_value());
  auto three = admission.TryAcquire("alice", 3, 3);  // 1 + 3 > 3
  ASSERT_FALSE(three.has_value());
  EXPECT_EQ(three.error(), Refusal::kTokenFull);
  EXPECT_EQ(admission.in_flight("alice"), 1u);  // Nothing half-taken.
  auto big = admission.TryAcquire("bob", 0, 11);
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error(), Refusal::kDaemonFull);
  EXPECT_EQ(admission.in_flight(), 1u);
  auto two = admission.TryAcquire("alice", 3, 2);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(admission.in_flight("alice"), 3u);
}

TEST(JobAdmissionTest, LeaseGivesItsPlaceBackExactlyOnce) {
  std::vector<uint32_t> changes;
  JobAdmission admission(10, [&](uint32_t n) { changes.push_back(n); });
  auto leases = admission.TryAcquire("alice", 2, 2);
  ASSERT_TRUE(leases.has_value());
  JobAdmission::Lease first = std::move((*leases)[0]);
  EXPECT_FALSE((*leases)[0].held());  // Moved from: owns nothing.
  first.Release();
  first.Release();  // A second release is a no-op.
  EXPECT_FALSE(first.held());
  EXPECT_EQ(admission.in_flight("alice"), 1u);
  leases->clear();  // The destructor releases the other one.
  EXPECT_EQ(admission.in_flight("alice"), 0u);
  EXPECT_EQ(admission.in_flight(), 0u);
  EXPECT_EQ(changes, (std::vector<uint32_t>{2, 1, 0}));
}

TEST(JobAdmissionTest, MoveAssignmentReleasesWhatItOverwrites) {
  JobAdmission admission(10);
  auto a = admission.TryAcquire("alice", 0);
  auto b = admission.TryAcquire("bob", 0);
  ASSERT_TRUE(a.has_value() && b.has_value());
  JobAdmission::Lease lease = std::move(a->front());
  lease = std::move(b->front());  // alice's place is given back here.
  EXPECT_EQ(admission.in_flight("alice"), 0u);
  EXPECT_EQ(admission.in_flight("bob"), 1u);
  lease.Release();
  EXPECT_EQ(admission.in_flight(), 0u);
}

TEST(JobAdmissionTest, ARefusedTokenGetsInAgainOnceAJobFinishes) {
  JobAdmission admission(10);
  auto held = admission.TryAcquire("alice", 1);
  ASSERT_TRUE(held.has_value());
  EXPECT_FALSE(admission.TryAcquire("alice", 1).has_value());
  held->front().Release();
  EXPECT_TRUE(admission.TryAcquire("alice", 1).has_value());
}

TEST(JobAdmissionTest, ConcurrentAcquiresNeverExceedTheLimits) {
  constexpr uint32_t kLimit = 3;
  JobAdmission admission(100);
  std::vector<std::thread> threads;
  std::atomic<uint32_t> over{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto lease = admission.TryAcquire("alice", kLimit);
        if (admission.in_flight("alice") > kLimit) over.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(over.load(), 0u);
  EXPECT_EQ(admission.in_flight(), 0u);
}

}  // namespace
}  // namespace kbox
