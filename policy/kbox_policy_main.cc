// kbox-policy: resolves, checks and tries out the seccomp profiles of policy/seccomp.
//
//   kbox-policy resolve FILE.policy    print the resolved, sorted listing
//   kbox-policy check [DIR]            exit 1 when a DIR/*.resolved is stale
//                                      (DIR defaults to policy/seccomp)
//   kbox-policy export FILE.policy OUT write the compiled BPF program to OUT
//   kbox-policy exec FILE.policy -- PROGRAM [ARGS...]
//                                      install the profile, then exec PROGRAM
//                                      (bring-up and debugging only)
//   kbox-policy rules                  list the static anti-cheat rules
//   kbox-policy anticheat FILE [--reference REF] [--backend cpu|cuda|triton]
//       [--precision fp32|fp16|bf16] [--profile NAME] [--profile-dir DIR]
//                                      run the static checker on a candidate
//                                      offline; exit 1 when it is rejected

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
#include "policy/static_check/rule_catalog.h"
#include "policy/static_check/static_checker.h"

namespace {

int Usage() {
  std::cerr << "usage: kbox-policy resolve FILE.policy | check [DIR] | export FILE.policy OUT | "
               "exec FILE.policy -- CMD... | rules | anticheat FILE [--reference REF] [--backend B] "
               "[--precision P] [--profile NAME] [--profile-dir DIR]\n";
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

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int Anticheat(const std::vector<std::string>& args) {
  namespace sc = kbox::static_check;
  std::string file, reference_file, profile_name = "strict", profile_dir = "policy/anticheat";
  sc::CheckInput input;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--reference" && has_value) {
      reference_file = args[++i];
    } else if (a == "--profile" && has_value) {
      profile_name = args[++i];
    } else if (a == "--profile-dir" && has_value) {
      profile_dir = args[++i];
    } else if (a == "--backend" && has_value) {
      const std::string& b = args[++i];
      if (b == "cpu") input.backend = sc::TaskBackend::kCpu;
      else if (b == "cuda") input.backend = sc::TaskBackend::kCuda;
      else if (b == "triton") input.backend = sc::TaskBackend::kTriton;
      else return Usage();
    } else if (a == "--precision" && has_value) {
      const std::string& p = args[++i];
      if (p == "fp32") input.precision = sc::TaskPrecision::kFp32;
      else if (p == "fp16") input.precision = sc::TaskPrecision::kFp16;
      else if (p == "bf16") input.precision = sc::TaskPrecision::kBf16;
      else return Usage();
    } else if (file.empty() && !a.starts_with("--")) {
      file = a;
    } else {
      return Usage();
    }
  }
  if (file.empty()) return Usage();
  auto profile = sc::AnticheatProfile::Load(profile_dir, profile_name);
  if (!profile) {
    std::cerr << "kbox-policy: " << profile.error().field << ": " << profile.error().message << "\n";
    return 2;
  }
  const auto candidate = ReadFile(file);
  const auto reference = reference_file.empty() ? std::optional<std::string>("") : ReadFile(reference_file);
  if (!candidate || !reference) {
    std::cerr << "kbox-policy: cannot read " << (candidate ? reference_file : file) << "\n";
    return 2;
  }
  input.candidate_source = *candidate;
  input.reference_source = *reference;
  const sc::CheckReport report = sc::Check(input, *profile);
  for (const sc::Finding& f : report.findings) {
    std::cout << file << ":" << f.line << ":" << f.column << ": " << sc::SeverityName(f.severity) << " "
              << f.rule_id << ": " << f.message << "\n    " << f.snippet << "\n";
  }
  // kboxd checks these on the strings the compile stage reports.
  for (const sc::DeferredCall& d : report.deferred) {
    std::cout << file << ":" << d.line << ":" << d.column << ": deferred to the compile stage: " << d.reason
              << "\n";
  }
  std::cout << (report.rejected() ? "rejected" : "not rejected") << " (" << report.findings.size()
            << " findings, profile " << profile->name() << ")\n";
  return report.rejected() ? 1 : 0;
}

int Rules() {
  for (const auto& r : kbox::static_check::RuleCatalog()) {
    std::cout << r.id << "\t" << r.hack_ref << "\t" << r.summary << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  if (args[0] == "rules" && args.size() == 1) return Rules();
  if (args[0] == "anticheat") return Anticheat(args);
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
    const kbox::Status exported = policy->ExportBpf(fd);
    ::close(fd);
    if (!exported.ok()) std::cerr << "kbox-policy: " << exported.message() << "\n";
    return exported.ok() ? 0 : 1;
  }
  if (args[0] == "exec" && args.size() >= 4 && args[2] == "--") {
    std::optional<kbox::SeccompPolicy> policy;
    if (!Load(args[1], policy)) return 1;
    if (kbox::Status error = policy->Install(); !error.ok()) {
      std::cerr << "kbox-policy: " << error.message() << "\n";
      return 1;
    }
    ::execvp(argv[4], argv + 4);
    return 127;  // Reached only when exec failed (and was allowed to).
  }
  return Usage();
}
