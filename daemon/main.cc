// kboxd: wires configuration, the host probe, the evaluator and the HTTP
// server together. Everything with behaviour lives in the libraries.

#include <algorithm>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <functional>
#include <iostream>
#include <memory>
#include <thread>

#include "daemon/api_handler.h"
#include "daemon/api_tokens.h"
#include "daemon/config_loader.h"
#include "daemon/evaluator.h"
#include "daemon/host_probe.h"
#include "daemon/http_server.h"
#include "daemon/job_journal.h"
#include "daemon/metrics.h"
#include "daemon/sandbox_setup.h"
#include "daemon/tls_context.h"
#include "daemon/version.h"

namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;

int Fail(const std::string& message) {
  std::cerr << "kboxd: " << message << std::endl;
  return 2;
}

// Child processes inherit fds 0-2 as /dev/null or pipes; make sure they exist
// so no pipe kboxd opens is ever numbered 0, 1 or 2.
void EnsureStandardFds() {
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
  }
}

// The directory kboxd's binary is in.
fs::path ExecutableDir(const char* argv0) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::absolute(argv0).parent_path() : exe.parent_path();
}

std::string DefaultHarnessDir(const char* argv0) {
  std::error_code ec;
  const fs::path base = ExecutableDir(argv0);
  for (const fs::path& candidate : {base / "../share/kbox/harness", base / "../../worker/harness"}) {
    if (fs::exists(candidate / "kbox_stage.py", ec)) return fs::canonical(candidate, ec).string();
  }
  return KBOX_SOURCE_HARNESS_DIR;
}

// The anti-cheat profiles: the configured folder, else the one installed
// beside kboxd, else the checkout's that build/bin/kboxd sits in (a build
// carried to another machine), else the source tree it was built from.
fs::path AnticheatProfileDir(const kbox::v1::DaemonConfig& config, const char* argv0) {
  if (!config.sandbox().anticheat_profile_dir().empty()) return config.sandbox().anticheat_profile_dir();
  std::error_code ec;
  for (const fs::path& dir : {ExecutableDir(argv0) / "../share/kbox/anticheat",
                              ExecutableDir(argv0) / "../../policy/anticheat"}) {
    if (fs::is_directory(dir, ec)) return fs::canonical(dir, ec);
  }
  return KBOX_SOURCE_ANTICHEAT_DIR;
}

std::vector<kbox::v1::Backend> ServedBackends(const kbox::v1::DaemonConfig& config,
                                              const kbox::HostInfo& host, bool have_gpus) {
  std::vector<kbox::v1::Backend> out;
  if (config.scheduling().backends().empty()) {
    out.push_back(kbox::v1::BACKEND_CPU);
    if (have_gpus) out.push_back(kbox::v1::BACKEND_CUDA);
    if (have_gpus && !host.probe.triton_version().empty()) out.push_back(kbox::v1::BACKEND_TRITON);
    return out;
  }
  for (const auto& name : config.scheduling().backends()) {
    out.push_back(name == "cuda"     ? kbox::v1::BACKEND_CUDA
                  : name == "triton" ? kbox::v1::BACKEND_TRITON
                                     : kbox::v1::BACKEND_CPU);
  }
  return out;
}

// Names only: a secret never reaches a log.
void LogTokens(const char* what, const kbox::ApiTokens& tokens) {
  const auto table = tokens.table();
  std::string names;
  for (const auto& name : table->names()) names += " " + name;
  std::cerr << "kboxd: " << what << " " << table->size() << " API tokens from " << tokens.path()
            << ":" << names << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  EnsureStandardFds();
  ::signal(SIGPIPE, SIG_IGN);

  auto cl = kbox::ParseCommandLine(argc, argv);
  if (!cl) return Fail(cl.error().field + ": " + cl.error().message);
  if (cl->show_help) {
    std::cout << cl->help_text;
    return 0;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // The default work dir is per process, so a build cache inside it can
  // never be reused: removed at exit rather than left in $TMPDIR.
  const bool ephemeral_build_cache =
      cl->config.store().work_dir().empty() && cl->config.caches().build_cache_dir().empty();
  auto resolved = kbox::ApplyConfigDefaults(cl->config, cores);
  if (!resolved) return Fail("config " + resolved.error().field + ": " + resolved.error().message);
  kbox::v1::DaemonConfig config = *resolved;
  if (config.sandbox().harness_dir().empty())
    config.mutable_sandbox()->set_harness_dir(DefaultHarnessDir(argv[0]));

  // Every profile must load, so a broken one is found now (before the slow
  // probe) and not by the first request that names it.
  const fs::path anticheat_dir = AnticheatProfileDir(config, argv[0]);
  auto profiles =
      kbox::AnticheatProfiles::LoadDir(anticheat_dir, config.sandbox().default_anticheat_profile());
  if (!profiles) return Fail("config " + profiles.error().field + ": " + profiles.error().message);
  std::string profile_names;
  for (const auto& name : profiles->names()) profile_names += " " + name;
  std::cerr << "kboxd: anti-cheat profiles" << profile_names << " from " << anticheat_dir.string()
            << "; default " << profiles->default_name << std::endl;

  // Tokens too, before the slow probe: a bad file fails start-up at once.
  std::unique_ptr<kbox::ApiTokens> tokens;
  if (config.auth().api_tokens_file().empty()) {
    std::cerr << "kboxd: WARNING: authentication off (no api_tokens_file): anyone who reaches "
              << config.listener().listen() << " may submit jobs" << std::endl;
  } else {
    auto opened = kbox::ApiTokens::Open(config.auth().api_tokens_file());
    if (!opened) return Fail("config api_tokens_file: " + opened.error());
    tokens = std::move(*opened);
    LogTokens("loaded", *tokens);
  }

  std::unique_ptr<kbox::TlsContext> tls;
  if (!config.listener().tls_cert_file().empty()) {
    auto opened = kbox::TlsContext::Open(config.listener().tls_cert_file(), config.listener().tls_key_file());
    if (!opened) return Fail("config " + opened.error());
    tls = std::move(*opened);
    std::cerr << "kboxd: TLS with " << config.listener().tls_cert_file() << std::endl;
  }

  asio::io_context io;
  // SIGHUP re-reads the tokens file and the TLS pair; a bad file keeps what
  // is in force. Caught from here on (a SIGHUP during the slow start-up
  // below waits for io.run()), rather than ending kboxd by default.
  asio::signal_set reload_signal(io, SIGHUP);
  std::function<void()> await_reload = [&] {
    reload_signal.async_wait([&](const boost::system::error_code& error, int) {
      if (error) return;
      if (tokens) {
        if (auto reloaded = tokens->Reload(); reloaded) {
          LogTokens("reloaded", *tokens);
        } else {
          std::cerr << "kboxd: ERROR: tokens not reloaded, keeping the " << tokens->table()->size()
                    << " in force: " << reloaded.error() << std::endl;
        }
      }
      if (tls) {
        if (auto reloaded = tls->Reload(); reloaded) {
          std::cerr << "kboxd: reloaded TLS certificate " << tls->cert_file() << std::endl;
        } else {
          std::cerr << "kboxd: ERROR: TLS certificate not reloaded, keeping the old one: "
                    << reloaded.error() << std::endl;
        }
      }
      if (!tokens && !tls) std::cerr << "kboxd: SIGHUP: nothing to reload" << std::endl;
      await_reload();
    });
  };
  await_reload();

  std::error_code ec;
  fs::create_directories(config.store().work_dir(), ec);
  if (ec) return Fail("cannot create store.work_dir " + config.store().work_dir() + ": " + ec.message());

  // A kboxd killed mid-job (SIGKILL, an OOM kill) leaves its jobs'
  // directories behind, each with its scratch tmpfs still mounted: a restart
  // on the same work_dir unmounts and removes them (their jobs, if they came
  // from POST /v1/jobs, are in the journal and run again under the same ids).
  for (const auto& left : fs::directory_iterator(fs::path(config.store().work_dir()) / "jobs", ec)) {
    ::umount2(left.path().c_str(), MNT_DETACH);
    fs::remove_all(left.path(), ec);
  }

  kbox::HarnessSettings harness{.python = config.sandbox().python(),
                                .harness_dir = config.sandbox().harness_dir()};
  std::cerr << "kboxd: probing worker interpreter " << config.sandbox().python() << std::endl;
  auto host = kbox::ProbeHost(harness);
  if (!host) return Fail(host.error());

  // A compile node runs nothing: it builds for every backend its toolchain
  // can build (CUDA with a CUDA torch, Triton when importable), GPU or not.
  const bool compile_role = config.scheduling().role() == kbox::v1::ROLE_COMPILE;
  std::vector<uint32_t> gpus(config.scheduling().gpus().begin(), config.scheduling().gpus().end());
  if (compile_role) {
    gpus.clear();
  } else if (gpus.empty()) {
    for (const auto& g : host->probe.gpus()) gpus.push_back(g.index());
  }
  for (uint32_t g : gpus) {
    const auto& seen = host->probe.gpus();
    if (std::none_of(seen.begin(), seen.end(), [g](const auto& info) { return info.index() == g; })) {
      return Fail("config scheduling.gpus: GPU " + std::to_string(g) + " is not visible to the workers");
    }
  }
  const auto backends =
      ServedBackends(config, *host, compile_role ? !host->probe.cuda_version().empty() : !gpus.empty());
  for (auto b : backends) {
    if (b != kbox::v1::BACKEND_CPU && gpus.empty() && !compile_role) {
      return Fail("config scheduling.backends: " + kbox::v1::Backend_Name(b) + " needs a GPU; none found");
    }
  }

  kbox::RequestLimits limits{.max_source_bytes = config.limits().max_source_bytes(),
                             .default_correctness_trials = 5,
                             .max_correctness_trials = config.limits().max_correctness_trials(),
                             .default_performance_trials = config.limits().default_performance_trials(),
                             .max_performance_trials = config.limits().max_performance_trials(),
                             .default_time_limit_s = config.limits().default_time_limit_s(),
                             .max_time_limit_s = config.limits().max_time_limit_s(),
                             .backends = backends};

  auto sandbox = kbox::SetUpSandbox(config, *host, ExecutableDir(argv[0]).string());
  if (!sandbox) return Fail("sandbox: " + sandbox.error().message());
  std::cerr << "kboxd: sandbox: " << sandbox->description << std::endl;

  std::vector<kbox::v1::GpuInfo> gpu_info;
  for (const auto& gpu : host->probe.gpus()) {
    if (std::find(gpus.begin(), gpus.end(), gpu.index()) != gpus.end()) gpu_info.push_back(gpu);
  }
  std::vector<std::string> token_names;
  if (tokens) token_names = tokens->table()->names();
  kbox::Metrics metrics(kbox::MetricLabelSets{
      .backends = backends, .gpus = gpus, .gpu_info = std::move(gpu_info), .tokens = std::move(token_names)});
  metrics.SetInsecureMode(!sandbox->settings.has_value());
  metrics.SetJobsInFlightLimit(config.limits().max_in_flight_jobs());
  std::unique_ptr<kbox::BuildCache> build_cache;
  if (config.caches().build_cache_max_bytes() > 0) {
    kbox::BuildCacheOptions options;
    options.root = config.caches().build_cache_dir();
    options.max_bytes = config.caches().build_cache_max_bytes();
    options.on_evicted = [&metrics](uint64_t n) { metrics.RecordBuildCacheEvictions(n); };
    options.on_corrupt = [&metrics] { metrics.RecordBuildCacheCorruptEntry(); };
    options.on_size = [&metrics](uint64_t bytes) { metrics.SetBuildCacheBytes(bytes); };
    auto opened = kbox::BuildCache::Open(std::move(options));
    if (!opened) return Fail("config caches.build_cache_dir: " + opened.error());
    build_cache = std::move(*opened);
    const auto stats = build_cache->stats();
    std::cerr << "kboxd: build cache " << config.caches().build_cache_dir() << ": " << stats.entries
              << " entries, " << stats.bytes << " of " << config.caches().build_cache_max_bytes() << " bytes"
              << std::endl;
  } else {
    std::cerr << "kboxd: build cache off (build_cache_max_bytes 0)" << std::endl;
  }
  // Built beside serving: compiles parse the light header until it is ready.
  // Declared before the evaluator, which reads it, so it outlives it.
  kbox::PrecompiledHeader pch;
  kbox::Evaluator evaluator(config, *host, gpus, *sandbox, metrics, build_cache.get());
  std::optional<kbox::RemoteBuilder> tier;
  if (!config.scheduling().compile_endpoint().empty()) {
    std::string token;
    if (!config.scheduling().compile_token_file().empty()) {
      std::ifstream in(config.scheduling().compile_token_file());
      if (!in || !std::getline(in, token) || token.empty()) {
        return Fail("config scheduling.compile_token_file: cannot read a token from " +
                    config.scheduling().compile_token_file());
      }
    }
    tier.emplace(kbox::RemoteBuilder::Options{
        .server = *kbox::ParseServerUrl(config.scheduling().compile_endpoint()),
        .token = token,
        .timeout = std::chrono::seconds(config.scheduling().remote_build_timeout_s())});
    evaluator.UseCompileTier(&*tier);
  }
  std::cerr << "kboxd: role "
            << (compile_role ? "compile: serves builds (POST /v1/builds) and takes no jobs"
                : config.scheduling().role() == kbox::v1::ROLE_RUN ? "run"
                                                                   : "all")
            << (tier ? "; builds go to the compile tier at " + config.scheduling().compile_endpoint() +
                           " first, here when it cannot build them"
                     : std::string())
            << std::endl;
  if (kbox::PrecompiledHeaderWanted(config)) {
    pch.StartBuild(harness, kbox::PrecompiledHeaderRoot(config));
    evaluator.UsePrecompiledHeader(&pch);
  }
  // One thread per admitted job, plus a few no job can take: /v1/check runs
  // on them, so a static check never waits behind running evaluations.
  constexpr uint32_t kCheckThreads = 2;
  asio::thread_pool job_pool(config.limits().max_in_flight_jobs() + kCheckThreads);
  std::unique_ptr<kbox::JobJournal> journal;
  if (!config.store().job_store_dir().empty()) {
    auto opened = kbox::JobJournal::Open(config.store().job_store_dir());
    if (!opened) return Fail("config store.job_store_dir: " + opened.error());
    journal = std::move(*opened);
  } else {
    std::cerr << "kboxd: job journal off (no job_store_dir): a restart loses queued jobs and results"
              << std::endl;
  }
  kbox::ApiHandler handler(config, kbox::RequestPolicy(limits, std::move(*profiles)), evaluator,
                           metrics, job_pool, tokens.get(), journal.get());
  if (journal) {
    // Before the listener opens: a retried key must find its first job.
    const auto start = std::chrono::steady_clock::now();
    const std::string restored = handler.RestoreJobs(journal->Load());
    std::cerr << "kboxd: job journal " << config.store().job_store_dir() << ": " << restored << " in "
              << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                       start)
                     .count()
              << " ms" << std::endl;
  }

  kbox::HttpServer server(
      io, handler,
      kbox::ServerLimits{.max_body_bytes = config.listener().max_body_bytes(),
                         .header_timeout = std::chrono::seconds(config.listener().header_timeout_s()),
                         .read_timeout = std::chrono::seconds(config.listener().read_timeout_s()),
                         .write_timeout = std::chrono::seconds(config.listener().write_timeout_s()),
                         .max_connections = config.listener().max_connections()},
      tls.get());
  auto endpoint = server.Start(config.listener().listen());
  if (!endpoint) return Fail(endpoint.error());

  // SIGTERM drains: /readyz turns 503 at once and submissions get 503 +
  // Retry-After, while the listener stays open so clients can still fetch
  // results; running jobs get drain_deadline_s, then are cancelled
  // (INFRA_ERROR); jobs not yet started stay in the journal for the restart.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& error, int) {
    if (error) return;
    std::cerr << "kboxd: draining; waiting up to " << config.store().drain_deadline_s() << " s for "
              << handler.jobs_in_flight() << " jobs in flight" << std::endl;
    handler.StartDraining();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer timer(io);
          const auto deadline =
              std::chrono::steady_clock::now() + std::chrono::seconds(config.store().drain_deadline_s());
          bool cancelled = false;
          while (handler.jobs_in_flight() > 0) {
            if (!cancelled && std::chrono::steady_clock::now() >= deadline) {
              // Running jobs end as INFRA_ERROR (retryable) and their
              // processes die; their clients still get an answer.
              std::cerr << "kboxd: drain deadline passed; cancelling " << handler.jobs_in_flight()
                        << " jobs" << std::endl;
              evaluator.CancelAll();
              cancelled = true;
            }
            timer.expires_after(std::chrono::milliseconds(50));
            co_await timer.async_wait(asio::use_awaitable);
          }
          // Long polls notice a finished job within their 100 ms poll: give
          // those in progress the results the drain produced (without a
          // journal, the only place a held-back job's INFRA_ERROR is read).
          timer.expires_after(std::chrono::seconds(1));
          co_await timer.async_wait(asio::use_awaitable);
          std::cerr << "kboxd: drained; exiting" << std::endl;
          server.Stop();
          io.stop();
        },
        asio::detached);
  });

  std::string backend_names;
  for (auto b : backends) backend_names += " " + kbox::v1::Backend_Name(b);
  std::cout << "kboxd " << kbox::kVersion << " listening on " << (tls ? "https" : "http")
            << "://" << endpoint->address().to_string()
            << ":" << endpoint->port() << std::endl;
  std::cerr << "kboxd: backends" << backend_names << "; gpus " << gpus.size() << "; work_dir "
            << config.store().work_dir() << "; harness " << config.sandbox().harness_dir() << std::endl;

  std::vector<std::thread> io_threads;
  for (uint32_t i = 1; i < config.listener().io_threads(); ++i) io_threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : io_threads) t.join();
  job_pool.stop();
  job_pool.join();
  fs::remove_all(fs::path(config.store().work_dir()) / "jobs", ec);
  if (build_cache && ephemeral_build_cache) {
    build_cache.reset();
    fs::remove_all(config.caches().build_cache_dir(), ec);
  }
  if (sandbox->settings) fs::remove(sandbox->settings->root_mount_point, ec);
  return 0;
}
