// libkbox_launch_probe.so: which kernels a stretch of code launches, through
// CUPTI's callback API (docs/anticheat.md, "Kernel launches").
//
// The run stage asks the candidate's process for one forward under this
// probe and checks that one of the candidate's own kernels launched
// (run.kernel-not-launched). It replaces torch.profiler with CUDA
// activities, whose start (Kineto and CUPTI's activity API, once per fresh
// process) cost 5.7-5.9 s of a ~8 s run stage on the H100
// (docs/benchmarks.md). The callback API only calls back on each driver and
// runtime API call; the launch callbacks carry the kernel's name.
//
// CUPTI is opened with dlopen from the path the harness finds (torch's own,
// or the toolkit's), so this library builds and loads on hosts without
// CUDA; there the harness does not use it. The few CUPTI types it needs are
// declared here from cupti_callbacks.h, whose layout has been stable since
// CUDA 4.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

// cupti_callbacks.h
constexpr int kApiExit = 1;            // CUPTI_API_EXIT
constexpr uint32_t kDriverApi = 1;     // CUPTI_CB_DOMAIN_DRIVER_API
constexpr uint32_t kRuntimeApi = 2;    // CUPTI_CB_DOMAIN_RUNTIME_API
struct CallbackData {                  // CUpti_CallbackData
  int callback_site;
  const char* function_name;
  const void* function_params;
  void* function_return_value;         // CUresult* / cudaError_t*, on exit
  const char* symbol_name;             // the kernel, on launch callbacks
  void* context;
  uint32_t context_uid;
  uint64_t* correlation_data;
  uint32_t correlation_id;
};
using Subscriber = void*;
using CallbackFunc = void (*)(void*, uint32_t, uint32_t, const void*);
using SubscribeFn = int (*)(Subscriber*, CallbackFunc, void*);
using EnableDomainFn = int (*)(uint32_t, Subscriber, uint32_t);
using UnsubscribeFn = int (*)(Subscriber);
using ResultStringFn = int (*)(int, const char**);

// Bounds what a candidate that launches many distinct kernels can make the
// probe hold.
constexpr std::size_t kMaxNames = 4096;
constexpr std::size_t kMaxNameChars = 1024;

struct Probe {
  std::mutex mu;
  void* cupti = nullptr;
  Subscriber subscriber = nullptr;
  UnsubscribeFn unsubscribe = nullptr;
  std::vector<std::string> names;  // in first-launch order
  std::unordered_set<std::string> seen;
  uint64_t launches = 0;
  uint64_t graph_launches = 0;
  bool dropped = false;
};
Probe probe;

bool IsGraphLaunch(const char* function) {
  // cuGraphLaunch, cuGraphLaunch_ptsz, cudaGraphLaunch, cudaGraphLaunch_ptsz:
  // the kernels inside a graph launch without a launch callback of their own.
  return function != nullptr && std::strstr(function, "GraphLaunch") != nullptr;
}

// On the way out of each API call: a launch counts only when the call
// succeeded (a launch with an invalid configuration names the kernel but
// never runs it). CUDA_SUCCESS and cudaSuccess are both 0.
void OnApiCall(void*, uint32_t domain, uint32_t, const void* data) {
  if (domain != kDriverApi && domain != kRuntimeApi) return;
  const auto* cb = static_cast<const CallbackData*>(data);
  if (cb == nullptr || cb->callback_site != kApiExit) return;
  if (cb->function_return_value == nullptr || *static_cast<const int*>(cb->function_return_value) != 0) return;
  const bool graph = IsGraphLaunch(cb->function_name);
  if (cb->symbol_name == nullptr && !graph) return;
  std::lock_guard<std::mutex> lock(probe.mu);
  if (graph) {
    ++probe.graph_launches;
    return;
  }
  ++probe.launches;
  std::string name(cb->symbol_name, strnlen(cb->symbol_name, kMaxNameChars));
  if (probe.seen.count(name)) return;
  if (probe.names.size() >= kMaxNames) {
    probe.dropped = true;
    return;
  }
  probe.seen.insert(name);
  probe.names.push_back(std::move(name));
}

void SetError(char* error, std::size_t error_len, const std::string& message) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", message.c_str());
}

std::string CuptiError(void* cupti, const char* call, int result) {
  const char* text = nullptr;
  auto result_string = reinterpret_cast<ResultStringFn>(dlsym(cupti, "cuptiGetResultString"));
  if (result_string == nullptr || result_string(result, &text) != 0 || text == nullptr) text = "?";
  return std::string(call) + " failed: " + text + " (" + std::to_string(result) + ")";
}

}  // namespace

extern "C" {

// Starts recording launches. 0 on success; else -1 with a one-line reason in
// `error`: CUPTI not loadable (2 = not found), or a subscriber already
// there (CUPTI allows one per process; 1).
__attribute__((visibility("default"))) int kbox_launch_probe_start(const char* cupti_path, char* error,
                                                                   std::size_t error_len) {
  std::lock_guard<std::mutex> lock(probe.mu);
  if (probe.subscriber != nullptr) {
    SetError(error, error_len, "the probe is already running");
    return 1;
  }
  // Opened on every start (dlopen counts references: the same library is
  // the same handle, and is never unloaded while callbacks may run).
  void* cupti = dlopen(cupti_path, RTLD_NOW | RTLD_LOCAL);
  if (cupti == nullptr) {
    const char* why = dlerror();
    SetError(error, error_len, std::string("cannot load CUPTI: ") + (why ? why : cupti_path));
    return 2;
  }
  probe.cupti = cupti;
  auto subscribe = reinterpret_cast<SubscribeFn>(dlsym(probe.cupti, "cuptiSubscribe"));
  auto enable = reinterpret_cast<EnableDomainFn>(dlsym(probe.cupti, "cuptiEnableDomain"));
  probe.unsubscribe = reinterpret_cast<UnsubscribeFn>(dlsym(probe.cupti, "cuptiUnsubscribe"));
  if (subscribe == nullptr || enable == nullptr || probe.unsubscribe == nullptr) {
    SetError(error, error_len, "CUPTI lacks the callback API");
    return 2;
  }
  probe.names.clear();
  probe.seen.clear();
  probe.launches = probe.graph_launches = 0;
  probe.dropped = false;
  Subscriber subscriber = nullptr;
  if (int r = subscribe(&subscriber, &OnApiCall, nullptr); r != 0) {
    SetError(error, error_len, CuptiError(probe.cupti, "cuptiSubscribe", r));
    return 1;
  }
  for (uint32_t domain : {kDriverApi, kRuntimeApi}) {
    if (int r = enable(1, subscriber, domain); r != 0) {
      SetError(error, error_len, CuptiError(probe.cupti, "cuptiEnableDomain", r));
      probe.unsubscribe(subscriber);
      return 1;
    }
  }
  probe.subscriber = subscriber;
  return 0;
}

// Stops recording (no callbacks after it returns). 0 on success.
__attribute__((visibility("default"))) int kbox_launch_probe_stop() {
  Subscriber subscriber;
  {
    std::lock_guard<std::mutex> lock(probe.mu);
    subscriber = probe.subscriber;
    probe.subscriber = nullptr;
  }
  // Outside the lock: CUPTI waits for callbacks in flight, which take it.
  return subscriber == nullptr ? 0 : probe.unsubscribe(subscriber);
}

// The distinct kernel names launched, newline-separated, into `out` (at
// most out_len - 1 bytes, NUL-terminated; names that do not fit are left
// out). Returns the number of names written; sets the counters.
__attribute__((visibility("default"))) int kbox_launch_probe_names(char* out, std::size_t out_len,
                                                                   uint64_t* launches,
                                                                   uint64_t* graph_launches, int* dropped) {
  std::lock_guard<std::mutex> lock(probe.mu);
  std::size_t used = 0;
  int written = 0;
  bool full = false;
  for (const auto& name : probe.names) {
    if (out == nullptr || used + name.size() + 1 >= out_len) {
      full = true;
      break;
    }
    std::memcpy(out + used, name.data(), name.size());
    used += name.size();
    out[used++] = '\n';
    ++written;
  }
  if (out != nullptr && out_len > 0) out[used < out_len ? used : out_len - 1] = '\0';
  if (launches) *launches = probe.launches;
  if (graph_launches) *graph_launches = probe.graph_launches;
  if (dropped) *dropped = (probe.dropped || full) ? 1 : 0;
  return written;
}

}  // extern "C"
