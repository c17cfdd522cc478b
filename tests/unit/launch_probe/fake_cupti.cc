// A stand-in libcupti for launch_probe_test: the GPU-free side of CUPTI's
// callback API (subscribe, enable, unsubscribe), plus a hook that delivers
// a callback as CUPTI would on an API call. No GPU here, so the real
// CUPTI never calls back; this pins what the probe does with each kind of
// callback. Layouts as in cupti_callbacks.h.
#include <cstdint>

namespace {
using CallbackFunc = void (*)(void*, uint32_t, uint32_t, const void*);
struct CallbackData {
  int callback_site;
  const char* function_name;
  const void* function_params;
  void* function_return_value;
  const char* symbol_name;
  void* context;
  uint32_t context_uid;
  uint64_t* correlation_data;
  uint32_t correlation_id;
};
CallbackFunc callback = nullptr;
void* userdata = nullptr;
bool subscribed = false;
uint32_t enabled_domains = 0;
int subscribe_result = 0;
int token;
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int cuptiSubscribe(void** subscriber, CallbackFunc fn, void* data) {
  if (subscribe_result != 0) return subscribe_result;
  if (subscribed) return 39;  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
  subscribed = true;
  callback = fn;
  userdata = data;
  *subscriber = &token;
  return 0;
}
__attribute__((visibility("default"))) int cuptiEnableDomain(uint32_t enable, void* subscriber, uint32_t domain) {
  if (subscriber != &token) return 1;
  if (enable) enabled_domains |= 1u << domain;
  return 0;
}
__attribute__((visibility("default"))) int cuptiUnsubscribe(void* subscriber) {
  if (subscriber != &token || !subscribed) return 1;
  subscribed = false;
  callback = nullptr;
  enabled_domains = 0;
  return 0;
}
__attribute__((visibility("default"))) int cuptiGetResultString(int, const char** text) {
  *text = "CUPTI_ERROR_FAKE";
  return 0;
}
// Test hooks.
__attribute__((visibility("default"))) void fake_cupti_fail_subscribe(int result) { subscribe_result = result; }
__attribute__((visibility("default"))) uint32_t fake_cupti_enabled_domains() { return enabled_domains; }
// Delivers one callback, as CUPTI does on an API call in an enabled domain.
__attribute__((visibility("default"))) void fake_cupti_call(uint32_t domain, int site, const char* function,
                                                           const char* symbol, int result) {
  if (callback == nullptr || !(enabled_domains & (1u << domain))) return;
  CallbackData data{};
  data.callback_site = site;
  data.function_name = function;
  data.symbol_name = symbol;
  data.function_return_value = site == 1 ? &result : nullptr;
  callback(userdata, domain, 0, &data);
}
}
