#include "daemon/config_loader.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "clients/http_client.h"

namespace kbox {
namespace po = boost::program_options;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Collects the text-format parser's complaints into one message.
class CollectingErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (text.empty()) text = "line " + std::to_string(line + 1) + ":" +
                             std::to_string(column + 1) + ": " + message;
  }
  std::string text;
};

// The section of DaemonConfig that holds a setting named `name`, or "" when
// none does: a config written before the sections names its settings at the
// top level, and the error then says where each one goes.
std::string SectionOf(const std::string& name) {
  const google::protobuf::Descriptor* top = v1::DaemonConfig::descriptor();
  for (int i = 0; i < top->field_count(); ++i) {
    const google::protobuf::Descriptor* section = top->field(i)->message_type();
    if (section != nullptr && section->FindFieldByName(name) != nullptr) return top->field(i)->name();
  }
  return "";
}

}  // namespace

boost::system::result<v1::DaemonConfig, FieldError> ParseConfigText(const std::string& text) {
  v1::DaemonConfig config;
  google::protobuf::TextFormat::Parser parser;
  CollectingErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    std::string message = errors.text.empty() ? "cannot parse" : errors.text;
    const std::string marker = "Message type \"kbox.v1.DaemonConfig\" has no field named \"";
    if (const auto at = message.find(marker); at != std::string::npos) {
      const auto start = at + marker.size();
      const std::string name = message.substr(start, message.find('"', start) - start);
      if (const std::string section = SectionOf(name); !section.empty()) {
        if (message.ends_with('.')) message.pop_back();
        message += "; settings live in sections: this one is " + section + " { " + name + ": ... }";
      }
    }
    return FieldError{"config", message};
  }
  return config;
}

boost::system::result<v1::DaemonConfig, FieldError> ApplyConfigDefaults(v1::DaemonConfig c,
                                                                        unsigned cores) {
  if (cores == 0) cores = 1;
  v1::ListenerConfig& listener = *c.mutable_listener();
  v1::AuthConfig& auth = *c.mutable_auth();
  v1::LimitsConfig& limits = *c.mutable_limits();
  v1::SandboxConfig& sandbox = *c.mutable_sandbox();
  v1::SchedulingConfig& scheduling = *c.mutable_scheduling();
  v1::CachesConfig& caches = *c.mutable_caches();
  v1::StoreConfig& store = *c.mutable_store();
  v1::ExperimentalConfig& experimental = *c.mutable_experimental();
  if (listener.listen().empty()) listener.set_listen("127.0.0.1:8080");
  if (sandbox.python().empty()) sandbox.set_python("/usr/bin/python3");
  if (store.work_dir().empty()) {
    const char* tmp = std::getenv("TMPDIR");
    store.set_work_dir(std::string(tmp && *tmp ? tmp : "/tmp") + "/kbox-" + std::to_string(::getpid()));
  }
  if (listener.max_body_bytes() == 0) listener.set_max_body_bytes(4 * kMiB);
  if (limits.max_source_bytes() == 0) limits.set_max_source_bytes(1 * kMiB);
  if (listener.read_timeout_s() == 0) listener.set_read_timeout_s(30);
  if (listener.write_timeout_s() == 0) listener.set_write_timeout_s(30);
  if (listener.header_timeout_s() == 0)
    listener.set_header_timeout_s(std::min(10u, listener.read_timeout_s()));
  if (listener.max_connections() == 0) listener.set_max_connections(4096);
  if (limits.max_in_flight_jobs() == 0) limits.set_max_in_flight_jobs(64);
  if (listener.io_threads() == 0) listener.set_io_threads(2);
  if (scheduling.compile_workers() == 0) scheduling.set_compile_workers(cores);
  if (scheduling.cpu_run_slots() == 0) scheduling.set_cpu_run_slots(1);
  if (!scheduling.has_infra_retries()) scheduling.set_infra_retries(1);
  if (!scheduling.has_exchange_arena_mib()) scheduling.set_exchange_arena_mib(1024);
  if (limits.compile_time_limit_s() == 0) limits.set_compile_time_limit_s(300);
  if (limits.default_time_limit_s() == 0) limits.set_default_time_limit_s(120);
  if (limits.max_time_limit_s() == 0) limits.set_max_time_limit_s(900);
  if (limits.run_set_up_limit_s() == 0) limits.set_run_set_up_limit_s(180);
  if (limits.max_correctness_trials() == 0) limits.set_max_correctness_trials(100);
  if (limits.default_performance_trials() == 0) limits.set_default_performance_trials(20);
  if (limits.max_performance_trials() == 0) limits.set_max_performance_trials(1000);
  if (limits.warmup_calls() == 0) limits.set_warmup_calls(3);
  if (limits.max_output_bytes() == 0) limits.set_max_output_bytes(8 * kMiB);
  if (limits.max_log_bytes() == 0) limits.set_max_log_bytes(16 << 10);
  if (sandbox.sandbox_uid() == 0) sandbox.set_sandbox_uid(65534);
  if (sandbox.sandbox_gid() == 0) sandbox.set_sandbox_gid(65534);
  if (sandbox.judge_uid() == 0) sandbox.set_judge_uid(65533);
  if (sandbox.judge_gid() == 0) sandbox.set_judge_gid(65533);
  if (limits.job_scratch_bytes() == 0) limits.set_job_scratch_bytes(4ull << 30);
  if (limits.job_memory_bytes() == 0) limits.set_job_memory_bytes(8ull << 30);
  if (limits.job_pids() == 0) limits.set_job_pids(1024);
  if (sandbox.default_anticheat_profile().empty()) sandbox.set_default_anticheat_profile("strict");
  if (caches.build_cache_dir().empty()) caches.set_build_cache_dir(store.work_dir() + "/build-cache");
  if (!caches.has_build_cache_max_bytes()) caches.set_build_cache_max_bytes(20ull << 30);
  if (!experimental.has_preforked_run_stage()) experimental.set_preforked_run_stage(true);
  if (!experimental.has_light_headers()) experimental.set_light_headers(true);
  if (!experimental.has_precompiled_header()) experimental.set_precompiled_header(true);
  if (!experimental.has_cuda_per_operator_headers()) experimental.set_cuda_per_operator_headers(true);
  if (!caches.has_reference_cache_enabled()) caches.set_reference_cache_enabled(true);
  if (caches.reference_cache_max_entries() == 0) caches.set_reference_cache_max_entries(10000);
  if (caches.reference_cache_ttl_s() == 0) caches.set_reference_cache_ttl_s(86400);
  if (caches.live_recheck_speedup() == 0) caches.set_live_recheck_speedup(1.0);
  if (caches.reference_cache_max_relative_ci() == 0) caches.set_reference_cache_max_relative_ci(0.01);
  if (store.result_ttl_s() == 0) store.set_result_ttl_s(3600);
  if (store.max_stored_jobs() == 0) store.set_max_stored_jobs(100000);
  if (store.drain_deadline_s() == 0) store.set_drain_deadline_s(60);

  if (listener.max_body_bytes() > 64 * kMiB)
    return FieldError{"listener.max_body_bytes", "must be at most 64 MiB"};
  if (limits.max_source_bytes() > listener.max_body_bytes()) {
    return FieldError{"limits.max_source_bytes", "must not exceed max_body_bytes"};
  }
  if (sandbox.python().front() != '/') return FieldError{"sandbox.python", "must be an absolute path"};
  if (limits.max_in_flight_jobs() > 4096)
    return FieldError{"limits.max_in_flight_jobs", "must be at most 4096"};
  if (listener.io_threads() > 64) return FieldError{"listener.io_threads", "must be at most 64"};
  if (listener.header_timeout_s() > listener.read_timeout_s()) {
    return FieldError{"listener.header_timeout_s", "must not exceed read_timeout_s"};
  }
  if (listener.max_connections() > 1u << 20)
    return FieldError{"listener.max_connections", "must be at most 1048576"};
  if (scheduling.compile_workers() > 256)
    return FieldError{"scheduling.compile_workers", "must be at most 256"};
  if (scheduling.cpu_run_slots() > 256) return FieldError{"scheduling.cpu_run_slots", "must be at most 256"};
  if (scheduling.infra_retries() > 3) return FieldError{"scheduling.infra_retries", "must be at most 3"};
  if (scheduling.run_stages_ahead() > 3)
    return FieldError{"scheduling.run_stages_ahead", "must be at most 3"};
  if (limits.run_set_up_limit_s() > 3600)
    return FieldError{"limits.run_set_up_limit_s", "must be at most 3600"};
  if (limits.default_time_limit_s() > limits.max_time_limit_s()) {
    return FieldError{"limits.default_time_limit_s", "must not exceed max_time_limit_s"};
  }
  if (limits.default_performance_trials() > limits.max_performance_trials()) {
    return FieldError{"limits.default_performance_trials", "must not exceed max_performance_trials"};
  }
  if (limits.max_correctness_trials() > 10'000) {
    return FieldError{"limits.max_correctness_trials", "must be at most 10000"};
  }
  if (limits.max_log_bytes() > 1 << 20) return FieldError{"limits.max_log_bytes", "must be at most 1 MiB"};
  // Two ids, or the candidate's process could signal the judge and open its
  // files (docs/judge-boundary.md); one user namespace cannot map one host id twice.
  if (sandbox.judge_uid() == sandbox.sandbox_uid())
    return FieldError{"sandbox.judge_uid", "must differ from sandbox_uid"};
  if (sandbox.judge_gid() == sandbox.sandbox_gid())
    return FieldError{"sandbox.judge_gid", "must differ from sandbox_gid"};
  if (limits.job_pids() < 64)
    return FieldError{"limits.job_pids", "must be at least 64 (PyTorch starts many threads)"};
  if (!(limits.job_cpu_cores() >= 0) || limits.job_cpu_cores() > 4096) {
    return FieldError{"limits.job_cpu_cores", "must be between 0 (no limit) and 4096"};
  }
  if (limits.job_memory_bytes() < 256 * kMiB)
    return FieldError{"limits.job_memory_bytes", "must be at least 256 MiB"};
  if (scheduling.exchange_arena_mib() > 65'536) {
    return FieldError{"scheduling.exchange_arena_mib", "must be at most 65536 (64 GiB; 0: files only)"};
  }
  for (const auto& path : sandbox.sandbox_ro_paths()) {
    if (path.empty() || path.front() != '/') {
      return FieldError{"sandbox.sandbox_ro_paths", "must be absolute paths, got '" + path + "'"};
    }
  }
  if (caches.reference_cache_max_entries() > 1'000'000) {
    return FieldError{"caches.reference_cache_max_entries", "must be at most 1000000"};
  }
  if (caches.reference_cache_ttl_s() > 30u * 86400) {
    return FieldError{"caches.reference_cache_ttl_s", "must be at most 2592000 (30 days)"};
  }
  if (!(caches.live_recheck_speedup() > 0) || caches.live_recheck_speedup() > 1000) {
    return FieldError{"caches.live_recheck_speedup", "must be above 0 and at most 1000"};
  }
  if (!(caches.reference_cache_max_relative_ci() > 0) ||
      caches.reference_cache_max_relative_ci() > 0.05) {
    return FieldError{"caches.reference_cache_max_relative_ci", "must be above 0 and at most 0.05"};
  }
  if (auth.api_tokens_file().empty() && auth.auth_required_for_metrics()) {
    return FieldError{"auth.auth_required_for_metrics", "needs api_tokens_file"};
  }
  if (auth.api_tokens_file().empty() && auth.auth_required_for_health()) {
    return FieldError{"auth.auth_required_for_health", "needs api_tokens_file"};
  }
  if (listener.tls_cert_file().empty() != listener.tls_key_file().empty()) {
    return FieldError{
        listener.tls_cert_file().empty() ? "listener.tls_cert_file" : "listener.tls_key_file",
        "tls_cert_file and tls_key_file are set together or not at all"};
  }
  if (scheduling.role() == v1::ROLE_UNSPECIFIED) scheduling.set_role(v1::ROLE_ALL);
  if (scheduling.remote_build_timeout_s() == 0)
    scheduling.set_remote_build_timeout_s(limits.compile_time_limit_s() + 60);
  if (!scheduling.compile_endpoint().empty()) {
    if (scheduling.role() == v1::ROLE_COMPILE) {
      return FieldError{"scheduling.compile_endpoint",
                        "is for run and all roles; a compile-role kboxd builds itself"};
    }
    auto url = ParseServerUrl(scheduling.compile_endpoint());
    if (!url) return FieldError{"scheduling.compile_endpoint", url.error().message};
    // No CA file option for it (yet): the tier is reached inside the
    // cluster, where its NetworkPolicy admits the GPU pods alone.
    if (url->tls)
      return FieldError{"scheduling.compile_endpoint", "must be http://HOST:PORT (https is not offered)"};
  } else if (scheduling.role() == v1::ROLE_RUN) {
    return FieldError{"scheduling.compile_endpoint", "is required with role run"};
  }
  if (!scheduling.compile_token_file().empty() && scheduling.compile_endpoint().empty()) {
    return FieldError{"scheduling.compile_token_file", "needs compile_endpoint"};
  }
  if (scheduling.role() == v1::ROLE_COMPILE && caches.build_cache_max_bytes() == 0) {
    return FieldError{"caches.build_cache_max_bytes",
                      "must be above 0 with role compile: builds are served from the cache"};
  }
  for (const auto& b : scheduling.backends()) {
    if (b != "cpu" && b != "cuda" && b != "triton") {
      return FieldError{"scheduling.backends", "unknown backend '" + b + "' (cpu, cuda, triton)"};
    }
  }
  return c;
}

boost::system::result<CommandLine, FieldError> ParseCommandLine(int argc,
                                                                const char* const* argv) {
  std::string config_path, listen, python, work_dir, harness_dir;
  std::string api_tokens_file, tls_cert_file, tls_key_file, job_store_dir;
  unsigned cpu_slots = 0, compile_workers = 0, max_in_flight = 0;
  std::string role, compile_endpoint, compile_token_file;
  std::optional<unsigned> stages_ahead;
  std::optional<unsigned> arena_mib;
  std::vector<unsigned> gpus;
  std::vector<std::string> backends;
  // The flags, grouped by the config's sections (config.proto); --help lists
  // them that way.
  po::options_description general("General");
  general.add_options()("help,h", "print this help")(
      "config", po::value(&config_path), "text-format DaemonConfig file (proto/kbox/v1/config.proto)");
  po::options_description listener("listener");
  listener.add_options()("listen", po::value(&listen), "HOST:PORT to listen on; port 0 picks a free port")(
      "tls-cert-file", po::value(&tls_cert_file), "PEM certificate chain: serve HTTPS (with --tls-key-file)")(
      "tls-key-file", po::value(&tls_key_file), "PEM private key of --tls-cert-file");
  po::options_description auth("auth");
  auth.add_options()(
      "api-tokens-file", po::value(&api_tokens_file),
      "bearer tokens file, '<name> <secret> [max_concurrent_jobs]' per line; re-read on SIGHUP");
  po::options_description limits("limits");
  limits.add_options()("max-in-flight-jobs", po::value(&max_in_flight), "jobs accepted at once");
  po::options_description sandbox("sandbox");
  sandbox.add_options()("python", po::value(&python), "Python interpreter of the workers")(
      "harness-dir", po::value(&harness_dir), "directory of the evaluation harness")(
      "danger-insecure-no-sandbox",
      "run candidates WITHOUT the sandbox (development on hosts without namespaces only)");
  po::options_description scheduling("scheduling");
  scheduling.add_options()("gpu", po::value(&gpus)->multitoken(), "GPU index to use (repeatable); default: all")(
      "backend", po::value(&backends)->multitoken(), "backend to serve (repeatable)")(
      "compile-workers", po::value(&compile_workers), "compile stages at once")(
      "cpu-run-slots", po::value(&cpu_slots), "CPU-backend run stages at once")(
      "run-stages-ahead", po::value<unsigned>()->notifier([&](unsigned n) { stages_ahead = n; }),
      "run stages per device that prepare while another job holds it; 0: none "
      "(docs/run-stages-ahead.md)")(
      "exchange-arena-mib", po::value<unsigned>()->notifier([&](unsigned n) { arena_mib = n; }),
      "MiB of shared memory per run stage that the candidate's outputs cross to the judge "
      "instead of files; 0: files only (docs/exchange-arena.md)")(
      "role", po::value(&role),
      "all (compile and run, the default), compile (serve builds to run nodes) or run (send "
      "builds to --compile-endpoint); docs/compile-tier.md")(
      "compile-endpoint", po::value(&compile_endpoint),
      "http://HOST:PORT of compile-role kboxds that build this daemon's jobs")(
      "compile-token-file", po::value(&compile_token_file),
      "file whose first line is the API token for --compile-endpoint");
  po::options_description store("store");
  store.add_options()("work-dir", po::value(&work_dir), "directory for per-job working directories")(
      "job-store-dir", po::value(&job_store_dir),
      "durable job journal directory: accepted jobs and results survive a restart")(
      "keep-job-dirs", "keep job directories after the result is sent");
  po::options_description experimental("experimental (A/B switches; the defaults measured best)");
  experimental.add_options()(
      "preforked-compile-stage",
      "start compile stages from a pre-forked zygote per compile worker (docs/prefork.md)")(
      "no-light-headers",
      "compile extensions exactly as asked, never first against the light "
      "<torch/extension.h> (docs/compile-speed.md)")(
      "no-cuda-per-operator-headers",
      "light tries compile CUDA sources against the whole of ATen, not per-operator headers "
      "(docs/compile-speed.md)")(
      "no-precompiled-header",
      "do not build the light header's precompiled header at start-up; compiles parse it "
      "(docs/compile-speed.md)");
  po::options_description desc("kboxd: the kbox evaluation daemon\n\nOptions");
  desc.add(general).add(listener).add(auth).add(limits).add(sandbox).add(scheduling).add(store).add(
      experimental);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    // Boost builds what() by substituting the offending argument into the
    // message's "%name%" placeholders, over and over: an argument that holds
    // a placeholder itself ("--%canonical_option%") makes what() loop
    // forever (found by config_fuzzer). Such an argument is never a valid
    // flag; name the problem without asking Boost.
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]).find('%') != std::string_view::npos) {
        return FieldError{"flags", "invalid command line: argument " + std::to_string(i) +
                                       " holds '%' and is not a valid option"};
      }
    }
    return FieldError{"flags", e.what()};
  }
  CommandLine cl;
  std::ostringstream help;
  help << desc;
  cl.help_text = help.str();
  if (vm.count("help")) {
    cl.show_help = true;
    return cl;
  }
  if (!config_path.empty()) {
    std::ifstream in(config_path);
    if (!in) return FieldError{"--config", "cannot read " + config_path};
    std::ostringstream text;
    text << in.rdbuf();
    auto parsed = ParseConfigText(text.str());
    if (!parsed) {
      return FieldError{config_path + ": " + parsed.error().field, parsed.error().message};
    }
    cl.config = *parsed;
  }
  v1::DaemonConfig& c = cl.config;
  if (!listen.empty()) c.mutable_listener()->set_listen(listen);
  if (!python.empty()) c.mutable_sandbox()->set_python(python);
  if (!work_dir.empty()) c.mutable_store()->set_work_dir(std::filesystem::absolute(work_dir).string());
  if (!harness_dir.empty())
    c.mutable_sandbox()->set_harness_dir(std::filesystem::absolute(harness_dir).string());
  if (!job_store_dir.empty())
    c.mutable_store()->set_job_store_dir(std::filesystem::absolute(job_store_dir).string());
  // Absolute, so that a SIGHUP reload reads the same files whatever the
  // working directory is by then.
  if (!api_tokens_file.empty()) {
    c.mutable_auth()->set_api_tokens_file(std::filesystem::absolute(api_tokens_file).string());
  }
  if (!tls_cert_file.empty())
    c.mutable_listener()->set_tls_cert_file(std::filesystem::absolute(tls_cert_file).string());
  if (!tls_key_file.empty())
    c.mutable_listener()->set_tls_key_file(std::filesystem::absolute(tls_key_file).string());
  if (vm.count("keep-job-dirs")) c.mutable_store()->set_keep_job_dirs(true);
  if (vm.count("danger-insecure-no-sandbox")) c.mutable_sandbox()->set_danger_insecure_no_sandbox(true);
  if (vm.count("preforked-compile-stage")) c.mutable_experimental()->set_preforked_compile_stage(true);
  if (vm.count("no-light-headers")) c.mutable_experimental()->set_light_headers(false);
  if (vm.count("no-precompiled-header")) c.mutable_experimental()->set_precompiled_header(false);
  if (vm.count("no-cuda-per-operator-headers"))
    c.mutable_experimental()->set_cuda_per_operator_headers(false);
  if (cpu_slots) c.mutable_scheduling()->set_cpu_run_slots(cpu_slots);
  if (stages_ahead) c.mutable_scheduling()->set_run_stages_ahead(*stages_ahead);
  if (arena_mib) c.mutable_scheduling()->set_exchange_arena_mib(*arena_mib);
  if (compile_workers) c.mutable_scheduling()->set_compile_workers(compile_workers);
  if (!role.empty()) {
    if (role == "all") {
      c.mutable_scheduling()->set_role(v1::ROLE_ALL);
    } else if (role == "compile") {
      c.mutable_scheduling()->set_role(v1::ROLE_COMPILE);
    } else if (role == "run") {
      c.mutable_scheduling()->set_role(v1::ROLE_RUN);
    } else {
      return FieldError{"--role", "must be all, compile or run, not '" + role + "'"};
    }
  }
  if (!compile_endpoint.empty()) c.mutable_scheduling()->set_compile_endpoint(compile_endpoint);
  if (!compile_token_file.empty()) {
    c.mutable_scheduling()->set_compile_token_file(std::filesystem::absolute(compile_token_file).string());
  }
  if (max_in_flight) c.mutable_limits()->set_max_in_flight_jobs(max_in_flight);
  if (!gpus.empty()) {
    c.mutable_scheduling()->clear_gpus();
    for (unsigned g : gpus) c.mutable_scheduling()->add_gpus(g);
  }
  if (!backends.empty()) {
    c.mutable_scheduling()->clear_backends();
    for (const auto& b : backends) c.mutable_scheduling()->add_backends(b);
  }
  return cl;
}

uint32_t RunStagesAhead(const v1::DaemonConfig& config, bool gpu) {
  if (config.scheduling().has_run_stages_ahead()) return config.scheduling().run_stages_ahead();
  return gpu ? 2 : 1;
}

}  // namespace kbox
