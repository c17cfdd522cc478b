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

}  // namespace

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
  for (const auto& v : r.verdicts()) {
    out << "  verdict " << v1::Verdict::Severity_Name(v.severity()) << " " << v.rule_id()
        << " line " << v.line() << ": " << v.message() << "\n";
  }
  const auto& d = r.durations();
  out << "  phases: compile " << Fixed(d.compile_ms() / 1000, 2) << " s, queue "
      << Fixed(d.queue_wait_ms() / 1000, 2) << " s, run " << Fixed(d.run_ms() / 1000, 2)
      << " s, total " << Fixed(d.total_ms() / 1000, 2) << " s\n";
  const auto& f = r.fingerprint();
  out << "  device: " << f.device_name() << " (torch " << f.torch_version() << ", python "
      << f.python_version() << (f.cuda_version().empty() ? "" : ", cuda " + f.cuda_version())
      << ", seed " << r.settings().seed() << ")\n";
  return out.str();
}

}  // namespace kbox
