#pragma once

// The GCC precompiled header of the harness's light <torch/extension.h>
// (docs/compile-speed.md). A PCH is compiler input for every later compile
// stage, so only trusted code writes it: kboxd runs the harness's
// kbox_pch.py once at start-up, outside any sandbox and never in a job, and
// it writes <work_dir>/pch/<key>/ (key: a digest of the header, torch, the
// compiler and the flags). Compile stages see <work_dir>/pch read-only
// (SetUpSandbox) and get the directory in StageSpec.pch_dir once it is
// ready. Until then, or when the build fails (one log line), compiles parse
// the light header as before: the PCH only ever saves time.

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "kbox/v1/config.pb.h"
#include "policy/status.h"
#include "worker/process_runner.h"
#include "worker/stage_runner.h"

namespace kbox {

// Where kbox_pch.py writes, and what the sandbox binds read-only.
std::filesystem::path PrecompiledHeaderRoot(const v1::DaemonConfig& config);

// Whether kboxd builds and offers one: light_headers and precompiled_header.
bool PrecompiledHeaderWanted(const v1::DaemonConfig& config);

// kbox_pch.py's answer: the directory it built or reused under `root`, else
// why not (its exit, its {"error": ...} line, or a directory outside root).
StatusOr<std::string> ParsePrecompiledHeaderBuild(const ProcessOutcome& outcome,
                                                  const std::filesystem::path& root);

class PrecompiledHeader {
 public:
  PrecompiledHeader() = default;
  PrecompiledHeader(const PrecompiledHeader&) = delete;
  PrecompiledHeader& operator=(const PrecompiledHeader&) = delete;
  // Kills a build still running (kboxd is exiting) and waits for it.
  ~PrecompiledHeader();

  // Runs kbox_pch.py on a thread of its own with the stages' environment
  // (so it finds the compiler they find); returns at once. Logs one line
  // when it ends. Call at most once.
  void StartBuild(const HarnessSettings& settings, const std::filesystem::path& root);

  // The directory for StageSpec.pch_dir: empty until the build succeeded.
  std::string dir() const;

  // Blocks until a started build has ended (tests; kboxd never waits).
  void WaitForBuild();

 private:
  mutable std::mutex mu_;
  std::string dir_;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace kbox
