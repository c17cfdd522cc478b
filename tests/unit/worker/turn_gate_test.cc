#include "worker/turn_gate.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <chrono>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <string>

namespace kbox {
namespace {

namespace fs = std::filesystem;

class TurnGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kbox-turn-gate-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The judge's end, opened as the harness opens it.
  int OpenReader(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::fcntl(fd, F_SETFL, 0);
    return fd;
  }
  // Whether a read would not block now.
  static bool Readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }

  fs::path dir_;
};

TEST_F(TurnGateTest, ReaderWaitsUntilTheTurnIsGiven) {
  TurnGate gate;
  ASSERT_TRUE(gate.Open(dir_ / "turn").ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "turn").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const int reader = OpenReader(dir_ / "turn");
  ASSERT_GE(reader, 0);
  EXPECT_FALSE(Readable(reader));  // kboxd's end is open: no end-of-file either.
  EXPECT_FALSE(gate.given());
  EXPECT_EQ(gate.granted_ns()->load(), 0);
  gate.Give();
  EXPECT_TRUE(gate.given());
  EXPECT_GT(gate.granted_ns()->load(), 0);
  char byte = 0;
  EXPECT_EQ(::read(reader, &byte, 1), 1);
  EXPECT_EQ(byte, 'g');
  gate.Give();  // Once only.
  EXPECT_FALSE(Readable(reader));
  gate.Withdraw();  // After the turn: nothing to withdraw.
  EXPECT_FALSE(gate.withdrawn());
  ::close(reader);
}

TEST_F(TurnGateTest, WithdrawGivesTheReaderEndOfFile) {
  TurnGate gate;
  ASSERT_TRUE(gate.Open(dir_ / "turn").ok());
  const int reader = OpenReader(dir_ / "turn");
  ASSERT_GE(reader, 0);
  gate.Withdraw();
  EXPECT_TRUE(gate.withdrawn());
  char byte = 0;
  EXPECT_EQ(::read(reader, &byte, 1), 0);
  gate.Give();  // Withdrawn: no turn after all.
  EXPECT_FALSE(gate.given());
  ::close(reader);
}

TEST_F(TurnGateTest, RemovesItsFifoAndRefusesAnExistingPath) {
  {
    TurnGate gate;
    ASSERT_TRUE(gate.Open(dir_ / "turn").ok());
    EXPECT_TRUE(fs::exists(dir_ / "turn"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "turn"));
  // A file planted where the FIFO goes is never reused.
  fs::create_symlink("/etc/passwd", dir_ / "turn");
  TurnGate gate;
  const auto error = gate.Open(dir_ / "turn");
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.message().find("mkfifo"), std::string::npos) << error.message();
  EXPECT_TRUE(fs::is_symlink(dir_ / "turn"));  // Left alone, not unlinked by its destructor.
}

TEST_F(TurnGateTest, NotesReachTheCallbackInOrderUntilStopped) {
  TurnGate gate;
  ASSERT_TRUE(gate.Open(dir_ / "turn").ok());
  std::mutex mu;
  std::condition_variable cv;
  std::string notes;
  ASSERT_TRUE(gate.OpenNotes(dir_ / "notes", std::nullopt, std::nullopt,
                             [&](v1::DeviceTurnNote note) {
                               std::lock_guard lock(mu);
                               notes += static_cast<char>(note);
                               cv.notify_all();
                             })
                  .ok());
  // The judge's end: write-only; never blocks (kboxd holds a reader).
  const int writer = ::open((dir_ / "notes").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::write(writer, "rq", 2), 2);
  ASSERT_EQ(::write(writer, "xd", 2), 2);  // 'x' is no DeviceTurnNote: skipped.
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return notes.size() == 3; }));
  }
  EXPECT_EQ(notes, "rqd");
  // The first 'r' is timed (the candidate's wall limit counts from it).
  const int64_t set_up_done = gate.set_up_done_ns()->load();
  EXPECT_GT(set_up_done, 0);
  EXPECT_LE(set_up_done, std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count());
  {
    std::lock_guard lock(mu);
    notes.clear();
  }
  EXPECT_EQ(gate.done_with_device_ns(), 0);
  ASSERT_EQ(::write(writer, "re", 2), 2);  // A later 'r' moves nothing; 'e' is timed.
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return notes.size() == 2; }));
  }
  EXPECT_EQ(gate.set_up_done_ns()->load(), set_up_done);
  EXPECT_GE(gate.done_with_device_ns(), set_up_done);
  gate.StopNotes();
  ASSERT_EQ(::write(writer, "q", 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(notes, "re");  // Nothing after StopNotes.
  }
  gate.StopNotes();  // Idempotent.
  ::close(writer);
}

TEST_F(TurnGateTest, QuietFollowsTheTurnOnTheTurnsFifo) {
  TurnGate gate;
  ASSERT_TRUE(gate.Open(dir_ / "turn").ok());
  const int reader = OpenReader(dir_ / "turn");
  ASSERT_GE(reader, 0);
  gate.GiveQuiet();  // Before the turn: nothing.
  EXPECT_FALSE(Readable(reader));
  gate.Give();
  gate.GiveQuiet();
  char got[2] = {};
  ASSERT_EQ(::read(reader, got, 2), 2);
  EXPECT_EQ(std::string(got, 2), "gq");
  ::close(reader);
}

}  // namespace
}  // namespace kbox
