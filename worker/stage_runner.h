#pragma once

// Launches one stage of the evaluation harness (worker/harness/kbox_stage.py)
// for a job and decodes what it reported on the result pipe.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kbox/v1/harness.pb.h"
#include "worker/job_workspace.h"
#include "worker/process_runner.h"

namespace kbox {

// How stage processes are started; the same for every job of a daemon.
struct HarnessSettings {
  std::string python;                  // Absolute path of the interpreter.
  std::filesystem::path harness_dir;   // Holds kbox_stage.py and kbox_probe.py.
  uint64_t max_output_bytes = 8ull << 20;
  unsigned build_jobs = 1;             // MAX_JOBS for the extension build (ninja -j).
  // Variables copied from kboxd's own environment when set (the toolchain's
  // location); everything else is dropped.
  std::vector<std::string> inherited_env = {"PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"};
};

// Where a stage runs.
struct StagePlacement {
  // GPU index for the run stage of a GPU backend; absent: no GPU visible.
  std::optional<uint32_t> gpu;
  // TORCH_CUDA_ARCH_LIST for builds ("9.0"); empty: torch's default.
  std::string cuda_arch;
  std::chrono::milliseconds wall_limit{60'000};
  // Shutdown flag; see ProcessSpec::cancel.
  const std::atomic<bool>* cancel = nullptr;
};

// What a stage process left behind, decoded.
struct StageOutcome {
  ProcessOutcome process;
  // The last party the harness announced before it stopped writing.
  v1::Party last_party = v1::PARTY_UNSPECIFIED;
  // The final report, when the harness wrote a well-formed one.
  std::optional<v1::StageReport> report;
  // Why the result pipe could not be decoded, when it could not.
  std::string protocol_error;
};

// Decodes the newline-separated HarnessEvent JSON lines of a result pipe.
// Anything after the report, or any malformed line, is a protocol error (the
// events before it still count for last_party).
void DecodeHarnessEvents(const std::string& stream, StageOutcome& outcome);

class StageRunner {
 public:
  explicit StageRunner(HarnessSettings settings);

  // Writes `spec` into the workspace and runs the stage to completion.
  StageOutcome Run(const JobWorkspace& workspace, const v1::StageSpec& spec,
                   const StagePlacement& placement) const;

  // Command line and environment of a stage (exposed for tests and logs).
  ProcessSpec BuildProcessSpec(const JobWorkspace& workspace, const std::string& spec_path,
                               const StagePlacement& placement) const;

  const HarnessSettings& settings() const { return settings_; }

 private:
  HarnessSettings settings_;
  std::vector<std::string> inherited_;  // Resolved NAME=value pairs.
};

}  // namespace kbox
