#pragma once

// The types the static checker's parts share: what a check is given, what it
// finds and reports. Every part of the checker includes this header, and the
// checker's entry points (static_checker.h) include it too, so includes
// point one way: from the entry points down to the parts, never back up.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/static_check/anticheat_profile.h"

namespace kbox::static_check {


enum class TaskBackend { kCpu, kCuda, kTriton };
enum class TaskPrecision { kFp32, kFp16, kBf16 };

// What the checker is told about the job besides the candidate.
struct CheckInput {
  std::string_view candidate_source;
  // The reference (KernelBench format); may be empty. Used to know the names
  // the reference defines (its class, its problem sizes).
  std::string_view reference_source;
  TaskBackend backend = TaskBackend::kCpu;
  TaskPrecision precision = TaskPrecision::kFp32;
};

// One rule firing at one place.
struct Finding {
  std::string rule_id;                   // A RuleInfo id.
  Severity severity = Severity::kInfo;   // After the profile (never kOff).
  uint32_t line = 0;    // Line in candidate.py, 1-based; 0 = the whole file.
  uint32_t column = 0;  // Column in that line, 1-based (bytes); 0 = unknown.
  std::string snippet;  // That source line, trimmed, at most 160 bytes of UTF-8.
  std::string message;  // One line: what was seen and why it matters.
};

// A load_inline/load call whose C++ (or compiler flags) the static pass
// could not read as text: a source through a helper's parameter, built in a
// loop, read from a dict, returned by a call, files named to load(), the
// arguments unpacked from a container. The check of that C++ is deferred: the
// compile stage reports the strings the call really received and kboxd runs
// the C++ rules on them (CheckReportedExtensions) before anything runs.
struct DeferredCall {
  uint32_t line = 0;       // The call's first token in candidate.py (1-based).
  uint32_t column = 0;
  uint32_t last_line = 0;  // The line of its closing parenthesis.
  std::string reason;      // What kbox could not read, e.g. "cuda_sources is not literal text".
};

struct CheckReport {
  // Sorted by (line, column, rule_id); one finding per rule and place.
  std::vector<Finding> findings;
  bool rejected() const;
  // Findings are capped (kMaxFindings) so a hostile file cannot make the
  // answer huge; true when some were dropped.
  bool truncated = false;
  // The candidate's own kernels, whatever the profile (the "off" profile
  // included): the identifier of every CUDA `__global__` function defined or
  // declared in its load_inline sources (read from the C++ lexer's tokens, so
  // comments and strings do not count; macro bodies are not read), and every
  // Python function decorated with triton.jit/autotune/heuristics (through
  // any import alias) or passed by name to `triton.jit(f)`. Deduplicated, in
  // order of appearance in candidate.py; at most kMaxKernelNames.
  std::vector<std::string> kernel_names;
  // Calls whose C++ the static pass could not read, in order of appearance.
  // Not empty: the compile stage must report the sources it built, and the
  // job is judged on them (CheckReportedExtensions). kernel.none and
  // cpp.kernel-never-launched wait for those sources too.
  std::vector<DeferredCall> deferred;
};

// One load_inline/load call as the compile stage's extension hook saw it:
// the strings the call received (and the text of the files load() named).
struct ReportedExtension {
  std::string name;     // The call's `name` argument.
  uint32_t line = 0;    // The candidate.py line the call came from; 0: unknown.
  std::vector<std::string> cpp_sources;   // load: the text of each C++ file.
  std::vector<std::string> cuda_sources;  // load: the text of each .cu/.cuh file.
  // extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths.
  std::vector<std::pair<std::string, std::string>> flags;  // (argument, flag)
  // Something the hook could not hand over: files it did not read, text past
  // the report's size bound. What kbox cannot read, it does not vouch for.
  std::string unread;  // Empty: complete.
};

inline constexpr size_t kMaxKernelNames = 256;

inline constexpr size_t kMaxFindings = 200;

}  // namespace kbox::static_check
