// The pre-forked run stage's zygote (worker/zygote.cc + kbox_zygote.py +
// libkbox_sandbox_enter.so), with real processes: a real Python that imports
// PyTorch, real sandboxes. The stage it runs is the real kbox_stage.py entry
// point given a spec it rejects at once (a HARNESS_FAILED report), or a spec
// path that is a FIFO nobody writes (a stage that never gets going), so no
// candidate needs compiling. Needs namespaces (skips otherwise).

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kbox/v1/sandbox.pb.h"
#include "tests/sandbox/minimal_spec.h"
#include "worker/sandbox/namespaces.h"
#include "worker/zygote.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;

// True once no process of group `group` is left, waiting up to 2 s (the
// kernel tears a killed pid namespace down asynchronously).
bool GroupGone(pid_t group) {
  for (int i = 0; i < 100 && ::kill(-group, 0) == 0; ++i) ::usleep(20'000);
  return ::kill(-group, 0) != 0;
}

int ThreadCount(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) ++n;
  return n;
}

// Where the pieces are: this build's paths, or, where the checkout and its
// Python live elsewhere (the GPU machine), KBOX_TEST_SOURCE_DIR (a checkout
// with build/bin), KBOX_TEST_PYTHON and KBOX_TEST_EXTRA_RO (colon-separated
// read-only paths the interpreter needs, none below /usr).
struct TestPaths {
  std::string python = KBOX_TEST_PYTHON;
  std::string harness = KBOX_HARNESS_DIR;
  std::string policy = KBOX_POLICY_DIR;
  std::string enter_library = KBOX_ENTER_LIBRARY;
  std::string sandbox = KBOX_SANDBOX_BIN;
  std::vector<std::string> extra_ro;

  TestPaths() {
    if (const char* src = std::getenv("KBOX_TEST_SOURCE_DIR")) {
      const std::string root = src;
      harness = root + "/worker/harness";
      policy = root + "/policy/seccomp";
      enter_library = root + "/build/bin/libkbox_sandbox_enter.so";
      sandbox = root + "/build/bin/kbox-sandbox";
    }
    if (const char* py = std::getenv("KBOX_TEST_PYTHON")) python = py;
    if (const char* ro = std::getenv("KBOX_TEST_EXTRA_RO")) {
      std::string list = ro;
      for (size_t begin = 0; begin <= list.size();) {
        size_t end = list.find(':', begin);
        if (end == std::string::npos) end = list.size();
        if (end > begin) extra_ro.push_back(list.substr(begin, end - begin));
        begin = end + 1;
      }
    }
  }
};

class ZygoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto e = sandbox::ProbeNamespaces()) GTEST_SKIP() << *e;
    char tmpl[] = "/tmp/kbox-zygote-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    fs::create_directories(dir_ / "root");
    scratch_ = dir_ / "scratch";
    fs::create_directories(scratch_);
    ::chown(scratch_.c_str(), 65534, 65534);
    std::ofstream(scratch_ / "bogus_stage.json") << "{\"stage\": \"STAGE_NOT_A_STAGE\"}\n";
    // A run stage with no candidate: it imports PyTorch and the judge, forks
    // the candidate's process, and reports the candidate's failure.
    std::ofstream(scratch_ / "no_candidate.json")
        << "{\"stage\": \"STAGE_RUN\", \"backend\": \"BACKEND_CPU\", "
           "\"candidate_path\": \"/nonexistent/candidate.py\", "
           "\"reference_path\": \"/nonexistent/reference.py\"}\n";
    ASSERT_EQ(::mkfifo((scratch_ / "never.json").c_str(), 0644), 0);
    std::ofstream(scratch_ / "no_candidate_gpu.json")
        << "{\"stage\": \"STAGE_RUN\", \"backend\": \"BACKEND_CUDA\", "
           "\"candidate_path\": \"/nonexistent/candidate.py\", "
           "\"reference_path\": \"/nonexistent/reference.py\"}\n";
    zygote_ = std::make_unique<Zygote>(Settings());
  }

  ZygoteSettings Settings(bool single_use = false) const {
    return ZygoteSettings{.python = paths_.python,
                          .script = paths_.harness + "/kbox_zygote.py",
                          .enter_library = paths_.enter_library,
                          .env = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
                                  "PYTORCH_NVML_BASED_CUDA_CHECK=1", "CUDA_VISIBLE_DEVICES="},
                          .single_use = single_use};
  }
  void TearDown() override {
    zygote_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Writes the sandbox spec of a run stage reading `stage_spec`; with `gpu`,
  // GPU 0's device nodes and CUDA_VISIBLE_DEVICES=0, as kboxd gives a GPU stage.
  std::string WriteSpec(const std::string& stage_spec, bool gpu = false) const {
    std::vector<std::string> ro = {paths_.harness, "/etc/alternatives"};
    ro.insert(ro.end(), paths_.extra_ro.begin(), paths_.extra_ro.end());
    v1::SandboxSpec spec = MinimalSandboxSpec(
        {paths_.python, "-s", "-B", paths_.harness + "/kbox_stage.py", "--spec",
         (scratch_ / stage_spec).string(), "--result-fd", "3"},
        dir_ / "root", scratch_, paths_.policy, ro);
    if (gpu) {
      for (const char* dev : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"}) spec.add_devices(dev);
      spec.add_env("CUDA_VISIBLE_DEVICES=0");
      spec.add_env("HOME=" + scratch_.string());
      spec.add_env("CUDA_CACHE_PATH=" + (scratch_ / ".nv").string());
    }
    spec.mutable_rlimits()->set_nproc(256);
    spec.mutable_rlimits()->set_nofile(1024);
    const std::string path = (dir_ / (stage_spec + ".pb")).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    EXPECT_TRUE(spec.SerializeToOstream(&out));
    return path;
  }

  ProcessOutcome Run(const std::string& stage_spec, std::chrono::milliseconds wall,
                     bool gpu = false) {
    ProcessSpec limits;
    limits.wall_limit = wall;
    auto out = zygote_->Run(WriteSpec(stage_spec, gpu), limits);
    EXPECT_TRUE(out.has_value()) << "the zygote did not start";
    return out.value_or(ProcessOutcome{});
  }

  // Runs the no-reference run stage 3 times each way; prints the medians.
  void Figures(bool gpu) {
    ASSERT_TRUE(zygote_->Start().ok());
    const std::string stage = gpu ? "no_candidate_gpu.json" : "no_candidate.json";
    std::vector<double> exec_ms, zygote_ms;
    for (int i = 0; i < 3; ++i) {
      ProcessSpec p;
      p.argv = {paths_.sandbox, "--spec", WriteSpec(stage, gpu)};
      p.wall_limit = std::chrono::seconds(120);
      const auto exec = RunProcess(p);
      const auto forked = Run(stage, std::chrono::seconds(120), gpu);
      // The same stage both ways: the judge ran, found no reference, said so.
      for (const auto* out : {&exec, &forked}) {
        EXPECT_EQ(out->end, ProcessOutcome::End::kExited) << out->output_tail;
        EXPECT_NE(out->result.find("\"outcome\":\"REFERENCE_FAILED\""), std::string::npos)
            << out->result << out->output_tail;
      }
      exec_ms.push_back(exec.wall_ms);
      zygote_ms.push_back(forked.wall_ms);
    }
    std::sort(exec_ms.begin(), exec_ms.end());
    std::sort(zygote_ms.begin(), zygote_ms.end());
    std::printf("%s run stage start-up to report, median of 3: fork+exec %.0f ms, zygote %.0f ms "
                "(all: %.0f %.0f %.0f / %.0f %.0f %.0f)\n",
                gpu ? "GPU" : "CPU", exec_ms[1], zygote_ms[1], exec_ms[0], exec_ms[1], exec_ms[2],
                zygote_ms[0], zygote_ms[1], zygote_ms[2]);
  }

  // The stage ran to its report: the real entry point, inside the sandbox.
  static void ExpectReport(const ProcessOutcome& out) {
    EXPECT_EQ(out.end, ProcessOutcome::End::kExited) << DescribeEnd(out) << out.output_tail;
    EXPECT_EQ(out.exit_code, 0) << out.output_tail;
    EXPECT_NE(out.result.find("HARNESS_FAILED"), std::string::npos) << out.result;
    EXPECT_NE(out.result.find("unknown stage"), std::string::npos) << out.result;
  }

  const TestPaths paths_;
  fs::path dir_, scratch_;
  std::unique_ptr<Zygote> zygote_;
};

// Every job is a new process; the zygote survives it, still single-threaded
// (it checks that and an uninitialised CUDA before each fork, and would have
// exited otherwise).
TEST_F(ZygoteTest, EachJobIsAFreshChildOfOneSingleThreadedZygote) {
  ASSERT_TRUE(zygote_->Start().ok());
  const pid_t zygote = zygote_->pid();
  const auto first = Run("bogus_stage.json", std::chrono::seconds(60));
  ExpectReport(first);
  const pid_t first_child = zygote_->last_child();
  const auto second = Run("bogus_stage.json", std::chrono::seconds(60));
  ExpectReport(second);
  EXPECT_NE(zygote_->last_child(), first_child);
  EXPECT_GT(first_child, 0);
  EXPECT_EQ(zygote_->pid(), zygote);
  EXPECT_EQ(ThreadCount(zygote), 1);
  EXPECT_TRUE(GroupGone(first_child)) << "a process of the first job outlived its job";
  std::printf("zygote %d: children %d, %d; stage wall %.0f ms, %.0f ms\n", zygote, first_child,
              zygote_->last_child(), first.wall_ms, second.wall_ms);
}

// A pool's pre-start (compile workers' zygotes, kboxd's start) starts the
// zygotes before any stage asks; the first stage then uses that zygote.
TEST_F(ZygoteTest, PrestartedZygotesAreReadyBeforeTheFirstStage) {
  std::vector<std::string> events;
  std::mutex events_mu;
  ZygotePool pool(ZygoteSettings{
      .python = paths_.python,
      .script = paths_.harness + "/kbox_zygote.py",
      .enter_library = paths_.enter_library,
      .env = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
              "PYTORCH_NVML_BASED_CUDA_CHECK=1", "CUDA_VISIBLE_DEVICES="},
      .observer = [&](const std::string& slot, ZygoteEvent event) {
        std::lock_guard lock(events_mu);
        if (event == ZygoteEvent::kStarted) events.push_back(slot);
      }});
  pool.Prestart({"compile0", "compile1"});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  for (;;) {
    {
      std::lock_guard lock(events_mu);
      if (events.size() == 2) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the pre-started zygotes never became ready";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Zygote& zygote = pool.For("compile0");
  const pid_t started = zygote.pid();
  ASSERT_GT(started, 0);
  EXPECT_NE(pool.For("compile1").pid(), started);
  ProcessSpec limits;
  limits.wall_limit = std::chrono::seconds(60);
  const auto out = zygote.Run(WriteSpec("bogus_stage.json"), limits);
  ASSERT_TRUE(out.has_value());
  ExpectReport(*out);
  EXPECT_EQ(zygote.pid(), started) << "the first stage started a zygote of its own";
  std::lock_guard lock(events_mu);
  EXPECT_EQ(events.size(), 2u);
}

// Waits until `zygote` has an idle zygote ready (a background start); its pid.
pid_t WaitForIdleZygote(const Zygote& zygote) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (zygote.pid() <= 0) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return zygote.pid();
}

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// A run stage's zygote is single use: it forks one stage and is gone once
// that stage has ended, and its successor was started beside the stage, so
// no two stages are children of one zygote (each has an image and an ASLR
// layout of its own). The successor is told the stage thread count the first
// measured instead of starting a second interpreter to measure it.
TEST_F(ZygoteTest, SingleUseZygoteForksOneStageAndItsSuccessorTheNext) {
  Zygote zygote(Settings(/*single_use=*/true));
  zygote.StartInBackground();
  const pid_t first = WaitForIdleZygote(zygote);
  ASSERT_GT(first, 0) << "the background start never finished";
  ProcessSpec limits;
  limits.wall_limit = std::chrono::seconds(60);
  const auto one = zygote.Run(WriteSpec("bogus_stage.json"), limits);
  ASSERT_TRUE(one.has_value());
  ExpectReport(*one);
  const pid_t first_child = zygote.last_child();
  EXPECT_FALSE(Alive(first)) << "the zygote that forked a stage outlived it";
  EXPECT_TRUE(GroupGone(first_child));
  const pid_t second = WaitForIdleZygote(zygote);
  ASSERT_GT(second, 0) << "no successor was started";
  EXPECT_NE(second, first);
  EXPECT_EQ(ThreadCount(second), 1);
  std::ifstream environ("/proc/" + std::to_string(second) + "/environ");
  const std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
  EXPECT_NE(env.find("KBOX_STAGE_THREADS="), std::string::npos) << "the successor measured again";
  const auto two = zygote.Run(WriteSpec("bogus_stage.json"), limits);
  ASSERT_TRUE(two.has_value());
  ExpectReport(*two);
  EXPECT_NE(zygote.last_child(), first_child);
  EXPECT_FALSE(Alive(second));
}

// A single-use zygote going away mid-start (kboxd's shutdown) ends the start
// at once rather than after the start timeout.
TEST_F(ZygoteTest, DestroyingASingleUseZygoteEndsItsStartAtOnce) {
  const auto begin = std::chrono::steady_clock::now();
  {
    Zygote zygote(Settings(/*single_use=*/true));
    zygote.StartInBackground();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
}

// The wall-clock limit holds for a zygote's child as for fork+exec: the job's
// group is killed; the zygote itself lives on and serves the next job.
TEST_F(ZygoteTest, WallClockLimitKillsTheJobNotTheZygote) {
  ASSERT_TRUE(zygote_->Start().ok());
  const pid_t zygote = zygote_->pid();
  const auto out = Run("never.json", std::chrono::milliseconds(1500));
  EXPECT_EQ(out.end, ProcessOutcome::End::kTimedOut) << DescribeEnd(out) << out.output_tail;
  EXPECT_LT(out.wall_ms, 12'000);
  EXPECT_TRUE(GroupGone(zygote_->last_child())) << "a process of the timed-out job is still alive";
  EXPECT_EQ(zygote_->pid(), zygote);
  ExpectReport(Run("bogus_stage.json", std::chrono::seconds(60)));
}

// kboxd's shutdown flag ends a zygote's job like a fork+exec'd one
// (kCancelled within the poll interval); the zygote stays for the next job.
TEST_F(ZygoteTest, CancelEndsTheJobNotTheZygote) {
  ASSERT_TRUE(zygote_->Start().ok());
  const pid_t zygote = zygote_->pid();
  std::atomic<bool> cancel{false};
  std::thread canceller([&cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    cancel.store(true);
  });
  ProcessSpec limits;
  limits.wall_limit = std::chrono::seconds(60);
  limits.cancel = &cancel;
  const auto out = zygote_->Run(WriteSpec("never.json"), limits);
  canceller.join();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->end, ProcessOutcome::End::kCancelled) << DescribeEnd(*out);
  EXPECT_LT(out->wall_ms, 12'000);
  EXPECT_TRUE(GroupGone(zygote_->last_child())) << "a process of the cancelled job is still alive";
  EXPECT_EQ(zygote_->pid(), zygote);
  ExpectReport(Run("bogus_stage.json", std::chrono::seconds(60)));
}

// A zygote killed mid-job: kbox's failure (kSpawnFailed, INFRA_ERROR in a
// result), never a verdict on the job; the job's processes die with it, and
// the next job gets a new zygote.
TEST_F(ZygoteTest, ZygoteKilledMidJobIsKboxsFailureAndIsReplaced) {
  ASSERT_TRUE(zygote_->Start().ok());
  const pid_t zygote = zygote_->pid();
  std::thread killer([zygote] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(zygote, SIGKILL);
  });
  const auto out = Run("never.json", std::chrono::seconds(60));
  killer.join();
  EXPECT_EQ(out.end, ProcessOutcome::End::kSpawnFailed) << DescribeEnd(out);
  EXPECT_NE(out.spawn_error.find("zygote"), std::string::npos) << out.spawn_error;
  EXPECT_TRUE(out.result.empty());
  EXPECT_LT(out.wall_ms, 12'000);
  const pid_t orphan = zygote_->last_child();
  EXPECT_TRUE(GroupGone(orphan)) << "a process of the job (launcher, init or program) outlived its zygote";
  ExpectReport(Run("bogus_stage.json", std::chrono::seconds(60)));
  EXPECT_NE(zygote_->pid(), zygote);
  EXPECT_GT(zygote_->pid(), 0);
}

// The figure the zygote exists for: from asking for a run stage to its report,
// fork+exec (kbox-sandbox, a new interpreter importing PyTorch and the
// harness) against a zygote's fork, for a run stage with no reference (it
// imports everything, forks the candidate's process, reports). Printed, not
// asserted (host load varies); both must deliver the same report.
TEST_F(ZygoteTest, StartUpFiguresForkExecAgainstZygote) { Figures(false); }

// The same on GPU 0 (the judge initialises CUDA before it finds no
// reference): the start-up target. Only where KBOX_TEST_GPU is set.
TEST_F(ZygoteTest, StartUpFiguresOnTheGpu) {
  if (!std::getenv("KBOX_TEST_GPU")) GTEST_SKIP() << "set KBOX_TEST_GPU=1 on a GPU machine";
  Figures(true);
}

// A zygote that cannot start is reported as such (the caller falls back to
// fork+exec) and not retried at once.
TEST_F(ZygoteTest, ZygoteThatCannotStartSaysSo) {
  Zygote broken(ZygoteSettings{.python = KBOX_TEST_PYTHON,
                               .script = (dir_ / "missing_zygote.py").string(),
                               .enter_library = KBOX_ENTER_LIBRARY,
                               .env = {"PATH=/usr/bin:/bin"},
                               .start_timeout = std::chrono::seconds(30)});
  const Status error = broken.Start();
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.message().find("did not report ready"), std::string::npos) << error.message();
  EXPECT_FALSE(broken.Run(WriteSpec("bogus_stage.json"), ProcessSpec{}).has_value());
}

}  // namespace
}  // namespace kbox
