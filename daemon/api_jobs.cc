// The asynchronous job endpoints of ApiHandler: POST /v1/jobs (submit one or
// many, with idempotency keys) and GET /v1/jobs/<id>[?wait=S] (long poll).
#include <algorithm>
#include <charconv>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string_view>

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

// The value of query parameter `name` in `target`, or nullopt.
std::optional<std::string_view> QueryValue(std::string_view target, std::string_view name) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=') {
      return pair.substr(name.size() + 1);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// The `wait` query parameter in seconds, bounded; 0 when absent, -1 when
// malformed.
int WaitSeconds(std::string_view target) {
  const auto value = QueryValue(target, "wait");
  if (!value) return 0;
  int seconds = 0;
  const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), seconds);
  if (ec != std::errc() || end != value->data() + value->size()) return -1;
  return std::clamp(seconds, 0, kMaxWaitSeconds);
}

}  // namespace

// Not a coroutine: nothing here waits, and protobuf messages in a coroutine
// frame draw GCC 12's false -Wmismatched-new-delete.
HttpResponse ApiHandler::ListJobs(const HttpRequest& req, const Caller& caller) {
  auto state = v1::JobStatus::STATE_UNSPECIFIED;
  if (const auto value = QueryValue(std::string_view(req.target()), "state")) {
    if (!v1::JobStatus::State_Parse(std::string(*value), &state) ||
        state == v1::JobStatus::STATE_UNSPECIFIED) {
      return Error(http::status::bad_request, "state", "state must be QUEUED, RUNNING or DONE");
    }
  }
  v1::JobList list;
  for (auto& job : jobs_.List(caller.token, state, JobStore::Clock::now())) {
    *list.add_jobs() = std::move(job);
  }
  return Reply(http::status::ok, list, Encoding::kJson);
}

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

  // A batch kboxd could never admit whole is the caller's error, not a
  // busy daemon's: 400 naming the limit, so a client splits it instead of
  // retrying it forever.
  const auto never_fits = [&](uint32_t fresh, uint32_t limit, const std::string& what) {
    return Error(http::status::bad_request, "jobs",
                 "a batch of " + std::to_string(fresh) + " new jobs can never be admitted at once: " +
                     what + " is " + std::to_string(limit) + "; send at most that many per request",
                 *encoding);
  };
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
  if (fresh > config_.limits().max_in_flight_jobs()) {
    withdraw();
    return never_fits(fresh, config_.limits().max_in_flight_jobs(), "max_in_flight_jobs");
  }
  if (caller.max_concurrent_jobs > 0 && fresh > caller.max_concurrent_jobs) {
    withdraw();
    return never_fits(fresh, caller.max_concurrent_jobs, "token " + caller.token + "'s max_concurrent_jobs");
  }
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

  // Durable before answered: a job the client is told about survives a
  // crash of kboxd from here on (docs/reliability.md).
  std::vector<std::shared_ptr<v1::JournalRecord>> records(pending.size());
  if (journal_ != nullptr && fresh > 0) {
    const int64_t now_ms = UnixMillis();
    std::vector<const v1::JournalRecord*> batch;
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      if (p.admission.existing) continue;
      auto record = std::make_shared<v1::JournalRecord>();
      record->set_job_id(p.admission.job_id);
      record->set_owner(caller.token);
      record->set_idempotency_key(p.key);
      record->set_digest(p.digest);
      *record->mutable_request() = *p.request;
      // The seed kboxd drew (or the client's): a re-run draws nothing new.
      record->mutable_request()->set_seed(p.job->settings.seed());
      record->set_accepted_unix_ms(now_ms);
      batch.push_back(record.get());
      records[i] = std::move(record);
    }
    if (!JournalWrite(batch)) {
      for (const auto* record : batch) journal_->Remove(record->job_id());
      withdraw();
      return Unavailable("kboxd cannot record jobs durably now (job journal write failed); retry",
                         *encoding);
    }
    // On disk now; the job's result record needs only the rest.
    for (auto& record : records) {
      if (record) record->clear_request();
    }
  }

  v1::SubmitResponse response;
  for (size_t i = 0; i < pending.size(); ++i) {
    Pending& p = pending[i];
    if (!p.admission.existing) {
      QueueSubmitted(p.request, p.job, received, p.admission.job_id, caller.token,
                     std::move(p.lease), std::move(records[i]));
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

void ApiHandler::QueueSubmitted(std::shared_ptr<const v1::EvaluateRequest> request,
                                std::shared_ptr<const ResolvedJob> job,
                                Evaluator::Clock::time_point received, const std::string& job_id,
                                const std::string& tenant, JobAdmission::Lease lease,
                                std::shared_ptr<const v1::JournalRecord> record) {
  // Runs on the job pool like /v1/evaluate; the store holds the result.
  // The lease travels with the job: were the job never run (kboxd
  // stopping), destroying the task gives the place back. Its cancel flag
  // exists before its id reaches the client, and until its result is stored.
  boost::asio::post(job_pool_, [this, request = std::move(request), job = std::move(job), received,
                                job_id, tenant, lease = std::move(lease), record = std::move(record),
                                cancel = evaluator_.OpenJob(job_id)]() mutable {
    RunSubmitted(*request, *job, received, job_id, tenant, lease, std::move(record), cancel);
  });
}

void ApiHandler::RunSubmitted(const v1::EvaluateRequest& request, const ResolvedJob& job,
                              Evaluator::Clock::time_point received, const std::string& job_id,
                              const std::string& tenant, JobAdmission::Lease& lease,
                              std::shared_ptr<const v1::JournalRecord> record,
                              std::shared_ptr<JobCancel> cancel) {
  bool held_back = false;
  v1::EvaluateResult result;
  if (draining_.load() && !cancel->by_client.load()) {
    // Not started before the drain: kept for after the restart (below),
    // unless its client cancelled it (then Evaluate ends it CANCELLED).
    held_back = true;
    result.set_job_id(job_id);
    result.set_client_request_id(request.client_request_id());
    result.set_status(v1::INFRA_ERROR);
    result.set_message("kboxd is draining (shutting down) and the job did not start; retry it");
  } else {
    jobs_.MarkRunning(job_id);
    result = evaluator_.Evaluate(request, job.settings, job.anticheat, received, job_id, tenant,
                                 &held_back, std::move(cancel));
  }
  lease.Release();
  if (held_back && record != nullptr) {
    // Its accepted record stays in the journal: the restarted kboxd runs it.
    jobs_.MarkQueued(job_id);
    return;
  }
  if (record != nullptr) {
    // The result is durable before any client can see it, so a client never
    // sees a result that a restart would replace with another.
    v1::JournalRecord done;
    done.set_job_id(record->job_id());
    done.set_owner(record->owner());
    done.set_idempotency_key(record->idempotency_key());
    done.set_digest(record->digest());
    done.set_accepted_unix_ms(record->accepted_unix_ms());
    done.set_done(true);
    *done.mutable_result() = result;
    done.set_done_unix_ms(UnixMillis());
    if (!JournalWrite({&done})) {
      std::cerr << "kboxd: ERROR: job " << job_id
                << "'s result is in memory only (journal write failed); a restart runs it again"
                << std::endl;
    }
  }
  jobs_.Complete(job_id, std::move(result), JobStore::Clock::now());
}

// What an unknown id, an expired result and another token's job all get.
HttpResponse ApiHandler::UnknownJob(const std::string& job_id) const {
  return Error(http::status::not_found, "job_id", "no job " + job_id + " (unknown, or its result expired)");
}

HttpResponse ApiHandler::CancelJob(const std::string& job_id, const Caller& caller) {
  const auto status = jobs_.RequestCancel(job_id, caller.token, JobStore::Clock::now());
  if (!status) return UnknownJob(job_id);
  if (status->state() == v1::JobStatus::DONE) {
    if (status->result().status() == v1::CANCELLED) return Reply(http::status::ok, *status, Encoding::kJson);
    return Error(http::status::conflict, "job_id",
                 "job " + job_id + " already ended " + v1::Status_Name(status->result().status()) +
                     "; there is nothing to cancel");
  }
  if (!evaluator_.Cancel(job_id)) {
    // Its flag is gone only once the job is done (its result stored now)
    // or held back by a drain, kept for the restarted kboxd.
    return Error(http::status::conflict, "job_id",
                 "job " + job_id + " cannot be cancelled now: it is ending, or waits for kboxd's "
                 "restart; GET it");
  }
  return Reply(http::status::accepted, *status, Encoding::kJson);
}

std::optional<HttpResponse> ApiHandler::JobAnswer(const std::string& job_id, const Caller& caller,
                                                  JobStore::Clock::time_point deadline) {
  const auto now = JobStore::Clock::now();
  auto status = jobs_.Get(job_id, caller.token, now);
  if (!status) return UnknownJob(job_id);
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
