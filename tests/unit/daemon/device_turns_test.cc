#include "daemon/device_turns.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace kbox {
namespace {

TEST(DeviceTurnsTest, FreeDeviceGivesTheTurnAtOnce) {
  DeviceTurns turns;
  int given = 0;
  const auto ticket = turns.Enqueue(0, [&] { ++given; });
  EXPECT_EQ(given, 1);
  EXPECT_TRUE(ticket.holds());
  EXPECT_TRUE(turns.Held(0));
  EXPECT_FALSE(turns.Held(1));
}

TEST(DeviceTurnsTest, TurnsGoInOrderOneAtATime) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [&] { log.push_back("c"); }));
  EXPECT_EQ(log, std::vector<std::string>{"a"});
  EXPECT_EQ(turns.Waiting(0), 2u);
  EXPECT_FALSE(b->holds());
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(b->holds());
  b.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "c"}));
  c.reset();
  EXPECT_FALSE(turns.Held(0));
}

// A stage that ended before its turn (its set-up failed) leaves the queue
// and is never given the turn.
TEST(DeviceTurnsTest, LeavingTheQueueSkipsTheTicket) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [&] { log.push_back("c"); }));
  b.reset();
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(c->holds());
}

TEST(DeviceTurnsTest, DevicesAreIndependent) {
  DeviceTurns turns;
  int given = 0;
  const auto a = turns.Enqueue(0, [&] { ++given; });
  const auto b = turns.Enqueue(1, [&] { ++given; });
  EXPECT_EQ(given, 2);
  EXPECT_TRUE(a.holds());
  EXPECT_TRUE(b.holds());
}

}  // namespace
}  // namespace kbox
