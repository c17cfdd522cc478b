#include "daemon/device_turns.h"

#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <thread>
#include <chrono>
#include <atomic>
#include <string>
#include <vector>

namespace kbox {
namespace {

// A stage prepared ahead of its turn on device 0, its set-up over.
DeviceTurns::Ticket ReadyStage(DeviceTurns& turns, DeviceTurns::Give give = [] {}) {
  DeviceTurns::Ticket ticket = turns.Enqueue(0, std::move(give), true);
  ticket.SetUpDone();
  return ticket;
}

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

// The next turn goes to the first stage in line that is done setting up,
// ahead of one still setting up, whose turn would leave the device waiting
// for its CUDA start (docs/run-stages-ahead.md, "Ready stages first").
TEST(DeviceTurnsTest, TheTurnGoesToAStageDoneSettingUpBeforeOneStillSettingUp) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }, true));
  std::optional<DeviceTurns::Ticket> c(ReadyStage(turns, [&] { log.push_back("c"); }));
  std::optional<DeviceTurns::Ticket> d(ReadyStage(turns, [&] { log.push_back("d"); }));
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(c->holds());
  b->SetUpDone();
  c.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c", "b"}));  // Ready now, and first in line.
  b.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c", "b", "d"}));
}

// With no stage done setting up, the device stays free: the turn goes to
// the first to be done, not to the first in line, which would hold the
// device idle through its CUDA start.
TEST(DeviceTurnsTest, WithNoStageDoneSettingUpTheTurnWaitsForTheFirstDone) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }, true));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [&] { log.push_back("c"); }, true));
  a.reset();
  EXPECT_EQ(log, std::vector<std::string>{"a"});
  EXPECT_FALSE(turns.Held(0));
  EXPECT_FALSE(b->holds());
  EXPECT_EQ(turns.Waiting(0), 2u);
  c->SetUpDone();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(c->holds());
  b->SetUpDone();  // The device is c's: b waits.
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c"}));
  c.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c", "b"}));
}

// A stage set up ahead on a free device gets its turn when its set-up ends,
// and a stage that does not set up, queued meanwhile, gets it at once.
TEST(DeviceTurnsTest, OnAFreeDeviceAStageSettingUpGetsTheTurnWhenItIsDone) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }, true));
  EXPECT_TRUE(log.empty());
  EXPECT_FALSE(turns.Held(0));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }));
  EXPECT_EQ(log, std::vector<std::string>{"b"});
  a->SetUpDone();
  EXPECT_EQ(log, std::vector<std::string>{"b"});
  b.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(a->holds());
}

TEST(DeviceTurnsTest, HandingOverGivesTheTurnToAStageDoneSettingUpFirst) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }, true));
  std::optional<DeviceTurns::Ticket> c(ReadyStage(turns, [&] { log.push_back("c"); }));
  a->HandOver();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(c->holds());
  EXPECT_FALSE(b->holds());
}

// The first in line on a free device, waiting only for its own set-up, is
// told its turn is due (its set-up limit counts from then), once, and only
// while nobody holds the device; told it is not when a stage behind it,
// done setting up first, takes the turn instead.
TEST(DeviceTurnsTest, TheTurnIsDueForTheFirstInLineOnAFreeDevice) {
  DeviceTurns turns;
  std::vector<std::string> log;
  const auto stage = [&](const std::string& name) {
    return turns.Enqueue(0, [&log, name] { log.push_back("turn " + name); }, true, {},
                         [&log, name](bool due) { log.push_back((due ? "due " : "not due ") + name); });
  };
  std::optional<DeviceTurns::Ticket> a(stage("a"));
  std::optional<DeviceTurns::Ticket> b(stage("b"));
  EXPECT_EQ(log, std::vector<std::string>{"due a"});
  a->SetUpDone();
  b->SetUpDone();
  EXPECT_EQ(log, (std::vector<std::string>{"due a", "turn a"}));
  std::optional<DeviceTurns::Ticket> c(stage("c"));
  std::optional<DeviceTurns::Ticket> d(stage("d"));
  std::optional<DeviceTurns::Ticket> e(stage("e"));
  a.reset();  // b is done: its turn, and no due for c while b holds it.
  EXPECT_EQ(log, (std::vector<std::string>{"due a", "turn a", "turn b"}));
  b.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"due a", "turn a", "turn b", "due c"}));
  d->SetUpDone();  // Done before c: c is passed over.
  EXPECT_EQ(log, (std::vector<std::string>{"due a", "turn a", "turn b", "due c", "not due c", "turn d"}));
  d.reset();
  EXPECT_EQ(log.back(), "due c");
  c.reset();  // Gone before its set-up ended: the next in line is due.
  EXPECT_EQ(log.back(), "due e");
  e->SetUpDone();
  EXPECT_EQ(log.back(), "turn e");
  EXPECT_EQ(log.size(), 9u);
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

// The holder's quiet (device_turns.h): granted at once when no stage of
// the device is setting up, else once the last one is done or gone.
TEST(DeviceTurnsTest, QuietWaitsForStagesSettingUp) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }, true));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [&] { log.push_back("c"); }, true));
  a->AskQuiet([&] { log.push_back("quiet a"); });
  EXPECT_EQ(log, std::vector<std::string>{"a"});  // b and c are still setting up.
  b->SetUpDone();
  EXPECT_EQ(log, std::vector<std::string>{"a"});
  c.reset();  // Gone before its set-up ended: no longer waited for.
  EXPECT_EQ(log, (std::vector<std::string>{"a", "quiet a"}));
  a->AskQuiet([&] { log.push_back("again"); });  // Once per timing.
  EXPECT_EQ(log.size(), 2u);
}

TEST(DeviceTurnsTest, QuietIsGrantedAtOnceWhenNothingSetsUp) {
  DeviceTurns turns;
  int granted = 0;
  const auto a = ReadyStage(turns);
  const auto b = turns.Enqueue(0, [] {}, false);  // Not prepared ahead.
  a.AskQuiet([&] { ++granted; });
  EXPECT_EQ(granted, 1);
}

TEST(DeviceTurnsTest, QuietAskedBeforeTheTurnWaitsForIt) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(ReadyStage(turns, [&] { log.push_back("b"); }));
  b->AskQuiet([&] { log.push_back("quiet b"); });
  EXPECT_EQ(log, std::vector<std::string>{"a"});
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "quiet b"}));
}

TEST(DeviceTurnsTest, NoStageAheadStartsWhileTheHolderHasItsQuiet) {
  DeviceTurns turns;
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  a->AskQuiet([] {});
  std::atomic<bool> entered{false};
  std::thread ahead([&] {
    const auto b = turns.Enqueue(0, [] {}, true);
    entered = true;
  });
  // Another device, and a stage not prepared ahead, are not held back.
  const auto other = turns.Enqueue(1, [] {}, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(entered.load());
  a->EndQuiet();
  ahead.join();
  EXPECT_TRUE(entered.load());
}

TEST(DeviceTurnsTest, TheHolderLeavingEndsItsQuiet) {
  DeviceTurns turns;
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  a->AskQuiet([] {});
  std::thread ahead([&] { const auto b = turns.Enqueue(0, [] {}, true); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  a.reset();
  ahead.join();  // Returns: the quiet went with its holder.
}


// A stage setting up that can be paused is paused instead of waited for:
// the quiet comes at once, and the stage continues when the quiet ends.
struct FakeStage {
  std::vector<std::string>* log;
  std::string name;
  bool stops = true;
  DeviceTurns::Pauser Pauser() {
    return {[this] {
              log->push_back("pause " + name);
              return stops;
            },
            [this] { log->push_back("resume " + name); }};
  }
};

TEST(DeviceTurnsTest, QuietPausesStagesSettingUpAndResumesThemAfter) {
  DeviceTurns turns;
  std::vector<std::string> log;
  FakeStage b_stage{&log, "b"}, c_stage{&log, "c"};
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [] {}, true, b_stage.Pauser()));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [] {}, true, c_stage.Pauser()));
  c->SetUpDone();  // Done setting up: left alone.
  a->AskQuiet([&] { log.push_back("quiet a"); });
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "quiet a"}));
  a->EndQuiet();
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "quiet a", "resume b"}));
  a.reset();  // Already resumed: not resumed twice.
  EXPECT_EQ(log.size(), 3u);
}

TEST(DeviceTurnsTest, AStageThatDoesNotStopIsWaitedFor) {
  DeviceTurns turns;
  std::vector<std::string> log;
  FakeStage b_stage{&log, "b", /*stops=*/false};
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [] {}, true, b_stage.Pauser()));
  a->AskQuiet([&] { log.push_back("quiet a"); });
  EXPECT_EQ(log, std::vector<std::string>{"pause b"});  // Tried once, not again.
  b->SetUpDone();
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "quiet a"}));
  a->EndQuiet();  // Nothing paused, nothing to resume.
  EXPECT_EQ(log.size(), 2u);
}

TEST(DeviceTurnsTest, TheHolderLeavingResumesWhatItsQuietPaused) {
  DeviceTurns turns;
  std::vector<std::string> log;
  FakeStage b_stage{&log, "b"}, c_stage{&log, "c"};
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [] {}, true, b_stage.Pauser()));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [] {}, true, c_stage.Pauser()));
  a->AskQuiet([&] { log.push_back("quiet a"); });
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "pause c", "quiet a"}));
  c.reset();  // A paused stage that ends (killed) is not resumed.
  a.reset();  // The holder ends without its 'd'.
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "pause c", "quiet a", "resume b"}));
}

TEST(DeviceTurnsTest, AQuietAskedBeforeTheTurnPausesWhenTheTurnComes) {
  DeviceTurns turns;
  std::vector<std::string> log;
  FakeStage c_stage{&log, "c"};
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  std::optional<DeviceTurns::Ticket> b(ReadyStage(turns));
  b->AskQuiet([&] { log.push_back("quiet b"); });
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [] {}, true, c_stage.Pauser()));
  EXPECT_TRUE(log.empty());
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"pause c", "quiet b"}));
}

// A holder done with the device hands the turn over before it leaves
// (device_turns.h): the next stage's turn starts, but its quiet, before
// timing, waits until the one handing over has left.
TEST(DeviceTurnsTest, HandingOverGivesTheTurnAndHoldsBackTheNextQuiet) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(ReadyStage(turns, [&] { log.push_back("b"); }));
  a->HandOver();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(a->holds());
  EXPECT_TRUE(b->holds());
  EXPECT_EQ(turns.Waiting(0), 0u);
  b->AskQuiet([&] { log.push_back("quiet b"); });
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));  // a is still exiting.
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "quiet b"}));
}

// Only the holder hands over, once; a device left free by it is given at
// once to the next stage that queues, whose quiet still waits.
TEST(DeviceTurnsTest, HandingOverIsTheHoldersOnly) {
  DeviceTurns turns;
  std::vector<std::string> log;
  std::optional<DeviceTurns::Ticket> a(turns.Enqueue(0, [&] { log.push_back("a"); }));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("b"); }));
  b->HandOver();  // Not its turn: nothing happens.
  EXPECT_EQ(log, std::vector<std::string>{"a"});
  a->HandOver();
  a->HandOver();  // Once.
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
  b->HandOver();
  EXPECT_FALSE(turns.Held(0));
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [&] { log.push_back("c"); }));
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "c"}));
  c->AskQuiet([&] { log.push_back("quiet c"); });
  b.reset();
  EXPECT_EQ(log.back(), "c");  // a has not left yet.
  a.reset();
  EXPECT_EQ(log.back(), "quiet c");
}

// A quiet its holder did not end (no 'd') ends when it hands over, as when
// it leaves: the stages it paused continue, and the one still setting up
// gets the turn once it is done.
TEST(DeviceTurnsTest, HandingOverEndsTheHoldersQuiet) {
  DeviceTurns turns;
  std::vector<std::string> log;
  FakeStage b_stage{&log, "b"};
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  std::optional<DeviceTurns::Ticket> b(turns.Enqueue(0, [&] { log.push_back("turn b"); }, true,
                                                     b_stage.Pauser()));
  a->AskQuiet([&] { log.push_back("quiet a"); });
  a->HandOver();
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "quiet a", "resume b"}));
  b->SetUpDone();
  EXPECT_EQ(log, (std::vector<std::string>{"pause b", "quiet a", "resume b", "turn b"}));
}

// A stage that queues while the holder's quiet is asked but not granted
// (here: the stage that handed its turn over is still leaving) is paused
// like those already queued, not waited for.
TEST(DeviceTurnsTest, AStageQueuedWhileTheQuietWaitsIsPausedToo) {
  DeviceTurns turns;
  std::vector<std::string> log;
  FakeStage c_stage{&log, "c"};
  std::optional<DeviceTurns::Ticket> a(ReadyStage(turns));
  std::optional<DeviceTurns::Ticket> b(ReadyStage(turns));
  a->HandOver();
  b->AskQuiet([&] { log.push_back("quiet b"); });
  std::optional<DeviceTurns::Ticket> c(turns.Enqueue(0, [] {}, true, c_stage.Pauser()));
  EXPECT_EQ(log, std::vector<std::string>{"pause c"});
  a.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"pause c", "quiet b"}));
  b->EndQuiet();
  EXPECT_EQ(log, (std::vector<std::string>{"pause c", "quiet b", "resume c"}));
}

}  // namespace
}  // namespace kbox
