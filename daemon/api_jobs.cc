// The asynchronous job endpoints of ApiHandler: POST /v1/jobs (submit one or
// many, with idempotency keys) and GET /v1/jobs/<id>[?wait=S] (long poll).
#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "daemon/api_handler.h"

namespace kbox {
namespace http = boost::beast::http;
using boost::asio::awaitable;

namespace {

constexpr const char* kRetryAfterSeconds = "5";
constexpr int kMaxWaitSeconds = 60;
constexpr auto kPollInterval = std::chrono::milliseconds(100);

// What tells two submissions under one key apart: a hash of the request's
// deterministic encoding. A 64-bit collision between two requests of the
// same client under the same key is the only way to miss a conflict.
std::string RequestDigest(const v1::EvaluateRequest& request) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
  }
  return std::to_string(std::hash<std::string>{}(bytes));
}

// The `wait` query parameter in seconds, bounded; 0 when absent or malformed.
int WaitSeconds(std::string_view target) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return 0;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.starts_with("wait=")) {
      int seconds = 0;
      const auto value = pair.substr(5);
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (ec != std::errc() || end != value.data() + value.size()) return -1;
      return std::clamp(seconds, 0, kMaxWaitSeconds);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return 0;
}

}  // namespace

// Not a coroutine: nothing here waits, and protobuf messages in a coroutine
// frame draw GCC 12's false -Wmismatched-new-delete.
HttpResponse ApiHandler::Submit(const HttpRequest& req, const Caller& caller) {
  const auto received = Evaluator::Clock::now();
  auto encoding = EncodingFromContentType(std::string(req[http::field::content_type]));
  if (!encoding) {
    return Error(http::status::unsupported_media_type, encoding.error().field,
                    encoding.error().message);
  }
  const auto submit = std::make_unique<v1::SubmitRequest>();
  if (auto decoded = DecodeMessage(req.body(), *encoding, *submit); !decoded) {
    return Error(http::status::bad_request, decoded.error().field, decoded.error().message,
                    *encoding);
  }
  if (submit->jobs_size() == 0) {
    return Error(http::status::bad_request, "jobs", "jobs must hold at least one job", *encoding);
  }

  // Everything is validated before anything is admitted: a batch is taken
  // whole or not at all.
  struct Pending {
    std::shared_ptr<const v1::EvaluateRequest> request;
    std::shared_ptr<const ResolvedJob> job;
    std::string key, digest;
    JobStore::Admission admission;
    JobAdmission::Lease lease;  // Fresh jobs only.
  };
  std::vector<Pending> pending;
  for (int i = 0; i < submit->jobs_size(); ++i) {
    const v1::SubmitItem& item = submit->jobs(i);
    const std::string where = "jobs[" + std::to_string(i) + "].";
    auto job = policy_.ResolveJob(item.request());
    if (!job) {
      return Error(http::status::bad_request, where + "request." + job.error().field,
                      job.error().field + " " + job.error().message, *encoding);
    }
    pending.push_back(Pending{.request = std::make_shared<const v1::EvaluateRequest>(item.request()),
                              .job = std::make_shared<const ResolvedJob>(std::move(*job)),
                              .key = item.idempotency_key(),
                              .digest = RequestDigest(item.request()),
                              .admission = {},
                              .lease = {}});
  }

  const auto now = JobStore::Clock::now();
  auto withdraw = [&] {
    for (const Pending& p : pending) {
      if (!p.admission.job_id.empty() && !p.admission.existing) jobs_.Withdraw(p.admission.job_id);
    }
  };
  uint32_t fresh = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    Pending& p = pending[i];
    p.admission = jobs_.Admit(caller.token, p.key, p.digest,
                              [this] { return evaluator_.NextJobId(); }, now);
    if (p.admission.conflict) {
      withdraw();
      return Error(http::status::conflict, "jobs[" + std::to_string(i) + "].idempotency_key",
                      "idempotency key " + p.key + " was used for a different request (job " +
                          p.admission.job_id + ")",
                      *encoding);
    }
    if (p.admission.full) {
      withdraw();
      auto res = Error(http::status::too_many_requests, "",
                       "kboxd holds as many jobs as it keeps; retry later", *encoding);
      res.set(http::field::retry_after, kRetryAfterSeconds);
      return res;
    }
    if (!p.admission.existing) ++fresh;
  }
  // Only fresh jobs take a place: a resubmitted key is the job already
  // counted, so a retry at the token's limit still gets its job back.
  if (fresh > 0) {
    auto leases = admission_.TryAcquire(caller.token, caller.max_concurrent_jobs, fresh);
    if (!leases) {
      withdraw();
      return AdmissionRefused(leases.error(), caller, fresh, *encoding);
    }
    size_t next = 0;
    for (Pending& p : pending) {
      if (!p.admission.existing) p.lease = std::move((*leases)[next++]);
    }
  }

  v1::SubmitResponse response;
  for (Pending& p : pending) {
    if (!p.admission.existing) {
      // Runs on the job pool like /v1/evaluate; the store holds the result.
      // The lease travels with the job: were the job never run (kboxd
      // stopping), destroying the task gives the place back.
      boost::asio::post(job_pool_, [this, request = p.request, job = p.job, received,
                                    job_id = p.admission.job_id, tenant = caller.token,
                                    lease = std::move(p.lease)]() mutable {
        RunSubmitted(*request, *job, received, job_id, tenant, lease);
      });
    }
    v1::JobStatus status;
    if (auto known = jobs_.Get(p.admission.job_id, caller.token, now)) status = std::move(*known);
    status.set_job_id(p.admission.job_id);
    status.set_idempotency_key(p.key);
    status.set_existing(p.admission.existing);
    *response.add_jobs() = std::move(status);
  }
  return Reply(http::status::ok, response, *encoding);
}

void ApiHandler::RunSubmitted(const v1::EvaluateRequest& request, const ResolvedJob& job,
                              Evaluator::Clock::time_point received, const std::string& job_id,
                              const std::string& tenant, JobAdmission::Lease& lease) {
  jobs_.MarkRunning(job_id);
  v1::EvaluateResult result =
      evaluator_.Evaluate(request, job.settings, job.anticheat, received, job_id, tenant);
  lease.Release();
  jobs_.Complete(job_id, std::move(result), JobStore::Clock::now());
}

std::optional<HttpResponse> ApiHandler::JobAnswer(const std::string& job_id, const Caller& caller,
                                                  JobStore::Clock::time_point deadline) {
  const auto now = JobStore::Clock::now();
  auto status = jobs_.Get(job_id, caller.token, now);
  if (!status) {
    return Error(http::status::not_found, "job_id",
                 "no job " + job_id + " (unknown, or its result expired)");
  }
  if (status->state() == v1::JobStatus::DONE || now >= deadline) {
    return Reply(http::status::ok, *status, Encoding::kJson);
  }
  return std::nullopt;
}

awaitable<HttpResponse> ApiHandler::GetJob(const HttpRequest& req, std::string job_id,
                                           const Caller& caller) {
  const int wait = WaitSeconds(req.target());
  if (wait < 0) {
    co_return Error(http::status::bad_request, "wait", "wait must be a whole number of seconds");
  }
  const auto deadline = JobStore::Clock::now() + std::chrono::seconds(wait);
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor);
  while (true) {
    if (auto answer = JobAnswer(job_id, caller, deadline)) co_return std::move(*answer);
    timer.expires_after(std::min<JobStore::Clock::duration>(kPollInterval,
                                                            deadline - JobStore::Clock::now()));
    co_await timer.async_wait(boost::asio::use_awaitable);
  }
}

}  // namespace kbox
