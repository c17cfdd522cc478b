#pragma once

// What kboxd learns about its host at start-up: the worker interpreter's
// software versions and the GPUs it sees (by running worker/harness/
// kbox_probe.py once, in a child process like every other worker), plus the
// host name and CPU model for result fingerprints.

#include <string>

#include <boost/system/result.hpp>

#include "kbox/v1/harness.pb.h"
#include "worker/stage_runner.h"

namespace kbox {

struct HostInfo {
  v1::ProbeReport probe;
  std::string hostname;
  std::string cpu_model;
};

// Runs the probe under `settings` (same interpreter and environment rules as
// the stages). Errors say why the worker interpreter is unusable.
boost::system::result<HostInfo, std::string> ProbeHost(const HarnessSettings& settings);

// The base fingerprint of results on this host (no device fields).
v1::Fingerprint HostFingerprint(const HostInfo& host);

}  // namespace kbox
