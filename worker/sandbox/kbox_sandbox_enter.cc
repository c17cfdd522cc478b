// libkbox_sandbox_enter.so: the C ABI over sandbox_entry.cc's kReturn mode.

#include "worker/sandbox/kbox_sandbox_enter.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "worker/sandbox/sandbox_entry.h"

namespace {

void CopyError(const std::string& message, char* err, size_t err_len) {
  if (!err || err_len == 0) return;
  const size_t n = std::min(message.size(), err_len - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

}  // namespace

extern "C" int kbox_sandbox_enter(const char* spec_path, char* err, size_t err_len) {
  kbox::v1::SandboxSpec spec;
  auto error = kbox::sandbox::ReadSpecFile(spec_path ? spec_path : "", spec);
  if (!error) error = kbox::sandbox::EnterSandbox(spec, kbox::sandbox::EntryMode::kReturn);
  if (error) {
    CopyError(*error, err, err_len);
    return -1;
  }
  return 0;
}

extern "C" long kbox_sandbox_spec_strings(const char* spec_path, int field, char* buf, size_t len) {
  kbox::v1::SandboxSpec spec;
  if (kbox::sandbox::ReadSpecFile(spec_path ? spec_path : "", spec)) return -1;
  const auto& strings = field == 0 ? spec.argv() : spec.env();
  std::string joined;
  for (const auto& s : strings) joined.append(s.c_str(), s.size() + 1);
  if (buf && joined.size() <= len) std::memcpy(buf, joined.data(), joined.size());
  return static_cast<long>(joined.size());
}
