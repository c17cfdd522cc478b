#include "daemon/job_admission.h"

#include <utility>

namespace kbox {

JobAdmission::JobAdmission(uint32_t max_in_flight, std::function<void(uint32_t)> on_change)
    : max_in_flight_(max_in_flight), on_change_(std::move(on_change)) {}

JobAdmission::Lease::Lease(Lease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), token_(std::move(other.token_)) {}

JobAdmission::Lease& JobAdmission::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    token_ = std::move(other.token_);
  }
  return *this;
}

void JobAdmission::Lease::Release() {
  if (JobAdmission* owner = std::exchange(owner_, nullptr)) owner->Give(token_);
}

boost::system::result<std::vector<JobAdmission::Lease>, JobAdmission::Refusal>
JobAdmission::TryAcquire(const std::string& token, uint32_t token_limit, uint32_t n) {
  uint32_t total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_token_.find(token);
    const uint32_t mine = it == by_token_.end() ? 0 : it->second;
    if (token_limit > 0 && (n > token_limit || mine > token_limit - n)) return Refusal::kTokenFull;
    if (n > max_in_flight_ || total_ > max_in_flight_ - n) return Refusal::kDaemonFull;
    if (n == 0) return std::vector<Lease>{};
    total_ += n;
    by_token_[token] = mine + n;
    total = total_;
  }
  std::vector<Lease> leases;
  leases.reserve(n);
  for (uint32_t i = 0; i < n; ++i) leases.push_back(Lease(this, token));
  if (on_change_) on_change_(total);
  return leases;
}

JobAdmission::Lease JobAdmission::Adopt(const std::string& token) {
  uint32_t total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++by_token_[token];
    total = ++total_;
  }
  if (on_change_) on_change_(total);
  return Lease(this, token);
}

void JobAdmission::Give(const std::string& token) {
  uint32_t total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_token_.find(token);
    // A lease exists only for a place counted here, so the entry is there.
    if (--it->second == 0) by_token_.erase(it);
    total = --total_;
  }
  if (on_change_) on_change_(total);
}

uint32_t JobAdmission::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

uint32_t JobAdmission::in_flight(const std::string& token) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_token_.find(token);
  return it == by_token_.end() ? 0 : it->second;
}

}  // namespace kbox
