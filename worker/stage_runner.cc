#include "worker/stage_runner.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace kbox {
namespace {

std::string SpecFileName(v1::Stage stage) {
  return stage == v1::STAGE_COMPILE ? "compile_spec.json" : "run_spec.json";
}

}  // namespace

void DecodeHarnessEvents(const std::string& stream, StageOutcome& outcome) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  size_t begin = 0;
  while (begin < stream.size()) {
    size_t end = stream.find('\n', begin);
    if (end == std::string::npos) end = stream.size();
    const std::string_view line(stream.data() + begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    if (outcome.report) {
      outcome.protocol_error = "data after the final report";
      outcome.report.reset();
      return;
    }
    v1::HarnessEvent event;
    const auto status = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(line.data(), line.size()), &event, options);
    if (!status.ok()) {
      outcome.protocol_error = "malformed harness event: " + std::string(status.message());
      return;
    }
    switch (event.event_case()) {
      case v1::HarnessEvent::kEnter:
        outcome.last_party = event.enter();
        break;
      case v1::HarnessEvent::kReport:
        outcome.report = event.report();
        break;
      case v1::HarnessEvent::EVENT_NOT_SET:
        outcome.protocol_error = "empty harness event";
        return;
    }
  }
}

StageRunner::StageRunner(HarnessSettings settings) : settings_(std::move(settings)) {
  for (const auto& name : settings_.inherited_env) {
    if (const char* value = std::getenv(name.c_str())) inherited_.push_back(name + "=" + value);
  }
  const bool has_path = std::any_of(inherited_.begin(), inherited_.end(),
                                    [](const std::string& kv) { return kv.starts_with("PATH="); });
  if (!has_path) inherited_.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
}

ProcessSpec StageRunner::BuildProcessSpec(const JobWorkspace& ws, const std::string& spec_path,
                                          const StagePlacement& placement) const {
  ProcessSpec p;
  p.argv = {settings_.python, "-s", "-B", (settings_.harness_dir / "kbox_stage.py").string(),
            "--spec", spec_path, "--result-fd", "3"};
  p.env = inherited_;
  p.env.push_back("HOME=" + ws.home_dir().string());
  p.env.push_back("TMPDIR=" + ws.tmp_dir().string());
  p.env.push_back("TORCH_EXTENSIONS_DIR=" + ws.build_dir().string());
  p.env.push_back("TRITON_CACHE_DIR=" + ws.triton_dir().string());
  // Per-job JIT cache: one job's PTX must never be another's (cache poisoning).
  p.env.push_back("CUDA_CACHE_PATH=" + (ws.home_dir() / ".nv").string());
  p.env.push_back("PYTHONUNBUFFERED=1");
  p.env.push_back("PYTHONDONTWRITEBYTECODE=1");
  p.env.push_back("LANG=C.UTF-8");
  p.env.push_back("MAX_JOBS=" + std::to_string(settings_.build_jobs));
  // An empty list hides every GPU: compile stages never hold one.
  p.env.push_back("CUDA_VISIBLE_DEVICES=" +
                  (placement.gpu ? std::to_string(*placement.gpu) : std::string()));
  if (!placement.cuda_arch.empty()) {
    p.env.push_back("TORCH_CUDA_ARCH_LIST=" + placement.cuda_arch);
  }
  p.cwd = ws.root().string();
  p.wall_limit = placement.wall_limit;
  p.cancel = placement.cancel;
  p.max_output_bytes = settings_.max_output_bytes;
  return p;
}

StageOutcome StageRunner::Run(const JobWorkspace& ws, const v1::StageSpec& spec,
                              const StagePlacement& placement) const {
  StageOutcome outcome;
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(spec, &json, options); !s.ok()) {
    outcome.process.spawn_error = "cannot encode stage spec: " + std::string(s.message());
    return outcome;
  }
  const std::string name = SpecFileName(spec.stage());
  if (auto error = ws.WriteFile(name, json)) {
    outcome.process.spawn_error = *error;
    return outcome;
  }
  outcome.process = RunProcess(BuildProcessSpec(ws, (ws.root() / name).string(), placement));
  if (outcome.process.result_truncated) {
    outcome.protocol_error = "result pipe exceeded its size limit";
  } else {
    DecodeHarnessEvents(outcome.process.result, outcome);
  }
  return outcome;
}

}  // namespace kbox
