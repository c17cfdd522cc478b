// The durable side of ApiHandler's asynchronous jobs: writing journal
// records, and putting the journal's jobs back at start-up
// (daemon/job_journal.h, docs/reliability.md).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "daemon/api_handler.h"

namespace kbox {

bool ApiHandler::JournalWrite(const std::vector<const v1::JournalRecord*>& records) {
  if (records.empty()) return true;
  const auto start = std::chrono::steady_clock::now();
  auto written = journal_->Write(records);
  metrics_.ObserveJournalWrite(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (written) return true;
  metrics_.RecordJournalWriteFailure();
  std::cerr << "kboxd: ERROR: job journal write failed: " << written.error() << std::endl;
  return false;
}

std::string ApiHandler::RestoreJobs(JobJournal::Loaded loaded) {
  for (const std::string& why : loaded.corrupt) {
    std::cerr << "kboxd: WARNING: job journal: skipped and deleted a corrupt record " << why
              << std::endl;
  }
  metrics_.RecordJournalCorruptRecords(loaded.corrupt.size());

  std::vector<v1::JournalRecord> done, unfinished;
  for (auto& record : loaded.records) (record.done() ? done : unfinished).push_back(std::move(record));
  // Newest results first, so the bound below drops the oldest; unfinished
  // jobs in the order they were accepted.
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) {
    return a.done_unix_ms() > b.done_unix_ms();
  });
  std::sort(unfinished.begin(), unfinished.end(), [](const auto& a, const auto& b) {
    return a.accepted_unix_ms() < b.accepted_unix_ms();
  });

  const int64_t now_ms = UnixMillis();
  const auto now = JobStore::Clock::now();
  const int64_t ttl_ms = static_cast<int64_t>(config_.store().result_ttl_s()) * 1000;
  // Every unfinished job is kept (each must end with a result); results
  // fill what room max_stored_jobs leaves.
  const size_t room = config_.store().max_stored_jobs() > unfinished.size()
                          ? config_.store().max_stored_jobs() - unfinished.size()
                          : 0;
  size_t served = 0, dropped = 0, requeued = 0, failed = 0;
  for (const auto& record : done) {
    const int64_t age_ms = std::max<int64_t>(0, now_ms - record.done_unix_ms());
    if (age_ms >= ttl_ms || served >= room) {
      journal_->Remove(record.job_id());
      ++dropped;
      continue;
    }
    jobs_.Restore(record.owner(), record.idempotency_key(), record.digest(), record.job_id(),
                  &record.result(), now - std::chrono::milliseconds(age_ms));
    ++served;
  }
  for (auto& record : unfinished) {
    auto job = policy_.ResolveJob(record.request());
    if (!job) {
      // The configuration changed under it (a backend or profile gone): it
      // still ends with a result, kbox's own failure, retryable elsewhere.
      v1::JournalRecord ended = record;
      ended.clear_request();
      ended.set_done(true);
      v1::EvaluateResult* result = ended.mutable_result();
      result->set_job_id(record.job_id());
      result->set_client_request_id(record.request().client_request_id());
      result->set_status(v1::INFRA_ERROR);
      result->set_message("kboxd restarted with a configuration that no longer accepts this job (" +
                          job.error().field + " " + job.error().message + "); resubmit it");
      ended.set_done_unix_ms(now_ms);
      JournalWrite({&ended});
      jobs_.Restore(record.owner(), record.idempotency_key(), record.digest(), record.job_id(),
                    result, now);
      ++failed;
      continue;
    }
    jobs_.Restore(record.owner(), record.idempotency_key(), record.digest(), record.job_id(),
                  nullptr, now);
    auto request = std::make_shared<const v1::EvaluateRequest>(record.request());
    auto lease = admission_.Adopt(record.owner());
    // Not from `kept`: it is moved below.
    const std::string job_id = record.job_id();
    const std::string tenant = record.owner();
    auto kept = std::make_shared<v1::JournalRecord>(std::move(record));
    kept->clear_request();  // The done record never carries it.
    QueueSubmitted(std::move(request), std::make_shared<const ResolvedJob>(std::move(*job)),
                   Evaluator::Clock::now(), job_id, tenant, std::move(lease), std::move(kept));
    ++requeued;
  }
  metrics_.RecordJournalRestored(served, requeued);
  return std::to_string(served) + " results served again, " + std::to_string(requeued) +
         " unfinished jobs queued again, " + std::to_string(failed) +
         " no longer runnable (INFRA_ERROR), " + std::to_string(dropped) +
         " expired or over max_stored_jobs (deleted), " + std::to_string(loaded.corrupt.size()) +
         " corrupt (skipped)";
}

}  // namespace kbox
