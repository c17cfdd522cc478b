// kboxd's metric declarations (daemon/metrics.h): every name, type and label
// set as docs/metrics.md lists them, read back from the exposition text the
// way Prometheus reads it, and the series each recording moves.

#include "daemon/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "daemon/version.h"
#include "policy/static_check/rule_catalog.h"

namespace kbox {
namespace {

struct Exposition {
  std::map<std::string, std::string> types;  // Family name -> type.
  // Sample name (with _bucket/_sum/_count) + sorted labels -> value.
  std::map<std::string, std::map<std::string, double>> samples;
  // Family name -> label name -> values seen.
  std::map<std::string, std::map<std::string, std::set<std::string>>> labels;
};

std::string FamilyOf(const std::string& sample, const Exposition& e) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample.size() > s.size() && sample.ends_with(s)) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      if (e.types.contains(base) && e.types.at(base) == "histogram") return base;
    }
  }
  return sample;
}

Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  const std::regex type_line(R"(^# TYPE (\S+) (\S+)$)");
  const std::regex sample_line(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
  const std::regex label(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)")re");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, type_line)) {
      e.types[m[1]] = m[2];
    } else if (!line.empty() && line[0] != '#' && std::regex_match(line, m, sample_line)) {
      const std::string name = m[1], label_text = m[3];
      const std::string family = FamilyOf(name, e);
      for (std::sregex_iterator it(label_text.begin(), label_text.end(), label), end; it != end; ++it) {
        if ((*it)[1] != "le") e.labels[family][(*it)[1]].insert((*it)[2]);
      }
      e.samples[name][label_text] = std::stod(m[4]);
    }
  }
  return e;
}

v1::GpuInfo Gpu(uint32_t index, const std::string& uuid) {
  v1::GpuInfo gpu;
  gpu.set_index(index);
  gpu.set_name("NVIDIA H200");
  gpu.set_uuid(uuid);
  return gpu;
}

Metrics TwoGpuMetrics() {
  return Metrics(MetricLabelSets{.backends = {v1::BACKEND_CPU, v1::BACKEND_CUDA},
                                 .gpus = {0, 1},
                                 .gpu_info = {Gpu(0, "GPU-aaaa"), Gpu(1, "GPU-bbbb")},
                                 .tokens = {"alice", "bob"}});
}

TEST(MetricsTest, DeclaresEveryMetricWithItsType) {
  const Exposition e = Parse(TwoGpuMetrics().Serialize());
  const std::map<std::string, std::string> expected = {
      {"kbox_jobs_total", "counter"},
      {"kbox_token_jobs_total", "counter"},
      {"kbox_gpu_info", "gauge"},
      {"kbox_job_phase_duration_seconds", "histogram"},
      {"kbox_http_responses_total", "counter"},
      {"kbox_anticheat_verdicts_total", "counter"},
      {"kbox_infra_errors_total", "counter"},
      {"kbox_infra_retries_total", "counter"},
      {"kbox_sandbox_violations_total", "counter"},
      {"kbox_worker_crashes_total", "counter"},
      {"kbox_zygote_restarts_total", "counter"},
      {"kbox_zygote_start_failures_total", "counter"},
      {"kbox_device_quarantines_total", "counter"},
      {"kbox_device_probes_total", "counter"},
      {"kbox_stage_cpu_seconds_total", "counter"},
      {"kbox_set_up_pauses_total", "counter"},
      {"kbox_queue_depth", "gauge"},
      {"kbox_run_slots", "gauge"},
      {"kbox_compile_slots", "gauge"},
      {"kbox_device_healthy", "gauge"},
      {"kbox_static_check_duration_seconds", "histogram"},
      {"kbox_jobs_in_flight", "gauge"},
      {"kbox_jobs_in_flight_limit", "gauge"},
      {"kbox_insecure_mode", "gauge"},
      {"kbox_build_cache_hits_total", "counter"},
      {"kbox_build_cache_misses_total", "counter"},
      {"kbox_build_cache_evictions_total", "counter"},
      {"kbox_build_cache_corrupt_entries_total", "counter"},
      {"kbox_build_cache_bytes", "gauge"},
      {"kbox_reference_cache_hits_total", "counter"},
      {"kbox_reference_cache_misses_total", "counter"},
      {"kbox_reference_cache_entries", "gauge"},
      {"kbox_job_journal_write_duration_seconds", "histogram"},
      {"kbox_job_journal_write_failures_total", "counter"},
      {"kbox_job_journal_corrupt_records_total", "counter"},
      {"kbox_job_journal_restored_jobs_total", "counter"},
      {"kbox_remote_builds_total", "counter"},
      {"kbox_builds_served_total", "counter"},
      {"kbox_build_info", "gauge"},
      {"kbox_speedup", "histogram"},
  };
  EXPECT_EQ(e.types, expected);
  for (const auto& [name, type] : e.types) {
    EXPECT_TRUE(std::regex_match(name, std::regex("kbox_[a-z_]+"))) << name;
    EXPECT_EQ(type == "counter", name.ends_with("_total")) << name;
    // Every family has its series from the start.
    EXPECT_TRUE(e.samples.contains(type == "histogram" ? name + "_count" : name)) << name;
  }
}

TEST(MetricsTest, LabelValuesComeFromClosedSets) {
  const Exposition e = Parse(TwoGpuMetrics().Serialize());
  using Sets = std::map<std::string, std::set<std::string>>;
  const std::set<std::string> devices = {"cpu", "gpu0", "gpu1"};
  const std::set<std::string> backends = {"cpu", "cuda"};
  std::set<std::string> rules;
  for (const auto& rule : static_check::RuleCatalog()) rules.insert(std::string(rule.id));
  std::set<std::string> causes, kinds;
  for (InfraCause c : kAllInfraCauses) causes.insert(std::string(InfraCauseName(c)));
  for (ViolationKind k : kAllViolationKinds) kinds.insert(std::string(ViolationKindName(k)));
  const std::set<std::string> statuses = {"correct",           "compile_error", "runtime_error",
                                          "incorrect",         "timeout",       "rejected",
                                          "sandbox_violation", "infra_error",   "reference_error",
                                          "cancelled"};
  const std::map<std::string, Sets> expected = {
      {"kbox_jobs_total",
       {{"backend", backends},
        {"status", statuses}}},
      {"kbox_token_jobs_total", {{"token", {"alice", "bob"}}, {"status", statuses}}},
      {"kbox_gpu_info",
       {{"device", {"gpu0", "gpu1"}}, {"gpu", {"0", "1"}}, {"UUID", {"GPU-aaaa", "GPU-bbbb"}},
        {"modelName", {"NVIDIA H200"}}}},
      {"kbox_job_phase_duration_seconds",
       {{"backend", backends}, {"phase", {"static", "compile", "queue_wait", "run", "total"}}}},
      {"kbox_http_responses_total", {{"code", {"1xx", "2xx", "3xx", "4xx", "5xx"}}}},
      {"kbox_anticheat_verdicts_total", {{"rule", rules}, {"severity", {"info", "suspicious", "reject"}}}},
      {"kbox_infra_errors_total", {{"cause", causes}}},
      {"kbox_infra_retries_total",
       {{"cause", {"stage_killed", "compiler_killed", "zygote_died", "harness_crash"}}}},
      {"kbox_sandbox_violations_total", {{"kind", kinds}}},
      {"kbox_worker_crashes_total", {{"worker", {"harness", "zygote"}}}},
      // Compile workers' zygotes (preforked_compile_stage) count as "compile".
      {"kbox_zygote_restarts_total", {{"device", {"compile", "cpu", "gpu0", "gpu1"}}}},
      {"kbox_zygote_start_failures_total", {{"device", {"compile", "cpu", "gpu0", "gpu1"}}}},
      {"kbox_device_quarantines_total", {{"device", devices}}},
      {"kbox_device_probes_total", {{"device", devices}, {"result", {"pass", "fail"}}}},
      {"kbox_stage_cpu_seconds_total", {{"backend", backends}, {"stage", {"compile", "run"}}}},
      {"kbox_set_up_pauses_total", {{"device", devices}, {"result", {"stopped", "not_stopped"}}}},
      {"kbox_queue_depth", {{"queue", {"compile", "run_cpu", "run_gpu"}}}},
      {"kbox_run_slots", {{"device", devices}, {"state", {"busy", "idle", "quarantined"}}}},
      {"kbox_compile_slots", {{"state", {"busy", "idle"}}}},
      {"kbox_device_healthy", {{"device", devices}}},
      {"kbox_job_journal_restored_jobs_total", {{"state", {"done", "requeued"}}}},
      {"kbox_remote_builds_total", {{"outcome", {"built", "failed", "fallback"}}}},
      {"kbox_builds_served_total", {{"outcome", {"built", "cached", "failed", "refused"}}}},
      {"kbox_build_info", {{"version", {kVersion}}}},
      {"kbox_speedup", {{"backend", backends}}},
  };
  for (const auto& [family, sets] : expected) EXPECT_EQ(e.labels.at(family), sets) << family;
  // The unlabelled ones carry no label at all.
  for (const auto& [family, type] : e.types) {
    if (!expected.contains(family)) {
      EXPECT_FALSE(e.labels.contains(family)) << family;
    }
  }
  EXPECT_EQ(e.samples.at("kbox_device_healthy").at(R"(device="gpu1")"), 1);
}

v1::EvaluateResult Job(v1::Backend backend, v1::Status status) {
  v1::EvaluateResult r;
  r.mutable_settings()->set_backend(backend);
  r.set_status(status);
  r.mutable_durations()->set_static_ms(0.2);
  r.mutable_durations()->set_compile_ms(20'000);
  r.mutable_durations()->set_total_ms(20'100);
  return r;
}

// A retried attempt counts by cause, and a killed harness as a worker crash;
// the job's own count waits for its final result.
TEST(MetricsTest, RecordInfraRetryCountsTheAttemptNotTheJob) {
  Metrics metrics = TwoGpuMetrics();
  metrics.RecordInfraRetry(InfraCause::kStageKilled);
  metrics.RecordInfraRetry(InfraCause::kCompilerKilled);
  JobTrace killed{.checked = true, .compiled = true};
  killed.cause.infra = InfraCause::kStageKilled;
  metrics.RecordJob(Job(v1::BACKEND_CPU, v1::INFRA_ERROR), killed);
  const Exposition e = Parse(metrics.Serialize());
  EXPECT_EQ(e.samples.at("kbox_infra_retries_total").at(R"(cause="stage_killed")"), 1);
  EXPECT_EQ(e.samples.at("kbox_infra_retries_total").at(R"(cause="compiler_killed")"), 1);
  EXPECT_EQ(e.samples.at("kbox_infra_retries_total").at(R"(cause="zygote_died")"), 0);
  EXPECT_EQ(e.samples.at("kbox_infra_errors_total").at(R"(cause="stage_killed")"), 1);
  EXPECT_EQ(e.samples.at("kbox_jobs_total").at(R"(backend="cpu",status="infra_error")"), 1);
  // The killed harness of the retried attempt and of the final one.
  EXPECT_EQ(e.samples.at("kbox_worker_crashes_total").at(R"(worker="harness")"), 2);
}

TEST(MetricsTest, RecordJobCountsStatusPhasesAndCauses) {
  Metrics metrics = TwoGpuMetrics();
  JobTrace compiled{.checked = true, .compiled = true};
  compiled.cause.infra = InfraCause::kHarnessCrash;
  metrics.RecordJob(Job(v1::BACKEND_CUDA, v1::INFRA_ERROR), compiled);
  JobTrace violated{.checked = true, .compiled = true, .queued = true, .ran = true,
                    .compile_cpu_ms = 1500, .run_cpu_ms = 250};
  violated.cause.violation = ViolationKind::kSeccomp;
  metrics.RecordJob(Job(v1::BACKEND_CPU, v1::SANDBOX_VIOLATION), violated);
  // An INFRA_ERROR without a cause still counts, as kboxd's own bug.
  metrics.RecordJob(Job(v1::BACKEND_CPU, v1::INFRA_ERROR), JobTrace{});

  const Exposition e = Parse(metrics.Serialize());
  EXPECT_EQ(e.samples.at("kbox_jobs_total").at(R"(backend="cuda",status="infra_error")"), 1);
  EXPECT_EQ(e.samples.at("kbox_jobs_total").at(R"(backend="cpu",status="infra_error")"), 1);
  EXPECT_EQ(e.samples.at("kbox_jobs_total").at(R"(backend="cpu",status="sandbox_violation")"), 1);
  EXPECT_EQ(e.samples.at("kbox_jobs_total").at(R"(backend="cpu",status="correct")"), 0);
  EXPECT_EQ(e.samples.at("kbox_infra_errors_total").at(R"(cause="harness_crash")"), 1);
  EXPECT_EQ(e.samples.at("kbox_infra_errors_total").at(R"(cause="internal")"), 1);
  EXPECT_EQ(e.samples.at("kbox_worker_crashes_total").at(R"(worker="harness")"), 1);
  EXPECT_EQ(e.samples.at("kbox_sandbox_violations_total").at(R"(kind="seccomp")"), 1);
  EXPECT_DOUBLE_EQ(e.samples.at("kbox_stage_cpu_seconds_total").at(R"(backend="cpu",stage="compile")"), 1.5);
  EXPECT_DOUBLE_EQ(e.samples.at("kbox_stage_cpu_seconds_total").at(R"(backend="cpu",stage="run")"), 0.25);
  EXPECT_EQ(e.samples.at("kbox_stage_cpu_seconds_total").at(R"(backend="cuda",stage="compile")"), 0);
  const auto& count = e.samples.at("kbox_job_phase_duration_seconds_count");
  // The CUDA job never reached a run slot: no queue_wait or run observation.
  EXPECT_EQ(count.at(R"(backend="cuda",phase="compile")"), 1);
  EXPECT_EQ(count.at(R"(backend="cuda",phase="queue_wait")"), 0);
  EXPECT_EQ(count.at(R"(backend="cuda",phase="run")"), 0);
  EXPECT_EQ(count.at(R"(backend="cpu",phase="run")"), 1);
  EXPECT_EQ(count.at(R"(backend="cpu",phase="total")"), 2);
  EXPECT_EQ(count.at(R"(backend="cpu",phase="static")"), 1);
  EXPECT_DOUBLE_EQ(e.samples.at("kbox_job_phase_duration_seconds_sum")
                       .at(R"(backend="cuda",phase="compile")"),
                   20.0);
  EXPECT_EQ(e.samples.at("kbox_job_phase_duration_seconds_bucket")
                .at(R"(backend="cuda",phase="compile",le="20")"),
            1);
  EXPECT_EQ(e.samples.at("kbox_job_phase_duration_seconds_bucket")
                .at(R"(backend="cuda",phase="compile",le="10")"),
            0);
}

// Only a timed, correct and rewardable job's speedup is observed.
TEST(MetricsTest, SpeedupsOfRewardableJobsOnly) {
  Metrics metrics = TwoGpuMetrics();
  v1::EvaluateResult fast = Job(v1::BACKEND_CUDA, v1::CORRECT);
  fast.set_rewardable(true);
  fast.set_speedup(1.8);
  metrics.RecordJob(fast, JobTrace{});
  v1::EvaluateResult flagged = fast;
  flagged.set_rewardable(false);
  metrics.RecordJob(flagged, JobTrace{});
  v1::EvaluateResult untimed = Job(v1::BACKEND_CUDA, v1::CORRECT);
  untimed.set_rewardable(true);
  metrics.RecordJob(untimed, JobTrace{});
  const Exposition e = Parse(metrics.Serialize());
  EXPECT_EQ(e.samples.at("kbox_speedup_count").at(R"(backend="cuda")"), 1);
  EXPECT_EQ(e.samples.at("kbox_speedup_bucket").at(R"(backend="cuda",le="2")"), 1);
  EXPECT_EQ(e.samples.at("kbox_speedup_bucket").at(R"(backend="cuda",le="1.5")"), 0);
  EXPECT_EQ(e.samples.at("kbox_build_info").at(std::string("version=\"") + kVersion + "\""), 1);
}

// Per-token counts join with the token file's names; the GPUs' UUIDs with
// DCGM's series.
TEST(MetricsTest, JobsPerTokenAndGpuUuids) {
  Metrics metrics = TwoGpuMetrics();
  metrics.RecordJob(Job(v1::BACKEND_CUDA, v1::CORRECT), JobTrace{}, "alice");
  metrics.RecordJob(Job(v1::BACKEND_CUDA, v1::CANCELLED), JobTrace{}, "alice");
  metrics.RecordJob(Job(v1::BACKEND_CPU, v1::CORRECT), JobTrace{}, "carol");  // added on SIGHUP
  metrics.RecordJob(Job(v1::BACKEND_CPU, v1::CORRECT), JobTrace{});           // no authentication
  const Exposition e = Parse(metrics.Serialize());
  const auto& per_token = e.samples.at("kbox_token_jobs_total");
  EXPECT_EQ(per_token.at(R"(status="correct",token="alice")"), 1);
  EXPECT_EQ(per_token.at(R"(status="cancelled",token="alice")"), 1);
  EXPECT_EQ(per_token.at(R"(status="correct",token="bob")"), 0);
  EXPECT_EQ(per_token.at(R"(status="correct",token="carol")"), 1);
  EXPECT_EQ(e.samples.at("kbox_jobs_total").at(R"(backend="cpu",status="correct")"), 2);
  const auto& gpus = e.samples.at("kbox_gpu_info");
  EXPECT_EQ(gpus.at(R"(UUID="GPU-aaaa",device="gpu0",gpu="0",modelName="NVIDIA H200")"), 1);
  EXPECT_EQ(gpus.at(R"(UUID="GPU-bbbb",device="gpu1",gpu="1",modelName="NVIDIA H200")"), 1);
}

TEST(MetricsTest, WorkersDevicesAndQueues) {
  Metrics metrics = TwoGpuMetrics();
  metrics.RecordZygoteEvent("gpu1", ZygoteEvent::kStarted);
  metrics.RecordZygoteEvent("gpu1", ZygoteEvent::kDied);
  metrics.RecordZygoteEvent("gpu1", ZygoteEvent::kStarted);
  metrics.RecordZygoteEvent("gpu1", ZygoteEvent::kRestarted);
  metrics.RecordZygoteEvent("cpu3", ZygoteEvent::kStartFailed);
  metrics.RecordQuarantine(1);
  metrics.SetDeviceHealthy("gpu1", false);
  metrics.SetRunSlots("gpu1", 0, 0, 1);
  metrics.SetRunSlots("cpu", 2, 1, 0);
  metrics.SetCompileSlots(3, 1);
  metrics.SetQueueDepth("run_gpu", 7);
  metrics.RecordResponse(503);
  metrics.RecordResponse(200);
  metrics.RecordSetUpPause(1, true);
  metrics.RecordSetUpPause(1, true);
  metrics.RecordSetUpPause(std::nullopt, false);

  const Exposition e = Parse(metrics.Serialize());
  EXPECT_EQ(e.samples.at("kbox_set_up_pauses_total").at(R"(device="gpu1",result="stopped")"), 2);
  EXPECT_EQ(e.samples.at("kbox_set_up_pauses_total").at(R"(device="cpu",result="not_stopped")"), 1);
  EXPECT_EQ(e.samples.at("kbox_worker_crashes_total").at(R"(worker="zygote")"), 1);
  EXPECT_EQ(e.samples.at("kbox_zygote_restarts_total").at(R"(device="gpu1")"), 1);
  EXPECT_EQ(e.samples.at("kbox_zygote_start_failures_total").at(R"(device="cpu")"), 1);
  EXPECT_EQ(e.samples.at("kbox_device_quarantines_total").at(R"(device="gpu1")"), 1);
  EXPECT_EQ(e.samples.at("kbox_device_healthy").at(R"(device="gpu1")"), 0);
  EXPECT_EQ(e.samples.at("kbox_device_healthy").at(R"(device="gpu0")"), 1);
  EXPECT_EQ(e.samples.at("kbox_run_slots").at(R"(device="gpu1",state="quarantined")"), 1);
  EXPECT_EQ(e.samples.at("kbox_run_slots").at(R"(device="cpu",state="busy")"), 2);
  EXPECT_EQ(e.samples.at("kbox_compile_slots").at(R"(state="busy")"), 3);
  EXPECT_EQ(e.samples.at("kbox_queue_depth").at(R"(queue="run_gpu")"), 7);
  EXPECT_EQ(e.samples.at("kbox_http_responses_total").at(R"(code="5xx")"), 1);
  EXPECT_EQ(e.samples.at("kbox_http_responses_total").at(R"(code="2xx")"), 1);
}

TEST(MetricsTest, LabelHelpers) {
  EXPECT_EQ(DeviceLabel(std::nullopt), "cpu");
  EXPECT_EQ(DeviceLabel(3), "gpu3");
  EXPECT_EQ(DeviceOfSlot("cpu1"), "cpu");
  EXPECT_EQ(DeviceOfSlot("gpu2"), "gpu2");
  // A lane's zygote (run_stages_ahead) counts for its device.
  EXPECT_EQ(DeviceOfSlot("gpu2.1"), "gpu2");
  EXPECT_EQ(DeviceOfSlot("cpu0.1"), "cpu");
  // A compile worker's zygote (preforked_compile_stage) has no device.
  EXPECT_EQ(DeviceOfSlot("compile3"), "compile");
  EXPECT_EQ(BackendLabel(v1::BACKEND_TRITON), "triton");
  EXPECT_EQ(BackendLabel(v1::BACKEND_CPU), "cpu");
}

}  // namespace
}  // namespace kbox
