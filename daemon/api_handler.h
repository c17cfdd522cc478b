#pragma once

// Routes kboxd's HTTP API: GET /healthz (liveness), GET /readyz (readiness:
// 200 {"ready":true} while a run slot on a healthy device can take jobs and
// kboxd is not draining, else 503 {"ready":false,"reason":...}), GET /v1/info, GET /metrics,
// POST /v1/evaluate, POST /v1/check, and the asynchronous POST /v1/jobs and
// GET /v1/jobs/<id> (api_jobs.cc). Every non-2xx answer carries an
// ErrorResponse naming the offending field. Evaluation runs on the job thread
// pool, never on an I/O thread, and at most max_in_flight_jobs at once (more
// get 503 + Retry-After). /v1/check (static checks only, sub-millisecond) runs
// on the job pool too but is not counted against that bound; kboxd sizes the
// pool with threads to spare for it, so checks never wait behind evaluations.

#include <atomic>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http.hpp>

#include "daemon/evaluator.h"
#include "daemon/job_store.h"
#include "daemon/message_codec.h"
#include "daemon/metrics.h"
#include "kbox/v1/config.pb.h"
#include "policy/request_policy.h"

namespace kbox {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

class ApiHandler {
 public:
  ApiHandler(const v1::DaemonConfig& config, RequestPolicy policy, Evaluator& evaluator,
             Metrics& metrics, boost::asio::thread_pool& job_pool);

  boost::asio::awaitable<HttpResponse> Handle(HttpRequest request);

  // An error response in `encoding` (used by the server for malformed HTTP).
  HttpResponse Error(boost::beast::http::status status, const std::string& field,
                     const std::string& message, Encoding encoding = Encoding::kJson) const;

  uint32_t jobs_in_flight() const { return in_flight_.load(); }
  // kboxd is shutting down: /readyz answers 503 from now on.
  void StartDraining() { draining_.store(true); }

 private:
  boost::asio::awaitable<HttpResponse> Evaluate(const HttpRequest& request);
  boost::asio::awaitable<HttpResponse> Check(const HttpRequest& request);
  HttpResponse Submit(const HttpRequest& request);
  boost::asio::awaitable<HttpResponse> GetJob(const HttpRequest& request, std::string job_id);
  // The job pool's side of a submitted job: run it, store the result.
  void RunSubmitted(const v1::EvaluateRequest& request, const ResolvedJob& job,
                    Evaluator::Clock::time_point received, const std::string& job_id);
  // GET /v1/jobs/<id>'s answer now, or nullopt to keep waiting.
  std::optional<HttpResponse> JobAnswer(const std::string& job_id,
                                        JobStore::Clock::time_point deadline);
  HttpResponse Info() const;
  HttpResponse Ready() const;
  HttpResponse Reply(boost::beast::http::status status, const google::protobuf::Message& body,
                     Encoding encoding) const;
  // Reserves n of the max_in_flight_jobs places, all or none.
  bool TryAdmit(uint32_t n = 1);

  const v1::DaemonConfig& config_;
  RequestPolicy policy_;
  Evaluator& evaluator_;
  Metrics& metrics_;
  boost::asio::thread_pool& job_pool_;
  std::atomic<uint32_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  JobStore jobs_;
};

}  // namespace kbox
