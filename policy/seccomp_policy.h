#pragma once

// A seccomp-bpf allowlist loaded from a text profile in policy/seccomp/ and
// compiled with libseccomp. The grammar (one rule a line, every rule with its
// reason after '#'):
//
//   include common.policy                   # why this profile builds on it
//   allow read                              # why
//   allow clone arg0&0x7E020000==0          # masked equality; hex or decimal
//   allow socket arg0==1                    # equality; conditions on a line AND
//   errno ENOSYS clone3                     # fail with an errno the caller handles
//   kill ptrace                             # documents intent: kill is the default
//
// Several lines for one syscall OR together; an unconditional rule must be the
// only rule of its syscall. Only EQ and MASKED_EQ comparisons exist, which keeps
// clear of libseccomp 2.5.4's 64-bit comparison bugs (CVE-2019-9893).
//
// A profile may instead be stacked on another ("stacked on run.policy #
// why"): its default is to allow, it may only take away (kill and errno
// rules), and it is meant to be installed on top of its base, which keeps
// deciding every call the stacked profile does not name. Install() installs
// the base first; ExportBpf() exports the stacked filter alone.
//
// Whatever the text says, a policy that allows a syscall of NeverAllowed()
// (process inspection, kernel keyrings, mounts, modules, kexec, io_uring,
// namespaces, non-AF_UNIX sockets, clone with CLONE_NEW* flags, clone3) is
// refused when it is parsed, so no edit of a profile can open those.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/system/result.hpp>

#include "policy/field_error.h"
#include "policy/status.h"

namespace kbox {

enum class SeccompAction { kAllow, kErrno, kKill };

// `argN==value` (no mask) or `argN&mask==value`.
struct SeccompCondition {
  unsigned arg = 0;
  std::optional<uint64_t> mask;
  uint64_t value = 0;
};

struct SeccompRule {
  SeccompAction action = SeccompAction::kKill;
  std::string errno_name;  // For kErrno: "ENOSYS", "EPERM", ...
  int errno_value = 0;
  std::vector<SeccompCondition> conditions;  // ANDed; empty = always.
  std::string origin;                        // "file:line", for errors.
};

class SeccompPolicy {
 public:
  // Returns the text of an included file, or nullopt when it cannot be read.
  using IncludeReader = std::function<std::optional<std::string>(const std::string&)>;

  // Reads the profile at `path`; `include NAME` is read from NAME relative to
  // the directory of `path`. On error, FieldError.field is "file:line".
  static boost::system::result<SeccompPolicy, FieldError> LoadFile(
      const std::filesystem::path& path);

  // Parses `text`, named `name` in errors; includes come from `read_include`.
  // Errors: a rule without a reason, an unknown syscall or errno, a bad
  // condition, an include cycle or repeat, conflicting rules, a never-allowed
  // allowance.
  static boost::system::result<SeccompPolicy, FieldError> Parse(const std::string& text,
                                                                const std::string& name,
                                                                const IncludeReader& read_include);

  // The native x86_64 number of `name`, or -1 when there is none.
  static int SyscallNumber(const std::string& name);
  // The native syscall's name, or "syscall <nr>" when unknown.
  static std::string SyscallName(int nr);
  // Waits for the next held call on a listener from InstallWithListener();
  // returns its syscall number, or -1 when the listener failed.
  static int ReceiveHeldCall(int listener_fd);

  // The base profile a stacked profile is installed on top of ("" if none).
  const std::string& stacked_on() const { return stacked_on_; }

  // Syscalls that no profile may allow (errno or kill rules are fine).
  static const std::vector<std::string>& NeverAllowed();

  // Compiles the filter and loads it into the calling process: every thread
  // (TSYNC), default SCMP_ACT_KILL_PROCESS, other architectures killed.
  // libseccomp sets no_new_privs first (SCMP_FLTATR_CTL_NNP), which an
  // unprivileged process needs to load a filter. libseccomp allocates: after
  // fork() in a multi-threaded parent use ExportBpf beforehand and install the
  // program with seccomp(2) instead. Returns an error message on failure.
  Status Install() const;

  // Like Install(), for a single-threaded caller about to exec, but a call
  // the profile does not allow is held and reported on the returned listener
  // descriptor (seccomp user notification) instead of killing at once, so a
  // supervisor outside the filter can name the call before it kills the
  // process. The caller hands the descriptor to that supervisor.
  boost::system::result<int, FieldError> InstallWithListener() const;

  // Writes the compiled BPF program (struct sock_filter[]) to `fd`, for a
  // process that installs it itself (the harness's second, strict stage).
  Status ExportBpf(int fd) const;

  // One line per rule, sorted: "<name> <action>[ <conditions>]", e.g.
  // "clone allow arg0&0x7e020000==0", "clone3 errno ENOSYS", "ptrace kill".
  // Syscalls the profile does not name are killed and not listed.
  std::string ResolvedListing() const;

  // The syscalls the profile names, sorted.
  std::vector<std::string> Names() const;

  // The rules of `syscall` (empty when the profile does not name it).
  const std::vector<SeccompRule>& RulesFor(const std::string& syscall) const;

 private:
  SeccompPolicy() = default;

  std::map<std::string, std::vector<SeccompRule>> rules_;  // By syscall name.
  // A stacked profile ("stacked on FILE") only takes away: every call it does
  // not name is left to its base, which must already be installed.
  std::string stacked_on_;
  std::shared_ptr<const SeccompPolicy> base_;
};

}  // namespace kbox
