#include "daemon/host_probe.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "daemon/version.h"

namespace kbox {
namespace {

// First import of torch on a cold page cache can take tens of seconds.
constexpr std::chrono::seconds kProbeLimit{180};

std::string ReadCpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string ReadHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

boost::system::result<HostInfo, std::string> ProbeHost(const HarnessSettings& settings) {
  ProcessSpec spec;
  spec.argv = {settings.python, "-s", "-B", (settings.harness_dir / "kbox_probe.py").string()};
  spec.env = InheritedEnvironment(settings);
  spec.env.push_back("PYTHONDONTWRITEBYTECODE=1");
  spec.env.push_back("HOME=/nonexistent");
  spec.wall_limit = kProbeLimit;
  spec.output_tail_bytes = 64 << 10;
  const ProcessOutcome outcome = RunProcess(spec);
  if (outcome.end != ProcessOutcome::End::kExited || outcome.exit_code != 0) {
    return "worker probe (" + spec.argv[0] + " " + spec.argv[3] + ") " + DescribeEnd(outcome) +
           ": " + outcome.output_tail;
  }
  // The probe prints its JSON as the last line; earlier lines are warnings.
  std::string text = outcome.output_tail;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto last_line = text.rfind('\n');
  if (last_line != std::string::npos) text = text.substr(last_line + 1);

  HostInfo host;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // A newer probe may report more.
  if (auto s = google::protobuf::util::JsonStringToMessage(text, &host.probe, options); !s.ok()) {
    return "worker probe printed no valid report: " + std::string(s.message());
  }
  host.hostname = ReadHostname();
  host.cpu_model = ReadCpuModel();
  return host;
}

v1::Fingerprint HostFingerprint(const HostInfo& host) {
  v1::Fingerprint f;
  f.set_kbox_version(kVersion);
  f.set_hostname(host.hostname);
  f.set_cpu_model(host.cpu_model);
  f.set_torch_version(host.probe.torch_version());
  f.set_python_version(host.probe.python_version());
  f.set_cuda_version(host.probe.cuda_version());
  f.set_triton_version(host.probe.triton_version());
  f.set_driver_version(host.probe.driver_version());
  return f;
}

}  // namespace kbox
