#include "clients/result_summary.h"

#include <cstdio>
#include <sstream>

namespace kbox {
namespace {

std::string Fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string Sci(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", value);
  return buf;
}

std::string TimingLine(const char* who, const v1::Timing& t) {
  return std::string("  ") + who + " median " + Fixed(t.median_ms(), 4) + " ms (mean " +
         Fixed(t.mean_ms(), 4) + ", min " + Fixed(t.min_ms(), 4) + ", std " + Fixed(t.std_ms(), 4) +
         ", n=" + std::to_string(t.count()) + ", " + t.method() + ")\n";
}

std::string Indent(const std::string& text) {
  std::string out = "    ";
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

std::string SeverityWord(v1::Verdict::Severity severity) {
  switch (severity) {
    case v1::Verdict::REJECT: return "reject";
    case v1::Verdict::SUSPICIOUS: return "suspicious";
    case v1::Verdict::INFO: return "info";
    default: return "unspecified";
  }
}

// "2 reject, 1 suspicious, 0 info".
std::string VerdictCounts(const google::protobuf::RepeatedPtrField<v1::Verdict>& verdicts) {
  int reject = 0, suspicious = 0, info = 0;
  for (const auto& v : verdicts) {
    reject += v.severity() == v1::Verdict::REJECT;
    suspicious += v.severity() == v1::Verdict::SUSPICIOUS;
    info += v.severity() == v1::Verdict::INFO;
  }
  return std::to_string(reject) + " reject, " + std::to_string(suspicious) + " suspicious, " +
         std::to_string(info) + " info";
}

}  // namespace

std::string FormatVerdict(const v1::Verdict& v, const std::string& indent) {
  std::string where = "candidate.py";
  if (v.line() > 0) {
    where += ":" + std::to_string(v.line());
    if (v.column() > 0) where += ":" + std::to_string(v.column());
  }
  std::string out = indent + where + ": " + SeverityWord(v.severity()) + " " + v.rule_id() + ": " +
                    v.message() + "\n";
  if (!v.snippet().empty()) out += indent + "    " + v.snippet() + "\n";
  return out;
}

std::string SummarizeCheck(const v1::CheckResponse& r) {
  std::string out;
  for (const auto& v : r.verdicts()) out += FormatVerdict(v);
  out += std::string("kbox check: ") + (r.rejected() ? "REJECTED" : "not rejected") + " (" +
         VerdictCounts(r.verdicts()) + (r.truncated() ? "; more findings were dropped" : "") +
         ") under profile " + r.anticheat_profile() + " in " + Fixed(r.duration_ms(), 3) +
         " ms\n";
  return out;
}

std::string SummarizeResult(const v1::EvaluateResult& r) {
  std::ostringstream out;
  out << "job " << r.job_id() << ": " << v1::Status_Name(r.status())
      << (r.rewardable() ? " (rewardable)" : " (not rewardable)") << "\n";
  if (!r.message().empty()) out << "  " << r.message() << "\n";
  if (r.trials_size() > 0) {
    int passed = 0;
    double max_abs = 0;
    for (const auto& t : r.trials()) {
      passed += t.passed();
      max_abs = std::max(max_abs, t.max_abs_diff());
    }
    out << "  trials: " << passed << "/" << r.trials_size() << " passed, max abs diff "
        << Sci(max_abs) << " (atol " << Sci(r.settings().atol()) << ", rtol "
        << Sci(r.settings().rtol()) << ")\n";
    for (const auto& t : r.trials()) {
      if (t.passed()) continue;
      out << "    trial seed " << t.seed() << ": ";
      if (!t.failure().empty()) {
        out << t.failure() << "\n";
      } else {
        out << Fixed(t.mismatch_fraction() * 100, 2) << "% of elements differ";
        if (t.has_first_mismatch()) {
          out << "; first at [";
          for (int i = 0; i < t.first_mismatch().index_size(); ++i) {
            out << (i ? ", " : "") << t.first_mismatch().index(i);
          }
          out << "]: expected " << Sci(t.first_mismatch().expected()) << ", got "
              << Sci(t.first_mismatch().actual());
        }
        out << "\n";
      }
    }
  }
  if (r.has_candidate_timing()) out << TimingLine("candidate:", r.candidate_timing());
  if (r.has_reference_timing()) out << TimingLine("reference:", r.reference_timing());
  if (r.speedup() > 0) out << "  speedup: " << Fixed(r.speedup(), 3) << "x\n";
  if (r.has_compile_log() && !r.compile_log().text().empty()) {
    out << "  compile log" << (r.compile_log().truncated() ? " (truncated)" : "") << ":\n"
        << Indent(r.compile_log().text()) << "\n";
  }
  if (r.has_runtime_error() && !r.runtime_error().type().empty()) {
    const auto& e = r.runtime_error();
    out << "  error: " << e.type() << ": " << e.message();
    if (e.candidate_line() > 0) out << " (candidate.py line " << e.candidate_line() << ")";
    out << "\n";
    if (!e.traceback().empty()) out << Indent(e.traceback()) << "\n";
  }
  if (r.verdicts_size() > 0) {
    out << "  anti-cheat verdicts (profile " << r.settings().anticheat_profile() << "; "
        << VerdictCounts(r.verdicts()) << "):\n";
    for (const auto& v : r.verdicts()) out << FormatVerdict(v, "    ");
  }
  const auto& d = r.durations();
  out << "  phases: static " << Fixed(d.static_ms(), 2) << " ms, compile "
      << Fixed(d.compile_ms() / 1000, 2) << " s, queue "
      << Fixed(d.queue_wait_ms() / 1000, 2) << " s, run " << Fixed(d.run_ms() / 1000, 2)
      << " s, total " << Fixed(d.total_ms() / 1000, 2) << " s\n";
  const auto& f = r.fingerprint();
  out << "  device: " << f.device_name() << " (torch " << f.torch_version() << ", python "
      << f.python_version() << (f.cuda_version().empty() ? "" : ", cuda " + f.cuda_version())
      << ", seed " << r.settings().seed() << ")\n";
  return out.str();
}

}  // namespace kbox
