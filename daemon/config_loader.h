#pragma once

// kboxd's configuration: a text-format DaemonConfig file (--config) with
// command-line flags on top, defaults applied and bounds checked in one place.

#include <string>
#include <vector>

#include <boost/system/result.hpp>

#include "kbox/v1/config.pb.h"
#include "policy/field_error.h"

namespace kbox {

// What the command line asked for besides the config itself.
struct CommandLine {
  v1::DaemonConfig config;
  bool show_help = false;
  std::string help_text;
};

// Parses flags and, when --config is given, the file under them. Errors name
// the flag or the config field.
boost::system::result<CommandLine, FieldError> ParseCommandLine(int argc, const char* const* argv);

// Parses a text-format DaemonConfig (unknown fields are errors).
boost::system::result<v1::DaemonConfig, FieldError> ParseConfigText(const std::string& text);

// Fills every zero field with its default (see config.proto) and checks
// bounds. `cores` is the machine's CPU count.
boost::system::result<v1::DaemonConfig, FieldError> ApplyConfigDefaults(v1::DaemonConfig config,
                                                                        unsigned cores);

// Run stages per device that prepare ahead of their turn: the configured
// run_stages_ahead, or when it is absent 2 on a GPU (where each stage's CUDA
// start takes seconds and one stage ahead left the device waiting for it) and
// 1 on a CPU run slot (whose stages start no CUDA). docs/run-stages-ahead.md.
uint32_t RunStagesAhead(const v1::DaemonConfig& config, bool gpu);

}  // namespace kbox
