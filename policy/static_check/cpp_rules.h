#pragma once

// The C++/CUDA half of the checker: the cpp.* rules over each source string a
// candidate hands to load_inline, with findings placed on candidate.py lines.

#include "policy/static_check/finding_sink.h"
#include "policy/static_check/python_rules.h"

namespace kbox::static_check {

struct CppFacts {
  bool has_global_kernel = false;  // Some `__global__` function exists.
  bool launches_kernel = false;    // Some `<<<...>>>` or cudaLaunchKernel.
  // The declarator name of every `__global__` function defined or declared
  // (not in #define bodies: a macro's parameters are not names).
  std::vector<KernelNameAt> kernels;
};

void CheckCppSource(const ExtensionSource& source, const CheckInput& input, FindingSink& sink, CppFacts* facts);

}  // namespace kbox::static_check
