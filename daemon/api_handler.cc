#include "daemon/api_handler.h"

#include <algorithm>
#include <memory>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/static_verdicts.h"
#include "daemon/version.h"
#include "kbox/v1/api.pb.h"

namespace kbox {
namespace http = boost::beast::http;
using boost::asio::awaitable;

namespace {

// How long a client refused for load should wait before retrying, seconds.
constexpr const char* kRetryAfterSeconds = "5";

// The canonical name of each HTTP status kboxd answers with (the one table;
// ErrorDetail in api.proto lists the same).
const char* ErrorCodeName(http::status status) {
  switch (status) {
    case http::status::bad_request:
    case http::status::payload_too_large:
    case http::status::unsupported_media_type:
    case http::status::request_header_fields_too_large:
      return "INVALID_ARGUMENT";
    case http::status::unauthorized:
      return "UNAUTHENTICATED";
    case http::status::not_found:
      return "NOT_FOUND";
    case http::status::method_not_allowed:
      return "METHOD_NOT_ALLOWED";
    case http::status::conflict:
      return "ALREADY_EXISTS";
    case http::status::too_many_requests:
      return "RESOURCE_EXHAUSTED";
    case http::status::service_unavailable:
      return "UNAVAILABLE";
    default:
      return static_cast<unsigned>(status) < 500 ? "INVALID_ARGUMENT" : "INTERNAL";
  }
}

}  // namespace

ApiHandler::ApiHandler(const v1::DaemonConfig& config, RequestPolicy policy, Evaluator& evaluator,
                       Metrics& metrics, boost::asio::thread_pool& job_pool, const ApiTokens* tokens,
                       JobJournal* journal)
    : config_(config),
      policy_(std::move(policy)),
      evaluator_(evaluator),
      metrics_(metrics),
      job_pool_(job_pool),
      tokens_(tokens),
      journal_(journal),
      admission_(config.limits().max_in_flight_jobs(),
                 [&metrics](uint32_t in_flight) { metrics.SetJobsInFlight(in_flight); }),
      jobs_(JobStore::Options{.result_ttl = std::chrono::seconds(config.store().result_ttl_s()),
                              .max_jobs = config.store().max_stored_jobs(),
                              .on_expired = [journal](const std::string& job_id) {
                                if (journal) journal->Remove(job_id);
                              }}) {}

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
  // Messages quote what the client sent (paths, media types, keys): only
  // valid UTF-8 goes back, else the JSON answer would not be JSON.
  error.set_field(ClientText(field));
  error.set_message(ClientText(message, 2048));
  error.mutable_error()->set_code(ErrorCodeName(status));
  error.mutable_error()->set_message(error.message());
  return Reply(status, error, encoding);
}

bool ApiHandler::NeedsToken(const std::string& target) const {
  if (tokens_ == nullptr) return false;
  if (target == "/healthz" || target == "/readyz") return config_.auth().auth_required_for_health();
  if (target == "/metrics") return config_.auth().auth_required_for_metrics();
  return true;  // Unknown paths too: which endpoints exist is not for strangers.
}

bool ApiHandler::Authenticate(const HttpRequest& req, const std::string& target, Caller& caller,
                              HttpResponse& refusal) const {
  if (!NeedsToken(target)) return true;
  const Authentication auth = tokens_->Authenticate(req[http::field::authorization]);
  if (auth.outcome == Authentication::Outcome::kAccepted) {
    caller = Caller{.token = auth.token->name,
                    .max_concurrent_jobs = auth.token->max_concurrent_jobs};
    return true;
  }
  // Never the presented secret in the answer (or anywhere else).
  std::string message;
  switch (auth.outcome) {
    case Authentication::Outcome::kMissing:
      message = target + " needs an API token: send the header Authorization: Bearer <token>";
      break;
    case Authentication::Outcome::kMalformed:
      message = "the Authorization header must be Bearer <token>";
      break;
    default:
      message = "the bearer token is not valid (unknown or revoked)";
  }
  refusal = Error(http::status::unauthorized, "authorization", message);
  // RFC 6750 section 3: no error code when no credentials were sent.
  refusal.set(http::field::www_authenticate,
              auth.outcome == Authentication::Outcome::kMissing ? "Bearer"
                                                                : "Bearer error=\"invalid_token\"");
  return false;
}

bool ApiHandler::AdmitOne(const Caller& caller, Encoding encoding, JobAdmission::Lease& lease,
                          HttpResponse& refusal) {
  auto leases = admission_.TryAcquire(caller.token, caller.max_concurrent_jobs);
  if (!leases) {
    refusal = AdmissionRefused(leases.error(), caller, 1, encoding);
    return false;
  }
  lease = std::move(leases->front());
  return true;
}

HttpResponse ApiHandler::AdmissionRefused(JobAdmission::Refusal refusal, const Caller& caller,
                                          uint32_t n, Encoding encoding) const {
  const std::string jobs = n == 1 ? "1 more job" : std::to_string(n) + " more jobs";
  const std::string message =
      refusal == JobAdmission::Refusal::kTokenFull
          ? "token " + caller.token + " has no room for " + jobs + " (limit " +
                std::to_string(caller.max_concurrent_jobs) + " in flight, " +
                std::to_string(admission_.in_flight(caller.token)) + " now); retry later"
          : "kboxd has no room for " + jobs + " (limit " +
                std::to_string(config_.limits().max_in_flight_jobs()) + " in flight); retry later";
  HttpResponse res = Error(http::status::too_many_requests, "", message, encoding);
  res.set(http::field::retry_after, kRetryAfterSeconds);
  return res;
}

ApiHandler::Route ApiHandler::Resolve(const HttpRequest& req, const std::string& target,
                                     Caller& caller, HttpResponse& res) {
  const auto method = req.method();
  auto only = [&](http::verb verb) {
    if (method == verb) return true;
    res = Error(http::status::method_not_allowed, "method",
                target + " accepts " + std::string(http::to_string(verb)) + " only");
    res.set(http::field::allow, http::to_string(verb));
    return false;
  };

  if (!Authenticate(req, target, caller, res)) return Route::kAnswered;  // res is the 401.
  if (target == "/healthz") {
    if (only(http::verb::get)) {
      v1::HealthResponse health;
      health.set_status("ok");
      res = Reply(http::status::ok, health, Encoding::kJson);
    }
  } else if (target == "/readyz") {
    if (only(http::verb::get)) res = Ready();
  } else if (target == "/v1/info") {
    if (only(http::verb::get)) res = Info(caller);
  } else if (target == "/metrics") {
    if (only(http::verb::get)) {
      metrics_.SetJobsInFlight(admission_.in_flight());
      evaluator_.PublishGauges();
      res = HttpResponse(http::status::ok, 11);
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = metrics_.Serialize();
      res.prepare_payload();
      metrics_.RecordResponse(200);
    }
  } else if (target == "/v1/builds") {
    if (config_.scheduling().role() == v1::ROLE_RUN) {
      res = Error(http::status::not_found, "path",
                  "this kboxd serves no builds (role run); its compile tier is " +
                      config_.scheduling().compile_endpoint());
    } else if (only(http::verb::post)) {
      if (!draining_.load()) return Route::kBuild;
      const auto encoding = EncodingFromContentType(std::string(req[http::field::content_type]));
      res = Unavailable("kboxd is draining (shutting down); ask another compile node",
                        encoding ? *encoding : Encoding::kJson);
    }
  } else if (config_.scheduling().role() == v1::ROLE_COMPILE &&
             (target == "/v1/evaluate" || target == "/v1/jobs" || target.starts_with("/v1/jobs/"))) {
    res = Error(http::status::not_found, "path",
                "this kboxd only builds (role compile): send jobs to a run- or all-role kboxd");
  } else if (target == "/v1/evaluate") {
    if (only(http::verb::post)) {
      if (!draining_.load()) return Route::kEvaluate;
      res = Unavailable("kboxd is draining (shutting down); retry on another replica or later",
                        Encoding::kJson);
    }
  } else if (target == "/v1/check") {
    if (only(http::verb::post)) return Route::kCheck;
  } else if (target == "/v1/jobs") {
    if (method == http::verb::get) {
      res = ListJobs(req, caller);
    } else if (method == http::verb::post) {
      res = draining_.load()
                ? Unavailable("kboxd is draining (shutting down); retry on another replica or later",
                              Encoding::kJson)
                : Submit(req, caller);
    } else {
      res = Error(http::status::method_not_allowed, "method", target + " accepts GET and POST only");
      res.set(http::field::allow, "GET, POST");
    }
  } else if (target.starts_with("/v1/jobs/") && target.size() > 9) {
    if (method == http::verb::get) return Route::kGetJob;
    if (method == http::verb::delete_) {
      res = CancelJob(target.substr(9), caller);
    } else {
      res = Error(http::status::method_not_allowed, "method", target + " accepts GET and DELETE only");
      res.set(http::field::allow, "GET, DELETE");
    }
  } else {
    res = Error(http::status::not_found, "path", "no such endpoint: " + target);
  }
  return Route::kAnswered;
}

awaitable<HttpResponse> ApiHandler::Handle(HttpRequest req) {
  const std::string target(req.target().substr(0, req.target().find('?')));
  const bool keep_alive = req.keep_alive();
  HttpResponse res;
  Caller caller;
  switch (Resolve(req, target, caller, res)) {
    case Route::kAnswered:
      break;
    case Route::kEvaluate:
      res = co_await Evaluate(req, caller);
      break;
    case Route::kCheck:
      res = co_await Check(req);
      break;
    case Route::kGetJob:
      res = co_await GetJob(req, target.substr(9), caller);
      break;
    case Route::kBuild:
      res = co_await ServeBuild(req, caller);
      break;
  }
  res.keep_alive(keep_alive);
  co_return res;
}

awaitable<HttpResponse> ApiHandler::Evaluate(const HttpRequest& req, const Caller& caller) {
  const auto received = Evaluator::Clock::now();
  auto encoding = EncodingFromContentType(std::string(req[http::field::content_type]));
  if (!encoding) {
    co_return Error(http::status::unsupported_media_type, encoding.error().field,
                    encoding.error().message);
  }
  // On the heap, not in the coroutine frame: with a message holding a map
  // field in the frame, GCC 12 reports a false -Wmismatched-new-delete for it.
  const auto request_ptr = std::make_unique<v1::EvaluateRequest>();
  v1::EvaluateRequest& request = *request_ptr;
  if (auto decoded = DecodeMessage(req.body(), *encoding, request); !decoded) {
    co_return Error(http::status::bad_request, decoded.error().field, decoded.error().message,
                    *encoding);
  }
  auto job = policy_.ResolveJob(request);
  if (!job) {
    co_return Error(http::status::bad_request, job.error().field,
                    job.error().field + " " + job.error().message, *encoding);
  }
  // Given back by hand below, or by its destructor if the evaluation throws.
  JobAdmission::Lease lease;
  if (HttpResponse refusal; !AdmitOne(caller, *encoding, lease, refusal)) co_return refusal;
  // The job blocks on child processes for seconds to minutes: run it on the
  // job pool and resume this coroutine on its I/O thread when it is done.
  v1::EvaluateResult result = co_await boost::asio::co_spawn(
      job_pool_,
      [&]() -> awaitable<v1::EvaluateResult> {
        co_return evaluator_.Evaluate(request, job->settings, job->anticheat, received, "",
                                      caller.token);
      },
      boost::asio::use_awaitable);
  lease.Release();
  co_return Reply(http::status::ok, result, *encoding);
}

awaitable<HttpResponse> ApiHandler::Check(const HttpRequest& req) {
  auto encoding = EncodingFromContentType(std::string(req[http::field::content_type]));
  if (!encoding) {
    co_return Error(http::status::unsupported_media_type, encoding.error().field,
                    encoding.error().message);
  }
  const auto request_ptr = std::make_unique<v1::CheckRequest>();  // As in Evaluate.
  v1::CheckRequest& request = *request_ptr;
  if (auto decoded = DecodeMessage(req.body(), *encoding, request); !decoded) {
    co_return Error(http::status::bad_request, decoded.error().field, decoded.error().message,
                    *encoding);
  }
  auto check = policy_.ResolveCheck(request);
  if (!check) {
    co_return Error(http::status::bad_request, check.error().field,
                    check.error().field + " " + check.error().message, *encoding);
  }
  // Sub-millisecond, but linear in a source of up to max_source_bytes: keep
  // it off the I/O threads. Not admitted against max_in_flight_jobs (the
  // body was already bounded by max_body_bytes while it was read).
  v1::CheckResponse response = co_await boost::asio::co_spawn(
      job_pool_,
      [&]() -> awaitable<v1::CheckResponse> {
        const StaticPhase phase = RunStaticCheck(
            static_check::CheckInput{.candidate_source = request.candidate_source(),
                                     .reference_source = request.reference_source(),
                                     .backend = TaskBackendOf(check->backend),
                                     .precision = TaskPrecisionOf(check->precision)},
            check->anticheat);
        if (phase.ran) metrics_.RecordStaticCheck(phase.report, phase.ms / 1000.0);
        v1::CheckResponse r;
        r.set_rejected(phase.report.rejected());
        AppendVerdicts(phase.report, r.mutable_verdicts());
        r.set_anticheat_profile(check->anticheat.name());
        r.set_duration_ms(phase.ms);
        r.set_truncated(phase.report.truncated);
        r.set_client_request_id(request.client_request_id());
        co_return r;
      },
      boost::asio::use_awaitable);
  co_return Reply(http::status::ok, response, *encoding);
}

awaitable<HttpResponse> ApiHandler::ServeBuild(const HttpRequest& req, const Caller& caller) {
  auto encoding = EncodingFromContentType(std::string(req[http::field::content_type]));
  if (!encoding) {
    co_return Error(http::status::unsupported_media_type, encoding.error().field,
                    encoding.error().message);
  }
  const auto request_ptr = std::make_unique<v1::BuildRequest>();  // As in Evaluate.
  v1::BuildRequest& request = *request_ptr;
  if (auto decoded = DecodeMessage(req.body(), *encoding, request); !decoded) {
    co_return Error(http::status::bad_request, decoded.error().field, decoded.error().message,
                    *encoding);
  }
  auto job = policy_.ResolveJob(request.job());
  if (!job) {
    co_return Error(http::status::bad_request, "job." + job.error().field,
                    job.error().field + " " + job.error().message, *encoding);
  }
  // A build counts as a job against max_in_flight_jobs: a full compile node
  // answers 429 and the run node asks again or builds itself.
  JobAdmission::Lease lease;
  if (HttpResponse refusal; !AdmitOne(caller, *encoding, lease, refusal)) co_return refusal;
  const auto answer_ptr = std::make_unique<Evaluator::BuildAnswer>(co_await boost::asio::co_spawn(
      job_pool_,
      [&]() -> awaitable<Evaluator::BuildAnswer> {
        co_return evaluator_.Build(request, job->settings, job->anticheat, caller.token);
      },
      boost::asio::use_awaitable));
  lease.Release();
  const Evaluator::BuildAnswer& answer = *answer_ptr;
  if (!answer.response) {
    co_return Error(static_cast<http::status>(answer.refusal_status), answer.refusal_field,
                    answer.refusal, *encoding);
  }
  co_return Reply(http::status::ok, *answer.response, *encoding);
}

HttpResponse ApiHandler::Unavailable(const std::string& message, Encoding encoding) const {
  HttpResponse res = Error(http::status::service_unavailable, "", message, encoding);
  res.set(http::field::retry_after, kRetryAfterSeconds);
  return res;
}

HttpResponse ApiHandler::Ready() const {
  bool cpu = false, gpu = false;
  for (v1::Backend b : policy_.limits().backends) (b == v1::BACKEND_CPU ? cpu : gpu) = true;
  std::string reason;
  if (draining_.load()) {
    reason = "draining: kboxd is shutting down";
  } else if (config_.scheduling().role() != v1::ROLE_COMPILE && !evaluator_.HasServingRunSlot(cpu, gpu)) {
    reason = "no run slot on a healthy device: every GPU is quarantined until its probe passes";
  }
  HttpResponse res(reason.empty() ? http::status::ok : http::status::service_unavailable, 11);
  res.set(http::field::server, std::string("kboxd/") + kVersion);
  res.set(http::field::content_type, "application/json");
  // The agreed body, exactly; the reasons are kboxd's own ASCII words.
  res.body() = reason.empty() ? R"({"ready":true})"
                              : R"({"ready":false,"reason":")" + reason + R"("})";
  res.prepare_payload();
  metrics_.RecordResponse(res.result_int());
  return res;
}

HttpResponse ApiHandler::Info(const Caller& caller) const {
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
  info.set_compile_workers(config_.scheduling().compile_workers());
  info.set_role(config_.scheduling().role() == v1::ROLE_COMPILE ? "compile"
                : config_.scheduling().role() == v1::ROLE_RUN   ? "run"
                                                                : "all");
  info.set_cpu_run_slots(config_.scheduling().cpu_run_slots());
  info.set_max_in_flight_jobs(config_.limits().max_in_flight_jobs());
  info.set_jobs_in_flight(admission_.in_flight());
  info.set_auth_enabled(tokens_ != nullptr);
  info.set_token_name(caller.token);
  info.set_token_max_concurrent_jobs(caller.max_concurrent_jobs);
  if (tokens_ != nullptr) info.set_token_jobs_in_flight(admission_.in_flight(caller.token));
  info.set_max_body_bytes(config_.listener().max_body_bytes());
  info.set_default_correctness_trials(policy_.limits().default_correctness_trials);
  info.set_max_time_limit_s(config_.limits().max_time_limit_s());
  info.set_sandboxed(evaluator_.sandbox().settings.has_value());
  info.set_sandbox(evaluator_.sandbox().description);
  for (const auto& name : policy_.profiles().names()) info.add_anticheat_profiles(name);
  info.set_default_anticheat_profile(policy_.profiles().default_name);
  return Reply(http::status::ok, info, Encoding::kJson);
}

}  // namespace kbox
