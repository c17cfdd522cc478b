#include "daemon/config_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "daemon/precompiled_header.h"
#include "tests/unit/temp_dir.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;
using kbox::testing::TempDir;

// Runs ParseCommandLine on `args` (argv[0] supplied).
boost::system::result<CommandLine, FieldError> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kboxd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(ConfigLoaderTest, ParsesValidTextProto) {
  const auto config = ParseConfigText(
      "# comment\n"
      "listener { listen: \"0.0.0.0:9000\" max_body_bytes: 1048576 }\n"
      "sandbox { python: \"/opt/py/bin/python3\" }\n"
      "store { keep_job_dirs: true }\n"
      "scheduling {\n"
      "  gpus: 0\n"
      "  gpus: 2\n"
      "  backends: [\"cpu\", \"cuda\"]\n"
      "}\n");
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->listener().listen(), "0.0.0.0:9000");
  EXPECT_EQ(config->sandbox().python(), "/opt/py/bin/python3");
  EXPECT_TRUE(config->store().keep_job_dirs());
  ASSERT_EQ(config->scheduling().gpus_size(), 2);
  EXPECT_EQ(config->scheduling().gpus(1), 2u);
  ASSERT_EQ(config->scheduling().backends_size(), 2);
  EXPECT_EQ(config->scheduling().backends(1), "cuda");
  EXPECT_EQ(config->listener().max_body_bytes(), 1048576u);
}

TEST(ConfigLoaderTest, EmptyTextIsEmptyConfig) {
  const auto config = ParseConfigText("");
  ASSERT_TRUE(config);
  EXPECT_EQ(config->listener().listen(), "");
}

TEST(ConfigLoaderTest, UnknownFieldNamesLine) {
  const auto config = ParseConfigText("listener { listen: \"127.0.0.1:1\" }\nlisten_port: 8080\n");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().field, "config");
  EXPECT_NE(config.error().message.find("line 2"), std::string::npos) << config.error().message;
  EXPECT_NE(config.error().message.find("listen_port"), std::string::npos)
      << config.error().message;
}

TEST(ConfigLoaderTest, WrongValueTypeIsError) {
  const auto config = ParseConfigText("listener { io_threads: \"many\" }\n");
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message.find("line 1"), std::string::npos) << config.error().message;
}

TEST(ConfigLoaderTest, AppliesDefaults) {
  const auto config = ApplyConfigDefaults(v1::DaemonConfig(), 12);
  ASSERT_TRUE(config) << config.error().field << ": " << config.error().message;
  EXPECT_EQ(config->listener().listen(), "127.0.0.1:8080");
  EXPECT_EQ(config->sandbox().python(), "/usr/bin/python3");
  EXPECT_NE(config->store().work_dir().find("/kbox-" + std::to_string(::getpid())), std::string::npos)
      << config->store().work_dir();
  EXPECT_EQ(config->listener().max_body_bytes(), 4u << 20);
  EXPECT_EQ(config->limits().max_source_bytes(), 1u << 20);
  EXPECT_EQ(config->listener().read_timeout_s(), 30u);
  EXPECT_EQ(config->listener().write_timeout_s(), 30u);
  EXPECT_EQ(config->limits().max_in_flight_jobs(), 64u);
  EXPECT_EQ(config->listener().io_threads(), 2u);
  EXPECT_EQ(config->scheduling().compile_workers(), 12u);
  EXPECT_EQ(config->scheduling().cpu_run_slots(), 1u);
  EXPECT_EQ(config->limits().compile_time_limit_s(), 300u);
  EXPECT_EQ(config->limits().default_time_limit_s(), 120u);
  EXPECT_EQ(config->limits().max_time_limit_s(), 900u);
  EXPECT_EQ(config->limits().max_correctness_trials(), 100u);
  EXPECT_EQ(config->limits().default_performance_trials(), 20u);
  EXPECT_EQ(config->limits().max_performance_trials(), 1000u);
  EXPECT_EQ(config->limits().warmup_calls(), 3u);
  EXPECT_EQ(config->limits().max_output_bytes(), 8u << 20);
  EXPECT_EQ(config->limits().max_log_bytes(), 16u << 10);
  EXPECT_FALSE(config->store().keep_job_dirs());
  EXPECT_EQ(config->sandbox().default_anticheat_profile(), "strict");
  EXPECT_EQ(config->sandbox().anticheat_profile_dir(), "");  // kboxd finds it beside itself.
  EXPECT_EQ(config->caches().build_cache_dir(), config->store().work_dir() + "/build-cache");
  EXPECT_EQ(config->caches().build_cache_max_bytes(), 20ull << 30);
  EXPECT_EQ(config->store().result_ttl_s(), 3600u);
  EXPECT_EQ(config->store().max_stored_jobs(), 100000u);
  EXPECT_EQ(config->store().drain_deadline_s(), 60u);
  EXPECT_TRUE(config->store().job_store_dir().empty());  // The journal is off unless asked for.
}

TEST(ConfigLoaderTest, BuildCacheSettings) {
  // Zero is "disabled" here, not "the default": the field is optional.
  auto parsed = ParseConfigText("store { work_dir: \"/srv/kbox\" }\ncaches { build_cache_max_bytes: 0 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  auto config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->caches().has_build_cache_max_bytes());
  EXPECT_EQ(config->caches().build_cache_max_bytes(), 0u);
  EXPECT_EQ(config->caches().build_cache_dir(), "/srv/kbox/build-cache");

  parsed =
      ParseConfigText("caches { build_cache_dir: \"/var/cache/kbox\" build_cache_max_bytes: 1048576 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->caches().build_cache_dir(), "/var/cache/kbox");
  EXPECT_EQ(config->caches().build_cache_max_bytes(), 1048576u);
}

TEST(ConfigLoaderTest, InfraRetriesDefaultsToOneAndZeroTurnsThemOff) {
  auto parsed = ParseConfigText("");
  ASSERT_TRUE(parsed) << parsed.error().message;
  auto config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->scheduling().infra_retries(), 1u);
  parsed = ParseConfigText("scheduling { infra_retries: 0 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->scheduling().has_infra_retries());
  EXPECT_EQ(config->scheduling().infra_retries(), 0u);
}

TEST(ConfigLoaderTest, RunStagesAheadDefaultsToTwoPerGpuAndOnePerCpuSlotAndTheFlagSetsBoth) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_FALSE(config->scheduling().has_run_stages_ahead());
  EXPECT_EQ(RunStagesAhead(*config, /*gpu=*/true), 2u);
  EXPECT_EQ(RunStagesAhead(*config, /*gpu=*/false), 1u);
  const auto off = Parse({"--run-stages-ahead", "0"});
  ASSERT_TRUE(off) << off.error().message;
  config = ApplyConfigDefaults(off->config, 4);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->scheduling().has_run_stages_ahead());
  EXPECT_EQ(RunStagesAhead(*config, /*gpu=*/true), 0u);
  EXPECT_EQ(RunStagesAhead(*config, /*gpu=*/false), 0u);
  const auto three = Parse({"--run-stages-ahead", "3"});
  ASSERT_TRUE(three) << three.error().message;
  EXPECT_EQ(RunStagesAhead(three->config, /*gpu=*/true), 3u);
  EXPECT_EQ(RunStagesAhead(three->config, /*gpu=*/false), 3u);
}

// Switches whose A/B is decided are gone: a command line that still names
// one is refused, not silently ignored.
TEST(ConfigLoaderTest, DecidedSwitchesAreRefused) {
  EXPECT_FALSE(Parse({"--no-pause-set-ups"}));
  EXPECT_FALSE(Parse({"--no-turn-hand-over"}));
  EXPECT_FALSE(Parse({"--run-stage-cpu-weight", "1000"}));
  EXPECT_FALSE(Parse({"--no-cupti-launch-probe"}));
}

// The top level holds sections only: a setting named outside its section is
// an unknown field, and the error says which line.
TEST(ConfigLoaderTest, ASettingOutsideItsSectionIsRefused) {
  const auto flat = ParseConfigText("compile_workers: 4\n");
  ASSERT_FALSE(flat);
  // The error says where the setting goes.
  EXPECT_NE(flat.error().message.find("scheduling { compile_workers: ... }"), std::string::npos)
      << flat.error().message;
  EXPECT_FALSE(ParseConfigText("limits { compile_workers: 4 }\n"));
  EXPECT_TRUE(ParseConfigText("scheduling { compile_workers: 4 }\n"));
  const auto* top = v1::DaemonConfig::descriptor();
  for (int i = 0; i < top->field_count(); ++i) {
    EXPECT_EQ(top->field(i)->type(), google::protobuf::FieldDescriptor::TYPE_MESSAGE)
        << top->field(i)->name();
  }
}

// 1 GiB unless set; 0 (files only) is kept, not replaced by the default.
TEST(ConfigLoaderTest, ExchangeArenaIsOneGibUnlessSet) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->scheduling().exchange_arena_mib(), 1024u);
  const auto off = Parse({"--exchange-arena-mib", "0"});
  ASSERT_TRUE(off) << off.error().message;
  config = ApplyConfigDefaults(off->config, 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->scheduling().exchange_arena_mib(), 0u);
  const auto parsed = ParseConfigText("scheduling { exchange_arena_mib: 256 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->scheduling().exchange_arena_mib(), 256u);
}

TEST(ConfigLoaderTest, ZeroCoresMeansOneCompileWorker) {
  const auto config = ApplyConfigDefaults(v1::DaemonConfig(), 0);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->scheduling().compile_workers(), 1u);
}

TEST(ConfigLoaderTest, KeepsExplicitValues) {
  v1::DaemonConfig in;
  in.mutable_listener()->set_listen("[::1]:0");
  in.mutable_scheduling()->set_compile_workers(7);
  in.mutable_limits()->set_max_time_limit_s(60);
  in.mutable_limits()->set_default_time_limit_s(60);
  in.mutable_store()->set_work_dir("/srv/kbox");
  in.mutable_sandbox()->set_default_anticheat_profile("lenient");
  const auto config = ApplyConfigDefaults(in, 12);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->sandbox().default_anticheat_profile(), "lenient");
  EXPECT_EQ(config->listener().listen(), "[::1]:0");
  EXPECT_EQ(config->scheduling().compile_workers(), 7u);
  EXPECT_EQ(config->limits().max_time_limit_s(), 60u);
  EXPECT_EQ(config->store().work_dir(), "/srv/kbox");
}

// Returns the field ApplyConfigDefaults names for `config`, or "" when valid.
std::string DefaultsErrorField(const v1::DaemonConfig& config) {
  const auto result = ApplyConfigDefaults(config, 4);
  return result ? std::string() : result.error().field;
}

TEST(ConfigLoaderTest, BodyLimitBoundedAt64MiB) {
  v1::DaemonConfig config;
  config.mutable_listener()->set_max_body_bytes(64ull << 20);
  EXPECT_EQ(DefaultsErrorField(config), "");
  config.mutable_listener()->set_max_body_bytes((64ull << 20) + 1);
  EXPECT_EQ(DefaultsErrorField(config), "listener.max_body_bytes");
}

TEST(ConfigLoaderTest, SourceLimitMayNotExceedBodyLimit) {
  v1::DaemonConfig config;
  config.mutable_listener()->set_max_body_bytes(1000);
  config.mutable_limits()->set_max_source_bytes(1001);
  EXPECT_EQ(DefaultsErrorField(config), "limits.max_source_bytes");
}

TEST(ConfigLoaderTest, RejectsRelativePython) {
  v1::DaemonConfig config;
  config.mutable_sandbox()->set_python("python3");
  const auto result = ApplyConfigDefaults(config, 4);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "sandbox.python");
  EXPECT_NE(result.error().message.find("absolute"), std::string::npos);
}

TEST(ConfigLoaderTest, DefaultTimeLimitMayNotExceedMax) {
  v1::DaemonConfig config;
  config.mutable_limits()->set_default_time_limit_s(1000);
  EXPECT_EQ(DefaultsErrorField(config), "limits.default_time_limit_s");  // Max defaults to 900.
  config.mutable_limits()->set_max_time_limit_s(1000);
  EXPECT_EQ(DefaultsErrorField(config), "");
}

TEST(ConfigLoaderTest, RejectsOutOfBoundsCounts) {
  struct Case {
    std::function<void(v1::DaemonConfig&, uint32_t)> set;
    uint32_t value;
    const char* field;
  };
  const Case cases[] = {
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_limits()->set_max_in_flight_jobs(v); }, 4097,
       "limits.max_in_flight_jobs"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_listener()->set_io_threads(v); }, 65,
       "listener.io_threads"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_scheduling()->set_compile_workers(v); }, 257,
       "scheduling.compile_workers"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_scheduling()->set_cpu_run_slots(v); }, 257,
       "scheduling.cpu_run_slots"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_limits()->set_default_performance_trials(v); }, 1001,
       "limits.default_performance_trials"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_limits()->set_max_correctness_trials(v); }, 10'001,
       "limits.max_correctness_trials"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_limits()->set_max_log_bytes(v); }, (1u << 20) + 1,
       "limits.max_log_bytes"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_scheduling()->set_infra_retries(v); }, 4,
       "scheduling.infra_retries"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_scheduling()->set_run_stages_ahead(v); }, 4,
       "scheduling.run_stages_ahead"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_scheduling()->set_exchange_arena_mib(v); }, 65'537,
       "scheduling.exchange_arena_mib"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_caches()->set_reference_cache_max_entries(v); },
       1'000'001, "caches.reference_cache_max_entries"},
      {[](v1::DaemonConfig& d, uint32_t v) { d.mutable_caches()->set_reference_cache_ttl_s(v); },
       30 * 86400 + 1, "caches.reference_cache_ttl_s"},
  };
  for (const Case& c : cases) {
    v1::DaemonConfig config;
    c.set(config, c.value);
    EXPECT_EQ(DefaultsErrorField(config), c.field) << c.field << " = " << c.value;
  }
}

TEST(ConfigLoaderTest, ReferenceCacheSettings) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->caches().reference_cache_enabled());
  EXPECT_EQ(config->caches().reference_cache_max_entries(), 10000u);
  EXPECT_EQ(config->caches().reference_cache_ttl_s(), 86400u);
  EXPECT_DOUBLE_EQ(config->caches().live_recheck_speedup(), 1.0);
  EXPECT_DOUBLE_EQ(config->caches().reference_cache_max_relative_ci(), 0.01);

  auto parsed = ParseConfigText(
      "caches { reference_cache_enabled: false reference_cache_max_entries: 5 live_recheck_speedup: 1.5 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_FALSE(config->caches().reference_cache_enabled());
  EXPECT_EQ(config->caches().reference_cache_max_entries(), 5u);
  EXPECT_DOUBLE_EQ(config->caches().live_recheck_speedup(), 1.5);

  for (const double bad : {-1.0, 1000.5}) {
    v1::DaemonConfig c;
    c.mutable_caches()->set_live_recheck_speedup(bad);
    EXPECT_EQ(DefaultsErrorField(c), "caches.live_recheck_speedup") << bad;
  }
  for (const double bad : {-0.01, 0.051}) {
    v1::DaemonConfig c;
    c.mutable_caches()->set_reference_cache_max_relative_ci(bad);
    EXPECT_EQ(DefaultsErrorField(c), "caches.reference_cache_max_relative_ci") << bad;
  }
}

TEST(ConfigLoaderTest, RejectsUnknownBackendName) {
  v1::DaemonConfig config;
  config.mutable_scheduling()->add_backends("cpu");
  config.mutable_scheduling()->add_backends("rocm");
  const auto result = ApplyConfigDefaults(config, 4);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "scheduling.backends");
  EXPECT_NE(result.error().message.find("rocm"), std::string::npos);

  config.mutable_scheduling()->clear_backends();
  for (const char* b : {"cpu", "cuda", "triton"}) config.mutable_scheduling()->add_backends(b);
  EXPECT_EQ(DefaultsErrorField(config), "");
}

TEST(ConfigLoaderTest, FlagsOverrideConfigFile) {
  TempDir tmp;
  const fs::path file = tmp.path() / "kboxd.textproto";
  std::ofstream(file) << "listener { listen: \"127.0.0.1:1111\" }\n"
                         "sandbox { python: \"/from/file/python\" }\n"
                         "scheduling { cpu_run_slots: 2 gpus: 5 backends: \"cpu\" }\n"
                         "limits { max_log_bytes: 4096 }\n";
  const auto cl = Parse({"--config", file.string(), "--listen", "0.0.0.0:0", "--cpu-run-slots",
                         "3", "--gpu", "0", "--gpu", "1", "--backend", "cuda", "--keep-job-dirs"});
  ASSERT_TRUE(cl) << cl.error().field << ": " << cl.error().message;
  EXPECT_FALSE(cl->show_help);
  const v1::DaemonConfig& c = cl->config;
  EXPECT_EQ(c.listener().listen(), "0.0.0.0:0");         // Flag wins.
  EXPECT_EQ(c.sandbox().python(), "/from/file/python");  // File value kept.
  EXPECT_EQ(c.limits().max_log_bytes(), 4096u);          // File value kept.
  EXPECT_EQ(c.scheduling().cpu_run_slots(), 3u);         // Flag wins.
  ASSERT_EQ(c.scheduling().gpus_size(), 2);              // Flag list replaces file list.
  EXPECT_EQ(c.scheduling().gpus(0), 0u);
  EXPECT_EQ(c.scheduling().gpus(1), 1u);
  ASSERT_EQ(c.scheduling().backends_size(), 1);
  EXPECT_EQ(c.scheduling().backends(0), "cuda");
  EXPECT_TRUE(c.store().keep_job_dirs());
}

TEST(ConfigLoaderTest, RelativeDirectoryFlagsBecomeAbsolute) {
  const auto cl = Parse({"--work-dir", "jobs", "--harness-dir", "h", "--job-store-dir", "journal"});
  ASSERT_TRUE(cl);
  EXPECT_EQ(cl->config.store().work_dir(), (fs::current_path() / "jobs").string());
  EXPECT_EQ(cl->config.sandbox().harness_dir(), (fs::current_path() / "h").string());
  EXPECT_EQ(cl->config.store().job_store_dir(), (fs::current_path() / "journal").string());
}

TEST(ConfigLoaderTest, AccessFlagsBecomeAbsolutePaths) {
  const auto cl = Parse({"--api-tokens-file", "tokens", "--tls-cert-file", "c.pem",
                         "--tls-key-file", "k.pem"});
  ASSERT_TRUE(cl);
  EXPECT_EQ(cl->config.auth().api_tokens_file(), (fs::current_path() / "tokens").string());
  EXPECT_EQ(cl->config.listener().tls_cert_file(), (fs::current_path() / "c.pem").string());
  EXPECT_EQ(cl->config.listener().tls_key_file(), (fs::current_path() / "k.pem").string());
}

// Authentication and TLS are off unless asked for; asking for half of
// either is a configuration error, never a silently open endpoint.
TEST(ConfigLoaderTest, AccessSettings) {
  v1::DaemonConfig config;
  const auto defaults = ApplyConfigDefaults(config, 4);
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->auth().api_tokens_file(), "");
  EXPECT_FALSE(defaults->auth().auth_required_for_metrics());
  EXPECT_FALSE(defaults->auth().auth_required_for_health());
  EXPECT_EQ(defaults->listener().tls_cert_file(), "");

  config.mutable_auth()->set_auth_required_for_metrics(true);
  EXPECT_EQ(DefaultsErrorField(config), "auth.auth_required_for_metrics");
  config.mutable_auth()->set_auth_required_for_metrics(false);
  config.mutable_auth()->set_auth_required_for_health(true);
  EXPECT_EQ(DefaultsErrorField(config), "auth.auth_required_for_health");
  config.mutable_auth()->set_api_tokens_file("/etc/kbox/tokens/tokens");
  EXPECT_EQ(DefaultsErrorField(config), "");

  config.mutable_listener()->set_tls_cert_file("/etc/kbox/tls/tls.crt");
  EXPECT_EQ(DefaultsErrorField(config), "listener.tls_key_file");
  config.mutable_listener()->set_tls_key_file("/etc/kbox/tls/tls.key");
  EXPECT_EQ(DefaultsErrorField(config), "");
  config.mutable_listener()->clear_tls_cert_file();
  EXPECT_EQ(DefaultsErrorField(config), "listener.tls_cert_file");
}

// The light-header compile path (docs/compile-speed.md) is on unless turned off.
TEST(ConfigLoaderTest, LightHeadersAreOnUnlessTurnedOff) {
  const auto plain = Parse({});
  ASSERT_TRUE(plain);
  const auto plain_config = ApplyConfigDefaults(plain->config, 4);
  ASSERT_TRUE(plain_config);
  EXPECT_TRUE(plain_config->experimental().light_headers());
  const auto flag = Parse({"--no-light-headers"});
  ASSERT_TRUE(flag);
  const auto flag_config = ApplyConfigDefaults(flag->config, 4);
  ASSERT_TRUE(flag_config);
  EXPECT_FALSE(flag_config->experimental().light_headers());
  // Explicitly false survives the defaults (the field is optional).
  const auto text = ParseConfigText("experimental { light_headers: false }\n");
  ASSERT_TRUE(text);
  const auto config = ApplyConfigDefaults(*text, 4);
  ASSERT_TRUE(config);
  EXPECT_FALSE(config->experimental().light_headers());
}

// The light header's precompiled header (docs/compile-speed.md) is on with
// the light header unless turned off; without the light header it is off.
TEST(ConfigLoaderTest, PrecompiledHeaderIsOnWithLightHeadersUnlessTurnedOff) {
  const auto plain = Parse({});
  ASSERT_TRUE(plain);
  const auto plain_config = ApplyConfigDefaults(plain->config, 4);
  ASSERT_TRUE(plain_config);
  EXPECT_TRUE(plain_config->experimental().precompiled_header());
  EXPECT_TRUE(PrecompiledHeaderWanted(*plain_config));
  EXPECT_EQ(PrecompiledHeaderRoot(*plain_config),
            std::filesystem::path(plain_config->store().work_dir()) / "pch");
  const auto flag = Parse({"--no-precompiled-header"});
  ASSERT_TRUE(flag);
  const auto flag_config = ApplyConfigDefaults(flag->config, 4);
  ASSERT_TRUE(flag_config);
  EXPECT_FALSE(flag_config->experimental().precompiled_header());
  EXPECT_FALSE(PrecompiledHeaderWanted(*flag_config));
  const auto light_off = Parse({"--no-light-headers"});
  ASSERT_TRUE(light_off);
  const auto light_off_config = ApplyConfigDefaults(light_off->config, 4);
  ASSERT_TRUE(light_off_config);
  EXPECT_TRUE(light_off_config->experimental().precompiled_header());
  EXPECT_FALSE(PrecompiledHeaderWanted(*light_off_config));
  const auto text = ParseConfigText("experimental { precompiled_header: false }\n");
  ASSERT_TRUE(text);
  const auto config = ApplyConfigDefaults(*text, 4);
  ASSERT_TRUE(config);
  EXPECT_FALSE(config->experimental().precompiled_header());
}

// Per-operator headers for CUDA sources' light tries (docs/compile-speed.md)
// are on unless turned off.
TEST(ConfigLoaderTest, CudaPerOperatorHeadersAreOnUnlessTurnedOff) {
  const auto plain = Parse({});
  ASSERT_TRUE(plain);
  const auto plain_config = ApplyConfigDefaults(plain->config, 4);
  ASSERT_TRUE(plain_config);
  EXPECT_TRUE(plain_config->experimental().cuda_per_operator_headers());
  const auto flag = Parse({"--no-cuda-per-operator-headers"});
  ASSERT_TRUE(flag);
  const auto flag_config = ApplyConfigDefaults(flag->config, 4);
  ASSERT_TRUE(flag_config);
  EXPECT_FALSE(flag_config->experimental().cuda_per_operator_headers());
  EXPECT_TRUE(flag_config->experimental().light_headers());  // The light header itself stays on.
  const auto text = ParseConfigText("experimental { cuda_per_operator_headers: false }\n");
  ASSERT_TRUE(text);
  const auto config = ApplyConfigDefaults(*text, 4);
  ASSERT_TRUE(config);
  EXPECT_FALSE(config->experimental().cuda_per_operator_headers());
}

// Run stages' zygotes are single use (docs/prefork.md): no job shares
// another's image or layout, so they are on by default; the config can turn
// them off, and the flag that once turned them on is gone.
TEST(ConfigLoaderTest, PreforkedRunStageIsOnByDefault) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->experimental().preforked_run_stage());
  const auto text = ParseConfigText("experimental { preforked_run_stage: false }\n");
  ASSERT_TRUE(text);
  auto off = ApplyConfigDefaults(*text, 4);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->experimental().preforked_run_stage());
  EXPECT_FALSE(Parse({"--preforked-run-stage"}));
}

TEST(ConfigLoaderTest, UnknownFlagIsError) {
  const auto cl = Parse({"--no-such-flag", "1"});
  ASSERT_FALSE(cl);
  EXPECT_EQ(cl.error().field, "flags");
  EXPECT_NE(cl.error().message.find("no-such-flag"), std::string::npos) << cl.error().message;
}

// Boost's error message substitutes the argument into its own placeholders
// until none is left: one that holds a placeholder used to loop forever
// (config_fuzzer; tests/fuzz/regressions/config-*).
TEST(ConfigLoaderTest, FlagHoldingABoostPlaceholderIsAnErrorNotAHang) {
  for (const char* arg : {"--%canonical_option%", "--%original_token%x", "--cpu-run-slots=%value%"}) {
    const auto cl = Parse({arg, "1"});
    ASSERT_FALSE(cl) << arg;
    EXPECT_EQ(cl.error().field, "flags");
    EXPECT_NE(cl.error().message.find("'%'"), std::string::npos) << cl.error().message;
  }
}

TEST(ConfigLoaderTest, ConnectionLimitsDefaultAndBounds) {
  auto c = ApplyConfigDefaults(v1::DaemonConfig(), 2);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->listener().header_timeout_s(), 10u);
  EXPECT_EQ(c->listener().max_connections(), 4096u);
  v1::DaemonConfig short_read;
  short_read.mutable_listener()->set_read_timeout_s(4);  // The header default never exceeds it.
  c = ApplyConfigDefaults(short_read, 2);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->listener().header_timeout_s(), 4u);
  v1::DaemonConfig slow_headers;
  slow_headers.mutable_listener()->set_read_timeout_s(5);
  slow_headers.mutable_listener()->set_header_timeout_s(6);
  c = ApplyConfigDefaults(slow_headers, 2);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().field, "listener.header_timeout_s");
  v1::DaemonConfig many;
  many.mutable_listener()->set_max_connections((1u << 20) + 1);
  c = ApplyConfigDefaults(many, 2);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().field, "listener.max_connections");
}

TEST(ConfigLoaderTest, MissingConfigFileIsError) {
  TempDir tmp;
  const auto cl = Parse({"--config", (tmp.path() / "absent.textproto").string()});
  ASSERT_FALSE(cl);
  EXPECT_EQ(cl.error().field, "--config");
}

TEST(ConfigLoaderTest, BadConfigFileErrorNamesFileAndLine) {
  TempDir tmp;
  const fs::path file = tmp.path() / "bad.textproto";
  std::ofstream(file) << "listener { listen: \"x\" }\n\nbogus_field: 1\n";
  const auto cl = Parse({"--config", file.string()});
  ASSERT_FALSE(cl);
  EXPECT_NE(cl.error().field.find(file.string()), std::string::npos) << cl.error().field;
  EXPECT_NE(cl.error().message.find("line 3"), std::string::npos) << cl.error().message;
}

TEST(ConfigLoaderTest, HelpFlagAsksForHelp) {
  const auto cl = Parse({"--help"});
  ASSERT_TRUE(cl);
  EXPECT_TRUE(cl->show_help);
  EXPECT_NE(cl->help_text.find("--listen"), std::string::npos);
}

// The set-up's own limit: 180 s unless set, at most an hour.
TEST(ConfigLoaderTest, RunSetUpLimitDefaultsAndIsBounded) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->limits().run_set_up_limit_s(), 180u);
  auto parsed = ParseConfigText("limits { run_set_up_limit_s: 60 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  config = ApplyConfigDefaults(*parsed, 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->limits().run_set_up_limit_s(), 60u);
  parsed = ParseConfigText("limits { run_set_up_limit_s: 3601 }\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto rejected = ApplyConfigDefaults(*parsed, 4);
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().field, "limits.run_set_up_limit_s");
}

// Compile stages' zygotes: off unless asked for, apart from run stages'.
TEST(ConfigLoaderTest, PreforkedCompileStageIsItsOwnFlag) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_FALSE(config->experimental().preforked_compile_stage());
  const auto flag = Parse({"--preforked-compile-stage"});
  ASSERT_TRUE(flag) << flag.error().message;
  EXPECT_TRUE(flag->config.experimental().preforked_compile_stage());
  EXPECT_FALSE(flag->config.experimental().has_preforked_run_stage());
}

}  // namespace
}  // namespace kbox

namespace kbox {
namespace {

// The compile tier's roles (docs/compile-tier.md).
TEST(ConfigLoaderTest, RolesAndTheCompileEndpoint) {
  auto config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->scheduling().role(), v1::ROLE_ALL);
  EXPECT_EQ(config->scheduling().remote_build_timeout_s(), config->limits().compile_time_limit_s() + 60);

  auto run = Parse({"--role", "run", "--compile-endpoint", "http://kbox-compile:8080"});
  ASSERT_TRUE(run) << run.error().message;
  config = ApplyConfigDefaults(run->config, 4);
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->scheduling().role(), v1::ROLE_RUN);

  // A run node needs a tier; a compile node builds itself, from its cache.
  auto alone = Parse({"--role", "run"});
  ASSERT_TRUE(alone);
  auto refused = ApplyConfigDefaults(alone->config, 4);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "scheduling.compile_endpoint");
  auto compile = Parse({"--role", "compile", "--compile-endpoint", "http://a:1"});
  ASSERT_TRUE(compile);
  EXPECT_FALSE(ApplyConfigDefaults(compile->config, 4));
  v1::DaemonConfig uncached;
  uncached.mutable_scheduling()->set_role(v1::ROLE_COMPILE);
  uncached.mutable_caches()->set_build_cache_max_bytes(0);
  uncached.mutable_caches()->set_build_cache_dir("/tmp/x");
  refused = ApplyConfigDefaults(uncached, 4);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "caches.build_cache_max_bytes");

  EXPECT_FALSE(Parse({"--role", "gpu"}));
  auto https = Parse({"--compile-endpoint", "https://a:1"});
  ASSERT_TRUE(https);
  EXPECT_FALSE(ApplyConfigDefaults(https->config, 4));
  auto token_alone = Parse({"--compile-token-file", "/tmp/t"});
  ASSERT_TRUE(token_alone);
  EXPECT_FALSE(ApplyConfigDefaults(token_alone->config, 4));
}

}  // namespace
}  // namespace kbox
