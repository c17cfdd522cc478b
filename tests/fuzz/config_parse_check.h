#pragma once

// What must hold for any config file and flags: the checks of config_fuzzer
// and of the replay of its regression inputs
// (tests/unit/daemon/decode_regression_test.cc), in one place.
//
// Input layout: the text-format DaemonConfig, then optionally a NUL and
// NUL-separated command-line arguments (at most kMaxFlags of them). Seeds
// (plain config files) are the config whole. The config goes through
// ParseCommandLine as `kboxd --config FILE ARGS...` (the file is a memfd, so
// no disk is touched), then ApplyConfigDefaults, exactly as kboxd starts:
//  - a refusal names a field (or flag) and says something;
//  - an accepted config is within every bound ApplyConfigDefaults promises,
//    and applying the defaults again changes nothing.

#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "daemon/config_loader.h"

namespace kbox::fuzz {

inline constexpr size_t kMaxFlags = 16;

// A file holding `text`, open while this lives; path() names it.
class MemFile {
 public:
  explicit MemFile(std::string_view text) : fd_(::memfd_create("kbox-config", MFD_CLOEXEC)) {
    size_t done = 0;
    while (fd_ >= 0 && done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  bool ok() const { return fd_ >= 0; }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

inline std::string BoundsViolation(const v1::DaemonConfig& c) {
  constexpr uint64_t kMiB = 1ull << 20;
  if (c.listener().listen().empty() || c.sandbox().python().empty() || c.sandbox().python().front() != '/')
    return "listen/python";
  if (c.listener().max_body_bytes() == 0 || c.listener().max_body_bytes() > 64 * kMiB)
    return "max_body_bytes";
  if (c.limits().max_source_bytes() == 0 || c.limits().max_source_bytes() > c.listener().max_body_bytes()) {
    return "max_source_bytes";
  }
  if (c.listener().read_timeout_s() == 0 || c.listener().write_timeout_s() == 0) return "read/write timeout";
  if (c.listener().header_timeout_s() == 0 ||
      c.listener().header_timeout_s() > c.listener().read_timeout_s()) {
    return "header_timeout_s";
  }
  if (c.listener().max_connections() == 0 || c.listener().max_connections() > 1u << 20)
    return "max_connections";
  if (c.limits().max_in_flight_jobs() == 0 || c.limits().max_in_flight_jobs() > 4096)
    return "max_in_flight_jobs";
  if (c.listener().io_threads() == 0 || c.listener().io_threads() > 64) return "io_threads";
  if (c.scheduling().compile_workers() == 0 || c.scheduling().compile_workers() > 256)
    return "compile_workers";
  if (c.scheduling().cpu_run_slots() == 0 || c.scheduling().cpu_run_slots() > 256) return "cpu_run_slots";
  if (c.limits().default_time_limit_s() == 0 ||
      c.limits().default_time_limit_s() > c.limits().max_time_limit_s()) {
    return "default_time_limit_s";
  }
  if (c.limits().default_performance_trials() > c.limits().max_performance_trials())
    return "performance trials";
  if (c.limits().job_pids() < 64 || c.limits().job_memory_bytes() < 256 * kMiB)
    return "job_pids/job_memory_bytes";
  for (const auto& b : c.scheduling().backends()) {
    if (b != "cpu" && b != "cuda" && b != "triton") return "backends";
  }
  return "";
}

// "" when ParseCommandLine and ApplyConfigDefaults treated `input` as they
// must, else the first violation.
inline std::string ConfigParseViolation(std::string_view input) {
  const size_t nul = input.find('\0');
  MemFile file(input.substr(0, nul));
  if (!file.ok()) return "";  // Out of file descriptors: nothing to check.
  std::vector<std::string> args = {"kboxd", "--config", file.path()};
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (args.size() < 3 + kMaxFlags) {
      const size_t next = rest.find('\0');
      args.emplace_back(rest.substr(0, next));
      if (next == std::string_view::npos) break;
      rest.remove_prefix(next + 1);
    }
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  auto parsed = ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  if (!parsed) {
    if (parsed.error().field.empty() || parsed.error().message.empty()) {
      return "command-line refusal without a field or message";
    }
    return "";
  }
  if (parsed->show_help) return parsed->help_text.empty() ? "empty help text" : "";
  const unsigned cores = static_cast<unsigned>(input.size() % 300);
  auto config = ApplyConfigDefaults(parsed->config, cores);
  if (!config) {
    if (config.error().field.empty() || config.error().message.empty()) {
      return "config refusal without a field or message";
    }
    return "";
  }
  if (auto v = BoundsViolation(*config); !v.empty()) return "accepted config out of bounds: " + v;
  auto again = ApplyConfigDefaults(*config, cores);
  if (!again) return "defaults applied twice refuse what they accepted once";
  if (!google::protobuf::util::MessageDifferencer::Equals(*config, *again)) {
    return "defaults applied twice change the config";
  }
  return "";
}

}  // namespace kbox::fuzz
