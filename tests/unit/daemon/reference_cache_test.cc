#include "daemon/reference_cache.h"
#include "worker/sha256.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kbox {
namespace {

using std::chrono::seconds;

ReferenceKeyInputs BaseInputs() {
  return ReferenceKeyInputs{.reference_source = "class Model: ...",
                            .backend = "BACKEND_CUDA",
                            .precision = "PRECISION_FP32",
                            .performance_trials = 20,
                            .warmup_calls = 3,
                            .device = "NVIDIA H100 80GB HBM3",
                            .driver = "550.54.15",
                            .cuda = "12.4",
                            .torch = "2.5.1",
                            .python = "3.11.2",
                            .harness = "kbox 0.1 harness=abc"};
}

v1::ReferenceTimingEntry Entry(double lower_quartile_ms, const std::string& signature = "sig") {
  v1::ReferenceTimingEntry e;
  e.mutable_timing()->set_lower_quartile_ms(lower_quartile_ms);
  e.set_input_signature(signature);
  return e;
}

TEST(ReferenceCacheKeyTest, IsSha256HexAndStable) {
  const std::string key = ReferenceCacheKey(BaseInputs());
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(key, ReferenceCacheKey(BaseInputs()));
}

TEST(ReferenceCacheKeyTest, EveryFieldSeparatesKeys) {
  std::vector<ReferenceKeyInputs> variants(12, BaseInputs());
  variants[1].reference_source += " ";
  variants[2].backend = "BACKEND_TRITON";
  variants[3].precision = "PRECISION_FP16";
  variants[4].performance_trials = 21;
  variants[5].warmup_calls = 4;
  variants[6].device = "NVIDIA H200";
  variants[7].driver = "560.28.03";
  variants[8].cuda = "12.6";
  variants[9].torch = "2.6.0";
  variants[10].python = "3.12.1";
  variants[11].harness = "kbox 0.1 harness=abd";
  std::set<std::string> keys;
  for (const auto& v : variants) keys.insert(ReferenceCacheKey(v));
  EXPECT_EQ(keys.size(), variants.size());
}

TEST(ReferenceCacheKeyTest, FieldBoundariesCannotBeShifted) {
  // The same bytes split differently between two fields: length-prefixed
  // fields encode them apart.
  ReferenceKeyInputs a = BaseInputs(), b = BaseInputs();
  a.driver = "550.5";
  a.cuda = "4.15";
  b.driver = "550.54";
  b.cuda = ".15";
  EXPECT_NE(ReferenceCacheKey(a), ReferenceCacheKey(b));
}

class ReferenceCacheTest : public ::testing::Test {
 protected:
  ReferenceCache::Clock::time_point now_ = ReferenceCache::Clock::now();
  ReferenceCache cache_{ReferenceCache::Options{.max_entries = 2, .ttl = seconds(60)}};
};

TEST_F(ReferenceCacheTest, MissThenHitReturnsTheStoredEntry) {
  EXPECT_FALSE(cache_.Lookup("a", now_).has_value());
  cache_.Insert("a", Entry(0.25, "float32[4,8]"), now_);
  const auto hit = cache_.Lookup("a", now_ + seconds(1));
  ASSERT_TRUE(hit.has_value());
  EXPECT_DOUBLE_EQ(hit->timing().lower_quartile_ms(), 0.25);
  EXPECT_EQ(hit->input_signature(), "float32[4,8]");
  EXPECT_EQ(cache_.size(), 1u);
}

TEST_F(ReferenceCacheTest, EvictsTheLeastRecentlyUsed) {
  cache_.Insert("a", Entry(1), now_);
  cache_.Insert("b", Entry(2), now_);
  ASSERT_TRUE(cache_.Lookup("a", now_).has_value());  // b is now the least recently used
  cache_.Insert("c", Entry(3), now_);
  EXPECT_EQ(cache_.size(), 2u);
  EXPECT_TRUE(cache_.Lookup("a", now_).has_value());
  EXPECT_FALSE(cache_.Lookup("b", now_).has_value());
  EXPECT_TRUE(cache_.Lookup("c", now_).has_value());
}

TEST_F(ReferenceCacheTest, ReinsertReplacesWithoutGrowing) {
  cache_.Insert("a", Entry(1), now_);
  cache_.Insert("a", Entry(5), now_);
  EXPECT_EQ(cache_.size(), 1u);
  EXPECT_DOUBLE_EQ(cache_.Lookup("a", now_)->timing().lower_quartile_ms(), 5);
}

TEST_F(ReferenceCacheTest, EntriesExpireAfterTheirTtl) {
  cache_.Insert("a", Entry(1), now_);
  EXPECT_TRUE(cache_.Lookup("a", now_ + seconds(59)).has_value());
  // A lookup does not refresh the entry: its age counts from the measurement.
  EXPECT_FALSE(cache_.Lookup("a", now_ + seconds(60)).has_value());
  EXPECT_EQ(cache_.size(), 0u);
  // A new measurement starts a new life.
  cache_.Insert("a", Entry(2), now_ + seconds(61));
  EXPECT_TRUE(cache_.Lookup("a", now_ + seconds(100)).has_value());
}

TEST(ReferenceCacheLimitTest, ZeroEntriesStoresNothing) {
  ReferenceCache cache(ReferenceCache::Options{.max_entries = 0, .ttl = seconds(60)});
  const auto now = ReferenceCache::Clock::now();
  cache.Insert("a", Entry(1), now);
  EXPECT_FALSE(cache.Lookup("a", now).has_value());
}

TEST(ReferenceCacheLimitTest, ConcurrentUseKeepsTheBound) {
  ReferenceCache cache(ReferenceCache::Options{.max_entries = 50, .ttl = seconds(60)});
  const auto now = ReferenceCache::Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, now, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string key = std::to_string(t) + "-" + std::to_string(i % 80);
        cache.Insert(key, Entry(i), now);
        cache.Lookup(std::to_string((t + 1) % 4) + "-" + std::to_string(i % 80), now);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.size(), 50u);
}

}  // namespace
}  // namespace kbox
