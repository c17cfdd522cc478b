#include "daemon/api_handler.h"

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/version.h"
#include "kbox/v1/api.pb.h"

namespace kbox {
namespace http = boost::beast::http;
using boost::asio::awaitable;

namespace {

// How long a client refused for load should wait before retrying, seconds.
constexpr const char* kRetryAfterSeconds = "5";

}  // namespace

ApiHandler::ApiHandler(const v1::DaemonConfig& config, RequestPolicy policy, Evaluator& evaluator,
                       Metrics& metrics, boost::asio::thread_pool& job_pool)
    : config_(config),
      policy_(std::move(policy)),
      evaluator_(evaluator),
      metrics_(metrics),
      job_pool_(job_pool) {}

HttpResponse ApiHandler::Reply(http::status status, const google::protobuf::Message& body,
                               Encoding encoding) const {
  HttpResponse res(status, 11);
  res.set(http::field::server, std::string("kboxd/") + kVersion);
  res.set(http::field::content_type, ContentTypeOf(encoding));
  res.body() = EncodeMessage(body, encoding);
  res.prepare_payload();
  metrics_.RecordResponse(static_cast<unsigned>(status));
  return res;
}

HttpResponse ApiHandler::Error(http::status status, const std::string& field,
                               const std::string& message, Encoding encoding) const {
  v1::ErrorResponse error;
  error.set_code(static_cast<uint32_t>(status));
  error.set_field(field);
  error.set_message(message);
  return Reply(status, error, encoding);
}

awaitable<HttpResponse> ApiHandler::Handle(HttpRequest req) {
  const std::string target(req.target().substr(0, req.target().find('?')));
  const bool keep_alive = req.keep_alive();
  HttpResponse res;
  const auto method = req.method();

  auto only = [&](http::verb verb) {
    if (method == verb) return true;
    res = Error(http::status::method_not_allowed, "method",
                target + " accepts " + std::string(http::to_string(verb)) + " only");
    res.set(http::field::allow, http::to_string(verb));
    return false;
  };

  if (target == "/healthz") {
    if (only(http::verb::get)) {
      v1::HealthResponse health;
      health.set_status("ok");
      res = Reply(http::status::ok, health, Encoding::kJson);
    }
  } else if (target == "/v1/info") {
    if (only(http::verb::get)) res = Info();
  } else if (target == "/metrics") {
    if (only(http::verb::get)) {
      metrics_.SetJobsInFlight(in_flight_.load());
      res = HttpResponse(http::status::ok, 11);
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = metrics_.Serialize();
      res.prepare_payload();
      metrics_.RecordResponse(200);
    }
  } else if (target == "/v1/evaluate") {
    if (only(http::verb::post)) res = co_await Evaluate(req);
  } else {
    res = Error(http::status::not_found, "path", "no such endpoint: " + target);
  }
  res.keep_alive(keep_alive);
  co_return res;
}

bool ApiHandler::TryAdmit() {
  uint32_t current = in_flight_.load();
  while (current < config_.max_in_flight_jobs()) {
    if (in_flight_.compare_exchange_weak(current, current + 1)) return true;
  }
  return false;
}

awaitable<HttpResponse> ApiHandler::Evaluate(const HttpRequest& req) {
  const auto received = Evaluator::Clock::now();
  auto encoding = EncodingFromContentType(std::string(req[http::field::content_type]));
  if (!encoding) {
    co_return Error(http::status::unsupported_media_type, encoding.error().field,
                    encoding.error().message);
  }
  v1::EvaluateRequest request;
  if (auto decoded = DecodeMessage(req.body(), *encoding, request); !decoded) {
    co_return Error(http::status::bad_request, decoded.error().field, decoded.error().message,
                    *encoding);
  }
  auto settings = policy_.Resolve(request);
  if (!settings) {
    co_return Error(http::status::bad_request, settings.error().field,
                    settings.error().field + " " + settings.error().message, *encoding);
  }
  if (!TryAdmit()) {
    auto res = Error(http::status::service_unavailable, "",
                     "kboxd is at its limit of " +
                         std::to_string(config_.max_in_flight_jobs()) +
                         " jobs in flight; retry later",
                     *encoding);
    res.set(http::field::retry_after, kRetryAfterSeconds);
    co_return res;
  }
  metrics_.SetJobsInFlight(in_flight_.load());
  // The job blocks on child processes for seconds to minutes: run it on the
  // job pool and resume this coroutine on its I/O thread when it is done.
  v1::EvaluateResult result = co_await boost::asio::co_spawn(
      job_pool_,
      [&]() -> awaitable<v1::EvaluateResult> {
        co_return evaluator_.Evaluate(request, *settings, received);
      },
      boost::asio::use_awaitable);
  in_flight_.fetch_sub(1);
  metrics_.SetJobsInFlight(in_flight_.load());
  co_return Reply(http::status::ok, result, *encoding);
}

HttpResponse ApiHandler::Info() const {
  v1::InfoResponse info;
  info.set_kbox_version(kVersion);
  for (v1::Backend b : policy_.limits().backends) info.add_backends(b);
  const HostInfo& host = evaluator_.host();
  const auto& in_use = evaluator_.gpus();
  for (const auto& gpu : host.probe.gpus()) {
    if (std::find(in_use.begin(), in_use.end(), gpu.index()) == in_use.end()) continue;
    auto* g = info.add_gpus();
    *g = gpu;
    g->set_busy(evaluator_.gpu_slots().IsBusy(gpu.index()));
  }
  *info.mutable_software() = HostFingerprint(host);
  info.set_compile_workers(config_.compile_workers());
  info.set_cpu_run_slots(config_.cpu_run_slots());
  info.set_max_in_flight_jobs(config_.max_in_flight_jobs());
  info.set_jobs_in_flight(in_flight_.load());
  info.set_max_body_bytes(config_.max_body_bytes());
  info.set_default_correctness_trials(policy_.limits().default_correctness_trials);
  info.set_max_time_limit_s(config_.max_time_limit_s());
  info.set_sandboxed(evaluator_.sandbox().settings.has_value());
  info.set_sandbox(evaluator_.sandbox().description);
  return Reply(http::status::ok, info, Encoding::kJson);
}

}  // namespace kbox
