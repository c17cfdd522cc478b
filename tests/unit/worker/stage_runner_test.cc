#include "worker/stage_runner.h"

#include <signal.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;
using kbox::testing::TempDir;
using namespace std::chrono_literals;

// ---- DecodeHarnessEvents ----

TEST(DecodeHarnessEventsTest, EnterLinesUpdateLastParty) {
  StageOutcome outcome;
  DecodeHarnessEvents("{\"enter\":\"HARNESS\"}\n{\"enter\":\"REFERENCE\"}\n", outcome);
  EXPECT_EQ(outcome.last_party, v1::REFERENCE);
  EXPECT_FALSE(outcome.report.has_value());
  EXPECT_EQ(outcome.protocol_error, "");
}

TEST(DecodeHarnessEventsTest, ParsesReport) {
  StageOutcome outcome;
  DecodeHarnessEvents(
      "{\"enter\":\"HARNESS\"}\n{\"enter\":\"CANDIDATE\"}\n"
      "{\"report\":{\"outcome\":\"OK\",\"message\":\"m\"}}\n",
      outcome);
  EXPECT_EQ(outcome.protocol_error, "");
  EXPECT_EQ(outcome.last_party, v1::CANDIDATE);
  ASSERT_TRUE(outcome.report.has_value());
  EXPECT_EQ(outcome.report->outcome(), v1::StageReport::OK);
  EXPECT_EQ(outcome.report->message(), "m");
}

TEST(DecodeHarnessEventsTest, ReportWithoutTrailingNewlineAndBlankLines) {
  StageOutcome outcome;
  DecodeHarnessEvents("\n{\"enter\":\"CANDIDATE\"}\n\n{\"report\":{\"outcome\":\"INCORRECT\"}}",
                      outcome);
  EXPECT_EQ(outcome.protocol_error, "");
  ASSERT_TRUE(outcome.report.has_value());
  EXPECT_EQ(outcome.report->outcome(), v1::StageReport::INCORRECT);
}

TEST(DecodeHarnessEventsTest, EmptyStreamLeavesNothing) {
  StageOutcome outcome;
  DecodeHarnessEvents("", outcome);
  EXPECT_EQ(outcome.last_party, v1::PARTY_UNSPECIFIED);
  EXPECT_FALSE(outcome.report.has_value());
  EXPECT_EQ(outcome.protocol_error, "");
}

TEST(DecodeHarnessEventsTest, MalformedLineKeepsLastPartyAndDropsReport) {
  StageOutcome outcome;
  DecodeHarnessEvents(
      "{\"enter\":\"CANDIDATE\"}\n{\"report\":{\"outcome\":\"OK\"\n"
      "{\"report\":{\"outcome\":\"OK\"}}\n",
      outcome);
  EXPECT_NE(outcome.protocol_error.find("malformed"), std::string::npos)
      << outcome.protocol_error;
  EXPECT_FALSE(outcome.report.has_value());
  EXPECT_EQ(outcome.last_party, v1::CANDIDATE);
}

TEST(DecodeHarnessEventsTest, DataAfterReportClearsReport) {
  StageOutcome outcome;
  DecodeHarnessEvents(
      "{\"enter\":\"CANDIDATE\"}\n{\"report\":{\"outcome\":\"OK\"}}\n{\"enter\":\"HARNESS\"}\n",
      outcome);
  EXPECT_EQ(outcome.protocol_error, "data after the final report");
  EXPECT_FALSE(outcome.report.has_value());
  EXPECT_EQ(outcome.last_party, v1::CANDIDATE);
}

TEST(DecodeHarnessEventsTest, SecondReportIsProtocolError) {
  // A candidate that forges a report of its own after the harness's.
  StageOutcome outcome;
  DecodeHarnessEvents(
      "{\"report\":{\"outcome\":\"INCORRECT\"}}\n{\"report\":{\"outcome\":\"OK\"}}\n", outcome);
  EXPECT_FALSE(outcome.protocol_error.empty());
  EXPECT_FALSE(outcome.report.has_value());
}

TEST(DecodeHarnessEventsTest, UnknownFieldIsProtocolError) {
  StageOutcome outcome;
  DecodeHarnessEvents("{\"enter\":\"CANDIDATE\"}\n{\"report\":{\"outcome\":\"OK\",\"bogus\":1}}\n",
                      outcome);
  EXPECT_NE(outcome.protocol_error.find("bogus"), std::string::npos) << outcome.protocol_error;
  EXPECT_FALSE(outcome.report.has_value());
  EXPECT_EQ(outcome.last_party, v1::CANDIDATE);
}

TEST(DecodeHarnessEventsTest, EmptyEventIsProtocolError) {
  StageOutcome outcome;
  DecodeHarnessEvents("{}\n", outcome);
  EXPECT_EQ(outcome.protocol_error, "empty harness event");
  EXPECT_FALSE(outcome.report.has_value());
}

TEST(DecodeHarnessEventsTest, AcceptsNanStringInDoubleField) {
  StageOutcome outcome;
  DecodeHarnessEvents(
      "{\"report\":{\"outcome\":\"INCORRECT\",\"trials\":[{\"seed\":\"7\",\"passed\":false,"
      "\"max_abs_diff\":\"NaN\",\"max_rel_diff\":\"Infinity\"}]}}\n",
      outcome);
  EXPECT_EQ(outcome.protocol_error, "");
  ASSERT_TRUE(outcome.report.has_value());
  ASSERT_EQ(outcome.report->trials_size(), 1);
  EXPECT_TRUE(std::isnan(outcome.report->trials(0).max_abs_diff()));
  EXPECT_TRUE(std::isinf(outcome.report->trials(0).max_rel_diff()));
  EXPECT_EQ(outcome.report->trials(0).seed(), 7u);
}

// ---- StageRunner ----

// Returns the value of NAME in `env`, or nullopt when absent.
std::optional<std::string> EnvValue(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  for (const auto& kv : env) {
    if (kv.starts_with(prefix)) return kv.substr(prefix.size());
  }
  return std::nullopt;
}

bool IsInside(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

HarnessSettings TestSettings(const fs::path& harness_dir) {
  HarnessSettings settings;
  settings.python = "/usr/bin/python3";
  settings.harness_dir = harness_dir;
  settings.build_jobs = 3;
  settings.max_output_bytes = 12345;
  return settings;
}

class StageRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ws = JobWorkspace::Create(tmp_.path(), "job", "ref", "cand");
    ASSERT_TRUE(ws) << ws.error().message();
    ws_.emplace(std::move(*ws));
  }

  TempDir tmp_;
  std::optional<JobWorkspace> ws_;
};

TEST_F(StageRunnerTest, BuildProcessSpecRunsHarnessInWorkspace) {
  const StageRunner runner(TestSettings("/opt/kbox/harness"), std::nullopt);
  StagePlacement placement;
  placement.wall_limit = 1234ms;
  const ProcessSpec spec = runner.BuildProcessSpec(*ws_, "/x/spec.json", placement);
  EXPECT_EQ(spec.argv, (std::vector<std::string>{"/usr/bin/python3", "-s", "-B",
                                                 "/opt/kbox/harness/kbox_stage.py", "--spec",
                                                 "/x/spec.json", "--result-fd", "3"}));
  EXPECT_EQ(spec.cwd, ws_->home_dir().string());
  EXPECT_EQ(spec.wall_limit, 1234ms);
  EXPECT_EQ(spec.max_output_bytes, 12345u);
  EXPECT_EQ(spec.result_fd, 3);
}

TEST_F(StageRunnerTest, EnvironmentPointsIntoWorkspace) {
  const StageRunner runner(TestSettings("/h"), std::nullopt);
  const ProcessSpec spec = runner.BuildProcessSpec(*ws_, "/x/spec.json", StagePlacement{});
  for (const char* name : {"HOME", "TMPDIR", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR",
                           "CUDA_CACHE_PATH"}) {
    const auto value = EnvValue(spec.env, name);
    ASSERT_TRUE(value.has_value()) << name;
    EXPECT_TRUE(IsInside(*value, ws_->root())) << name << "=" << *value;
  }
  EXPECT_EQ(EnvValue(spec.env, "HOME"), ws_->home_dir().string());
  EXPECT_EQ(EnvValue(spec.env, "TMPDIR"), ws_->tmp_dir().string());
  EXPECT_EQ(EnvValue(spec.env, "TORCH_EXTENSIONS_DIR"), ws_->build_dir().string());
  EXPECT_EQ(EnvValue(spec.env, "MAX_JOBS"), "3");
}

TEST_F(StageRunnerTest, NoGpuHidesEveryDevice) {
  const StageRunner runner(TestSettings("/h"), std::nullopt);
  const ProcessSpec spec = runner.BuildProcessSpec(*ws_, "/x/spec.json", StagePlacement{});
  EXPECT_EQ(EnvValue(spec.env, "CUDA_VISIBLE_DEVICES"), "");
  EXPECT_EQ(EnvValue(spec.env, "TORCH_CUDA_ARCH_LIST"), std::nullopt);
}

TEST_F(StageRunnerTest, GpuPlacementShowsOnlyThatDevice) {
  const StageRunner runner(TestSettings("/h"), std::nullopt);
  StagePlacement placement;
  placement.gpu = 3;
  placement.cuda_arch = "9.0";
  const ProcessSpec spec = runner.BuildProcessSpec(*ws_, "/x/spec.json", placement);
  EXPECT_EQ(EnvValue(spec.env, "CUDA_VISIBLE_DEVICES"), "3");  // No sandbox: every node is there.
  EXPECT_EQ(EnvValue(spec.env, "KBOX_GPU_INDEX"), "3");
  EXPECT_EQ(EnvValue(spec.env, "TORCH_CUDA_ARCH_LIST"), "9.0");
}

TEST_F(StageRunnerTest, InTheSandboxTheDeviceNodesAndCudaAgreeOnAGpuOtherThanZero) {
  // The sandbox's /dev holds the placed GPU's node alone, and CUDA numbers
  // the GPUs it can open from 0: CUDA_VISIBLE_DEVICES=3 there named no GPU
  // ("No CUDA GPUs are available" on every gpu1 job of a two-GPU host).
  SandboxSettings sandbox;
  sandbox.uid = 65534;
  sandbox.gid = 65534;
  sandbox.judge_uid = 65533;
  sandbox.judge_gid = 65533;
  sandbox.policy_dir = "/p";
  const StageRunner runner(TestSettings("/h"), sandbox);
  StagePlacement placement;
  placement.gpu = 3;
  placement.judge_dir = ws_->root() / "judge-1";
  const ProcessSpec harness = runner.BuildProcessSpec(*ws_, "/x/run_spec.json", placement);
  const v1::SandboxSpec run = runner.BuildSandboxSpec(*ws_, v1::STAGE_RUN, harness, placement, {});
  std::vector<std::string> gpus;
  for (const auto& dev : run.devices()) {
    if (dev.rfind("/dev/nvidia", 0) == 0 && dev != "/dev/nvidiactl" && dev != "/dev/nvidia-uvm") {
      gpus.push_back(dev);
    }
  }
  EXPECT_EQ(gpus, std::vector<std::string>{"/dev/nvidia3"});
  EXPECT_EQ(EnvValue(harness.env, "CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(EnvValue(harness.env, "KBOX_GPU_INDEX"), "3");
  // The candidate's process, which replaces its environment, sees the same GPU.
  EXPECT_EQ(runner.GpuEnvironment(placement.gpu),
            (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=0", "KBOX_GPU_INDEX=3"}));
  EXPECT_EQ(runner.GpuEnvironment(std::nullopt), std::vector<std::string>{"CUDA_VISIBLE_DEVICES="});
}

TEST_F(StageRunnerTest, InheritsOnlyListedVariables) {
  const char* old_path = std::getenv("PATH");
  const std::string saved_path = old_path ? old_path : "";
  ASSERT_EQ(::setenv("KBOX_SECRET_TOKEN", "hunter2", 1), 0);
  ASSERT_EQ(::setenv("CUDA_HOME", "/opt/cuda-test", 1), 0);
  ASSERT_EQ(::setenv("PATH", "/kbox/test/bin:/usr/bin", 1), 0);
  const StageRunner runner(TestSettings("/h"), std::nullopt);
  ::unsetenv("KBOX_SECRET_TOKEN");
  ::unsetenv("CUDA_HOME");
  if (old_path) ::setenv("PATH", saved_path.c_str(), 1);
  const ProcessSpec spec = runner.BuildProcessSpec(*ws_, "/x/spec.json", StagePlacement{});

  EXPECT_EQ(EnvValue(spec.env, "KBOX_SECRET_TOKEN"), std::nullopt);
  EXPECT_EQ(EnvValue(spec.env, "CUDA_HOME"), "/opt/cuda-test");
  EXPECT_EQ(EnvValue(spec.env, "PATH"), "/kbox/test/bin:/usr/bin");
  for (const auto& kv : spec.env) {
    EXPECT_EQ(kv.find("hunter2"), std::string::npos) << kv;
  }
  // Every variable is one kbox sets or one on the inherited list.
  const std::vector<std::string> allowed = {
      "PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "HOME", "TMPDIR",
      "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TORCHINDUCTOR_CACHE_DIR",
      "XDG_CACHE_HOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "LANG", "MAX_JOBS",
      "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "CUDA_VISIBLE_DEVICES",
      "TORCH_CUDA_ARCH_LIST"};
  for (const auto& kv : spec.env) {
    const std::string name = kv.substr(0, kv.find('='));
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), name), allowed.end()) << kv;
  }
}

TEST_F(StageRunnerTest, DefaultsPathWhenUnset) {
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::unsetenv("PATH");
  const StageRunner runner(TestSettings("/h"), std::nullopt);
  if (old) ::setenv("PATH", saved.c_str(), 1);
  const ProcessSpec spec = runner.BuildProcessSpec(*ws_, "/x/spec.json", StagePlacement{});
  EXPECT_EQ(EnvValue(spec.env, "PATH"), "/usr/local/bin:/usr/bin:/bin");
}

// A stand-in for the Python interpreter: a shell script that receives the
// harness's command line and speaks the result-pipe protocol.
fs::path WriteFakeInterpreter(const fs::path& dir, const std::string& body) {
  const fs::path path = dir / "fake-python";
  std::ofstream(path) << "#!/bin/sh\n" << body;
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(StageRunnerTest, RunWritesSpecAndDecodesReport) {
  // $5 is the spec path: after python's "-s -B kbox_stage.py --spec".
  HarnessSettings settings = TestSettings(tmp_.path());
  settings.python = WriteFakeInterpreter(tmp_.path(),
                                         "/bin/cp \"$5\" \"$HOME/seen_spec.json\"\n"
                                         "printf '{\"enter\":\"HARNESS\"}\\n' >&3\n"
                                         "printf '{\"enter\":\"CANDIDATE\"}\\n' >&3\n"
                                         "printf '{\"report\":{\"outcome\":\"OK\"}}\\n' >&3\n")
                        .string();
  const StageRunner runner(settings, std::nullopt);
  v1::StageSpec spec;
  spec.set_stage(v1::STAGE_COMPILE);
  spec.set_correctness_trials(4);
  StagePlacement placement;
  placement.wall_limit = 30s;
  const StageOutcome outcome = runner.Run(*ws_, spec, placement);

  EXPECT_EQ(outcome.process.end, ProcessOutcome::End::kExited) << outcome.process.spawn_error;
  EXPECT_EQ(outcome.process.exit_code, 0) << outcome.process.output_tail;
  EXPECT_EQ(outcome.protocol_error, "");
  EXPECT_EQ(outcome.last_party, v1::CANDIDATE);
  ASSERT_TRUE(outcome.report.has_value());
  EXPECT_EQ(outcome.report->outcome(), v1::StageReport::OK);

  EXPECT_TRUE(fs::exists(ws_->src_dir() / "compile_spec.json"));
  const std::string seen = ReadAll(ws_->home_dir() / "seen_spec.json");
  EXPECT_NE(seen.find("\"stage\":\"STAGE_COMPILE\""), std::string::npos) << seen;
  EXPECT_NE(seen.find("\"correctness_trials\":4"), std::string::npos) << seen;
}

TEST_F(StageRunnerTest, RunReportsCrashWithLastParty) {
  HarnessSettings settings = TestSettings(tmp_.path());
  settings.python = WriteFakeInterpreter(tmp_.path(),
                                         "printf '{\"enter\":\"REFERENCE\"}\\n' >&3\n"
                                         "kill -SEGV $$\n")
                        .string();
  const StageRunner runner(settings, std::nullopt);
  v1::StageSpec spec;
  spec.set_stage(v1::STAGE_RUN);
  StagePlacement placement;
  placement.wall_limit = 30s;
  const StageOutcome outcome = runner.Run(*ws_, spec, placement);

  EXPECT_EQ(outcome.process.end, ProcessOutcome::End::kSignaled);
  EXPECT_EQ(outcome.process.term_signal, SIGSEGV);
  EXPECT_EQ(outcome.last_party, v1::REFERENCE);
  EXPECT_FALSE(outcome.report.has_value());
  EXPECT_TRUE(fs::exists(ws_->src_dir() / "run_spec.json"));
}

TEST_F(StageRunnerTest, SeedReachesOnlyTheRunStagesSecretFile) {
  // The spec files sit in the read-only source directory the candidate can
  // read: the seed must not be in them. The run stage's judge gets it from a
  // 0600 file in its own directory, which it deletes after forking.
  HarnessSettings settings = TestSettings(tmp_.path());
  settings.python = WriteFakeInterpreter(tmp_.path(),
                                         "/bin/cp \"$5\" \"$HOME/seen_$(basename \"$5\")\"\n"
                                         "printf '{\"report\":{\"outcome\":\"OK\"}}\\n' >&3\n")
                        .string();
  const StageRunner runner(settings, std::nullopt);
  StagePlacement placement;
  placement.wall_limit = 30s;
  for (const v1::Stage stage : {v1::STAGE_COMPILE, v1::STAGE_RUN}) {
    v1::StageSpec spec;
    spec.set_stage(stage);
    spec.set_seed(987654321);
    const StageOutcome outcome = runner.Run(*ws_, spec, placement);
    ASSERT_TRUE(outcome.report.has_value()) << outcome.process.output_tail;
  }
  // The compile stage's HOME is the job's home; the run stage's judge's is
  // its own directory (judge-1: the first run stage of this job).
  const fs::path judge = ws_->root() / "judge-1";
  for (const fs::path& seen_path : {ws_->home_dir() / "seen_compile_spec.json", judge / "seen_run_spec.json"}) {
    const std::string seen = ReadAll(seen_path);
    EXPECT_EQ(seen.find("987654321"), std::string::npos) << seen_path << ": " << seen;
  }
  const fs::path secret = judge / "kbox_secret.json";
  EXPECT_FALSE(fs::exists(ws_->home_dir() / "kbox_secret.json"));
  EXPECT_NE(ReadAll(judge / "seen_run_spec.json").find(secret.string()), std::string::npos);
  EXPECT_NE(ReadAll(secret).find("\"987654321\""), std::string::npos);
  EXPECT_EQ(fs::status(secret).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(StageRunnerTest, AStageQueuedAgainReplacesItsEarlierSpecFile) {
  // A run stage whose GPU left service before its turn is queued again and
  // runs in the same workspace, without run_again (evaluator.cc): the spec
  // file its first run left must not make the second a spawn failure.
  HarnessSettings settings = TestSettings(tmp_.path());
  settings.python = WriteFakeInterpreter(tmp_.path(),
                                         "/bin/cp \"$5\" \"$HOME/seen_spec.json\"\n"
                                         "printf '{\"report\":{\"outcome\":\"OK\"}}\\n' >&3\n")
                        .string();
  const StageRunner runner(settings, std::nullopt);
  v1::StageSpec spec;
  spec.set_stage(v1::STAGE_RUN);
  ASSERT_TRUE(ws_->WriteFile("run_spec.json", "{\"stale\": true}").ok());
  StagePlacement placement;
  placement.wall_limit = 30s;
  const StageOutcome outcome = runner.Run(*ws_, spec, placement);
  ASSERT_TRUE(outcome.report.has_value()) << outcome.process.spawn_error << outcome.process.output_tail;
  EXPECT_EQ(ReadAll(ws_->src_dir() / "run_spec.json").find("stale"), std::string::npos);
}

TEST_F(StageRunnerTest, RunAgainReplacesTheFirstRunsSpecFile) {
  // A run stage whose set-up failed before its device turn runs again in
  // the same workspace (evaluator.cc, set_up_again).
  HarnessSettings settings = TestSettings(tmp_.path());
  settings.python = WriteFakeInterpreter(tmp_.path(),
                                         "/bin/cp \"$5\" \"$HOME/seen_spec.json\"\n"
                                         "printf '{\"report\":{\"outcome\":\"OK\"}}\\n' >&3\n")
                        .string();
  const StageRunner runner(settings, std::nullopt);
  v1::StageSpec spec;
  spec.set_stage(v1::STAGE_RUN);
  spec.set_device_turn_path("/home/kbox_turn");
  StagePlacement placement;
  placement.wall_limit = 30s;
  ASSERT_TRUE(runner.Run(*ws_, spec, placement).report.has_value());
  spec.clear_device_turn_path();
  placement.run_again = true;
  const StageOutcome again = runner.Run(*ws_, spec, placement);
  ASSERT_TRUE(again.report.has_value()) << again.process.spawn_error << again.process.output_tail;
  // Each run got a judge directory of its own: the second's spec is the new one.
  EXPECT_EQ(ReadAll(ws_->root() / "judge-2" / "seen_spec.json").find("kbox_turn"), std::string::npos);
}

TEST_F(StageRunnerTest, TheJudgeAndTheCandidateGetEnvironmentsOfTheirOwn) {
  // The judge's HOME, TMPDIR and every cache it might load code from are in
  // its own directory; the candidate's process gets the job's, which the
  // compile stage wrote (docs/judge-boundary.md).
  const StageRunner runner(TestSettings("/h"), std::nullopt);
  StagePlacement placement;
  placement.judge_dir = ws_->root() / "judge-7";
  const ProcessSpec judge = runner.BuildProcessSpec(*ws_, "/x/run_spec.json", placement);
  const std::string j = placement.judge_dir.string();
  EXPECT_EQ(EnvValue(judge.env, "HOME"), j);
  EXPECT_EQ(EnvValue(judge.env, "TMPDIR"), j);
  EXPECT_EQ(EnvValue(judge.env, "TORCH_EXTENSIONS_DIR"), j + "/torch_extensions");
  EXPECT_EQ(EnvValue(judge.env, "TRITON_CACHE_DIR"), j + "/triton");
  EXPECT_EQ(EnvValue(judge.env, "CUDA_CACHE_PATH"), j + "/.nv");
  EXPECT_EQ(EnvValue(judge.env, "TORCHINDUCTOR_CACHE_DIR"), j + "/.inductor");
  EXPECT_EQ(EnvValue(judge.env, "XDG_CACHE_HOME"), j + "/.cache");
  EXPECT_EQ(judge.cwd, j);
  // OpenBLAS's pool would start with numpy's import: the judge must be one
  // thread when it drops its capabilities (boundary.settle_judge).
  EXPECT_EQ(EnvValue(judge.env, "OPENBLAS_NUM_THREADS"), "1");
  const std::vector<std::string> candidate = runner.CandidateEnvironment(*ws_);
  EXPECT_EQ(EnvValue(candidate, "HOME"), ws_->home_dir().string());
  EXPECT_EQ(EnvValue(candidate, "TORCH_EXTENSIONS_DIR"), ws_->build_dir().string());
  for (const auto& kv : candidate) EXPECT_EQ(kv.find(j), std::string::npos) << kv;
  for (const auto& kv : judge.env) {
    EXPECT_EQ(kv.find(ws_->home_dir().string()), std::string::npos) << kv;
    EXPECT_EQ(kv.find(ws_->build_dir().string()), std::string::npos) << kv;
  }
}

TEST_F(StageRunnerTest, RunStagesMapTheJudgeAndTheCandidateAsTwoIds) {
  // The program of a run stage is the judge, under its own host id; the
  // candidate's process gets the id compile stages run as. The build is
  // read-only there; the judge's directory is bound for it.
  SandboxSettings sandbox;
  sandbox.uid = 65534;
  sandbox.gid = 65534;
  sandbox.judge_uid = 65533;
  sandbox.judge_gid = 65533;
  sandbox.policy_dir = "/p";
  const StageRunner runner(TestSettings("/h"), sandbox);
  StagePlacement placement;
  placement.judge_dir = ws_->root() / "judge-1";
  const ProcessSpec harness = runner.BuildProcessSpec(*ws_, "/x/run_spec.json", placement);
  CandidateCgroupFiles cgroup;
  cgroup.version = 2;
  cgroup.procs = {"/cg/candidate/cgroup.procs"};
  cgroup.freeze = "/cg/candidate/cgroup.freeze";
  cgroup.state = "/cg/candidate/cgroup.events";
  cgroup.cpu = "/cg/candidate/cpu.stat";
  cgroup.threads = "/cg/candidate/cgroup.threads";
  const v1::SandboxSpec run =
      runner.BuildSandboxSpec(*ws_, v1::STAGE_RUN, harness, placement, {}, &cgroup);
  EXPECT_EQ(run.outside_uid(), 65533u);
  EXPECT_EQ(run.inside_id(), StageRunner::kJudgeInsideId);
  ASSERT_TRUE(run.has_candidate());
  EXPECT_EQ(run.candidate().outside_uid(), 65534u);
  EXPECT_EQ(run.candidate().inside_id(), StageRunner::kCandidateInsideId);
  const auto& ro = run.ro_paths();
  const auto& rw = run.rw_paths();
  EXPECT_NE(std::find(ro.begin(), ro.end(), ws_->build_dir().string()), ro.end());
  EXPECT_EQ(std::find(rw.begin(), rw.end(), ws_->build_dir().string()), rw.end());
  EXPECT_NE(std::find(rw.begin(), rw.end(), placement.judge_dir.string()), rw.end());
  ASSERT_EQ(run.inherited_files_size(), 5);
  EXPECT_EQ(run.inherited_files(0).fd(), StageRunner::kFirstInheritedFd);
  EXPECT_TRUE(run.inherited_files(0).write());   // procs
  EXPECT_TRUE(run.inherited_files(1).write());   // freeze
  EXPECT_FALSE(run.inherited_files(2).write());  // events
  StagePlacement compile_placement;
  const v1::SandboxSpec compile = runner.BuildSandboxSpec(
      *ws_, v1::STAGE_COMPILE, runner.BuildProcessSpec(*ws_, "/x/c.json", compile_placement),
      compile_placement, {});
  EXPECT_EQ(compile.outside_uid(), 65534u);
  EXPECT_EQ(compile.inside_id(), StageRunner::kCandidateInsideId);
  EXPECT_FALSE(compile.has_candidate());
  EXPECT_EQ(compile.inherited_files_size(), 0);
  const auto& crw = compile.rw_paths();
  EXPECT_NE(std::find(crw.begin(), crw.end(), ws_->build_dir().string()), crw.end());
}

}  // namespace
}  // namespace kbox
