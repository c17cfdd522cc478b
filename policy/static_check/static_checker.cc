#include "policy/static_check/static_checker.h"

#include <algorithm>
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

  // kernel.none: the backend's kind of kernel is nowhere in the candidate.
  switch (input.backend) {
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
  std::vector<KernelNameAt> kernels = facts.triton_kernels;
  kernels.insert(kernels.end(), cpp.kernels.begin(), cpp.kernels.end());
  CheckReport report = std::move(sink).Finish();
  report.kernel_names = KernelNames(std::move(kernels));
  return report;
}

}  // namespace kbox::static_check
