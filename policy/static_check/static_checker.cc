#include "policy/static_check/static_checker.h"

#include <algorithm>
#include <functional>
#include <set>
#include <tuple>

#include "policy/static_check/cpp_rules.h"
#include "policy/static_check/finding_sink.h"
#include "policy/static_check/python_module.h"
#include "policy/static_check/python_rules.h"

namespace kbox::static_check {

bool CheckReport::rejected() const {
  for (const Finding& f : findings) {
    if (f.severity == Severity::kReject) return true;
  }
  return false;
}

namespace {

// Triton and CUDA kernel names in the order they appear in candidate.py, each
// once, at most kMaxKernelNames.
std::vector<std::string> KernelNames(std::vector<KernelNameAt> found) {
  std::stable_sort(found.begin(), found.end(), [](const KernelNameAt& a, const KernelNameAt& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  std::vector<std::string> names;
  std::set<std::string_view> seen;
  for (const KernelNameAt& k : found) {
    if (names.size() >= kMaxKernelNames) break;
    if (seen.insert(k.name).second) names.push_back(k.name);
  }
  return names;
}

// kernel.none and cpp.kernel-never-launched: the backend's kind of kernel
// is nowhere in the candidate, or its CUDA kernels are never launched.
void KernelRules(TaskBackend backend, const PythonFacts& facts, const CppFacts& cpp, FindingSink& sink) {
  switch (backend) {
    case TaskBackend::kCpu:
      if (!facts.has_extension) {
        sink.Add("kernel.none", 0, 0, "no load_inline extension: the cpu backend needs the candidate's own C++");
      }
      break;
    case TaskBackend::kCuda:
      if (!cpp.has_global_kernel && !facts.has_triton_kernel) {
        sink.Add("kernel.none", 0, 0, "no __global__ kernel in the extension sources (and no @triton.jit)");
      } else if (cpp.has_global_kernel && !cpp.launches_kernel && !facts.has_triton_kernel) {
        sink.Add("cpp.kernel-never-launched", 0, 0,
                 "__global__ kernels are defined but nothing launches one (no <<<...>>> or cudaLaunchKernel)");
      }
      break;
    case TaskBackend::kTriton:
      if (!facts.has_triton_kernel && !cpp.has_global_kernel) {
        sink.Add("kernel.none", 0, 0, "no @triton.jit kernel in the candidate");
      }
      break;
  }
}

// A reported text is placed by its line map when it stands in candidate.py
// verbatim (a literal without escapes handed through a helper); shorter
// texts could sit anywhere.
constexpr size_t kMinVerbatimBytes = 16;

// A source the compile stage reported, with a line map when the text stands
// in candidate.py verbatim, else every finding at (line, column): the call.
ExtensionSource ReportedSource(const std::string& text, bool cuda, std::string_view candidate, uint32_t line,
                               uint32_t column) {
  ExtensionSource s;
  s.cuda = cuda;
  s.text.value = text;
  size_t at = std::string_view::npos;
  if (text.size() >= kMinVerbatimBytes && text.size() <= candidate.size()) {
    // Boyer-Moore: linear in the candidate whatever the text (a naive search
    // is quadratic on hostile input).
    const auto found =
        std::search(candidate.begin(), candidate.end(), std::boyer_moore_searcher(text.begin(), text.end()));
    if (found != candidate.end()) at = static_cast<size_t>(found - candidate.begin());
  }
  if (at == std::string_view::npos) {
    s.fixed_place = true;
    s.fixed_line = line;
    s.fixed_column = column;
    s.text.value_line_source.assign(1, line);
    return s;
  }
  // Line breaks as the tokenizer and the C++ lexer count them: \n, \r\n, a lone \r.
  const auto breaks_line = [](std::string_view v, size_t i) {
    return v[i] == '\n' || (v[i] == '\r' && (i + 1 >= v.size() || v[i + 1] != '\n'));
  };
  uint32_t l = 1;
  size_t line_begin = 0;
  for (size_t i = 0; i < at; ++i) {
    if (breaks_line(candidate, i)) {
      ++l;
      line_begin = i + 1;
    }
  }
  s.text.first_column = static_cast<uint32_t>(at - line_begin + 1);
  s.text.value_line_source.push_back(l);
  for (size_t i = 0; i < text.size(); ++i) {
    if (breaks_line(text, i)) s.text.value_line_source.push_back(++l);
  }
  return s;
}

const AnticheatProfile& Quiet() {
  static const AnticheatProfile quiet = AnticheatProfile::Uniform("quiet", Severity::kOff);
  return quiet;
}

}  // namespace

CheckReport Check(const CheckInput& input, const AnticheatProfile& profile) {
  // Under a profile that switches every rule off the sink keeps nothing, but
  // the analysis still runs: the run stage needs the kernel names.
  FindingSink sink(input.candidate_source, profile);
  const PyModule module = PyModule::Parse(input.candidate_source);
  if (module.error()) {
    // Fail closed: what kbox cannot read, it cannot vouch for. Rules still
    // run on the part that was read, so the report says what else it saw.
    const PyTokenizeError& e = *module.error();
    sink.Add("py.unparseable", e.line, e.column, "kbox cannot parse the candidate: " + e.message);
  }
  const PythonFacts facts = CheckPython(module, input, sink);
  CppFacts cpp;
  for (const ExtensionSource& source : facts.sources) CheckCppSource(source, input, sink, &cpp);

  // kernel.none and cpp.kernel-never-launched: unless some C++ is read only
  // after the compile (CheckReportedExtensions decides them then).
  if (facts.deferred.empty()) KernelRules(input.backend, facts, cpp, sink);
  std::vector<KernelNameAt> kernels = facts.triton_kernels;
  kernels.insert(kernels.end(), cpp.kernels.begin(), cpp.kernels.end());
  CheckReport report = std::move(sink).Finish();
  report.kernel_names = KernelNames(std::move(kernels));
  report.deferred = facts.deferred;
  return report;
}

CheckReport CheckReportedExtensions(const CheckInput& input, const std::vector<ReportedExtension>& reported,
                                    const AnticheatProfile& profile) {
  // What the static pass read, read again without its findings (they are in
  // the result already): the sources it checked, its kernels, the calls it
  // could not read.
  FindingSink quiet(input.candidate_source, Quiet());
  const PyModule module = PyModule::Parse(input.candidate_source);
  const PythonFacts facts = CheckPython(module, input, quiet);
  CppFacts cpp;
  std::set<std::string_view> read;
  for (const ExtensionSource& source : facts.sources) {
    CheckCppSource(source, input, quiet, &cpp);
    read.insert(source.text.value);
  }

  FindingSink sink(input.candidate_source, profile);
  std::vector<bool> answered(facts.deferred.size(), false);
  for (const ReportedExtension& call : reported) {
    // The deferred call it came from; else its own line (a call the static
    // pass read, whose real text differs: `.format` with other values).
    uint32_t line = call.line, column = 0;
    for (size_t k = 0; k < facts.deferred.size(); ++k) {
      const DeferredCall& d = facts.deferred[k];
      if (call.line != 0 && d.line <= call.line && call.line <= d.last_line) {
        answered[k] = true;
        line = d.line;
        column = d.column;
        break;
      }
    }
    if (line == 0 && !facts.deferred.empty()) {
      line = facts.deferred.front().line;
      column = facts.deferred.front().column;
    }
    const std::string what = "extension `" + call.name.substr(0, 60) + "`";
    if (!call.unread.empty()) {
      sink.Add("py.unresolved-extension-source", line, column,
               what + ": " + call.unread + ": kbox does not vouch for C++ it cannot read");
    }
    for (const auto& [texts, is_cuda] : {std::pair{&call.cpp_sources, false}, std::pair{&call.cuda_sources, true}}) {
      for (const std::string& text : *texts) {
        if (read.contains(text)) continue;  // Checked before the compile, with its line map.
        CheckCppSource(ReportedSource(text, is_cuda, input.candidate_source, line, column), input, sink, &cpp);
      }
    }
    for (const auto& [key, flag] : call.flags) {
      if (FlagReadsHostFiles(key, flag)) {
        sink.Add("cpp.include-path", line, column,
                 what + ": compiler flag `" + flag.substr(0, 60) + "` reads host files at compile time");
      }
    }
  }
  bool all_answered = true;
  for (size_t k = 0; k < facts.deferred.size(); ++k) {
    if (answered[k]) continue;
    all_answered = false;
    const DeferredCall& d = facts.deferred[k];
    sink.Add("py.unresolved-extension-source", d.line, d.column,
             d.reason + ", and the compile stage reported no sources for this call: kbox does not vouch for "
                        "C++ it cannot read");
  }
  // Check() left these to now when it deferred something; with a call
  // unanswered, which kernels exist is unknown (that call is the finding).
  if (!facts.deferred.empty() && all_answered) KernelRules(input.backend, facts, cpp, sink);
  std::vector<KernelNameAt> kernels = facts.triton_kernels;
  kernels.insert(kernels.end(), cpp.kernels.begin(), cpp.kernels.end());
  CheckReport report = std::move(sink).Finish();
  report.kernel_names = KernelNames(std::move(kernels));
  return report;
}

}  // namespace kbox::static_check
