#include "policy/static_check/static_checker.h"

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

CheckReport Check(const CheckInput& input, const AnticheatProfile& profile) {
  FindingSink sink(input.candidate_source, profile);
  if (profile.all_off()) return std::move(sink).Finish();
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
  return std::move(sink).Finish();
}

}  // namespace kbox::static_check
