#include "policy/seccomp_policy.h"

#include <seccomp.h>

#include <cstdlib>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "policy/status.h"

namespace kbox {
namespace {

// Syscalls that cross the sandbox boundary whatever the namespaces do: they
// reach other processes, kernel-global state, or large kernel attack surface.
struct NeverGroup {
  std::vector<std::string> names;
  const char* why;
};

const std::vector<NeverGroup>& NeverGroups() {
  static const std::vector<NeverGroup> groups = {
      {{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"},
       "inspects or steals from another process"},
      {{"bpf", "perf_event_open", "userfaultfd"}, "kernel attack surface and side channels"},
      {{"keyctl", "add_key", "request_key"}, "kernel keyrings are not namespaced"},
      {{"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
        "fsconfig", "fsmount", "fspick", "mount_setattr"},
       "changes the filesystem view the sandbox built"},
      {{"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "iopl",
        "ioperm"},
       "host-wide state or hardware access"},
      {{"init_module", "finit_module", "delete_module"}, "loads kernel code"},
      {{"io_uring_setup", "io_uring_enter", "io_uring_register"},
       "bypasses seccomp for the syscalls it performs"},
      {{"unshare", "setns", "clone3"}, "creates or joins namespaces (clone3 flags are unfilterable)"},
      {{"open_by_handle_at", "name_to_handle_at"}, "opens files outside the mount namespace"},
      {{"execveat"}, "runs a memfd without a file on disk"},
  };
  return groups;
}

const char* NeverWhy(const std::string& name) {
  for (const auto& group : NeverGroups()) {
    if (std::find(group.names.begin(), group.names.end(), name) != group.names.end()) {
      return group.why;
    }
  }
  return nullptr;
}

constexpr uint64_t kCloneNewFlags = 0x7E020000;  // CLONE_NEW* (incl. CLONE_NEWNS 0x20000).
constexpr uint64_t kAfUnix = 1;

int ErrnoByName(const std::string& name) {
  static const std::map<std::string, int> table = {
      {"EPERM", EPERM},   {"ENOENT", ENOENT},         {"EACCES", EACCES},
      {"EINVAL", EINVAL}, {"ENOSYS", ENOSYS},         {"EAFNOSUPPORT", EAFNOSUPPORT},
      {"EIO", EIO},       {"EOPNOTSUPP", EOPNOTSUPP}, {"ENOTSUP", ENOTSUP}};
  auto it = table.find(name);
  return it == table.end() ? 0 : it->second;
}

std::optional<uint64_t> ParseNumber(const std::string& text) {
  uint64_t value = 0;
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const char* begin = text.data() + (hex ? 2 : 0);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value, hex ? 16 : 10);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return value;
}

std::string FormatNumber(uint64_t value, bool force_hex) {
  std::ostringstream out;
  if (force_hex || value >= 1024) {
    out << "0x" << std::hex << value;
  } else {
    out << value;
  }
  return out.str();
}

std::string FormatCondition(const SeccompCondition& c) {
  std::string out = "arg" + std::to_string(c.arg);
  if (c.mask) out += "&" + FormatNumber(*c.mask, true);
  return out + "==" + FormatNumber(c.value, false);
}

std::optional<SeccompCondition> ParseCondition(const std::string& text, std::string* error) {
  static const std::regex pattern("arg([0-5])(?:&(\\w+))?==(\\w+)");
  std::smatch m;
  if (!std::regex_match(text, m, pattern)) {
    *error = "condition '" + text + "' is not argN==VALUE or argN&MASK==VALUE (N 0..5)";
    return std::nullopt;
  }
  SeccompCondition c;
  c.arg = static_cast<unsigned>(m[1].str()[0] - '0');
  auto value = ParseNumber(m[3].str());
  if (!value) {
    *error = "condition '" + text + "': bad number '" + m[3].str() + "'";
    return std::nullopt;
  }
  c.value = *value;
  if (m[2].matched) {
    c.mask = ParseNumber(m[2].str());
    if (!c.mask) {
      *error = "condition '" + text + "': bad mask '" + m[2].str() + "'";
      return std::nullopt;
    }
    if ((c.value & ~*c.mask) != 0) {
      *error = "condition '" + text + "' can never match: the value has bits outside the mask";
      return std::nullopt;
    }
  }
  return c;
}

bool SameConditions(const std::vector<SeccompCondition>& a, const std::vector<SeccompCondition>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].arg != b[i].arg || a[i].mask != b[i].mask || a[i].value != b[i].value) return false;
  }
  return true;
}

std::string Trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

// The never-allowed check; runs on the merged rules so include order is moot.
std::optional<FieldError> CheckNeverAllowed(const std::string& name, const SeccompRule& rule) {
  if (name == "clone3" && rule.action == SeccompAction::kErrno && rule.errno_value != ENOSYS) {
    return FieldError{rule.origin, "clone3 may only fail with ENOSYS (glibc falls back on it)"};
  }
  if (rule.action != SeccompAction::kAllow) return std::nullopt;
  if (const char* why = NeverWhy(name)) {
    return FieldError{rule.origin, name + " may never be allowed: " + why};
  }
  auto has = [&](auto pred) {
    return std::any_of(rule.conditions.begin(), rule.conditions.end(), pred);
  };
  if (name == "socket" && !has([](const SeccompCondition& c) {
        return c.arg == 0 && !c.mask && c.value == kAfUnix;
      })) {
    return FieldError{rule.origin, "socket may only be allowed with arg0==1 (AF_UNIX)"};
  }
  if (name == "clone" && !has([](const SeccompCondition& c) {
        return c.arg == 0 && c.mask && (*c.mask & kCloneNewFlags) == kCloneNewFlags &&
               (c.value & kCloneNewFlags) == 0;
      })) {
    return FieldError{rule.origin,
                      "clone may only be allowed with arg0&MASK==VALUE where MASK covers "
                      "0x7e020000 (CLONE_NEW*) and VALUE has none of those bits"};
  }
  return std::nullopt;
}

struct ParseState {
  std::map<std::string, std::vector<SeccompRule>> rules;
  std::string stacked_on;  // "stacked on FILE" in the top-level file.
  std::vector<std::string> stack;  // Files being parsed, for cycle errors.
  std::set<std::string> seen;
};

std::optional<FieldError> ParseInto(const std::string& text, const std::string& name,
                                    const SeccompPolicy::IncludeReader& read_include,
                                    ParseState& state) {
  state.stack.push_back(name);
  state.seen.insert(name);
  std::istringstream in(text);
  std::string raw;
  for (int line_no = 1; std::getline(in, raw); ++line_no) {
    const std::string where = name + ":" + std::to_string(line_no);
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    const auto hash = line.find('#');
    if (hash == std::string::npos || Trim(line.substr(hash + 1)).empty()) {
      return FieldError{where, "every rule needs a reason after '#'"};
    }
    std::istringstream words(line.substr(0, hash));
    std::vector<std::string> tokens;
    for (std::string w; words >> w;) tokens.push_back(w);
    const std::string& verb = tokens[0];

    if (verb == "include") {
      if (tokens.size() != 2) return FieldError{where, "expected 'include FILE # reason'"};
      const std::string& file = tokens[1];
      if (std::find(state.stack.begin(), state.stack.end(), file) != state.stack.end()) {
        std::string cycle;
        for (const auto& s : state.stack) cycle += s + " -> ";
        return FieldError{where, "include cycle: " + cycle + file};
      }
      if (state.seen.count(file)) return FieldError{where, file + " is included twice"};
      auto included = read_include(file);
      if (!included) return FieldError{where, "cannot read include " + file};
      if (auto error = ParseInto(*included, file, read_include, state)) return error;
      continue;
    }

    if (verb == "stacked") {
      if (tokens.size() != 3 || tokens[1] != "on") {
        return FieldError{where, "expected 'stacked on FILE # reason'"};
      }
      if (state.stack.size() != 1 || !state.stacked_on.empty()) {
        return FieldError{where, "'stacked on' may appear once, in the top-level profile"};
      }
      state.stacked_on = tokens[2];
      continue;
    }

    SeccompRule rule;
    rule.origin = where;
    size_t next = 1;
    if (verb == "allow" && !state.stacked_on.empty()) {
      return FieldError{where, "a stacked profile only takes away: no allow rules"};
    }
    if (verb == "allow") {
      rule.action = SeccompAction::kAllow;
    } else if (verb == "kill") {
      rule.action = SeccompAction::kKill;
    } else if (verb == "errno") {
      rule.action = SeccompAction::kErrno;
      if (tokens.size() < 3) return FieldError{where, "expected 'errno ENAME SYSCALL ...'"};
      rule.errno_name = tokens[1];
      rule.errno_value = ErrnoByName(rule.errno_name);
      if (rule.errno_value == 0) return FieldError{where, "unknown errno " + rule.errno_name};
      next = 2;
    } else {
      return FieldError{where, "unknown action '" + verb + "' (allow, errno, kill, include)"};
    }
    if (tokens.size() <= next) return FieldError{where, "missing syscall name"};
    const std::string& syscall = tokens[next];
    if (SeccompPolicy::SyscallNumber(syscall) < 0) {
      return FieldError{where, "unknown syscall '" + syscall + "' on this architecture"};
    }
    for (size_t i = next + 1; i < tokens.size(); ++i) {
      std::string error;
      auto condition = ParseCondition(tokens[i], &error);
      if (!condition) return FieldError{where, error};
      for (const auto& c : rule.conditions) {
        if (c.arg == condition->arg) return FieldError{where, "two conditions on one argument"};
      }
      rule.conditions.push_back(*condition);
    }
    std::sort(rule.conditions.begin(), rule.conditions.end(),
              [](const auto& a, const auto& b) { return a.arg < b.arg; });

    auto& existing = state.rules[syscall];
    for (const auto& other : existing) {
      // libseccomp cannot mix a catch-all with conditional rules of one syscall.
      if (other.conditions.empty() || rule.conditions.empty() ||
          SameConditions(other.conditions, rule.conditions)) {
        return FieldError{where, syscall + " conflicts with the rule at " + other.origin};
      }
    }
    existing.push_back(std::move(rule));
  }
  state.stack.pop_back();
  return std::nullopt;
}

struct FilterDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

std::string SeccompError(const std::string& what, int rc) {
  return what + ": " + std::strerror(-rc);
}

}  // namespace

std::string SeccompPolicy::SyscallName(int nr) {
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
  std::string out = name ? name : "syscall " + std::to_string(nr);
  std::free(name);
  return out;
}

int SeccompPolicy::ReceiveHeldCall(int listener_fd) {
  seccomp_notif* request = nullptr;
  seccomp_notif_resp* response = nullptr;
  if (seccomp_notify_alloc(&request, &response) != 0) return -1;
  int nr = -1;
  if (seccomp_notify_receive(listener_fd, request) == 0) nr = request->data.nr;
  seccomp_notify_free(request, response);
  return nr;
}

int SeccompPolicy::SyscallNumber(const std::string& name) {
  const int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_NATIVE, name.c_str());
  return nr < 0 ? -1 : nr;
}

const std::vector<std::string>& SeccompPolicy::NeverAllowed() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& group : NeverGroups()) out.insert(out.end(), group.names.begin(), group.names.end());
    return out;
  }();
  return names;
}

boost::system::result<SeccompPolicy, FieldError> SeccompPolicy::Parse(
    const std::string& text, const std::string& name, const IncludeReader& read_include) {
  ParseState state;
  if (auto error = ParseInto(text, name, read_include, state)) return *error;
  for (const auto& [syscall, rules] : state.rules) {
    for (const auto& rule : rules) {
      if (auto error = CheckNeverAllowed(syscall, rule)) return *error;
    }
  }
  SeccompPolicy policy;
  policy.rules_ = std::move(state.rules);
  if (!state.stacked_on.empty()) {
    if (state.seen.size() != 1) {
      return FieldError{name, "a stacked profile includes nothing; its base decides the rest"};
    }
    auto base_text = read_include(state.stacked_on);
    if (!base_text) return FieldError{name, "cannot read the base " + state.stacked_on};
    auto base = Parse(*base_text, state.stacked_on, read_include);
    if (!base) return base.error();
    if (!base->stacked_on_.empty()) return FieldError{name, "the base may not be stacked itself"};
    policy.stacked_on_ = state.stacked_on;
    policy.base_ = std::make_shared<const SeccompPolicy>(std::move(*base));
  }
  return policy;
}

boost::system::result<SeccompPolicy, FieldError> SeccompPolicy::LoadFile(
    const std::filesystem::path& path) {
  auto read = [](const std::filesystem::path& p) -> std::optional<std::string> {
    std::ifstream in(p, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  auto text = read(path);
  if (!text) return FieldError{path.string(), "cannot read the policy file"};
  const auto dir = path.parent_path();
  return Parse(*text, path.filename().string(),
               [&](const std::string& file) { return read(dir / file); });
}

namespace {

// Builds the libseccomp filter for `rules`; kill rules are left to the default
// action (libseccomp refuses a rule whose action equals the default).
std::optional<std::string> Build(const std::map<std::string, std::vector<SeccompRule>>& rules,
                                 Filter& filter, bool notify_default = false,
                                 bool stacked = false) {
  const uint32_t default_action =
      stacked ? SCMP_ACT_ALLOW : notify_default ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS;
  filter.reset(seccomp_init(default_action));
  if (!filter) return "seccomp_init failed";
  void* ctx = filter.get();
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0) {
    return SeccompError("setting the bad-arch action", rc);
  }
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1); rc < 0) {
    return SeccompError("setting no_new_privs", rc);
  }
  // A listener cannot be combined with TSYNC; the launcher installs it while
  // single-threaded, where TSYNC has nothing to do.
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, notify_default ? 0 : 1); rc < 0) {
    return SeccompError("setting TSYNC", rc);
  }
  for (const auto& [name, list] : rules) {
    const int nr = SeccompPolicy::SyscallNumber(name);
    for (const auto& rule : list) {
      // Kill rules are the default of an allowlist (libseccomp refuses a rule
      // equal to the default); in a stacked profile they are the point.
      if (rule.action == SeccompAction::kKill && !stacked) continue;
      const uint32_t action = rule.action == SeccompAction::kAllow  ? SCMP_ACT_ALLOW
                              : rule.action == SeccompAction::kKill ? SCMP_ACT_KILL_PROCESS
                                  : SCMP_ACT_ERRNO(static_cast<uint16_t>(rule.errno_value));
      std::vector<scmp_arg_cmp> args;
      for (const auto& c : rule.conditions) {
        args.push_back(c.mask ? scmp_arg_cmp{c.arg, SCMP_CMP_MASKED_EQ, *c.mask, c.value}
                              : scmp_arg_cmp{c.arg, SCMP_CMP_EQ, c.value, 0});
      }
      const int rc = seccomp_rule_add_exact_array(ctx, action, nr,
                                                  static_cast<unsigned>(args.size()), args.data());
      if (rc < 0) return SeccompError(rule.origin + ": adding " + name, rc);
    }
  }
  return std::nullopt;
}

}  // namespace

Status SeccompPolicy::Install() const {
  if (base_) {
    if (Status installed = base_->Install(); !installed.ok()) return installed;
  }
  Filter filter;
  if (auto error = Build(rules_, filter, false, base_ != nullptr)) return Status::Error(*error);
  if (int rc = seccomp_load(filter.get()); rc < 0) return Status::Error(SeccompError("seccomp_load", rc));
  return Status::Ok();
}

boost::system::result<int, FieldError> SeccompPolicy::InstallWithListener() const {
  if (base_) return FieldError{"seccomp", "a stacked profile cannot own the listener"};
  Filter filter;
  if (auto error = Build(rules_, filter, /*notify_default=*/true)) return FieldError{"seccomp", *error};
  if (int rc = seccomp_load(filter.get()); rc < 0) {
    return FieldError{"seccomp", SeccompError("seccomp_load", rc)};
  }
  const int fd = seccomp_notify_fd(filter.get());
  if (fd < 0) return FieldError{"seccomp", SeccompError("seccomp_notify_fd", fd)};
  return fd;
}

Status SeccompPolicy::ExportBpf(int fd) const {
  Filter filter;
  if (auto error = Build(rules_, filter, false, base_ != nullptr)) return Status::Error(*error);
  if (int rc = seccomp_export_bpf(filter.get(), fd); rc < 0) {
    return Status::Error(SeccompError("seccomp_export_bpf", rc));
  }
  return Status::Ok();
}

std::string SeccompPolicy::ResolvedListing() const {
  std::string out;
  if (!stacked_on_.empty()) out = "(stacked on " + stacked_on_ + "; anything else allowed)\n";
  for (const auto& [name, list] : rules_) {
    std::vector<std::string> lines;
    for (const auto& rule : list) {
      std::string line = name;
      switch (rule.action) {
        case SeccompAction::kAllow: line += " allow"; break;
        case SeccompAction::kKill: line += " kill"; break;
        case SeccompAction::kErrno: line += " errno " + rule.errno_name; break;
      }
      for (const auto& c : rule.conditions) line += " " + FormatCondition(c);
      lines.push_back(std::move(line));
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& line : lines) out += line + "\n";
  }
  return out;
}

std::vector<std::string> SeccompPolicy::Names() const {
  std::vector<std::string> names;
  for (const auto& entry : rules_) names.push_back(entry.first);
  return names;
}

const std::vector<SeccompRule>& SeccompPolicy::RulesFor(const std::string& syscall) const {
  static const std::vector<SeccompRule> none;
  auto it = rules_.find(syscall);
  return it == rules_.end() ? none : it->second;
}

}  // namespace kbox
