#pragma once

// The life of one job: static anti-cheat checks (in kboxd; a reject ends the
// job here) → workspace → compile stage (on a compile worker, never holding a
// device), or its build restored from the build cache → wait for a device
// slot → run stage → result. Blocking; kboxd calls it on its job thread pool.

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/device_health.h"
#include "daemon/device_turns.h"
#include "daemon/host_probe.h"
#include "daemon/job_cancels.h"
#include "daemon/metrics.h"
#include "daemon/precompiled_header.h"
#include "daemon/reference_cache.h"
#include "daemon/remote_build.h"
#include "daemon/sandbox_setup.h"
#include "daemon/slot_pool.h"
#include "kbox/v1/config.pb.h"
#include "kbox/v1/evaluation.pb.h"
#include "policy/static_check/anticheat_profile.h"
#include "worker/build_cache/build_cache.h"
#include "worker/stage_runner.h"

namespace kbox {

struct JobRun;

class Evaluator {
 public:
  using Clock = std::chrono::steady_clock;

  // `gpus` are the GPU indices run stages of GPU backends may use.
  // `build_cache` (may be null: no cache) must outlive the evaluator.
  Evaluator(const v1::DaemonConfig& config, HostInfo host, std::vector<uint32_t> gpus,
            const SandboxRuntime& sandbox, Metrics& metrics, BuildCache* build_cache = nullptr);

  // Runs one job whose request already passed RequestPolicy, its static
  // checks under `anticheat` (the request's profile with its overrides).
  // Never throws for anything a candidate does; kbox's own failures come
  // back as INFRA_ERROR. `tenant` (the API token's name) is whose turn the
  // job waits for in the compile and run queues (SlotPool's fair share).
  // `held_back` (may be null) is set when a drain kept the job from starting:
  // its result is not final, the journal runs it after the restart.
  // `cancel` (from OpenJob(job_id); may be null: opened here) is the job's
  // cancel flag.
  v1::EvaluateResult Evaluate(const v1::EvaluateRequest& request,
                              const v1::EffectiveSettings& settings,
                              const static_check::AnticheatProfile& anticheat,
                              Clock::time_point received, const std::string& job_id = "",
                              const std::string& tenant = "", bool* held_back = nullptr,
                              std::shared_ptr<JobCancel> cancel = nullptr);

  // Job `job_id`'s cancel flag, which Cancel finds from now until the job's
  // Evaluate returns and the caller drops it. Open it before the job's id is
  // given out, so no cancel can arrive before the flag exists.
  std::shared_ptr<JobCancel> OpenJob(const std::string& job_id) { return cancels_.Open(job_id); }

  // The client cancels job `job_id` (DELETE /v1/jobs/<id>): its processes
  // are killed, a wait for a compile worker or a lane ends, and its result
  // is CANCELLED unless it had already ended otherwise. A job waiting for an
  // identical build another job is making ends when that build does. False
  // when no live job has that id.
  bool Cancel(const std::string& job_id);

  // A fresh job id (unique per daemon, never reused after a restart); the
  // asynchronous API assigns it at submission and passes it to Evaluate.
  std::string NextJobId();

  // kboxd is draining: a job that has not yet taken a compile worker or a
  // run slot does not take one; it ends at once as INFRA_ERROR ("did not
  // start; retry") with *held_back set, so the caller can keep it for after
  // the restart. Jobs already compiling or running go on.
  void StopStartingJobs() { stop_starting_.store(true); }

  // Ends every running and queued job as INFRA_ERROR (kboxd's shutdown
  // deadline passed); their processes are killed within kCancelPollInterval.
  void CancelAll();

  // Sets the point-in-time gauges (queues, slots, device health) for a scrape.
  void PublishGauges() const;
  // Whether a run slot can take a job now: a CPU slot when `cpu`, a GPU in
  // service when `gpu` (quarantined GPUs do not count; busy slots do).
  bool HasServingRunSlot(bool cpu, bool gpu) const;

  // Compile stages get `pch`'s directory (StageSpec.pch_dir) once it is
  // built. `pch` (may be null: none) must outlive the evaluator.
  void UsePrecompiledHeader(const PrecompiledHeader* pch) { pch_ = pch; }

  // Jobs' builds go to the compile tier first (docs/compile-tier.md).
  // `tier` (may be null: local builds only) must outlive the evaluator.
  void UseCompileTier(const RemoteBuilder* tier) { tier_ = tier; }

  // A compile node's side of POST /v1/builds: the build of `request.job()`
  // (already through RequestPolicy; `settings` and `anticheat` are its
  // resolution) from the build cache or a compile stage here, or the job's
  // result when it ends at its compile. Otherwise `refusal` says why this
  // daemon cannot answer with either (the run node then builds locally)
  // and `refusal_status` is the HTTP status for it.
  struct BuildAnswer {
    std::optional<v1::BuildResponse> response;
    unsigned refusal_status = 0;
    std::string refusal_field;
    std::string refusal;
  };
  BuildAnswer Build(const v1::BuildRequest& request, const v1::EffectiveSettings& settings,
                    const static_check::AnticheatProfile& anticheat, const std::string& tenant);

  const HostInfo& host() const { return host_; }
  const SandboxRuntime& sandbox() const { return sandbox_; }
  const SlotPool& gpu_slots() const { return gpu_slots_; }
  // The GPU indices jobs are scheduled on (a subset of what the probe saw).
  const std::vector<uint32_t>& gpus() const { return gpus_; }
  // The build cache's toolchain fingerprint (docs/build-cache.md); empty
  // without a cache.
  const std::string& toolchain_fingerprint() const { return toolchain_; }

 private:
  // `candidate_kernels`: the static analysis's kernel names, sent to the run
  // stage only.
  v1::StageSpec MakeSpec(const JobWorkspace& ws, const v1::EffectiveSettings& settings,
                         v1::Stage stage, const std::vector<std::string>& candidate_kernels = {}) const;
  // Starts run stages through per-slot zygotes when the sandbox and the
  // enter library are there; logs why not otherwise.
  void EnablePrefork();
  // The reference cache's key for this job's run stage (`gpu`: the GPU it
  // runs on; none on the CPU backend), and the cached entry, the recheck
  // threshold and the request's fresh_reference_timing put into `spec`.
  // Empty without a cache or when nothing is timed.
  std::string OfferCachedReference(const v1::EvaluateRequest& request,
                                   const v1::EffectiveSettings& settings, std::optional<uint32_t> gpu,
                                   v1::StageSpec& spec);
  // Counts where a timed CORRECT job's reference figure came from, and
  // stores a live one the harness offered (settled) unless a REJECT verdict
  // casts doubt on the whole run.
  void RecordReferenceTiming(const std::string& key, const v1::EvaluateResult& result,
                             const v1::StageReport* report);
  // A lane's name for its zygote ("gpu0", then "gpu0.1", ...): the lowest
  // index not in use on the device, given back when destroyed.
  class LaneName {
   public:
    LaneName(Evaluator* owner, std::string device, uint32_t index)
        : owner_(owner), device_(std::move(device)), index_(index) {}
    LaneName(const LaneName&) = delete;
    ~LaneName();
    std::string name() const { return Of(device_, index_); }
    static std::string Of(const std::string& device, uint32_t index) {
      return index == 0 ? device : device + "." + std::to_string(index);
    }

   private:
    Evaluator* owner_;
    std::string device_;
    uint32_t index_;
  };
  LaneName TakeLane(const std::string& device);
  // After a cancel: every queue's waiters check their cancel flags.
  void WakeQueuedJobs();

  // How a job's (or a served build's) workspace is made: its owner the
  // sandbox user, its scratch capped where the host allows.
  WorkspaceOptions JobWorkspaceOptions() const;
  // The compile stage of the job in `ws` on local compile worker `worker`.
  StageOutcome RunCompileStage(const JobWorkspace& ws, const v1::EffectiveSettings& settings,
                               const std::string& cuda_arch, bool report_sources, uint32_t worker,
                               const std::atomic<bool>& cancel);
  // A run node's ask of the compile tier (compile_tier.cc): kBuilt, the
  // build is in ws's build dir; kEnded, `result` is the job's final result
  // (its compile failed there); kFallback, build locally.
  enum class TierOutcome { kBuilt, kEnded, kFallback };
  TierOutcome BuildOnTier(const v1::EvaluateRequest& request, const std::string& cuda_arch,
                          const std::string& key, const JobWorkspace& ws, const JobCancel& cancel,
                          std::optional<uid_t> owner_uid, std::optional<gid_t> owner_gid,
                          v1::EvaluateResult& result, std::string& output);

  // One attempt of a job, as its phases in order (daemon/job_phases.cc).
  void RunJob(const v1::EvaluateRequest& request, const v1::EffectiveSettings& settings,
              const static_check::AnticheatProfile& anticheat, const std::string& tenant,
              const std::string& workspace, JobCancel& cancel, v1::EvaluateResult& result,
              JobTrace& trace, bool& held_back);
  // RunJob's phases. Each returns false once the job has ended, its result
  // set (job_run.h).
  bool CheckStatically(JobRun& job);
  bool PrepareWorkspace(JobRun& job, const std::string& workspace);
  bool CompileOrRestore(JobRun& job);
  // CompileOrRestore's last way: a compile stage here.
  bool CompileHere(JobRun& job, std::optional<BuildCache::Flight>& flight, const std::string& cache_key);
  bool RunOnDevice(JobRun& job);
  void Grade(JobRun& job);

  const v1::DaemonConfig& config_;
  HostInfo host_;
  const SandboxRuntime& sandbox_;
  Metrics& metrics_;
  StageRunner runner_;
  SlotPool compile_slots_;
  // Run lanes: each CPU run slot and each GPU once per stage that may hold
  // or prepare for it (1 + run_stages_ahead); docs/run-stages-ahead.md.
  SlotPool cpu_slots_;
  SlotPool gpu_slots_;
  // Whose turn it is on each device (exclusive, in order of asking).
  DeviceTurns cpu_turns_;
  DeviceTurns gpu_turns_;
  std::mutex lane_mu_;
  std::map<std::string, uint32_t> lanes_in_use_;  // Device name -> bit per lane index.
  DeviceHealth device_health_;  // Takes broken GPUs out of gpu_slots_.
  std::vector<uint32_t> gpus_;
  std::string cuda_arch_list_;  // TORCH_CUDA_ARCH_LIST covering every GPU in use.
  BuildCache* build_cache_;
  const PrecompiledHeader* pch_ = nullptr;  // Set before jobs start.
  const RemoteBuilder* tier_ = nullptr;     // Set before jobs start.
  std::string toolchain_;  // Part of every build cache key.
  std::optional<ReferenceCache> reference_cache_;  // Absent when disabled.
  std::string reference_harness_;  // kbox's version and the harness digest: part of its keys.
  std::atomic<uint64_t> job_counter_{0};
  JobCancels cancels_;
  std::atomic<bool> stop_starting_{false};
  std::string job_id_prefix_;
};

}  // namespace kbox
