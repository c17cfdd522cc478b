#include "daemon/device_health.h"

#include <iostream>

#include "worker/process_runner.h"

namespace kbox {

DeviceHealth::DeviceHealth(SlotPool& pool, Probe probe, std::chrono::milliseconds probe_interval,
                           Observer observer)
    : pool_(pool), probe_(std::move(probe)), interval_(probe_interval), observer_(std::move(observer)) {}

DeviceHealth::~DeviceHealth() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (prober_.joinable()) prober_.join();
}

void DeviceHealth::Quarantine(uint32_t gpu, const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (!quarantined_.emplace(gpu, why).second) return;
    pool_.SetInService(gpu, false);
    if (!prober_.joinable()) prober_ = std::thread([this] { ProbeLoop(); });
  }
  std::cerr << "kboxd: gpu" << gpu << " quarantined until its probe passes: " << why << std::endl;
  if (observer_) observer_(gpu, false, why);
  wake_.notify_all();
}

Status DeviceHealth::CheckNow(uint32_t gpu, const std::string& why) {
  Status probed = probe_(gpu);
  if (!probed.ok()) Quarantine(gpu, why + "; probe failed: " + probed.message());
  return probed;
}

bool DeviceHealth::Healthy(uint32_t gpu) const {
  std::lock_guard lock(mu_);
  return !quarantined_.contains(gpu);
}

void DeviceHealth::ProbeLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // Wait a whole interval first: the device just failed a job.
    wake_.wait_for(lock, interval_, [&] { return stopping_; });
    if (stopping_) break;
    std::vector<uint32_t> due;
    for (const auto& [gpu, why] : quarantined_) {
      if (!pool_.IsBusy(gpu)) due.push_back(gpu);  // Never beside a job still holding it.
    }
    for (uint32_t gpu : due) {
      lock.unlock();
      const Status probed = probe_(gpu);
      lock.lock();
      if (stopping_) break;
      if (!probed.ok()) {
        std::cerr << "kboxd: gpu" << gpu << " still quarantined: probe failed: " << probed.message()
                  << std::endl;
        continue;
      }
      quarantined_.erase(gpu);
      std::cerr << "kboxd: gpu" << gpu << " passed its probe; back in service" << std::endl;
      // Heard before a job can take the GPU again.
      if (observer_) {
        lock.unlock();
        observer_(gpu, true, "");
        lock.lock();
      }
      pool_.SetInService(gpu, true);
    }
  }
}

bool MayHaveBrokenTheDevice(v1::Status status) {
  switch (status) {
    case v1::RUNTIME_ERROR:
    case v1::TIMEOUT:
    case v1::SANDBOX_VIOLATION:
    case v1::REFERENCE_ERROR:
    case v1::INFRA_ERROR:
      return true;
    default:
      return false;
  }
}

Status ProbeGpu(const std::string& python, const std::string& harness_dir, const std::vector<std::string>& env,
                uint32_t gpu, std::chrono::milliseconds limit) {
  ProcessSpec spec;
  spec.argv = {python, "-s", "-B", harness_dir + "/kbox_probe.py", "--device-check"};
  spec.env = env;
  spec.env.push_back("PYTHONDONTWRITEBYTECODE=1");
  spec.env.push_back("HOME=/nonexistent");
  spec.env.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(gpu));
  spec.wall_limit = limit;
  spec.output_tail_bytes = 4 << 10;
  const ProcessOutcome outcome = RunProcess(spec);
  if (outcome.end == ProcessOutcome::End::kExited && outcome.exit_code == 0) return Status::Ok();
  std::string tail = outcome.output_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const auto nl = tail.rfind('\n');
  return Status::Error(DescribeEnd(outcome) + ": " + (nl == std::string::npos ? tail : tail.substr(nl + 1)));
}

}  // namespace kbox
