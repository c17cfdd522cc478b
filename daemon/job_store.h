#pragma once

// The asynchronous jobs of POST /v1/jobs: each accepted job by id, and by the
// client's idempotency key, from submission until its result expires.
//
// A trainer that retries a submission (a timeout, a restart on its side) must
// never get a job counted twice: a key seen before returns the first job, and
// the same key with a different request is a conflict, never a silent
// overwrite. Results stay for result_ttl after they are done; the store holds
// at most max_jobs entries (a submission past that is refused, not evicting a
// result a client may still fetch).
//
// Every job has an owner (the API token's name; "" when authentication is
// off): idempotency keys are scoped per owner, and a job is visible to its
// owner only, so one client can neither see another's results nor learn
// which ids exist.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"

namespace kbox {

class JobStore {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::chrono::seconds result_ttl{3600};
    size_t max_jobs = 100000;
    // Called (under the store's lock: keep it short) with each job whose
    // result expires, so the durable journal forgets it too.
    std::function<void(const std::string& job_id)> on_expired;
  };

  struct Admission {
    std::string job_id;
    bool existing = false;  // The key was known: this is the first job.
    bool conflict = false;  // The key was known with a different request.
    bool full = false;      // No room: refused.
  };

  explicit JobStore(Options options) : options_(std::move(options)) {}

  // Registers a job (state QUEUED) of `owner` under a fresh id from
  // `new_id`, unless `key` is non-empty and names a live job of `owner`:
  // then that job, with `existing` (and `conflict` when `digest`, a hash of
  // the request, differs).
  Admission Admit(const std::string& owner, const std::string& key, const std::string& digest,
                  const std::function<std::string()>& new_id, Clock::time_point now);

  // Forgets a job admitted but never started (its batch was refused).
  void Withdraw(const std::string& job_id);

  // Puts back a job the journal held at start-up under its old id: QUEUED
  // (to be run again) when `result` is null, else DONE since `done_at`.
  // Counts against max_jobs like any other.
  void Restore(const std::string& owner, const std::string& key, const std::string& digest,
               const std::string& job_id, const v1::EvaluateResult* result,
               Clock::time_point done_at);

  void MarkRunning(const std::string& job_id);
  // A running job that was held back (kboxd draining) waits again.
  void MarkQueued(const std::string& job_id);
  void Complete(const std::string& job_id, v1::EvaluateResult result, Clock::time_point now);

  // The job's state (with its result once DONE); nullopt when unknown,
  // expired, or not `owner`'s.
  std::optional<v1::JobStatus> Get(const std::string& job_id, const std::string& owner,
                                   Clock::time_point now);

  // As Get, and marks a job not yet DONE cancel_requested (DELETE).
  std::optional<v1::JobStatus> RequestCancel(const std::string& job_id, const std::string& owner,
                                             Clock::time_point now);

  // The owner's jobs (state, id, key; no results) in job id order, only
  // those in `state` unless it is STATE_UNSPECIFIED.
  std::vector<v1::JobStatus> List(const std::string& owner, v1::JobStatus::State state,
                                  Clock::time_point now);

  size_t size() const;

 private:
  struct Entry {
    std::string owner;
    std::string key;
    std::string digest;
    v1::JobStatus status;
    std::optional<Clock::time_point> done_at;
  };

  void ExpireLocked(Clock::time_point now);

  const Options options_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> jobs_;           // By job id.
  // (owner, idempotency key) -> job id.
  std::map<std::pair<std::string, std::string>, std::string> by_key_;
  std::multimap<Clock::time_point, std::string> expiry_;  // Done time -> job id.
};

}  // namespace kbox
