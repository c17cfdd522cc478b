#pragma once

// Each job's cancel flag, by job id, while kboxd holds the job.
//
// A flag is set by the job's client (DELETE /v1/jobs/<id>) or by kboxd's
// shutdown deadline (CancelAll). Once set, the job's processes are killed
// within kCancelPollInterval (ProcessSpec::cancel points at `stop`), its
// waits for a compile worker or a device lane end, and it starts nothing new.
// Only that job is touched: no other job's flag, slot or cache entry.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kbox {

struct JobCancel {
  std::atomic<bool> stop{false};       // Kill the job's processes, start nothing.
  std::atomic<bool> by_client{false};  // Its client asked; its result is CANCELLED.
};

class JobCancels {
 public:
  JobCancels() = default;
  JobCancels(const JobCancels&) = delete;

  // `job_id`'s flag, found by Cancel for as long as the returned pointer (or
  // a copy) lives. A job opened after CancelAll starts stopped.
  std::shared_ptr<JobCancel> Open(const std::string& job_id);

  // Sets the flag of live job `job_id` as its client's; false when no live
  // job has that id.
  bool Cancel(const std::string& job_id);

  // Sets every live job's flag, and those of jobs opened from now on.
  void CancelAll();

 private:
  std::mutex mu_;
  std::map<std::string, JobCancel*> live_;
  std::atomic<bool> all_{false};
};

}  // namespace kbox
