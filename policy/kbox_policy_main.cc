// kbox-policy: resolves, checks and tries out the seccomp profiles of policy/seccomp.
//
//   kbox-policy resolve FILE.policy    print the resolved, sorted listing
//   kbox-policy check [DIR]            exit 1 when a DIR/*.resolved is stale
//                                      (DIR defaults to policy/seccomp)
//   kbox-policy export FILE.policy OUT write the compiled BPF program to OUT
//   kbox-policy exec FILE.policy -- PROGRAM [ARGS...]
//                                      install the profile, then exec PROGRAM
//                                      (bring-up and debugging only)

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "policy/seccomp_policy.h"

namespace {

int Usage() {
  std::cerr << "usage: kbox-policy resolve FILE.policy | check [DIR] | export FILE.policy OUT | exec FILE.policy -- CMD...\n";
  return 2;
}

bool Load(const std::filesystem::path& path, std::optional<kbox::SeccompPolicy>& out) {
  auto policy = kbox::SeccompPolicy::LoadFile(path);
  if (!policy) {
    std::cerr << "kbox-policy: " << policy.error().field << ": " << policy.error().message << "\n";
    return false;
  }
  out.emplace(std::move(*policy));
  return true;
}

int Check(const std::filesystem::path& dir) {
  int status = 0;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".policy") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::cerr << "kbox-policy: no .policy files in " << dir << "\n";
    return 1;
  }
  for (const auto& file : files) {
    std::optional<kbox::SeccompPolicy> policy;
    if (!Load(file, policy)) return 1;
    auto resolved = file;
    resolved.replace_extension(".resolved");
    std::ifstream in(resolved);
    std::ostringstream checked_in;
    checked_in << in.rdbuf();
    if (!in || checked_in.str() != policy->ResolvedListing()) {
      std::cerr << "kbox-policy: " << resolved.string() << " is stale; regenerate it with "
                << "kbox-policy resolve " << file.string() << " > " << resolved.string() << "\n";
      status = 1;
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  if (args[0] == "resolve" && args.size() == 2) {
    std::optional<kbox::SeccompPolicy> policy;
    if (!Load(args[1], policy)) return 1;
    std::cout << policy->ResolvedListing();
    return 0;
  }
  if (args[0] == "check" && args.size() <= 2) {
    return Check(args.size() == 2 ? args[1] : "policy/seccomp");
  }
  if (args[0] == "export" && args.size() == 3) {
    std::optional<kbox::SeccompPolicy> policy;
    if (!Load(args[1], policy)) return 1;
    const int fd = ::open(args[2].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::cerr << "kbox-policy: cannot write " << args[2] << "\n";
      return 1;
    }
    auto error = policy->ExportBpf(fd);
    ::close(fd);
    if (error) std::cerr << "kbox-policy: " << *error << "\n";
    return error ? 1 : 0;
  }
  if (args[0] == "exec" && args.size() >= 4 && args[2] == "--") {
    std::optional<kbox::SeccompPolicy> policy;
    if (!Load(args[1], policy)) return 1;
    if (auto error = policy->Install()) {
      std::cerr << "kbox-policy: " << *error << "\n";
      return 1;
    }
    ::execvp(argv[4], argv + 4);
    return 127;  // Reached only when exec failed (and was allowed to).
  }
  return Usage();
}
