#include "daemon/precompiled_header.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <iostream>

namespace kbox {
namespace {

// Two variants of ~20 CPU-s each, compiled in parallel; a loaded 2-core host
// took 72 s. Far beyond that something is wrong: give up, compiles go on.
constexpr std::chrono::minutes kBuildLimit{15};

std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

}  // namespace

std::filesystem::path PrecompiledHeaderRoot(const v1::DaemonConfig& config) {
  return std::filesystem::path(config.store().work_dir()) / "pch";
}

bool PrecompiledHeaderWanted(const v1::DaemonConfig& config) {
  return config.experimental().light_headers() && config.experimental().precompiled_header();
}

StatusOr<std::string> ParsePrecompiledHeaderBuild(const ProcessOutcome& outcome,
                                                  const std::filesystem::path& root) {
  google::protobuf::Struct answer;
  const std::string line = LastLine(outcome.output_tail);
  const bool parsed = google::protobuf::util::JsonStringToMessage(line, &answer).ok();
  const auto& fields = answer.fields();
  if (parsed && fields.contains("error")) {
    return Status::Error("kbox_pch.py: " + fields.at("error").string_value());
  }
  if (outcome.end != ProcessOutcome::End::kExited || outcome.exit_code != 0) {
    return Status::Error("kbox_pch.py " + DescribeEnd(outcome) + ": " + line);
  }
  if (!parsed || !fields.contains("dir")) {
    return Status::Error("kbox_pch.py printed no directory: " + line);
  }
  // The sandbox binds root, nothing else: a directory elsewhere would not
  // be there (and is not what kboxd asked for).
  const std::filesystem::path dir = fields.at("dir").string_value();
  if (dir.parent_path() != root || dir.filename().string().starts_with(".")) {
    return Status::Error("kbox_pch.py named " + dir.string() + ", not a directory of " + root.string());
  }
  // in_place_value: a string would also construct the error (C++20
  // parenthesised aggregate initialisation).
  return {boost::system::in_place_value, dir.string()};
}

PrecompiledHeader::~PrecompiledHeader() {
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
}

void PrecompiledHeader::StartBuild(const HarnessSettings& settings,
                                   const std::filesystem::path& root) {
  ProcessSpec spec;
  spec.argv = {settings.python, "-s", "-B", (settings.harness_dir / "kbox_pch.py").string(),
               "--root", root.string()};
  spec.env = InheritedEnvironment(settings);
  spec.env.push_back("PYTHONDONTWRITEBYTECODE=1");
  spec.env.push_back("HOME=/nonexistent");
  spec.wall_limit = kBuildLimit;
  spec.output_tail_bytes = 16 << 10;
  spec.cancel = &cancel_;
  thread_ = std::thread([this, spec = std::move(spec), root] {
    const ProcessOutcome outcome = RunProcess(spec);
    auto built = ParsePrecompiledHeaderBuild(outcome, root);
    if (!built) {
      if (outcome.end != ProcessOutcome::End::kCancelled) {
        std::cerr << "kboxd: precompiled header not built, compiles parse the light header: "
                  << built.error().message() << std::endl;
      }
      return;
    }
    std::cerr << "kboxd: precompiled header ready in " << static_cast<int>(outcome.wall_ms / 1000)
              << " s (" << static_cast<int>(outcome.cpu_ms / 1000) << " CPU-s): " << *built
              << std::endl;
    std::lock_guard<std::mutex> lock(mu_);
    dir_ = *built;
  });
}

void PrecompiledHeader::WaitForBuild() {
  if (thread_.joinable()) thread_.join();
}

std::string PrecompiledHeader::dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dir_;
}

}  // namespace kbox
