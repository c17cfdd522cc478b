// kbox-sandbox: runs one program inside kbox's sandbox.
//
//   kbox-sandbox --spec FILE      (FILE: a binary kbox.v1.SandboxSpec)
//
// kboxd starts it (through worker/process_runner.cc) for every stage that is
// not started by a pre-forked zygote (docs/prefork.md). It is
// single-threaded, so each step may allocate and report errors freely.
//
//   kbox-sandbox (host namespaces; joins the job's cgroups)
//    └─ init: pid 1 of new user/pid/mount/net/ipc/uts/cgroup namespaces;
//       builds the root file system, reaps orphans, reports the program's
//       wait status; when it exits the kernel kills everything left inside
//        └─ program: rlimits, unprivileged uid, no capabilities,
//           no_new_privs, descriptors closed, seccomp, execve
//
// The steps live in sandbox_entry.cc, shared with libkbox_sandbox_enter.so.
// Exit status: the program's own (exit code, or death by the same signal);
// 125 with a message on stderr when the sandbox could not be set up, which
// kboxd reports as INFRA_ERROR, never against the candidate.

#include <iostream>
#include <string>

#include "worker/sandbox/sandbox_entry.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--spec") {
    std::cerr << "usage: kbox-sandbox --spec FILE\n";
    return 2;
  }
  kbox::v1::SandboxSpec spec;
  auto error = kbox::sandbox::ReadSpecFile(argv[2], spec);
  if (!error) error = kbox::sandbox::EnterSandbox(spec, kbox::sandbox::EntryMode::kExec);
  // Only a failure before anything started comes back here.
  std::cerr << "kbox-sandbox: " << error.value_or("the sandbox returned in exec mode") << "\n";
  return kbox::sandbox::kSetupFailed;
}
