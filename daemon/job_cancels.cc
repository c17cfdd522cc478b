#include "daemon/job_cancels.h"

namespace kbox {

std::shared_ptr<JobCancel> JobCancels::Open(const std::string& job_id) {
  // Forgotten with the job's last handle; an id opened again since (a job
  // the journal restored) keeps its newer flag.
  std::shared_ptr<JobCancel> flag(new JobCancel, [this, job_id](JobCancel* done) {
    {
      std::lock_guard forget(mu_);
      const auto it = live_.find(job_id);
      if (it != live_.end() && it->second == done) live_.erase(it);
    }
    delete done;
  });
  std::lock_guard lock(mu_);
  if (all_.load()) flag->stop.store(true);
  live_[job_id] = flag.get();
  return flag;
}

bool JobCancels::Cancel(const std::string& job_id) {
  std::lock_guard lock(mu_);
  const auto it = live_.find(job_id);
  if (it == live_.end()) return false;
  it->second->by_client.store(true);
  it->second->stop.store(true);
  return true;
}

void JobCancels::CancelAll() {
  std::lock_guard lock(mu_);
  all_.store(true);
  for (auto& [id, flag] : live_) flag->stop.store(true);
}

}  // namespace kbox
