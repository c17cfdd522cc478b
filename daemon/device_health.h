#pragma once

// Which GPUs kboxd trusts with jobs. Only kbox's own device probe takes a
// GPU out of service. A GPU job that ended in a failure a broken device
// could explain (kbox's harness crashed, hung, or raised outside candidate
// code: FailureCause::device_suspect) or in a fault of its own (runtime
// error, timeout, a killed process) is followed by a probe before the GPU
// takes the next job (CheckNow): a candidate's fresh CUDA context dies with
// its process, but a hung or faulting kernel can leave the device unusable.
// A GPU whose probe fails is quarantined: its slot leaves the GPU pool (jobs
// wait for the other GPUs), /readyz and kbox_device_healthy say so, and a
// background thread runs the probe on it every probe interval, once no job
// holds it, until a probe passes; then it serves again.
//
// kboxd does not read ECC or XID errors, nor probe idle healthy GPUs on a
// schedule. The CPU is never quarantined.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/slot_pool.h"
#include "kbox/v1/evaluation.pb.h"
#include "policy/status.h"

namespace kbox {

class DeviceHealth {
 public:
  // Checks one GPU: nullopt when it works, else why not. Blocking.
  using Probe = std::function<Status(uint32_t gpu)>;
  // Hears each quarantine and each recovery (may be empty).
  using Observer = std::function<void(uint32_t gpu, bool healthy, const std::string& why)>;

  // `pool` holds the GPU slots (by index) and must outlive this object.
  DeviceHealth(SlotPool& pool, Probe probe, std::chrono::milliseconds probe_interval,
               Observer observer = {});
  ~DeviceHealth();
  DeviceHealth(const DeviceHealth&) = delete;
  DeviceHealth& operator=(const DeviceHealth&) = delete;

  bool Healthy(uint32_t gpu) const;

  // Probes `gpu` now, on the caller's thread, and quarantines it when the
  // probe fails. For a job that may have left the device broken (a fault, a
  // hang, memory exhausted): the caller still holds the GPU's slot, so no
  // other job runs on it before the probe has passed. Returns the probe's
  // error, nullopt when it passed.
  Status CheckNow(uint32_t gpu, const std::string& why);

 private:
  // Takes `gpu` out of service until a probe passes; a no-op when it is
  // already quarantined. Private: only a failed probe (CheckNow) gets here,
  // never a job's failure alone.
  void Quarantine(uint32_t gpu, const std::string& why);
  void ProbeLoop();

  SlotPool& pool_;
  const Probe probe_;
  const std::chrono::milliseconds interval_;
  const Observer observer_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<uint32_t, std::string> quarantined_;  // GPU -> why.
  bool stopping_ = false;
  std::thread prober_;  // Started at the first quarantine.
};

// Whether a GPU job that ended with `status` may have left the device broken,
// so that the GPU is probed before its next job: a fault of the candidate's
// own while running (a CUDA error, a crash, memory exhausted), a kernel that
// never ended (TIMEOUT kills the processes mid-kernel), a killed sandbox
// violation, or a failure of the reference or of kbox (INFRA_ERROR, one a
// broken device could explain included). A job that ended with a clean report (CORRECT, INCORRECT,
// REJECTED) left a working CUDA context behind; a compile error never ran.
bool MayHaveBrokenTheDevice(v1::Status status);

// The production probe: worker/harness/kbox_probe.py --device-check on that
// GPU alone (CUDA initialised, a small matmul, synchronised), in a child
// process under `limit`. Runs outside the sandbox like the start-up probe: it
// runs only kbox's own code.
Status ProbeGpu(const std::string& python, const std::string& harness_dir,
                                    const std::vector<std::string>& env, uint32_t gpu,
                                    std::chrono::milliseconds limit);

}  // namespace kbox
