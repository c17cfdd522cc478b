#include "daemon/job_store.h"

#include <gtest/gtest.h>

#include <string>

namespace kbox {
namespace {

using std::chrono::seconds;

class JobStoreTest : public ::testing::Test {
 protected:
  JobStore::Admission Admit(const std::string& key, const std::string& digest = "d",
                            const std::string& owner = kOwner) {
    return store_.Admit(owner, key, digest, [this] { return "job-" + std::to_string(++ids_); },
                        now_);
  }

  static constexpr const char* kOwner = "alice";

  JobStore::Clock::time_point now_ = JobStore::Clock::now();
  int ids_ = 0;
  JobStore store_{JobStore::Options{.result_ttl = seconds(60), .max_jobs = 3, .on_expired = {}}};
};

TEST_F(JobStoreTest, NewJobIsQueuedUnderAFreshId) {
  const auto a = Admit("k1");
  EXPECT_EQ(a.job_id, "job-1");
  EXPECT_FALSE(a.existing || a.conflict || a.full);
  const auto status = store_.Get("job-1", kOwner, now_);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->state(), v1::JobStatus::QUEUED);
  EXPECT_EQ(status->idempotency_key(), "k1");
}

TEST_F(JobStoreTest, SameKeyReturnsTheFirstJobAndRunsNothingNew) {
  Admit("k1");
  const auto again = Admit("k1");
  EXPECT_EQ(again.job_id, "job-1");
  EXPECT_TRUE(again.existing);
  EXPECT_FALSE(again.conflict);
  EXPECT_EQ(ids_, 1);
  EXPECT_EQ(store_.size(), 1u);
}

TEST_F(JobStoreTest, SameKeyWithAnotherRequestIsAConflict) {
  Admit("k1", "digest-a");
  const auto other = Admit("k1", "digest-b");
  EXPECT_TRUE(other.existing);
  EXPECT_TRUE(other.conflict);
}

TEST_F(JobStoreTest, JobsWithoutKeysAreAlwaysNew) {
  EXPECT_EQ(Admit("").job_id, "job-1");
  EXPECT_EQ(Admit("").job_id, "job-2");
}

TEST_F(JobStoreTest, ResultIsKeptUntilItsTimeToLive) {
  Admit("k1");
  store_.MarkRunning("job-1");
  EXPECT_EQ(store_.Get("job-1", kOwner, now_)->state(), v1::JobStatus::RUNNING);
  v1::EvaluateResult result;
  result.set_job_id("job-1");
  result.set_status(v1::CORRECT);
  store_.Complete("job-1", result, now_);
  const auto done = store_.Get("job-1", kOwner, now_ + seconds(59));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state(), v1::JobStatus::DONE);
  EXPECT_EQ(done->result().status(), v1::CORRECT);
  // A retry with the key within the time to live gets the same result.
  now_ += seconds(59);
  EXPECT_EQ(Admit("k1").job_id, "job-1");
  // Past it, the job and its key are forgotten.
  EXPECT_FALSE(store_.Get("job-1", kOwner, now_ + seconds(2)).has_value());
  now_ += seconds(2);
  EXPECT_EQ(Admit("k1").job_id, "job-2");
}

TEST_F(JobStoreTest, UnfinishedJobsNeverExpire) {
  Admit("k1");
  EXPECT_TRUE(store_.Get("job-1", kOwner, now_ + seconds(100000)).has_value());
}

TEST_F(JobStoreTest, FullStoreRefusesAndEvictsNothing) {
  Admit("a");
  Admit("b");
  Admit("c");
  const auto refused = Admit("d");
  EXPECT_TRUE(refused.full);
  EXPECT_EQ(store_.size(), 3u);
  // A known key is still answered when full.
  EXPECT_EQ(Admit("a").job_id, "job-1");
}

TEST_F(JobStoreTest, WithdrawForgetsAQueuedJobAndItsKey) {
  Admit("k1");
  store_.Withdraw("job-1");
  EXPECT_FALSE(store_.Get("job-1", kOwner, now_).has_value());
  EXPECT_EQ(Admit("k1").job_id, "job-2");
  store_.MarkRunning("job-2");
  store_.Withdraw("job-2");  // Running jobs stay.
  EXPECT_TRUE(store_.Get("job-2", kOwner, now_).has_value());
}

TEST_F(JobStoreTest, IdempotencyKeysArePerOwner) {
  const auto alice = Admit("k1", "digest-a", "alice");
  const auto bob = Admit("k1", "digest-b", "bob");  // Same key, other owner: no conflict.
  EXPECT_FALSE(bob.existing || bob.conflict);
  EXPECT_NE(alice.job_id, bob.job_id);
  const auto again = Admit("k1", "digest-b", "bob");
  EXPECT_TRUE(again.existing);
  EXPECT_FALSE(again.conflict);
  EXPECT_EQ(again.job_id, bob.job_id);
}

TEST_F(JobStoreTest, AJobIsVisibleToItsOwnerOnly) {
  const auto alice = Admit("k1", "d", "alice");
  EXPECT_TRUE(store_.Get(alice.job_id, "alice", now_).has_value());
  EXPECT_FALSE(store_.Get(alice.job_id, "bob", now_).has_value());
  EXPECT_FALSE(store_.Get(alice.job_id, "", now_).has_value());
}

TEST_F(JobStoreTest, WithdrawFreesTheKeyOfItsOwnerOnly) {
  Admit("k1", "d", "alice");
  const auto bob = Admit("k1", "d", "bob");
  store_.Withdraw(bob.job_id);
  EXPECT_TRUE(Admit("k1", "d", "alice").existing);
  EXPECT_FALSE(Admit("k1", "d", "bob").existing);
}

}  // namespace
}  // namespace kbox

namespace kbox {
namespace {

TEST(JobStoreListTest, AnOwnersJobsByStateWithoutResults) {
  JobStore store{JobStore::Options{.result_ttl = std::chrono::seconds(60), .max_jobs = 10, .on_expired = {}}};
  const auto now = JobStore::Clock::now();
  int ids = 0;
  const auto admit = [&](const std::string& owner, const std::string& key) {
    return store.Admit(owner, key, "d", [&] { return "job-" + std::to_string(++ids); }, now).job_id;
  };
  const std::string a = admit("alice", "k1"), b = admit("alice", ""), c = admit("bob", "k1");
  store.MarkRunning(b);
  v1::EvaluateResult result;
  result.set_status(v1::CORRECT);
  store.Complete(a, result, now);
  const auto all = store.List("alice", v1::JobStatus::STATE_UNSPECIFIED, now);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].job_id(), a);
  EXPECT_EQ(all[0].state(), v1::JobStatus::DONE);
  EXPECT_EQ(all[0].idempotency_key(), "k1");
  EXPECT_FALSE(all[0].has_result());  // GET /v1/jobs/<id> has it
  const auto running = store.List("alice", v1::JobStatus::RUNNING, now);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].job_id(), b);
  // Another owner's jobs are never listed.
  EXPECT_EQ(store.List("bob", v1::JobStatus::STATE_UNSPECIFIED, now).size(), 1u);
  EXPECT_EQ(store.List("bob", v1::JobStatus::STATE_UNSPECIFIED, now)[0].job_id(), c);
  // Expired results leave the list.
  EXPECT_EQ(store.List("alice", v1::JobStatus::DONE, now + std::chrono::seconds(61)).size(), 0u);
}

TEST(JobStoreListTest, ACancelIsMarkedOnTheOwnersUnfinishedJobOnly) {
  JobStore store{JobStore::Options{.result_ttl = std::chrono::seconds(60), .max_jobs = 10, .on_expired = {}}};
  const auto now = JobStore::Clock::now();
  int ids = 0;
  const auto admit = [&](const std::string& key) {
    return store.Admit("alice", key, "d", [&] { return "job-" + std::to_string(++ids); }, now).job_id;
  };
  const std::string running = admit("r"), done = admit("d");
  store.MarkRunning(running);
  v1::EvaluateResult result;
  result.set_status(v1::CORRECT);
  store.Complete(done, result, now);

  EXPECT_FALSE(store.RequestCancel(running, "bob", now).has_value());  // Not bob's: unknown to him.
  EXPECT_FALSE(store.Get(running, "alice", now)->cancel_requested());
  const auto asked = store.RequestCancel(running, "alice", now);
  ASSERT_TRUE(asked.has_value());
  EXPECT_TRUE(asked->cancel_requested());
  EXPECT_EQ(asked->state(), v1::JobStatus::RUNNING);
  EXPECT_TRUE(store.List("alice", v1::JobStatus::RUNNING, now)[0].cancel_requested());
  // A finished job is left as it ended.
  const auto finished = store.RequestCancel(done, "alice", now);
  ASSERT_TRUE(finished.has_value());
  EXPECT_FALSE(finished->cancel_requested());
  EXPECT_EQ(finished->result().status(), v1::CORRECT);
}

}  // namespace
}  // namespace kbox
