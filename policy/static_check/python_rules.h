#pragma once

// The Python half of the checker: builds a model of the candidate module
// (imports and aliases, classes, functions, what ModelNew.forward reaches, the
// extension sources handed to load_inline) and applies the py.* rules.

#include <cstdint>
#include <string>
#include <vector>

#include "policy/static_check/finding_sink.h"
#include "policy/static_check/python_module.h"
#include "policy/static_check/check_types.h"

namespace kbox::static_check {

// One C++/CUDA source string passed to load_inline, decoded.
struct ExtensionSource {
  DecodedString text;
  bool cuda = false;  // From cuda_sources (or a .cu name in load(sources=...)).
  // A text without a line map (reported by the compile stage, not found in
  // candidate.py): every finding sits at this place (the load_inline call).
  bool fixed_place = false;
  uint32_t fixed_line = 0;
  uint32_t fixed_column = 0;
};

// A kernel the candidate defines, placed in candidate.py (for the order of
// CheckReport::kernel_names).
struct KernelNameAt {
  std::string name;
  uint32_t line = 0;
  uint32_t column = 0;
};

// What the Python pass learned that the C++ pass and kernel.none need.
struct PythonFacts {
  std::vector<ExtensionSource> sources;
  bool has_extension = false;      // Some load_inline/load call exists.
  bool has_triton_kernel = false;  // Some @triton.jit function exists.
  // Functions decorated with triton.jit/autotune/heuristics (through any
  // import alias), and plain names passed to `triton.jit(f)`.
  std::vector<KernelNameAt> triton_kernels;
  // load_inline/load calls whose C++ or flags are not literal text: checked
  // on what the compile stage reports (CheckReportedExtensions).
  std::vector<DeferredCall> deferred;
};

// A compiler flag of load_inline's `key` argument (extra_cflags, ...) that
// makes the compiler read host files (-include, @file, -I/etc, ...):
// cpp.include-path.
bool FlagReadsHostFiles(std::string_view key, std::string_view flag);

PythonFacts CheckPython(const PyModule& module, const CheckInput& input, FindingSink& sink);

}  // namespace kbox::static_check
