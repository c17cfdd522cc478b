// The evaluator's two sides of the compile tier (docs/compile-tier.md): a
// compile node answering POST /v1/builds (Evaluator::Build) and a run node
// asking it for a job's build (Evaluator::BuildOnTier).

#include <iostream>

#include "daemon/evaluator.h"
#include "daemon/result_mapper.h"
#include "daemon/static_verdicts.h"
#include "policy/request_policy.h"
#include "worker/elapsed.h"

namespace kbox {
namespace {

// Statuses a job may end with at its compile, as a compile node reports
// them. INFRA_ERROR is kbox's own failure there (the run node builds
// instead); CORRECT and the run stage's statuses cannot come from a compile.
bool EndsAtCompile(v1::Status status) {
  switch (status) {
    case v1::COMPILE_ERROR:
    case v1::TIMEOUT:
    case v1::REJECTED:
    case v1::SANDBOX_VIOLATION:
    case v1::RUNTIME_ERROR:
      return true;
    default:
      return false;
  }
}

}  // namespace

Evaluator::BuildAnswer Evaluator::Build(const v1::BuildRequest& ask,
                                        const v1::EffectiveSettings& settings,
                                        const static_check::AnticheatProfile& anticheat,
                                        const std::string& tenant) {
  BuildAnswer answer;
  const auto refuse = [&](unsigned status, const std::string& field, const std::string& why) {
    answer.refusal_status = status;
    answer.refusal_field = field;
    answer.refusal = why;
    metrics_.RecordBuildServed("refused");
    return answer;
  };
  const auto ended = [&](v1::EvaluateResult result) {
    answer.response.emplace();
    *answer.response->mutable_result() = std::move(result);
    metrics_.RecordBuildServed("failed");
    return answer;
  };
  if (!build_cache_) return refuse(500, "", "this kboxd has no build cache to serve builds from");
  const v1::EvaluateRequest& job = ask.job();
  const bool gpu_backend = settings.backend() != v1::BACKEND_CPU;
  if (!ValidCudaArchList(ask.cuda_arch_list()) || gpu_backend == ask.cuda_arch_list().empty()) {
    return refuse(400, "cuda_arch_list",
                  gpu_backend ? "must be MAJOR.MINOR[+PTX] entries joined by ';' for a GPU backend"
                              : "must be empty for the CPU backend");
  }
  const std::string key = BuildCacheKey(BuildKeyInputs{.candidate_source = job.candidate_source(),
                                                       .reference_source = job.reference_source(),
                                                       .backend = v1::Backend_Name(settings.backend()),
                                                       .precision = v1::Precision_Name(settings.precision()),
                                                       .cuda_arch_list = ask.cuda_arch_list(),
                                                       .toolchain = toolchain_});
  if (key != ask.key()) {
    return refuse(409, "key",
                  "this compile node's toolchain is not the run node's (its key for the job is " + key +
                      "): run the same kbox image on both");
  }
  // The run node checked the job already; a compile node never builds what
  // its own checks reject either.
  const static_check::CheckInput check_input{.candidate_source = job.candidate_source(),
                                             .reference_source = job.reference_source(),
                                             .backend = TaskBackendOf(settings.backend()),
                                             .precision = TaskPrecisionOf(settings.precision())};
  const StaticPhase checked = RunStaticCheck(check_input, anticheat);
  v1::EvaluateResult result;
  if (!ApplyStaticCheck(checked.report, result)) return ended(std::move(result));
  if (!checked.report.deferred.empty()) {
    return refuse(409, "candidate_source",
                  "its C++ sources are checked as its compile stage reports them, where the job runs: "
                  "the run node builds it");
  }

  BuildCache::Flight flight = build_cache_->Acquire(key);
  std::optional<BuildCache::Entry> entry;
  double compile_ms = 0;
  const bool hit = flight.role() == BuildCache::Flight::Role::kHit;
  if (hit) {
    entry.emplace(std::move(*flight.entry()));
  } else {
    const std::string build_id = "build-" + NextJobId();
    auto ws = JobWorkspace::Create(config_.store().work_dir(), build_id, job.reference_source(),
                                   job.candidate_source(), JobWorkspaceOptions());
    if (!ws) return refuse(500, "", "cannot prepare the build's directory: " + ws.error().message());
    const auto cancel = cancels_.Open(build_id);
    auto worker = compile_slots_.Acquire(tenant, cancel->stop);
    if (!worker || stop_starting_.load() || cancel->stop.load()) {
      return refuse(503, "", "kboxd is draining");
    }
    const StageOutcome compiled =
        RunCompileStage(*ws, settings, ask.cuda_arch_list(), false, worker->slot(), cancel->stop);
    compile_ms = compiled.process.wall_ms;
    metrics_.RecordBuildCpu(settings.backend(), compiled.process.cpu_ms);
    FailureCause cause;
    if (!ApplyCompileStage(compiled, result, &cause)) {
      if (!EndsAtCompile(result.status())) {
        return refuse(500, "", "the compile stage failed here: " + result.message());
      }
      result.set_output_tail(compiled.process.output_tail);
      result.mutable_durations()->set_compile_ms(compile_ms);
      return ended(std::move(result));
    }
    if (!ws->OnlyBuildDirWritten()) {
      return refuse(409, "", "the compile stage wrote outside its build directory: such a build is "
                             "neither cached nor sent");
    }
    const auto inserted = build_cache_->Insert(key, ws->build_dir(), compiled.process.output_tail);
    flight.Finish(inserted.stored());
    if (!inserted.stored()) return refuse(500, "", "the build could not be cached: " + inserted.message);
    if (auto found = build_cache_->Lookup(key)) entry.emplace(std::move(*found));
    if (!entry) return refuse(500, "", "the build left the cache before it was sent");
  }
  metrics_.RecordBuildCacheLookup(hit);
  auto files = ReadEntryFiles(*entry);
  if (!files) return refuse(500, "", "cannot read the build: " + files.error());
  v1::BuildArtifact artifact = ArtifactOf(*files);
  artifact.set_key(key);
  artifact.set_compile_output(entry->compile_output());
  artifact.set_compile_ms(compile_ms);
  artifact.set_cache_hit(hit);
  answer.response.emplace();
  *answer.response->mutable_artifact() = std::move(artifact);
  metrics_.RecordBuildServed(hit ? "cached" : "built");
  return answer;
}

Evaluator::TierOutcome Evaluator::BuildOnTier(const v1::EvaluateRequest& request,
                                              const std::string& cuda_arch, const std::string& key,
                                              const JobWorkspace& ws, const JobCancel& cancel,
                                              std::optional<uid_t> owner_uid,
                                              std::optional<gid_t> owner_gid,
                                              v1::EvaluateResult& result, std::string& output) {
  v1::BuildRequest ask;
  *ask.mutable_job() = request;
  ask.set_cuda_arch_list(cuda_arch);
  ask.set_key(key);
  const auto started = Clock::now();
  const auto fallback = [&](const std::string& why) {
    std::cerr << "kboxd: job " << result.job_id() << ": built here, not on the compile tier: " << why
              << std::endl;
    metrics_.RecordRemoteBuild("fallback");
    return TierOutcome::kFallback;
  };
  auto answer = tier_->Build(ask, &cancel.stop);
  if (!answer) return fallback(answer.error());
  if (answer->has_result()) {
    const v1::EvaluateResult& theirs = answer->result();
    if (!EndsAtCompile(theirs.status())) {
      return fallback("it answered " + v1::Status_Name(theirs.status()));
    }
    // The verdict, its message and logs; this node's own static verdicts,
    // settings and fingerprint stay.
    result.set_status(theirs.status());
    result.set_message(theirs.message());
    *result.mutable_compile_log() = theirs.compile_log();
    // A rejection's verdicts say why; the static ones of this node are in result already.
    if (theirs.status() == v1::REJECTED) result.mutable_verdicts()->MergeFrom(theirs.verdicts());
    output = theirs.output_tail();
    result.set_output_tail(output);
    result.mutable_durations()->set_compile_ms(MsSince(started));
    metrics_.RecordRemoteBuild("failed");
    return TierOutcome::kEnded;
  }
  const v1::BuildArtifact& artifact = answer->artifact();
  // The job's scratch bounds a build made here; it bounds one made there.
  const uint64_t max_bytes =
      config_.limits().job_scratch_bytes() > 0 ? config_.limits().job_scratch_bytes() : (1ull << 32);
  const Status written = WriteBuildFiles(FilesOf(artifact), ws.build_dir(), max_bytes, owner_uid, owner_gid);
  if (!written.ok()) return fallback("its build does not check: " + written.message());
  output = artifact.compile_output();
  result.mutable_durations()->set_compile_ms(MsSince(started));
  result.set_build_cache_hit(artifact.cache_hit());
  metrics_.RecordRemoteBuild("built");
  return TierOutcome::kBuilt;
}

}  // namespace kbox
