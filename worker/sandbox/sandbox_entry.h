#pragma once

// The sandbox's launcher → init → program sequence (docs/sandbox.md), usable
// two ways:
//
//   kExec    (kbox-sandbox): the program process execve()s the spec's argv.
//   kReturn  (libkbox_sandbox_enter.so, the pre-forked run stage of
//            docs/prefork.md): the program process returns from EnterSandbox
//            and its caller goes on with its own code, inside the sandbox.
//
// The calling process becomes the launcher. Launcher and init never return:
// they wait and _exit with the program's status (or die by its signal), as
// kbox-sandbox always has. The caller must be single-threaded: the steps
// allocate after fork.

#include <string>

#include "kbox/v1/sandbox.pb.h"
#include "worker/sandbox/sandbox_step.h"

namespace kbox::sandbox {

enum class EntryMode { kExec, kReturn };

// Exit status of a launcher whose sandbox could not be set up; kboxd reports
// it as INFRA_ERROR.
inline constexpr int kSetupFailed = 125;

// Reads a binary kbox.v1.SandboxSpec.
StepError ReadSpecFile(const std::string& path, v1::SandboxSpec& spec);

// Returns an error only when nothing was started yet (unusable spec or
// policy, cgroup not joinable, clone refused); the caller then still runs
// outside any sandbox and must not go on as if confined. In kReturn mode it
// returns std::nullopt in the program process only.
StepError EnterSandbox(const v1::SandboxSpec& spec, EntryMode mode);

}  // namespace kbox::sandbox
