#pragma once

// Launches one stage of the evaluation harness (worker/harness/kbox_stage.py)
// for a job and decodes what it reported on the result pipe.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kbox/v1/harness.pb.h"
#include "kbox/v1/sandbox.pb.h"
#include "policy/status.h"
#include "worker/job_cgroup.h"
#include "worker/job_workspace.h"
#include "worker/process_group_pause.h"
#include "worker/process_runner.h"
#include "worker/zygote.h"

namespace kbox {

// How stage processes are started; the same for every job of a daemon.
struct HarnessSettings {
  std::string python;                  // Absolute path of the interpreter.
  std::filesystem::path harness_dir;   // Holds kbox_stage.py and kbox_probe.py.
  uint64_t max_output_bytes = 8ull << 20;
  unsigned build_jobs = 1;             // MAX_JOBS for the extension build (ninja -j).
  // Variables copied from kboxd's own environment when set (the toolchain's
  // location); everything else is dropped.
  std::vector<std::string> inherited_env = {"PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"};
};

// How stages are confined (docs/sandbox.md); the same for every job.
struct SandboxSettings {
  std::string binary;                         // kbox-sandbox.
  std::filesystem::path policy_dir;           // compile.policy, run.policy, run_strict.policy.
  std::filesystem::path spec_dir;             // SandboxSpec files; never visible to jobs.
  std::filesystem::path root_mount_point;     // Empty directory for the sandboxes' roots.
  uint32_t uid = 65534;                       // Host uid/gid of what the candidate controls.
  uint32_t gid = 65534;
  uint32_t judge_uid = 65533;                 // Host uid/gid of the run stage's judge.
  uint32_t judge_gid = 65533;
  std::vector<std::string> ro_paths;          // Read-only binds of every stage.
  std::vector<std::string> run_masked_paths;  // The toolchain, hidden from run stages.
  uint64_t tmp_bytes = 1ull << 30;            // Private /tmp and /dev/shm.
  const CgroupRoot* cgroups = nullptr;        // Absent: the host delegates none.
  CgroupLimits limits;
  // Triton's ptxas, run for Triton candidates through the harness's broker.
  std::string ptxas_path;
};

// The variables of `settings.inherited_env` that kboxd's environment sets, as
// NAME=value, with a default PATH when kboxd has none.
std::vector<std::string> InheritedEnvironment(const HarnessSettings& settings);

// Where a stage runs.
struct StagePlacement {
  // GPU index for the run stage of a GPU backend; absent: no GPU visible.
  std::optional<uint32_t> gpu;
  // TORCH_CUDA_ARCH_LIST for builds ("9.0"); empty: torch's default.
  std::string cuda_arch;
  std::chrono::milliseconds wall_limit{60'000};
  // Shutdown flag; see ProcessSpec::cancel.
  const std::atomic<bool>* cancel = nullptr;
  // A run stage prepared ahead of its device turn; see
  // ProcessSpec::turn_granted_ns (StageSpec.device_turn_path is its FIFO).
  const std::atomic<int64_t>* turn_granted_ns = nullptr;
  std::chrono::milliseconds turn_wait_limit{0};
  // The judge's end of set-up (TurnGate::set_up_done_ns); see
  // ProcessSpec::set_up_done_ns.
  const std::atomic<int64_t>* set_up_done_ns = nullptr;
  std::chrono::milliseconds set_up_limit{0};
  // See ProcessSpec::turn_due_ns.
  const std::atomic<int64_t>* turn_due_ns = nullptr;
  // See ProcessSpec::pausable.
  PausableGroup* pausable = nullptr;
  // The stage runs again in the same workspace (a run stage whose set-up
  // failed before its device turn: StageReport.set_up_again): its spec file
  // is replaced. Otherwise a spec file already there fails the run.
  bool run_again = false;
  // Extra read-only paths for this stage.
  std::vector<std::string> extra_ro_paths;
  // Hide the C/CUDA toolchain (SandboxSettings::run_masked_paths) from a run
  // stage. Off for Triton, whose launcher stubs are built by `cc` at a
  // kernel's first launch (through the harness's broker; the candidate's own
  // process cannot exec under the strict filter).
  bool mask_toolchain = true;
  // A run stage's judge directory (JobWorkspace::CreateJudgeDir): its HOME,
  // TMPDIR and caches, the seed file. Empty: Run makes one.
  std::filesystem::path judge_dir;
  // The slot running the stage (a device lane "gpu0", "cpu1.1"; a compile
  // worker "compile3"): once EnablePrefork ran, the stage is forked by that
  // slot's zygote. Empty: fork+exec.
  std::string zygote_slot;
};

// What a stage process left behind, decoded.
struct StageOutcome {
  ProcessOutcome process;
  // The last party the harness announced before it stopped writing.
  v1::Party last_party = v1::PARTY_UNSPECIFIED;
  // Whether the harness ever announced candidate code. In a compile stage
  // candidate code shares the harness's process (and its result pipe), so
  // from then on nothing the stage says or does is kbox's alone.
  bool candidate_ran = false;
  // The final report, when the harness wrote a well-formed one.
  std::optional<v1::StageReport> report;
  // Why the result pipe could not be decoded, when it could not.
  std::string protocol_error;
  // kbox-sandbox could not set the sandbox up (its message is in the output).
  bool sandbox_setup_failed = false;
  // The stage's cgroup limits were hit.
  bool memory_limit_hit = false;
  bool pids_limit_hit = false;
  // The stage went to a pre-forked zygote, which died or broke its protocol
  // (process.end is then kSpawnFailed): kbox's failure, never the candidate's.
  bool zygote_failed = false;
};

// Decodes the newline-separated HarnessEvent JSON lines of a result pipe.
// Anything after the report, or any malformed line, is a protocol error (the
// events before it still count for last_party).
void DecodeHarnessEvents(const std::string& stream, StageOutcome& outcome);

// kbox-sandbox's exit status when the sandbox could not be set up.
inline constexpr int kSandboxSetupFailed = 125;

class StageRunner {
 public:
  // Without `sandbox`, stages run unconfined (the insecure development mode).
  StageRunner(HarnessSettings settings, std::optional<SandboxSettings> sandbox);

  // Writes `spec` into the workspace and runs the stage to completion.
  StageOutcome Run(const JobWorkspace& workspace, const v1::StageSpec& spec,
                   const StagePlacement& placement) const;

  // Command line and environment of a stage as the harness sees them
  // (exposed for tests and logs).
  ProcessSpec BuildProcessSpec(const JobWorkspace& workspace, const std::string& spec_path,
                               const StagePlacement& placement) const;

  // The sandbox around `harness` for `stage` (exposed for tests).
  // `candidate_cgroup`: a run stage's candidate group, whose files the
  // launcher opens for the judge.
  v1::SandboxSpec BuildSandboxSpec(const JobWorkspace& workspace, v1::Stage stage,
                                   const ProcessSpec& harness, const StagePlacement& placement,
                                   const std::vector<std::string>& cgroup_procs,
                                   const CandidateCgroupFiles* candidate_cgroup = nullptr) const;

  // The GPU a stage placed on `gpu` sees, as CUDA_VISIBLE_DEVICES=...:
  // empty without one (every GPU hidden); "0" in the sandbox, whose /dev
  // holds that GPU's node alone, and CUDA numbers the GPUs it can open from
  // 0 (its own index there hid gpu1 and up: "No CUDA GPUs are available");
  // the index itself outside the sandbox, where every node is there.
  // KBOX_GPU_INDEX carries the host's index for the result's fingerprint.
  std::vector<std::string> GpuEnvironment(std::optional<uint32_t> gpu) const;

  // The environment of a run stage's candidate process: the stage's own
  // (HOME, TMPDIR and caches in the job's candidate-owned directories),
  // none of the judge's (exposed for tests).
  std::vector<std::string> CandidateEnvironment(const JobWorkspace& workspace) const;

  // The inside ids of a sandboxed run stage: the candidate's process keeps
  // the id every other stage runs as; the judge has its own.
  static constexpr uint32_t kCandidateInsideId = 1000;
  static constexpr uint32_t kJudgeInsideId = 1001;
  // Where the judge finds the candidate group's files (SandboxInheritedFile.fd).
  static constexpr int kFirstInheritedFd = 100;

  // Starts stages with a zygote_slot through that slot's zygote
  // (docs/prefork.md) from now on; needs the sandbox. `enter_library` is
  // libkbox_sandbox_enter.so; `observer` (may be empty) hears every zygote's
  // starts and deaths. Stages without a zygote_slot stay fork+exec. A run
  // stage's zygote is single use (a fresh one per stage, started beside the
  // stage before); a compile worker's serves every build of its slot.
  void EnablePrefork(const std::string& enter_library, ZygoteObserver observer = {});
  // Starts the zygotes of `slots` now, in the background (after
  // EnablePrefork; otherwise nothing): run stages' slots when `run_stages`.
  void PrestartZygotes(const std::vector<std::string>& slots, bool run_stages);
  // The environment a zygote starts with: the stage's clean environment,
  // one thread for every library that would start a pool at import, and no
  // GPU; nothing of any job.
  std::vector<std::string> ZygoteEnvironment() const;

  const HarnessSettings& settings() const { return settings_; }
  const std::optional<SandboxSettings>& sandbox() const { return sandbox_; }

 private:
  // Writes the run stage's secret seed file into the judge's directory; sets `path`.
  Status WriteSecret(const std::filesystem::path& judge_dir, uint64_t seed, std::string& path) const;
  // The stage's cgroup, where the host delegates cgroups; `error` set when
  // it could not be made.
  std::optional<JobCgroup> CreateStageCgroup(const JobWorkspace& workspace, v1::Stage stage,
                                             std::string& error) const;
  StageOutcome RunSandboxed(const JobWorkspace& workspace, v1::Stage stage, ProcessSpec harness,
                            const StagePlacement& placement, std::optional<JobCgroup> cgroup,
                            const CandidateCgroupFiles* candidate_cgroup) const;
  // The environment variables that place a stage's files (HOME, TMPDIR, caches) in `home`.
  std::vector<std::string> PlacedEnvironment(const std::filesystem::path& home,
                                             const std::string& tmp,
                                             const std::filesystem::path& extensions,
                                             const std::filesystem::path& triton) const;

  // Runs the sandboxed stage of `spec_path` through the slot's zygote
  // (`single_use`: ZygoteSettings::single_use); nullopt when the zygote
  // cannot start (the caller falls back to fork+exec).
  std::optional<ProcessOutcome> RunPreforked(const std::string& slot, bool single_use,
                                             const std::string& spec_path,
                                             const ProcessSpec& limits) const;

  HarnessSettings settings_;
  std::optional<SandboxSettings> sandbox_;
  std::shared_ptr<ZygotePool> zygotes_;  // Set by EnablePrefork.
  std::vector<std::string> inherited_;  // Resolved NAME=value pairs.
};

}  // namespace kbox
