#include "daemon/job_store.h"

#include <utility>

namespace kbox {

JobStore::Admission JobStore::Admit(const std::string& owner, const std::string& key,
                                    const std::string& digest,
                                    const std::function<std::string()>& new_id,
                                    Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  Admission admission;
  if (!key.empty()) {
    if (auto known = by_key_.find({owner, key}); known != by_key_.end()) {
      const Entry& entry = jobs_.at(known->second);
      admission.job_id = known->second;
      admission.existing = true;
      admission.conflict = entry.digest != digest;
      return admission;
    }
  }
  if (jobs_.size() >= options_.max_jobs) {
    admission.full = true;
    return admission;
  }
  Entry entry;
  entry.owner = owner;
  entry.key = key;
  entry.digest = digest;
  admission.job_id = new_id();
  entry.status.set_job_id(admission.job_id);
  entry.status.set_idempotency_key(key);
  entry.status.set_state(v1::JobStatus::QUEUED);
  jobs_.emplace(admission.job_id, std::move(entry));
  if (!key.empty()) by_key_.emplace(std::make_pair(owner, key), admission.job_id);
  return admission;
}

void JobStore::Withdraw(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.status.state() != v1::JobStatus::QUEUED) return;
  if (!it->second.key.empty()) by_key_.erase({it->second.owner, it->second.key});
  jobs_.erase(it);
}

void JobStore::Restore(const std::string& owner, const std::string& key, const std::string& digest,
                       const std::string& job_id, const v1::EvaluateResult* result,
                       Clock::time_point done_at) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry entry;
  entry.owner = owner;
  entry.key = key;
  entry.digest = digest;
  entry.status.set_job_id(job_id);
  entry.status.set_idempotency_key(key);
  entry.status.set_state(result ? v1::JobStatus::DONE : v1::JobStatus::QUEUED);
  if (result) {
    *entry.status.mutable_result() = *result;
    entry.done_at = done_at;
    expiry_.emplace(done_at, job_id);
  }
  jobs_.insert_or_assign(job_id, std::move(entry));
  if (!key.empty()) by_key_.insert_or_assign(std::make_pair(owner, key), job_id);
}

void JobStore::MarkQueued(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    it->second.status.set_state(v1::JobStatus::QUEUED);
  }
}

void JobStore::MarkRunning(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    it->second.status.set_state(v1::JobStatus::RUNNING);
  }
}

void JobStore::Complete(const std::string& job_id, v1::EvaluateResult result,
                        Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  it->second.status.set_state(v1::JobStatus::DONE);
  *it->second.status.mutable_result() = std::move(result);
  it->second.done_at = now;
  expiry_.emplace(now, job_id);
}

std::optional<v1::JobStatus> JobStore::Get(const std::string& job_id, const std::string& owner,
                                           Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = jobs_.find(job_id);
  // Another owner's job reads as unknown: its id must not leak.
  if (it == jobs_.end() || it->second.owner != owner) return std::nullopt;
  return it->second.status;
}

std::optional<v1::JobStatus> JobStore::RequestCancel(const std::string& job_id,
                                                     const std::string& owner, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.owner != owner) return std::nullopt;
  if (it->second.status.state() != v1::JobStatus::DONE) it->second.status.set_cancel_requested(true);
  return it->second.status;
}

std::vector<v1::JobStatus> JobStore::List(const std::string& owner, v1::JobStatus::State state,
                                          Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  std::vector<v1::JobStatus> out;
  for (const auto& [id, entry] : jobs_) {
    if (entry.owner != owner) continue;
    if (state != v1::JobStatus::STATE_UNSPECIFIED && entry.status.state() != state) continue;
    v1::JobStatus brief;
    brief.set_job_id(entry.status.job_id());
    brief.set_state(entry.status.state());
    brief.set_idempotency_key(entry.status.idempotency_key());
    brief.set_cancel_requested(entry.status.cancel_requested());
    out.push_back(std::move(brief));
  }
  return out;
}

size_t JobStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void JobStore::ExpireLocked(Clock::time_point now) {
  // Only finished jobs expire, oldest first: a queued or running one always
  // reaches its result.
  while (!expiry_.empty() && now - expiry_.begin()->first >= options_.result_ttl) {
    if (auto it = jobs_.find(expiry_.begin()->second); it != jobs_.end()) {
      if (!it->second.key.empty()) by_key_.erase({it->second.owner, it->second.key});
      jobs_.erase(it);
      if (options_.on_expired) options_.on_expired(expiry_.begin()->second);
    }
    expiry_.erase(expiry_.begin());
  }
}

}  // namespace kbox
