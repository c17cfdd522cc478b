#pragma once

// Routes kboxd's HTTP API: GET /healthz (liveness), GET /readyz (readiness:
// 200 {"ready":true} while a run slot on a healthy device can take jobs and
// kboxd is not draining, else 503 {"ready":false,"reason":...}), GET /v1/info, GET /metrics,
// POST /v1/evaluate, POST /v1/check, the asynchronous POST /v1/jobs and
// GET /v1/jobs/<id> (api_jobs.cc), and POST /v1/builds, the compile tier's
// (docs/compile-tier.md); docs/api.md describes each. A compile-role kboxd
// takes no jobs; a run-role one serves no builds. Every non-2xx
// answer carries an ErrorResponse naming the offending field.
//
// With API tokens (api_tokens.h), every request but the health endpoints and
// /metrics (unless the config says otherwise) needs `Authorization: Bearer
// <secret>`, else 401. A job belongs to the token that submitted it: only
// that token reads it, and idempotency keys are per token.
//
// Evaluation runs on the job thread pool, never on an I/O thread, and at most
// max_in_flight_jobs at once, at most each token's max_concurrent_jobs for
// that token (job_admission.h; more get 429 + Retry-After). /v1/check (static
// checks only, sub-millisecond) runs on the job pool too but is not counted
// against either bound; kboxd sizes the pool with threads to spare for it, so
// checks never wait behind evaluations.

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http.hpp>

#include "daemon/api_tokens.h"
#include "daemon/evaluator.h"
#include "daemon/job_admission.h"
#include "daemon/job_journal.h"
#include "daemon/job_store.h"
#include "daemon/message_codec.h"
#include "daemon/metrics.h"
#include "kbox/v1/config.pb.h"
#include "policy/request_policy.h"

namespace kbox {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Who is asking: the token's name ("" when authentication is off) and its
// max_concurrent_jobs (0: no per-token limit).
struct Caller {
  std::string token;
  uint32_t max_concurrent_jobs = 0;
};

class ApiHandler {
 public:
  // `tokens` null: no authentication. Otherwise it must outlive the handler.
  // `journal` null: jobs live in memory only (lost by a restart); otherwise
  // every accepted job and result is durable before it is answered or
  // shown (api_journal.cc), and the journal must outlive the handler.
  ApiHandler(const v1::DaemonConfig& config, RequestPolicy policy, Evaluator& evaluator,
             Metrics& metrics, boost::asio::thread_pool& job_pool, const ApiTokens* tokens,
             JobJournal* journal = nullptr);

  // Start-up, before serving: the journal's jobs back in the store, finished
  // ones to be served again and unfinished ones queued to run (with their
  // first seed). Expired results are deleted; past max_stored_jobs, the
  // oldest results go. Returns a line for the log.
  std::string RestoreJobs(JobJournal::Loaded loaded);

  boost::asio::awaitable<HttpResponse> Handle(HttpRequest request);

  // An error response in `encoding` (used by the server for malformed HTTP).
  HttpResponse Error(boost::beast::http::status status, const std::string& field,
                     const std::string& message, Encoding encoding = Encoding::kJson) const;

  uint32_t jobs_in_flight() const { return admission_.in_flight(); }
  // kboxd is shutting down: /readyz answers 503 from now on, submissions
  // get 503 + Retry-After, and jobs that have not started stay unstarted
  // (in the journal, to run after the restart; without one they end
  // INFRA_ERROR, retryable). Running jobs go on.
  void StartDraining() {
    draining_.store(true);
    evaluator_.StopStartingJobs();
  }

 private:
  // What Handle does with a request: answered here (`res` is set: every
  // endpoint that does not wait, and every refusal), or a coroutine to await.
  // (Not a coroutine itself, so that Handle's frame stays small: GCC 12 draws
  // a false -Wmismatched-new-delete for large coroutines.)
  enum class Route { kAnswered, kEvaluate, kCheck, kGetJob, kBuild };
  Route Resolve(const HttpRequest& request, const std::string& target, Caller& caller,
                HttpResponse& res);
  // Whether `target` needs a token under this configuration.
  bool NeedsToken(const std::string& target) const;
  // Sets `caller` and returns true, or sets `refusal` to the 401 to answer.
  // (Out parameters: a result<Caller, HttpResponse> in Handle's coroutine
  // frame draws GCC 12's false -Wmismatched-new-delete.)
  bool Authenticate(const HttpRequest& request, const std::string& target, Caller& caller,
                    HttpResponse& refusal) const;
  boost::asio::awaitable<HttpResponse> Evaluate(const HttpRequest& request, const Caller& caller);
  boost::asio::awaitable<HttpResponse> Check(const HttpRequest& request);
  // POST /v1/builds on a compile (or all) role kboxd (docs/compile-tier.md).
  boost::asio::awaitable<HttpResponse> ServeBuild(const HttpRequest& request, const Caller& caller);
  HttpResponse Submit(const HttpRequest& request, const Caller& caller);
  // GET /v1/jobs[?state=S]: the caller's jobs (api_jobs.cc).
  HttpResponse ListJobs(const HttpRequest& request, const Caller& caller);
  // DELETE /v1/jobs/<id>: 202 with the job's status while its cancel takes
  // hold; 200 when it already ended CANCELLED; 409 when it ended otherwise.
  HttpResponse CancelJob(const std::string& job_id, const Caller& caller);
  HttpResponse UnknownJob(const std::string& job_id) const;
  boost::asio::awaitable<HttpResponse> GetJob(const HttpRequest& request, std::string job_id,
                                              const Caller& caller);
  // The job pool's side of a submitted job: run it, give its place back,
  // store the result (in that order: a client that sees DONE may submit
  // again at once).
  // `record` (null without a journal) is the job's accepted journal record.
  void RunSubmitted(const v1::EvaluateRequest& request, const ResolvedJob& job,
                    Evaluator::Clock::time_point received, const std::string& job_id,
                    const std::string& tenant, JobAdmission::Lease& lease,
                    std::shared_ptr<const v1::JournalRecord> record,
                    std::shared_ptr<JobCancel> cancel);
  // Posts a job to the job pool (fresh or restored).
  void QueueSubmitted(std::shared_ptr<const v1::EvaluateRequest> request,
                      std::shared_ptr<const ResolvedJob> job, Evaluator::Clock::time_point received,
                      const std::string& job_id, const std::string& tenant,
                      JobAdmission::Lease lease,
                      std::shared_ptr<const v1::JournalRecord> record);
  // Makes the accepted records durable; false (and counted) on failure.
  bool JournalWrite(const std::vector<const v1::JournalRecord*>& records);
  // The 503 + Retry-After of a submission kboxd cannot take now.
  HttpResponse Unavailable(const std::string& message, Encoding encoding) const;
  // GET /v1/jobs/<id>'s answer now, or nullopt to keep waiting.
  std::optional<HttpResponse> JobAnswer(const std::string& job_id, const Caller& caller,
                                        JobStore::Clock::time_point deadline);
  // Takes one place for `caller`'s job into `lease`, or sets `refusal` to
  // the 429 and returns false.
  bool AdmitOne(const Caller& caller, Encoding encoding, JobAdmission::Lease& lease,
                HttpResponse& refusal);
  // The 429 for a refused admission of n jobs.
  HttpResponse AdmissionRefused(JobAdmission::Refusal refusal, const Caller& caller, uint32_t n,
                                Encoding encoding) const;
  HttpResponse Info(const Caller& caller) const;
  HttpResponse Ready() const;
  HttpResponse Reply(boost::beast::http::status status, const google::protobuf::Message& body,
                     Encoding encoding) const;

  const v1::DaemonConfig& config_;
  RequestPolicy policy_;
  Evaluator& evaluator_;
  Metrics& metrics_;
  boost::asio::thread_pool& job_pool_;
  const ApiTokens* tokens_;
  JobJournal* journal_;
  JobAdmission admission_;
  std::atomic<bool> draining_{false};
  JobStore jobs_;
};

}  // namespace kbox
