#include "daemon/static_verdicts.h"

#include <chrono>

#include "daemon/result_mapper.h"
#include "policy/static_check/rule_catalog.h"
#include "worker/elapsed.h"

namespace kbox {
namespace {

// The checker bounds its text already; these bounds only keep a bug there
// from making responses large.
constexpr size_t kMaxSnippetBytes = 512;
constexpr size_t kMaxMessageBytes = 1024;

std::string OneLine(const std::string& text, size_t max_bytes) {
  std::string out = SanitizeTail(text, max_bytes);
  for (char& c : out) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return out;
}

}  // namespace

StaticPhase RunStaticCheck(const static_check::CheckInput& input,
                           const static_check::AnticheatProfile& profile) {
  StaticPhase phase;
  if (profile.all_off()) {
    // No rule runs, so nothing is timed or counted; the analysis still
    // names the candidate's kernels for the run stage (the profile keeps
    // every finding out of the report).
    phase.report = static_check::Check(input, profile);
    phase.report.findings.clear();
    phase.report.truncated = false;
    phase.report.deferred.clear();  // No rule would read the sources.
    return phase;
  }
  const auto start = std::chrono::steady_clock::now();
  phase.report = static_check::Check(input, profile);
  phase.ms = MsSince(start);
  phase.ran = true;
  return phase;
}

v1::Verdict::Severity VerdictSeverityOf(static_check::Severity severity) {
  switch (severity) {
    case static_check::Severity::kInfo: return v1::Verdict::INFO;
    case static_check::Severity::kSuspicious: return v1::Verdict::SUSPICIOUS;
    case static_check::Severity::kReject: return v1::Verdict::REJECT;
    case static_check::Severity::kOff: break;
  }
  return v1::Verdict::SEVERITY_UNSPECIFIED;
}

v1::Verdict VerdictOf(const static_check::Finding& finding, v1::Phase phase) {
  v1::Verdict v;
  v.set_rule_id(OneLine(finding.rule_id, kMaxSnippetBytes));
  v.set_severity(VerdictSeverityOf(finding.severity));
  v.set_line(finding.line);
  v.set_column(finding.line == 0 ? 0 : finding.column);
  v.set_message(OneLine(finding.message, kMaxMessageBytes));
  if (finding.line != 0) v.set_snippet(OneLine(finding.snippet, kMaxSnippetBytes));
  v.set_phase(phase);
  return v;
}

void AppendVerdicts(const static_check::CheckReport& report,
                    google::protobuf::RepeatedPtrField<v1::Verdict>* verdicts) {
  verdicts->Reserve(verdicts->size() + static_cast<int>(report.findings.size()));
  for (const auto& f : report.findings) *verdicts->Add() = VerdictOf(f);
}

std::string RejectionMessage(const static_check::CheckReport& report) {
  const static_check::Finding* first = nullptr;
  size_t rejects = 0;
  for (const auto& f : report.findings) {
    if (f.severity != static_check::Severity::kReject) continue;
    if (first == nullptr) first = &f;
    ++rejects;
  }
  if (first == nullptr) return "";
  std::string out = "rejected by anti-cheat rule " + first->rule_id + " at candidate.py";
  if (first->line != 0) out += ":" + std::to_string(first->line);
  out += ": " + first->message;
  if (rejects > 1) out += " (+" + std::to_string(rejects - 1) + " more)";
  return OneLine(out, 2 * kMaxMessageBytes);
}

bool ApplyStaticCheck(const static_check::CheckReport& report, v1::EvaluateResult& result) {
  AppendVerdicts(report, result.mutable_verdicts());
  if (!report.rejected()) return true;
  result.set_status(v1::REJECTED);
  const std::string message = RejectionMessage(report);
  result.set_message(message.empty() ? "rejected by the static anti-cheat checks" : message);
  return false;
}

std::vector<static_check::ReportedExtension> ReportedExtensionsOf(const v1::StageReport* report) {
  std::vector<static_check::ReportedExtension> out;
  if (report == nullptr) return out;
  size_t left = kMaxReportedSourceBytes;
  // Takes `text` when it fits in what is left; false (nothing taken) when not.
  const auto take = [&left](const std::string& text) {
    if (text.size() > left) return false;
    left -= text.size();
    return true;
  };
  for (const v1::ExtensionSources& call : report->extension_sources()) {
    if (out.size() == kMaxReportedCalls) {
      static_check::ReportedExtension rest;
      rest.name = "(more)";
      rest.unread = "more than " + std::to_string(kMaxReportedCalls) + " load_inline/load calls";
      out.push_back(std::move(rest));
      break;
    }
    static_check::ReportedExtension r;
    r.name = call.name();
    r.line = call.line();
    bool over = false;
    for (const std::string& text : call.cpp_sources()) {
      if (take(text)) r.cpp_sources.push_back(text);
      else over = true;
    }
    for (const std::string& text : call.cuda_sources()) {
      if (take(text)) r.cuda_sources.push_back(text);
      else over = true;
    }
    for (const std::string& flag : call.flags()) {
      const size_t eq = flag.find('=');
      if (!take(flag)) over = true;
      else if (eq != std::string::npos) r.flags.emplace_back(flag.substr(0, eq), flag.substr(eq + 1));
    }
    if (call.truncated() || over) r.unread = "its text is longer than the 1 MiB kbox reads";
    if (!call.unread_files().empty()) {
      std::string files;
      for (const std::string& f : call.unread_files()) {
        if (files.size() > 200) {
          files += ", ...";
          break;
        }
        files += (files.empty() ? "" : ", ") + f;
      }
      r.unread = "load() named files kbox did not read: " + files;
    }
    out.push_back(std::move(r));
  }
  return out;
}

static_check::CheckReport CheckCompiledSources(const static_check::CheckInput& input, const v1::StageReport* report,
                                               const static_check::AnticheatProfile& profile) {
  return static_check::CheckReportedExtensions(input, ReportedExtensionsOf(report), profile);
}

bool ApplyCompiledSources(const static_check::CheckReport& report, v1::EvaluateResult& result) {
  for (const auto& f : report.findings) *result.add_verdicts() = VerdictOf(f, v1::PHASE_COMPILE);
  if (!report.rejected()) return true;
  result.set_status(v1::REJECTED);
  const std::string message = RejectionMessage(report);
  result.set_message(message.empty() ? "rejected by the anti-cheat checks of the compiled sources" : message);
  return false;
}

static_check::CheckReport GradeRunFindings(const google::protobuf::RepeatedPtrField<v1::Verdict>& reported,
                                           const static_check::AnticheatProfile& profile) {
  static_check::CheckReport graded;
  for (const v1::Verdict& v : reported) {
    const static_check::RuleInfo* rule = static_check::FindRule(v.rule_id());
    if (rule == nullptr || !rule->id.starts_with("run.")) continue;
    const static_check::Severity severity = profile.severity(rule->id);
    if (severity == static_check::Severity::kOff) continue;
    if (graded.findings.size() >= static_check::kMaxFindings) {
      graded.truncated = true;
      break;
    }
    graded.findings.push_back(
        static_check::Finding{std::string(rule->id), severity, 0, 0, "", OneLine(v.message(), kMaxMessageBytes)});
  }
  return graded;
}

void ApplyRunFindings(const static_check::CheckReport& graded, v1::EvaluateResult& result) {
  for (const auto& f : graded.findings) *result.add_verdicts() = VerdictOf(f, v1::PHASE_RUN);
  if (!graded.rejected()) return;
  if (result.status() != v1::CORRECT && result.status() != v1::INCORRECT) return;
  result.set_status(v1::REJECTED);
  std::string message = RejectionMessage(graded);
  const std::string at = " at candidate.py";
  if (auto pos = message.find(at); pos != std::string::npos) message.replace(pos, at.size(), " while running");
  result.set_message(message);
}

}  // namespace kbox
