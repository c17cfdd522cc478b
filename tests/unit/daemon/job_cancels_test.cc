#include "daemon/job_cancels.h"

#include <gtest/gtest.h>

namespace kbox {
namespace {

TEST(JobCancelsTest, CancelSetsOnlyThatJobsFlagAsTheClients) {
  JobCancels cancels;
  auto a = cancels.Open("job-a");
  auto b = cancels.Open("job-b");
  EXPECT_TRUE(cancels.Cancel("job-a"));
  EXPECT_TRUE(a->stop.load());
  EXPECT_TRUE(a->by_client.load());
  EXPECT_FALSE(b->stop.load());
  EXPECT_FALSE(cancels.Cancel("job-c"));
}

TEST(JobCancelsTest, AJobIsForgottenWithItsLastHandle) {
  JobCancels cancels;
  auto a = cancels.Open("job-a");
  auto copy = a;
  a.reset();
  EXPECT_TRUE(cancels.Cancel("job-a"));
  copy.reset();
  EXPECT_FALSE(cancels.Cancel("job-a"));
}

TEST(JobCancelsTest, AnIdOpenedAgainKeepsItsNewerFlag) {
  JobCancels cancels;
  auto old_flag = cancels.Open("job-a");
  auto new_flag = cancels.Open("job-a");
  old_flag.reset();  // Must not forget the newer flag.
  EXPECT_TRUE(cancels.Cancel("job-a"));
  EXPECT_TRUE(new_flag->by_client.load());
}

TEST(JobCancelsTest, CancelAllStopsLiveJobsAndThoseOpenedLaterButNotAsTheClients) {
  JobCancels cancels;
  auto live = cancels.Open("live");
  cancels.CancelAll();
  EXPECT_TRUE(live->stop.load());
  EXPECT_FALSE(live->by_client.load());
  auto later = cancels.Open("later");
  EXPECT_TRUE(later->stop.load());
  EXPECT_FALSE(later->by_client.load());
}

}  // namespace
}  // namespace kbox
