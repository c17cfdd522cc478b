// Runs tiny programs under the real kbox-sandbox with the real run profile and
// checks that each forbidden thing is refused or killed, and that honest work
// still runs. Needs what kboxd needs: root (or user namespaces) on Linux.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
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

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto e = sandbox::ProbeNamespaces()) GTEST_SKIP() << *e;
    char tmpl[] = "/tmp/kbox-sandbox-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    fs::create_directories(dir_ / "root");
    scratch_ = dir_ / "scratch";
    fs::create_directories(scratch_);
    ::chown(scratch_.c_str(), 65534, 65534);
    other_job_ = dir_ / "other-job";
    fs::create_directories(other_job_);
    std::ofstream(other_job_ / "secret") << "another job's data\n";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  v1::SandboxSpec Spec(const std::vector<std::string>& argv) const {
    v1::SandboxSpec spec =
        MinimalSandboxSpec(argv, dir_ / "root", scratch_, KBOX_POLICY_DIR, {KBOX_TEST_BIN_DIR});
    spec.mutable_rlimits()->set_nproc(64);
    spec.mutable_rlimits()->set_nofile(256);
    return spec;
  }

  ProcessOutcome Run(const v1::SandboxSpec& spec) const {
    const fs::path file = dir_ / "spec.pb";
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      EXPECT_TRUE(spec.SerializeToOstream(&out));
    }
    ProcessSpec p;
    p.argv = {KBOX_SANDBOX_BIN, "--spec", file.string()};
    p.wall_limit = std::chrono::seconds(30);
    return RunProcess(p);
  }

  ProcessOutcome Try(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {KBOX_SANDBOXEE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(Spec(argv));
  }

  fs::path dir_, scratch_, other_job_;
};

// The forbidden thing must not have worked: refused with an error, or the
// process killed (SIGSYS: seccomp).
void ExpectBlocked(const ProcessOutcome& out) {
  EXPECT_FALSE(out.end == ProcessOutcome::End::kExited && out.exit_code == kGotThrough)
      << out.output_tail;
  EXPECT_FALSE(out.end == ProcessOutcome::End::kExited && out.exit_code == kSetupFailed)
      << "the sandbox itself failed: " << out.output_tail;
}

// Killed by seccomp, and kbox-sandbox named the call.
void ExpectSeccompKill(const ProcessOutcome& out, const std::string& syscall) {
  EXPECT_EQ(out.end, ProcessOutcome::End::kSignaled) << DescribeEnd(out) << out.output_tail;
  EXPECT_EQ(out.term_signal, SIGSYS) << out.output_tail;
  EXPECT_NE(out.output_tail.find("forbidden system call " + syscall + "\n"), std::string::npos)
      << out.output_tail;
}

TEST_F(SandboxTest, HonestProgramRunsAsAnUnprivilegedUserWithNoCapabilities) {
  const auto out = Run(Spec({"/bin/sh", "-c",
                             "id -u; id -g; hostname; grep CapEff /proc/self/status; "
                             "echo result >&3; ls /"}));
  ASSERT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
  EXPECT_EQ(out.exit_code, 0) << out.output_tail;
  EXPECT_NE(out.output_tail.find("1000\n1000\nkbox\n"), std::string::npos) << out.output_tail;
  EXPECT_NE(out.output_tail.find("CapEff:\t0000000000000000"), std::string::npos) << out.output_tail;
  EXPECT_EQ(out.result, "result\n");  // The result pipe survives, nothing else.
  EXPECT_EQ(out.output_tail.find("root\n"), std::string::npos) << "host /root visible: " << out.output_tail;
  EXPECT_EQ(out.output_tail.find("home\n"), std::string::npos) << "host /home visible: " << out.output_tail;
}

// Nothing kbox-sandbox used (its spec, the seccomp listener and its socket,
// the descriptors of the bound paths) reaches the program: only 0-2 and the
// result pipe, plus the directory ls itself opens.
TEST_F(SandboxTest, ProgramInheritsOnlyStdioAndTheResultPipe) {
  const auto out = Run(Spec({"/bin/ls", "/proc/self/fd"}));
  ASSERT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
  EXPECT_EQ(out.output_tail, "0\n1\n2\n3\n4\n");
}

TEST_F(SandboxTest, HostSecretsAreNotThere) {
  ExpectBlocked(Try({"read", "/etc/shadow"}));
  ExpectBlocked(Try({"list", "/root"}));
  ExpectBlocked(Try({"list", "/home"}));
}

TEST_F(SandboxTest, AnotherJobsScratchIsNotThere) {
  ExpectBlocked(Try({"read", (other_job_ / "secret").string()}));
}

// run.policy answers AF_INET/AF_INET6 with EAFNOSUPPORT (and the network
// namespace has no interface anyway).
TEST_F(SandboxTest, NetworkSocketsAreRefused) {
  const auto out = Try({"connect"});
  ExpectBlocked(out);
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
  EXPECT_NE(out.output_tail.find("socket refused"), std::string::npos) << out.output_tail;
}

TEST_F(SandboxTest, PtraceAndProcessVmAreKilled) {
  ExpectSeccompKill(Try({"ptrace-parent"}), "ptrace");
  ExpectSeccompKill(Try({"vm-read-parent"}), "process_vm_readv");
}

TEST_F(SandboxTest, MountUnshareAndKeyctlAreKilled) {
  ExpectSeccompKill(Try({"mount"}), "mount");
  ExpectSeccompKill(Try({"unshare"}), "unshare");
  ExpectSeccompKill(Try({"keyctl"}), "keyctl");
}

TEST_F(SandboxTest, CannotBecomeHostRoot) { ExpectBlocked(Try({"setuid0"})); }

TEST_F(SandboxTest, ForkingPastTheLimitFails) {
  const auto out = Try({"fork", "200"});
  ExpectBlocked(out);
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
}

TEST_F(SandboxTest, WritingPastTheTmpCapFails) {
  const auto out = Try({"fill", "/tmp/fill.bin", std::to_string(64 << 20)});
  ExpectBlocked(out);
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
}

TEST_F(SandboxTest, InitCannotBeKilledFromInside) { ExpectBlocked(Try({"kill-init"})); }

// Whether any process on the host has exactly this command line.
bool ProcessWithCmdlineExists(const std::string& cmdline) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text == cmdline) return true;
  }
  return false;
}

TEST_F(SandboxTest, ChildrenDieWithTheSandbox) {
  // A daemonised grandchild (its own session, so outside the process group)
  // must not outlive the sandbox's init. The odd duration marks it.
  const auto out = Run(Spec({"/bin/sh", "-c", "setsid sleep 317.25 & sleep 0.2; exit 0"}));
  ASSERT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
  EXPECT_LT(out.wall_ms, 10'000);
  const std::string marker = std::string("sleep") + '\0' + "317.25" + '\0';
  bool alive = true;
  for (int i = 0; i < 100 && alive; ++i) {
    alive = ProcessWithCmdlineExists(marker);
    if (alive) ::usleep(20'000);
  }
  EXPECT_FALSE(alive) << "the setsid() grandchild survived the sandbox";
}

// The CPU-time limit is a SIGXCPU, never the kernel's SIGKILL: kboxd reads a
// SIGKILL it did not send as a kill from outside the job (kbox's fault), so a
// process that ignores SIGXCPU must run on into the wall-clock limit, not be
// killed a second later (process_limits.cc).
TEST_F(SandboxTest, TheCpuLimitNeverEndsInTheKernelsSigkill) {
  auto spec = Spec({KBOX_SANDBOXEE_BIN, "spin-past-xcpu", "2500"});
  spec.mutable_rlimits()->set_cpu_seconds(1);
  const auto ignoring = Run(spec);
  ASSERT_EQ(ignoring.end, ProcessOutcome::End::kExited) << DescribeEnd(ignoring) << ignoring.output_tail;
  EXPECT_EQ(ignoring.exit_code, 0) << ignoring.output_tail;
  // Not ignored, SIGXCPU ends it at the limit (a limit kboxd names).
  auto plain = Spec({"/bin/sh", "-c", "while :; do :; done"});
  plain.mutable_rlimits()->set_cpu_seconds(1);
  const auto killed = Run(plain);
  ASSERT_EQ(killed.end, ProcessOutcome::End::kSignaled) << DescribeEnd(killed) << killed.output_tail;
  EXPECT_EQ(killed.term_signal, SIGXCPU);
}

// The run stage's split (docs/judge-boundary.md): the program is the judge,
// holding CAP_SETUID/CAP_SETGID/CAP_KILL; the child it forks takes the
// candidate's id and reaches nothing of the judge's (no signal, no /proc
// entry: the procfs hides other uids), yet names its own thread through
// /proc/<pid>/task/<tid>/comm as libcuda must at cuInit.
TEST_F(SandboxTest, TheCandidatesProcessCannotReachTheJudge) {
  auto spec = Spec({KBOX_SANDBOXEE_BIN, "split", "1000"});
  spec.set_inside_id(1001);
  spec.set_outside_uid(65533);
  spec.set_outside_gid(65533);
  auto* candidate = spec.mutable_candidate();
  candidate->set_inside_id(1000);
  candidate->set_outside_uid(65534);
  candidate->set_outside_gid(65534);
  const auto out = Run(spec);
  ASSERT_EQ(out.end, ProcessOutcome::End::kExited) << DescribeEnd(out) << out.output_tail;
  EXPECT_EQ(out.exit_code, 0) << out.output_tail;
}

// Without the candidate's identity nothing of the split is there: no
// capability survives into the program.
TEST_F(SandboxTest, WithoutACandidateIdentityTheProgramHoldsNothing) {
  const auto out = Try({"split", "1000"});
  ASSERT_EQ(out.end, ProcessOutcome::End::kExited) << DescribeEnd(out) << out.output_tail;
  EXPECT_EQ(out.exit_code, 3) << out.output_tail;
}

// The launcher opens the inherited files (the candidate's cgroup controls)
// at their numbers for the program, and only for it.
TEST_F(SandboxTest, InheritedFilesReachTheProgramAtTheirNumbers) {
  const fs::path file = dir_ / "inherited";
  std::ofstream(file) << "hello\n";
  auto spec = Spec({"/bin/cat", "/proc/self/fd/100"});
  auto* inherited = spec.add_inherited_files();
  inherited->set_path(file.string());
  inherited->set_fd(100);
  const auto out = Run(spec);
  ASSERT_EQ(out.end, ProcessOutcome::End::kExited) << out.output_tail;
  EXPECT_EQ(out.exit_code, 0) << out.output_tail;
  EXPECT_EQ(out.output_tail, "hello\n");
}

TEST_F(SandboxTest, UnusableSpecIsASetupFailureNotTheProgramsFault) {
  auto spec = Spec({"/bin/true"});
  spec.set_root_mount_point((dir_ / "does-not-exist" / "deeper").string());
  spec.set_seccomp_policy("/nonexistent.policy");
  const auto out = Run(spec);
  EXPECT_EQ(out.end, ProcessOutcome::End::kExited);
  EXPECT_EQ(out.exit_code, kSetupFailed) << out.output_tail;
  EXPECT_NE(out.output_tail.find("kbox-sandbox:"), std::string::npos) << out.output_tail;
}

}  // namespace
}  // namespace kbox
