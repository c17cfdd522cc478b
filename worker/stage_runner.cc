#include "worker/stage_runner.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "policy/status.h"

namespace kbox {
namespace fs = std::filesystem;
namespace {

std::string SpecFileName(v1::Stage stage) {
  return stage == v1::STAGE_COMPILE ? "compile_spec.json" : "run_spec.json";
}

}  // namespace

void DecodeHarnessEvents(const std::string& stream, StageOutcome& outcome) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  size_t begin = 0;
  while (begin < stream.size()) {
    size_t end = stream.find('\n', begin);
    if (end == std::string::npos) end = stream.size();
    const std::string_view line(stream.data() + begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    if (outcome.report) {
      outcome.protocol_error = "data after the final report";
      outcome.report.reset();
      return;
    }
    v1::HarnessEvent event;
    const auto status = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(line.data(), line.size()), &event, options);
    if (!status.ok()) {
      outcome.protocol_error = "malformed harness event: " + std::string(status.message());
      return;
    }
    switch (event.event_case()) {
      case v1::HarnessEvent::kEnter:
        outcome.last_party = event.enter();
        if (outcome.last_party == v1::CANDIDATE) outcome.candidate_ran = true;
        break;
      case v1::HarnessEvent::kReport:
        outcome.report = event.report();
        break;
      case v1::HarnessEvent::EVENT_NOT_SET:
        outcome.protocol_error = "empty harness event";
        return;
    }
  }
}

std::vector<std::string> InheritedEnvironment(const HarnessSettings& settings) {
  std::vector<std::string> env;
  for (const auto& name : settings.inherited_env) {
    if (const char* value = std::getenv(name.c_str())) env.push_back(name + "=" + value);
  }
  const bool has_path = std::any_of(env.begin(), env.end(),
                                    [](const std::string& kv) { return kv.starts_with("PATH="); });
  if (!has_path) env.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  return env;
}

StageRunner::StageRunner(HarnessSettings settings, std::optional<SandboxSettings> sandbox)
    : settings_(std::move(settings)),
      sandbox_(std::move(sandbox)),
      inherited_(InheritedEnvironment(settings_)) {}

std::vector<std::string> StageRunner::PlacedEnvironment(const fs::path& home, const std::string& tmp,
                                                       const fs::path& extensions,
                                                       const fs::path& triton) const {
  std::vector<std::string> env = inherited_;
  env.push_back("HOME=" + home.string());
  env.push_back("TMPDIR=" + tmp);
  env.push_back("TORCH_EXTENSIONS_DIR=" + extensions.string());
  env.push_back("TRITON_CACHE_DIR=" + triton.string());
  // Per-job JIT cache: one job's PTX must never be another's (cache poisoning).
  env.push_back("CUDA_CACHE_PATH=" + (home / ".nv").string());
  // torch.compile's and other libraries' caches default to /tmp and ~/.cache.
  env.push_back("TORCHINDUCTOR_CACHE_DIR=" + (home / ".inductor").string());
  env.push_back("XDG_CACHE_HOME=" + (home / ".cache").string());
  env.push_back("PYTHONUNBUFFERED=1");
  env.push_back("PYTHONDONTWRITEBYTECODE=1");
  env.push_back("LANG=C.UTF-8");
  env.push_back("MAX_JOBS=" + std::to_string(settings_.build_jobs));
  // OpenMP workers sleep as soon as a parallel region ends instead of
  // spinning for milliseconds: a side's spinning workers would otherwise
  // take cores from the other side's timed call, and the judge could not
  // tell them from work the candidate left running (docs/judge-boundary.md).
  env.push_back("OMP_WAIT_POLICY=PASSIVE");
  // Allocations up to 32 MiB (glibc's largest threshold) come from the heap
  // and are reused, not mapped afresh and faulted in inside a timed call: a
  // CPU candidate's 2 MB output otherwise timed 5x slower in some stages,
  // whichever way glibc's adaptive threshold had drifted.
  env.push_back("MALLOC_MMAP_THRESHOLD_=33554432");
  env.push_back("MALLOC_TRIM_THRESHOLD_=1073741824");
  // OpenBLAS (numpy's wheels bundle it; some hosts' libblas is it) starts
  // its pool when it loads, one thread per core: the run stage's judge
  // imports numpy with torch, and it must have no thread but its own when it
  // forks the candidate's process and drops its capabilities (capabilities
  // are per thread; docs/judge-boundary.md). The zygote sets the same for
  // the same reason. torch's own intra-op pool (OpenMP) is untouched.
  env.push_back("OPENBLAS_NUM_THREADS=1");
  return env;
}

std::vector<std::string> StageRunner::GpuEnvironment(std::optional<uint32_t> gpu) const {
  // An empty list hides every GPU: compile stages never hold one.
  if (!gpu) return {"CUDA_VISIBLE_DEVICES="};
  return {"CUDA_VISIBLE_DEVICES=" + (sandbox_ ? std::string("0") : std::to_string(*gpu)),
          "KBOX_GPU_INDEX=" + std::to_string(*gpu)};
}

std::vector<std::string> StageRunner::CandidateEnvironment(const JobWorkspace& ws) const {
  // Inside the sandbox /tmp is private to the stage; outside, the job's own.
  return PlacedEnvironment(ws.home_dir(), sandbox_ ? std::string("/tmp") : ws.tmp_dir().string(),
                           ws.build_dir(), ws.triton_dir());
}

ProcessSpec StageRunner::BuildProcessSpec(const JobWorkspace& ws, const std::string& spec_path,
                                          const StagePlacement& placement) const {
  ProcessSpec p;
  p.argv = {settings_.python, "-s", "-B", (settings_.harness_dir / "kbox_stage.py").string(),
            "--spec", spec_path, "--result-fd", "3"};
  const fs::path& judge = placement.judge_dir;
  if (judge.empty()) {
    p.env = CandidateEnvironment(ws);
    p.cwd = ws.home_dir().string();
  } else {
    // A run stage's judge: everything it writes, caches it may load code
    // from included, is in its own directory, which nothing the candidate
    // controls (the compile stage, the candidate's process) can reach
    // (docs/judge-boundary.md). Its extensions directory starts empty.
    p.env = PlacedEnvironment(judge, judge.string(), judge / "torch_extensions", judge / "triton");
    p.cwd = judge.string();
  }
  for (auto& kv : GpuEnvironment(placement.gpu)) p.env.push_back(std::move(kv));
  if (!placement.cuda_arch.empty()) {
    p.env.push_back("TORCH_CUDA_ARCH_LIST=" + placement.cuda_arch);
  }
  p.wall_limit = placement.wall_limit;
  p.cancel = placement.cancel;
  p.turn_granted_ns = placement.turn_granted_ns;
  p.turn_wait_limit = placement.turn_wait_limit;
  p.set_up_done_ns = placement.set_up_done_ns;
  p.turn_due_ns = placement.turn_due_ns;
  p.set_up_limit = placement.set_up_limit;
  p.pausable = placement.pausable;
  p.max_output_bytes = settings_.max_output_bytes;
  return p;
}

v1::SandboxSpec StageRunner::BuildSandboxSpec(const JobWorkspace& ws, v1::Stage stage,
                                              const ProcessSpec& harness,
                                              const StagePlacement& placement,
                                              const std::vector<std::string>& cgroup_procs,
                                              const CandidateCgroupFiles* candidate_cgroup) const {
  const SandboxSettings& sb = *sandbox_;
  v1::SandboxSpec spec;
  for (const auto& arg : harness.argv) spec.add_argv(arg);
  for (const auto& kv : harness.env) spec.add_env(kv);
  spec.set_cwd(harness.cwd);
  spec.set_root_mount_point(sb.root_mount_point.string());
  spec.set_root_tmpfs_bytes(16 << 20);  // Mount points and three /etc files.
  for (const auto& path : sb.ro_paths) spec.add_ro_paths(path);
  for (const auto& path : placement.extra_ro_paths) spec.add_ro_paths(path);
  spec.add_ro_paths(ws.src_dir().string());
  const bool compile = stage == v1::STAGE_COMPILE;
  // The run stage loads what the compile stage built and builds nothing:
  // its candidate's process cannot replace a library once the judge has
  // read its imports.
  (compile ? spec.add_rw_paths(ws.build_dir().string()) : spec.add_ro_paths(ws.build_dir().string()));
  for (const auto& dir : {ws.home_dir(), ws.triton_dir()}) spec.add_rw_paths(dir.string());
  if (!placement.judge_dir.empty()) spec.add_rw_paths(placement.judge_dir.string());
  spec.set_tmp_bytes(sb.tmp_bytes);
  for (const char* dev : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}) {
    spec.add_devices(dev);
  }
  if (placement.gpu) {
    // Only the job's own GPU, plus the control and unified-memory nodes CUDA
    // needs; no uvm-tools, caps, modeset or other GPUs.
    spec.add_devices("/dev/nvidiactl");
    spec.add_devices("/dev/nvidia-uvm");
    spec.add_devices("/dev/nvidia" + std::to_string(*placement.gpu));
  }
  if (compile) {
    spec.set_outside_uid(sb.uid);
    spec.set_outside_gid(sb.gid);
    spec.set_inside_id(kCandidateInsideId);
  } else {
    // The program is the judge; the candidate's process it forks gets the
    // id every compile stage has (docs/judge-boundary.md).
    spec.set_outside_uid(sb.judge_uid);
    spec.set_outside_gid(sb.judge_gid);
    spec.set_inside_id(kJudgeInsideId);
    auto* candidate = spec.mutable_candidate();
    candidate->set_inside_id(kCandidateInsideId);
    candidate->set_outside_uid(sb.uid);
    candidate->set_outside_gid(sb.gid);
  }
  if (candidate_cgroup) {
    int fd = kFirstInheritedFd;
    const auto inherit = [&](const std::string& path, bool write) {
      if (path.empty()) return;
      auto* file = spec.add_inherited_files();
      file->set_path(path);
      file->set_write(write);
      file->set_fd(fd++);
    };
    for (const auto& procs : candidate_cgroup->procs) inherit(procs, true);
    inherit(candidate_cgroup->freeze, true);
    inherit(candidate_cgroup->state, false);
    inherit(candidate_cgroup->cpu, false);
    inherit(candidate_cgroup->threads, false);
  }
  spec.set_hostname("kbox");
  spec.set_seccomp_policy((sb.policy_dir / (compile ? "compile.policy" : "run.policy")).string());
  auto* limits = spec.mutable_rlimits();
  limits->set_nofile(4096);
  limits->set_fsize_bytes(1ull << 30);
  limits->set_nproc(sb.limits.pids);
  // A backstop behind the wall-clock limit: CPU time over all cores.
  const auto wall_s = std::chrono::duration_cast<std::chrono::seconds>(
                          placement.wall_limit + placement.set_up_limit)
                          .count();
  limits->set_cpu_seconds(static_cast<uint64_t>(wall_s + 1) * 64);
  for (const auto& procs : cgroup_procs) spec.mutable_cgroup()->add_procs_files(procs);
  if (!compile && placement.mask_toolchain) {
    for (const auto& path : sb.run_masked_paths) spec.add_masked_paths(path);
  }
  spec.add_keep_fds(harness.result_fd);
  return spec;
}

StageOutcome StageRunner::RunSandboxed(const JobWorkspace& ws, v1::Stage stage,
                                       ProcessSpec harness, const StagePlacement& placement,
                                       std::optional<JobCgroup> cgroup,
                                       const CandidateCgroupFiles* candidate_cgroup) const {
  StageOutcome outcome;
  const std::string name = ws.job_id() + (stage == v1::STAGE_COMPILE ? "-compile" : "-run");
  const std::vector<std::string> procs = cgroup ? cgroup->ProcsFiles() : std::vector<std::string>{};
  const std::string spec_path = (sandbox_->spec_dir / (name + ".pb")).string();
  {
    const v1::SandboxSpec spec =
        BuildSandboxSpec(ws, stage, harness, placement, procs, candidate_cgroup);
    const int fd = ::open(spec_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    const bool written = fd >= 0 && spec.SerializeToFileDescriptor(fd);
    if (fd >= 0) ::close(fd);
    if (!written) {
      outcome.process.spawn_error = "cannot write the sandbox spec " + spec_path;
      return outcome;
    }
  }
  ProcessSpec launcher = harness;
  launcher.argv = {sandbox_->binary, "--spec", spec_path};
  launcher.env.clear();
  launcher.cwd = sandbox_->spec_dir.string();
  std::optional<ProcessOutcome> preforked;
  if (zygotes_ && !placement.zygote_slot.empty()) {
    preforked = RunPreforked(placement.zygote_slot, stage == v1::STAGE_RUN, spec_path, launcher);
  }
  // A zygote's run ends as kSpawnFailed only when the zygote itself failed.
  outcome.zygote_failed = preforked && preforked->end == ProcessOutcome::End::kSpawnFailed;
  outcome.process = preforked ? std::move(*preforked) : RunProcess(launcher);
  ::unlink(spec_path.c_str());
  if (cgroup) {
    cgroup->KillAll();  // Anything that outlived the sandbox's init.
    outcome.memory_limit_hit = cgroup->MemoryLimitHit();
    outcome.pids_limit_hit = cgroup->PidsLimitHit();
  }
  outcome.sandbox_setup_failed = outcome.process.end == ProcessOutcome::End::kExited &&
                                 outcome.process.exit_code == kSandboxSetupFailed &&
                                 outcome.process.result.empty();
  return outcome;
}

void StageRunner::EnablePrefork(const std::string& enter_library, ZygoteObserver observer) {
  zygotes_ = std::make_shared<ZygotePool>(
      ZygoteSettings{.python = settings_.python,
                     .script = (settings_.harness_dir / "kbox_zygote.py").string(),
                     .enter_library = enter_library,
                     .env = ZygoteEnvironment(),
                     .observer = std::move(observer)});
}

void StageRunner::PrestartZygotes(const std::vector<std::string>& slots, bool run_stages) {
  if (zygotes_) zygotes_->Prestart(slots, run_stages);
}

std::vector<std::string> StageRunner::ZygoteEnvironment() const {
  std::vector<std::string> env = inherited_;
  for (const char* kv : {"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "LANG=C.UTF-8",
                         "HOME=/nonexistent", "TMPDIR=/nonexistent",
                         // A fork copies only the forking thread: the zygote
                         // must have no other (kbox_zygote.py checks).
                         "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
                         // Read once by libgomp, at the zygote's import: every
                         // stage forked from it gets it (PlacedEnvironment).
                         "OMP_WAIT_POLICY=PASSIVE",
                         // Read by glibc at the zygote's start (PlacedEnvironment).
                         "MALLOC_MMAP_THRESHOLD_=33554432", "MALLOC_TRIM_THRESHOLD_=1073741824",
                         "NUMEXPR_NUM_THREADS=1", "VECLIB_MAXIMUM_THREADS=1",
                         // is_available() through NVML, never a CUDA context.
                         "PYTORCH_NVML_BASED_CUDA_CHECK=1",
                         // No GPU for the zygote itself; each child gets its
                         // job's CUDA_VISIBLE_DEVICES from its spec.
                         "CUDA_VISIBLE_DEVICES="}) {
    env.emplace_back(kv);
  }
  return env;
}

std::optional<ProcessOutcome> StageRunner::RunPreforked(const std::string& slot, bool single_use,
                                                        const std::string& spec_path,
                                                        const ProcessSpec& limits) const {
  Zygote& zygote = zygotes_->For(slot, single_use);
  auto outcome = zygote.Run(spec_path, limits);
  if (!outcome) {
    std::cerr << "kboxd: zygote for " << slot << " unavailable (" << zygote.start_error()
              << "); stages there fall back to fork+exec" << std::endl;
  }
  return outcome;
}

Status StageRunner::WriteSecret(const fs::path& judge_dir, uint64_t seed, std::string& path) const {
  // In the judge's own directory, which kboxd made for this stage alone (so
  // O_EXCL cannot meet a file a job planted), readable by the judge's uid
  // only. The spec files sit in the read-only source directory, which the
  // candidate's process can read.
  path = (judge_dir / "kbox_secret.json").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot create the judge's seed file in " + judge_dir.filename().string());
  const std::string text = "{\"seed\": \"" + std::to_string(seed) + "\"}\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  (!sandbox_ || ::fchown(fd, sandbox_->judge_uid, sandbox_->judge_gid) == 0);
  ::close(fd);
  if (!ok) return Status::Error("cannot write the judge's seed file");
  return Status::Ok();
}

std::optional<JobCgroup> StageRunner::CreateStageCgroup(const JobWorkspace& ws, v1::Stage stage,
                                                        std::string& error) const {
  if (!sandbox_ || !sandbox_->cgroups) return std::nullopt;
  const std::string name = ws.job_id() + (stage == v1::STAGE_COMPILE ? "-compile" : "-run");
  auto created = sandbox_->cgroups->CreateJob(name, sandbox_->limits);
  if (!created) {
    error = created.error().message();
    return std::nullopt;
  }
  return std::move(*created);
}

StageOutcome StageRunner::Run(const JobWorkspace& ws, const v1::StageSpec& given,
                              const StagePlacement& given_placement) const {
  StageOutcome outcome;
  StagePlacement placement = given_placement;
  const bool run_stage = given.stage() == v1::STAGE_RUN;
  // The seed decides every trial's inputs: a candidate that could read it
  // could precompute answers. Compile stages do not need it; the run stage
  // gets it through a file only its judge process reads.
  v1::StageSpec spec = given;
  spec.set_seed(0);
  if (run_stage) {
    if (placement.judge_dir.empty()) {
      auto dir = ws.CreateJudgeDir(
          sandbox_ ? std::optional<uid_t>(sandbox_->judge_uid) : std::nullopt,
          sandbox_ ? std::optional<gid_t>(sandbox_->judge_gid) : std::nullopt);
      if (!dir) {
        outcome.process.spawn_error = dir.error().message();
        return outcome;
      }
      placement.judge_dir = *dir;
    }
    std::string secret;
    if (Status error = WriteSecret(placement.judge_dir, given.seed(), secret); !error.ok()) {
      outcome.process.spawn_error = error.message();
      return outcome;
    }
    spec.set_secret_path(secret);
    auto* boundary = spec.mutable_candidate_boundary();
    if (sandbox_) {
      boundary->set_uid(kCandidateInsideId);
      boundary->set_gid(kCandidateInsideId);
    }
    for (const auto& kv : CandidateEnvironment(ws)) boundary->add_env(kv);
    // The candidate's process replaces its environment: the same GPU as the judge's.
    for (const auto& kv : GpuEnvironment(placement.gpu)) boundary->add_env(kv);
    boundary->set_cwd(ws.home_dir().string());
  }
  std::string cgroup_error;
  std::optional<JobCgroup> cgroup = CreateStageCgroup(ws, given.stage(), cgroup_error);
  if (!cgroup_error.empty()) {
    outcome.process.spawn_error = cgroup_error;
    return outcome;
  }
  std::optional<CandidateCgroupFiles> candidate_cgroup;
  if (run_stage && cgroup && sandbox_->cgroups->CanFreeze()) {
    auto files = cgroup->AddCandidateGroup();
    if (!files) {
      outcome.process.spawn_error = files.error().message();
      return outcome;
    }
    candidate_cgroup = std::move(*files);
    auto* out = spec.mutable_candidate_boundary()->mutable_cgroup();
    out->set_version(static_cast<uint32_t>(candidate_cgroup->version));
    // The numbering BuildSandboxSpec gives the inherited files.
    int fd = kFirstInheritedFd;
    for (size_t i = 0; i < candidate_cgroup->procs.size(); ++i) out->add_procs_fds(fd++);
    out->set_freeze_fd(fd++);
    out->set_state_fd(fd++);
    out->set_cpu_fd(candidate_cgroup->cpu.empty() ? -1 : fd++);
    out->set_threads_fd(fd++);
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(spec, &json, options); !s.ok()) {
    outcome.process.spawn_error = "cannot encode stage spec: " + std::string(s.message());
    return outcome;
  }
  const std::string name = SpecFileName(spec.stage());
  // Only kboxd writes the source directory (the sandbox binds it read-only),
  // so a file already there is an earlier run's of this stage: one run again
  // after a failed set-up, or one queued again when its GPU left service
  // before its turn. The new spec replaces it (unlinked, then created with
  // O_EXCL: a link there is removed, never followed).
  ::unlink((ws.src_dir() / name).c_str());
  if (Status error = ws.WriteFile(name, json); !error.ok()) {
    outcome.process.spawn_error = error.message();
    return outcome;
  }
  ProcessSpec harness = BuildProcessSpec(ws, (ws.src_dir() / name).string(), placement);
  if (sandbox_) {
    outcome = RunSandboxed(ws, spec.stage(), std::move(harness), placement, std::move(cgroup),
                           candidate_cgroup ? &*candidate_cgroup : nullptr);
  } else {
    outcome.process = RunProcess(harness);
  }
  if (outcome.process.result_truncated) {
    outcome.protocol_error = "result pipe exceeded its size limit";
  } else {
    DecodeHarnessEvents(outcome.process.result, outcome);
  }
  return outcome;
}

}  // namespace kbox
