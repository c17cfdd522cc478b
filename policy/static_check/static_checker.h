#pragma once

// The static anti-cheat checker: reads a candidate's Python source (and the
// C++/CUDA sources it hands to load_inline) and reports findings of the rules
// in rule_catalog.h before anything is compiled (docs/anticheat.md).
//
// Contract: Check() never throws on any input, runs in time linear in the
// source size (nesting is bounded), and is safe to call from many threads at
// once. It sees text only; what it cannot see (stale memory, input mutation,
// degenerate outputs) is left to the run stage's dynamic checks.

#include <cstdint>
#include <string>
#include <string_view>
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
};

inline constexpr size_t kMaxKernelNames = 256;

inline constexpr size_t kMaxFindings = 200;

// Runs every rule the profile does not switch off, and always fills
// kernel_names (under a profile that switches every rule off, the analysis
// still runs but reports no findings).
CheckReport Check(const CheckInput& input, const AnticheatProfile& profile);

}  // namespace kbox::static_check
