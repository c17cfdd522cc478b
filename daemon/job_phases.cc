// Evaluator::RunJob and its phases (docs/architecture.md, "One job through
// the code"): the static checks, the job's directory, its build (the build
// cache, the compile tier or a compile stage here), its run stage on a
// device's turn, and the grading of what the run stage found. Each phase
// returns false once the job has ended, its result set; an end kboxd
// decides itself goes through JobRun::End.

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>

#include "daemon/config_loader.h"
#include "daemon/evaluator.h"
#include "daemon/job_run.h"
#include "daemon/result_mapper.h"
#include "daemon/stage_turn.h"
#include "daemon/static_verdicts.h"
#include "policy/request_policy.h"
#include "worker/build_cache/build_cache.h"
#include "worker/elapsed.h"

namespace kbox {
void Evaluator::RunJob(const v1::EvaluateRequest& request, const v1::EffectiveSettings& settings,
                       const static_check::AnticheatProfile& anticheat, const std::string& tenant,
                       const std::string& workspace, JobCancel& cancel, v1::EvaluateResult& result,
                       JobTrace& trace, bool& held_back) {
  JobRun job{request, settings, anticheat, tenant, cancel, result, trace, held_back};
  if (!CheckStatically(job)) return;
  if (!PrepareWorkspace(job, workspace)) return;
  if (!CompileOrRestore(job)) return;
  if (!RunOnDevice(job)) return;
  Grade(job);
}

bool Evaluator::CheckStatically(JobRun& job) {
  // Static checks first: a rejected candidate is never written to disk,
  // compiled or run. The verdicts of one that goes on ride along.
  job.check_input = static_check::CheckInput{.candidate_source = job.request.candidate_source(),
                                             .reference_source = job.request.reference_source(),
                                             .backend = TaskBackendOf(job.settings.backend()),
                                             .precision = TaskPrecisionOf(job.settings.precision())};
  const StaticPhase checked = RunStaticCheck(job.check_input, job.anticheat);
  job.result.mutable_durations()->set_static_ms(checked.ms);
  job.trace.checked = checked.ran;
  if (checked.ran) metrics_.RecordStaticCheck(checked.report, checked.ms / 1000.0);
  if (!ApplyStaticCheck(checked.report, job.result)) return false;
  // C++ the static checks could not read as text: the compile stage reports
  // what its load_inline/load calls really received, and those strings are
  // checked before anything runs (docs/anticheat.md). Such a job never uses
  // the build cache: a restored build comes with no sources to check.
  job.deferred = !checked.report.deferred.empty();
  job.kernel_names = checked.report.kernel_names;
  return true;
}

bool Evaluator::PrepareWorkspace(JobRun& job, const std::string& workspace) {
  job.workspace_options = JobWorkspaceOptions();
  auto ws = JobWorkspace::Create(config_.store().work_dir(), workspace, job.request.reference_source(),
                                 job.request.candidate_source(), job.workspace_options);
  if (!ws) {
    job.End(InfraCause::kWorkspace, "cannot prepare the job directory: " + ws.error().message());
    return false;
  }
  job.workspace.emplace(std::move(*ws));
  return true;
}

bool Evaluator::CompileOrRestore(JobRun& job) {
  auto* durations = job.result.mutable_durations();
  job.compile_arch = job.gpu_backend() ? cuda_arch_list_ : "";
  // The build cache (docs/build-cache.md): a verified build of the same
  // inputs replaces the compile stage. Jobs with the same key wait in
  // Acquire while one of them compiles (never holding a compile slot).
  std::optional<BuildCache::Flight> flight;
  std::string cache_key;
  if ((build_cache_ || tier_) && !job.deferred) {
    cache_key = BuildCacheKey(BuildKeyInputs{.candidate_source = job.request.candidate_source(),
                                             .reference_source = job.request.reference_source(),
                                             .backend = v1::Backend_Name(job.settings.backend()),
                                             .precision = v1::Precision_Name(job.settings.precision()),
                                             .cuda_arch_list = job.compile_arch,
                                             .toolchain = toolchain_});
  }
  if (build_cache_ && !job.deferred) {
    const auto looked_up = Clock::now();
    flight.emplace(build_cache_->Acquire(cache_key));
    if (job.Stopped(stop_starting_)) return false;
    bool restored = false;
    if (flight->role() == BuildCache::Flight::Role::kHit) {
      // On failure the build dir is empty again and the job compiles.
      const Status restore =
          build_cache_->Restore(*flight->entry(), job.workspace->build_dir(), job.workspace_options.owner_uid,
                                job.workspace_options.owner_gid);
      if (restore.ok()) {
        restored = true;
        durations->set_compile_ms(MsBetween(looked_up, Clock::now()));
        job.output = flight->entry()->compile_output();
        job.result.set_build_cache_hit(true);
        job.trace.compiled = true;
      }
      flight->entry().reset();  // Unpinned: evictable again.
    }
    metrics_.RecordBuildCacheLookup(restored);
    if (restored) return true;
  }
  // The compile tier (compile_tier.cc): a build from there is written into
  // the build dir as a restored one is, and cached here as a local one.
  // A job whose sources are checked as its compile stage reports them
  // builds here, where that report is read.
  if (tier_ && !job.deferred) {
    if (job.Stopped(stop_starting_)) return false;
    job.began = true;
    switch (BuildOnTier(job.request, job.compile_arch, cache_key, *job.workspace, job.cancel,
                        job.workspace_options.owner_uid, job.workspace_options.owner_gid, job.result,
                        job.output)) {
      case TierOutcome::kEnded:
        job.trace.compiled = true;
        return false;
      case TierOutcome::kBuilt:
        job.trace.compiled = true;
        if (flight) flight->Finish(build_cache_->Insert(cache_key, job.workspace->build_dir(), job.output).stored());
        return true;
      case TierOutcome::kFallback:
        break;
    }
  }
  return CompileHere(job, flight, cache_key);
}

bool Evaluator::CompileHere(JobRun& job, std::optional<BuildCache::Flight>& flight, const std::string& cache_key) {
  auto compile_slot = compile_slots_.Acquire(job.tenant, job.cancel.stop);
  if (job.Stopped(stop_starting_)) return false;
  job.began = true;
  StageOutcome compiled = RunCompileStage(*job.workspace, job.settings, job.compile_arch, job.deferred,
                                          compile_slot->slot(), job.cancel.stop);
  job.result.mutable_durations()->set_compile_ms(compiled.process.wall_ms);
  job.trace.compile_cpu_ms = compiled.process.cpu_ms;
  job.output = compiled.process.output_tail;
  job.trace.compiled = true;
  if (!ApplyCompileStage(compiled, job.result, &job.trace.cause)) {
    // Not cached: a failed compile's result is its log, not a build (the
    // flight ends uncached; jobs waiting for it compile on their own).
    job.result.set_output_tail(job.output);
    return false;
  }
  if (job.deferred) {
    const static_check::CheckReport read = CheckCompiledSources(
        job.check_input, compiled.report ? &*compiled.report : nullptr, job.anticheat);
    metrics_.RecordVerdicts(read);
    job.kernel_names = read.kernel_names;
    if (!ApplyCompiledSources(read, job.result)) return false;
  }
  if (flight) {
    const bool cached = job.workspace->OnlyBuildDirWritten() &&
                        build_cache_->Insert(cache_key, job.workspace->build_dir(), job.output).stored();
    flight->Finish(cached);
  }
  return true;
}

bool Evaluator::RunOnDevice(JobRun& job) {
  v1::EvaluateResult& result = job.result;
  auto* durations = result.mutable_durations();
  const auto queued = Clock::now();
  SlotPool& lanes = job.gpu_backend() ? gpu_slots_ : cpu_slots_;
  DeviceTurns& turns = job.gpu_backend() ? gpu_turns_ : cpu_turns_;
  const StageTurn::Settings turn_settings{
      .stages_ahead = RunStagesAhead(config_, job.gpu_backend()),
      .set_up_limit = std::chrono::seconds(config_.limits().run_set_up_limit_s()),
      .max_time_limit = std::chrono::seconds(config_.limits().max_time_limit_s()),
      .judge_uid = sandbox_.settings ? std::optional<uid_t>(sandbox_.settings->judge_uid) : std::nullopt,
      .judge_gid = sandbox_.settings ? std::optional<gid_t>(sandbox_.settings->judge_gid) : std::nullopt};
  // A stage prepared ahead whose turn was withdrawn (its GPU left service
  // while it waited) queues again for a lane.
  for (;;) {
    auto device = lanes.Acquire(job.tenant, job.cancel.stop);
    const double lane_wait_ms = MsBetween(queued, Clock::now());
    durations->set_queue_wait_ms(lane_wait_ms);
    job.trace.queued = true;
    if (job.Stopped(stop_starting_)) return false;
    const uint32_t slot = device->slot();
    const std::optional<uint32_t> gpu = job.gpu_backend() ? std::optional<uint32_t>(slot) : std::nullopt;
    const std::string device_name = (job.gpu_backend() ? "gpu" : "cpu") + std::to_string(slot);
    const LaneName lane = TakeLane(device_name);
    StagePlacement placement;
    placement.cancel = &job.cancel.stop;
    if (gpu) {
      // Same arch list as the build: load_inline re-derives its flags in the
      // run stage, and different flags would make ninja rebuild on the GPU.
      placement.cuda_arch = cuda_arch_list_;
      placement.gpu = slot;
      result.mutable_fingerprint()->set_device_index(slot);
    }
    // Each lane has its own zygote: a zygote serves one stage at a time.
    if (config_.experimental().preforked_run_stage()) placement.zygote_slot = lane.name();
    placement.wall_limit = std::chrono::seconds(job.settings.time_limit_s());
    placement.mask_toolchain = job.settings.backend() != v1::BACKEND_TRITON;
    v1::StageSpec run_spec = MakeSpec(*job.workspace, job.settings, v1::STAGE_RUN, job.kernel_names);
    job.reference_key = OfferCachedReference(job.request, job.settings, gpu, run_spec);

    // The device's turn (docs/run-stages-ahead.md). With stages ahead, the
    // stage starts now and its judge waits on the gate before the
    // candidate's code loads; the turn comes when the job ahead has ended
    // (and its device probe, if any, passed).
    StageTurn turn(*job.workspace, turn_settings);
    Status ready = turn.Prepare(run_spec, placement);
    const auto started = Clock::now();
    if (ready.ok()) {
      ready = turn.Enqueue(
          turns, slot,
          // A GPU quarantined by the job ahead: this job goes back to the queue.
          [this, gpu] { return !gpu || device_health_.Healthy(*gpu); },
          [this, gpu, job_id = result.job_id()](bool stopped, const std::string& running) {
            metrics_.RecordSetUpPause(gpu, stopped);
            if (!stopped && !running.empty()) {
              std::cerr << "kboxd: job " << job_id << ": its stage setting up did not stop within "
                        << StageTurn::kSetUpPauseLimit.count() << " ms (" << running << "); waited for instead"
                        << std::endl;
            }
          });
    }
    if (!ready.ok()) {
      job.End(InfraCause::kWorkspace, "cannot prepare the job's device turn: " + ready.message());
      return false;
    }
    job.ran = runner_.Run(*job.workspace, run_spec, placement);
    if (turn.withdrawn()) {
      std::cerr << "kboxd: job " << result.job_id() << ": " << device_name
                << " left service before its turn; queueing it again" << std::endl;
      continue;
    }
    double waited_ms = 0;
    if (turn.given()) {
      waited_ms = std::max(0.0, MsBetween(started, turn.device_time_from()));
      durations->set_device_turn_ms(turn.HeldMs());
      durations->set_turn_set_up_wait_ms(turn.SetUpWaitMs());
    }
    double run_ms = job.ran.process.wall_ms - waited_ms;
    if (turn.given() && job.ran.report && job.ran.report->set_up_again()) {
      // Set-up failed before the turn (the job then holding the device may
      // have filled its memory): once more, now holding the turn.
      if (Status again = turn.RunAgainHoldingTheTurn(run_spec, placement); !again.ok()) {
        job.End(InfraCause::kWorkspace, "cannot prepare the job's device turn: " + again.message());
        return false;
      }
      metrics_.RecordSetUpAgain(gpu);
      job.trace.run_cpu_ms += job.ran.process.cpu_ms;
      job.ran = runner_.Run(*job.workspace, run_spec, placement);
      run_ms += job.ran.process.wall_ms;
      durations->set_device_turn_ms(durations->device_turn_ms() + turn.HeldMs());
      durations->set_turn_set_up_wait_ms(durations->turn_set_up_wait_ms() + turn.SetUpWaitMs());
    }
    job.trace.run_cpu_ms += job.ran.process.cpu_ms;
    durations->set_queue_wait_ms(lane_wait_ms + waited_ms);
    durations->set_run_ms(std::max(0.0, run_ms));
    job.trace.ran = true;
    ApplyRunStage(job.ran, result, &job.trace.cause);
    // Timed out waiting for a turn that never came. A stage whose turn was
    // due (first in line on a free device) and whose set-up ran past its
    // limit keeps that verdict: the device was waiting on it.
    if (turn.gated() && !turn.given() && !turn.due() && job.ran.process.end == ProcessOutcome::End::kTimedOut) {
      job.End(InfraCause::kHarnessTimeout,
              "the job's run stage waited longer than " + std::to_string(placement.turn_wait_limit.count() / 1000) +
                  " s for its turn on " + device_name + "; retry it");
    }
    // A failure the device could explain (device_suspect) is an INFRA_ERROR, probed as every fault is.
    if (gpu && MayHaveBrokenTheDevice(result.status())) {
      // Still holding the turn: the next job on this GPU starts only after
      // the probe passed (or finds the GPU quarantined and queues again).
      // Only kbox's own probe takes a GPU out of service, never a job's
      // failure alone, which a candidate may have brought about: the jobs
      // queued and set up for it keep their places.
      const std::string why = job.trace.cause.device_suspect
                                  ? "job " + result.job_id() + ": " + result.message()
                                  : "after job " + result.job_id() + " (" + v1::Status_Name(result.status()) + ")";
      const bool passed = device_health_.CheckNow(slot, why).ok();
      metrics_.RecordDeviceProbe(slot, passed);
    }
    return true;
  }
}

void Evaluator::Grade(JobRun& job) {
  const v1::StageReport* report = job.ran.report ? &*job.ran.report : nullptr;
  if (report) {
    const static_check::CheckReport graded = GradeRunFindings(report->verdicts(), job.anticheat);
    metrics_.RecordVerdicts(graded);
    ApplyRunFindings(graded, job.result);
  }
  RecordReferenceTiming(job.reference_key, job.result, report);
  job.output += job.ran.process.output_tail;
  job.result.set_output_tail(job.output);
}

}  // namespace kbox
