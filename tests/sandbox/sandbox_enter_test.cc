// The return mode of the sandbox (libkbox_sandbox_enter.so, used by the
// pre-forked run stage) must confine exactly like kbox-sandbox's exec mode.
// kbox-sandboxee-enter enters the sandbox in place and then tries one
// forbidden thing (sandboxee.cc); each test compares with the exec mode where
// the answer must be the same.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kbox/v1/sandbox.pb.h"
#include "tests/sandbox/minimal_spec.h"
#include "worker/process_runner.h"
#include "worker/sandbox/namespaces.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;

constexpr int kGotThrough = 42;  // See sandboxee.cc.
constexpr int kSetupFailed = 125;

enum class Mode { kExec, kReturn };

class SandboxEnterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto e = sandbox::ProbeNamespaces()) GTEST_SKIP() << *e;
    char tmpl[] = "/tmp/kbox-enter-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    fs::create_directories(dir_ / "root");
    scratch_ = dir_ / "scratch";
    fs::create_directories(scratch_);
    ::chown(scratch_.c_str(), 65534, 65534);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Runs the sandboxee trying `args`, in exec mode (kbox-sandbox execs it)
  // or return mode (it enters the sandbox itself).
  ProcessOutcome Try(Mode mode, const std::vector<std::string>& args,
                     const std::string& policy_dir = KBOX_POLICY_DIR) const {
    std::vector<std::string> argv = {KBOX_SANDBOXEE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    v1::SandboxSpec spec =
        MinimalSandboxSpec(argv, dir_ / "root", scratch_, policy_dir, {KBOX_TEST_BIN_DIR});
    spec.mutable_rlimits()->set_nproc(64);
    spec.mutable_rlimits()->set_nofile(256);
    const fs::path file = dir_ / "spec.pb";
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      EXPECT_TRUE(spec.SerializeToOstream(&out));
    }
    ProcessSpec p;
    if (mode == Mode::kExec) {
      p.argv = {KBOX_SANDBOX_BIN, "--spec", file.string()};
    } else {
      p.argv = {KBOX_SANDBOXEE_ENTER_BIN, file.string()};
      p.argv.insert(p.argv.end(), args.begin(), args.end());
    }
    p.wall_limit = std::chrono::seconds(30);
    return RunProcess(p);
  }

  fs::path dir_, scratch_;
};

void ExpectBlocked(const ProcessOutcome& out) {
  EXPECT_FALSE(out.end == ProcessOutcome::End::kExited && out.exit_code == kGotThrough)
      << out.output_tail;
  EXPECT_FALSE(out.end == ProcessOutcome::End::kExited && out.exit_code == kSetupFailed)
      << "the sandbox itself failed: " << out.output_tail;
}

void ExpectSeccompKill(const ProcessOutcome& out, const std::string& syscall) {
  EXPECT_EQ(out.end, ProcessOutcome::End::kSignaled) << DescribeEnd(out) << out.output_tail;
  EXPECT_EQ(out.term_signal, SIGSYS) << out.output_tail;
  EXPECT_NE(out.output_tail.find("forbidden system call " + syscall + "\n"), std::string::npos)
      << out.output_tail;
}

// Same identity in both modes: pid 2 under init (pid 1), the mapped
// unprivileged uid, and only stdio plus the result pipe (the enter library's
// spec, listener socket and the caller's own descriptors are closed).
TEST_F(SandboxEnterTest, ReturnModeProgramIsPid2UnprivilegedWithOnlyItsDescriptors) {
  const auto exec = Try(Mode::kExec, {"whoami"});
  const auto ret = Try(Mode::kReturn, {"whoami"});
  ASSERT_EQ(exec.end, ProcessOutcome::End::kExited) << exec.output_tail;
  ASSERT_EQ(ret.end, ProcessOutcome::End::kExited) << ret.output_tail;
  EXPECT_EQ(exec.exit_code, 0);
  EXPECT_EQ(ret.exit_code, 0);
  EXPECT_EQ(exec.output_tail, "pid 2 uid 1000 fds 0 1 2 3\n");
  EXPECT_EQ(ret.output_tail, exec.output_tail);
}

TEST_F(SandboxEnterTest, ReturnModeHidesHostFiles) {
  for (Mode mode : {Mode::kExec, Mode::kReturn}) {
    ExpectBlocked(Try(mode, {"read", "/etc/shadow"}));
    ExpectBlocked(Try(mode, {"list", "/root"}));
    ExpectBlocked(Try(mode, {"list", "/home"}));
  }
}

TEST_F(SandboxEnterTest, ReturnModeRefusesNetworkSockets) {
  const auto out = Try(Mode::kReturn, {"connect"});
  ExpectBlocked(out);
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
  EXPECT_NE(out.output_tail.find("socket refused"), std::string::npos) << out.output_tail;
}

TEST_F(SandboxEnterTest, ReturnModeKillsAndNamesForbiddenSystemCalls) {
  ExpectSeccompKill(Try(Mode::kReturn, {"ptrace-parent"}), "ptrace");
  ExpectSeccompKill(Try(Mode::kReturn, {"mount"}), "mount");
  ExpectSeccompKill(Try(Mode::kReturn, {"unshare"}), "unshare");
}

TEST_F(SandboxEnterTest, ReturnModeCannotBecomeRootOrKillInit) {
  ExpectBlocked(Try(Mode::kReturn, {"setuid0"}));
  ExpectBlocked(Try(Mode::kReturn, {"kill-init"}));
}

TEST_F(SandboxEnterTest, ReturnModeAppliesTheProcessLimit) {
  const auto out = Try(Mode::kReturn, {"fork", "200"});
  ExpectBlocked(out);
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
}

// A spec that cannot be used is kbox's failure (125), reported before
// anything starts, and the caller never runs unconfined past it.
TEST_F(SandboxEnterTest, ReturnModeUnusablePolicyIsASetupFailure) {
  const auto out = Try(Mode::kReturn, {"whoami"}, "/nonexistent");
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited);
  EXPECT_EQ(out.exit_code, kSetupFailed) << out.output_tail;
  EXPECT_NE(out.output_tail.find("kbox-sandbox: seccomp policy"), std::string::npos)
      << out.output_tail;
  EXPECT_EQ(out.output_tail.find("pid "), std::string::npos) << out.output_tail;
}

}  // namespace
}  // namespace kbox
