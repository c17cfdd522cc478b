#pragma once

// Places for jobs in flight (accepted and not yet finished: queued,
// compiling or running): at most max_in_flight_jobs in the whole daemon, and
// at most each API token's max_concurrent_jobs for that token. Both refusals
// become 429 + Retry-After.
//
// A place is held by a Lease and given back exactly once: by Release() or by
// the Lease's destructor, whichever comes first. That covers every way a job
// ends: a result, a failure inside the evaluation, a batch withdrawn before it
// ran, or a job dropped at shutdown. An idempotent resubmission takes no
// lease at all (the caller only asks for fresh jobs).
//
// Counts are by token name, so a token whose line is edited or removed on
// reload still gives back the places its running jobs hold, and a token
// re-added under the same name finds them still counted.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <boost/system/result.hpp>

namespace kbox {

class JobAdmission {
 public:
  // `on_change` (may be empty) gets the daemon-wide count after each change,
  // outside the lock (for the jobs-in-flight gauge).
  explicit JobAdmission(uint32_t max_in_flight,
                        std::function<void(uint32_t)> on_change = {});
  JobAdmission(const JobAdmission&) = delete;
  JobAdmission& operator=(const JobAdmission&) = delete;

  // One job's place. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }

    // Gives the place back; a no-op the second time.
    void Release();
    bool held() const { return owner_ != nullptr; }

   private:
    friend class JobAdmission;
    Lease(JobAdmission* owner, std::string token) : owner_(owner), token_(std::move(token)) {}

    JobAdmission* owner_ = nullptr;
    std::string token_;
  };

  enum class Refusal {
    kDaemonFull,  // max_in_flight_jobs reached.
    kTokenFull,   // The token's max_concurrent_jobs reached.
  };

  // `n` places for `token` ("" when authentication is off), all or none.
  // `token_limit` is the token's max_concurrent_jobs (0: no limit). The
  // token's limit is checked first: a token over its own limit is told so
  // even when the daemon is full too.
  boost::system::result<std::vector<Lease>, Refusal> TryAcquire(const std::string& token,
                                                                uint32_t token_limit,
                                                                uint32_t n = 1);

  // A place for a job accepted before a restart (the journal's): taken
  // whatever the limits, since the job was admitted once already; new
  // submissions wait until the count is under the limits again.
  Lease Adopt(const std::string& token);

  uint32_t in_flight() const;
  uint32_t in_flight(const std::string& token) const;
  uint32_t max_in_flight() const { return max_in_flight_; }

 private:
  void Give(const std::string& token);

  const uint32_t max_in_flight_;
  const std::function<void(uint32_t)> on_change_;
  mutable std::mutex mu_;
  uint32_t total_ = 0;
  std::map<std::string, uint32_t> by_token_;  // Only tokens with jobs in flight.
};

}  // namespace kbox
