// libFuzzer target: the whole static checker, Check(), with every rule at
// "reject", then the report's invariants (static_checker.h) (scripts/fuzz
// runs it):
//  - at most kMaxFindings findings; `truncated` only when the cap was reached;
//  - findings strictly sorted by (line, column, rule_id): one per rule and place;
//  - every rule id is in the catalogue, every severity is reject (the profile
//    is uniform), rejected() is true exactly when there is a finding;
//  - lines within the candidate's line count, column 0 when line is 0;
//  - snippets at most 160 bytes, one line, valid UTF-8; messages non-empty,
//    one line, valid UTF-8 (they end up in proto3 string fields).
// A violation is a __builtin_trap(), which libFuzzer reports as a crash.
//
// Input layout. Plain text (the seeds, every candidate.py) is the candidate
// whole; backend and precision come from its size, and every other size class
// gets a small KernelBench reference, so seeds stay intact. An input whose
// first byte is 0xFF (never in UTF-8 text) picks the job itself:
//   0xFF, cfg, candidate [, 0x00, reference]
// cfg % 3 = backend (cpu, cuda, triton), cfg / 3 % 3 = precision (fp32, fp16,
// bf16); with cfg & 0x80 the text after the first NUL is the reference.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <tuple>

#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/rule_catalog.h"
#include "policy/static_check/static_checker.h"

namespace {

namespace sc = kbox::static_check;

[[noreturn]] void Fail(const char* what, size_t finding_index) {
  std::fprintf(stderr, "static_check_fuzzer: invariant violated: %s (finding %zu)\n", what,
               finding_index);
  __builtin_trap();
}

constexpr std::string_view kReference = R"py(import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, dim=self.dim)


batch_size = 16
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1]
)py";

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Upper bound on the lines of `s`: "\n", "\r\n" and a lone "\r" each end one.
uint32_t LineCount(std::string_view s) {
  uint32_t n = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || (s[i] == '\r' && (i + 1 == s.size() || s[i + 1] != '\n'))) ++n;
  }
  return n;
}

constexpr sc::TaskBackend kBackends[] = {sc::TaskBackend::kCpu, sc::TaskBackend::kCuda,
                                         sc::TaskBackend::kTriton};
constexpr sc::TaskPrecision kPrecisions[] = {sc::TaskPrecision::kFp32, sc::TaskPrecision::kFp16,
                                             sc::TaskPrecision::kBf16};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sc::AnticheatProfile profile = sc::AnticheatProfile::Uniform("all", sc::Severity::kReject);

  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  sc::CheckInput in;
  if (size >= 2 && data[0] == 0xFF) {
    const uint8_t cfg = data[1];
    in.backend = kBackends[cfg % 3];
    in.precision = kPrecisions[cfg / 3 % 3];
    std::string_view rest = bytes.substr(2);
    if ((cfg & 0x80) != 0) {
      const size_t nul = rest.find('\0');
      if (nul != std::string_view::npos) {
        in.reference_source = rest.substr(nul + 1);
        rest = rest.substr(0, nul);
      }
    }
    in.candidate_source = rest;
  } else {
    in.candidate_source = bytes;
    in.backend = kBackends[size % 3];
    in.precision = kPrecisions[size / 3 % 3];
    if (size / 9 % 2 == 1) in.reference_source = kReference;
  }

  const sc::CheckReport report = sc::Check(in, profile);

  const auto& findings = report.findings;
  if (findings.size() > sc::kMaxFindings) Fail("more than kMaxFindings findings", findings.size());
  if (report.truncated && findings.size() != sc::kMaxFindings) {
    Fail("truncated but fewer than kMaxFindings findings", findings.size());
  }
  if (report.rejected() != !findings.empty()) {
    Fail("rejected() disagrees with an all-reject profile", findings.size());
  }
  const uint32_t max_line = LineCount(in.candidate_source);
  for (size_t i = 0; i < findings.size(); ++i) {
    const sc::Finding& f = findings[i];
    if (sc::FindRule(f.rule_id) == nullptr) Fail("rule id not in the catalogue", i);
    if (f.severity != sc::Severity::kReject) Fail("severity is not the profile's (reject)", i);
    if (f.line > max_line) Fail("line past the candidate's last line", i);
    if (f.line == 0 && f.column != 0) Fail("whole-file finding with a column", i);
    if (f.snippet.size() > 160) Fail("snippet longer than 160 bytes", i);
    if (!ValidUtf8(f.snippet)) Fail("snippet is not valid UTF-8", i);
    if (f.snippet.find('\n') != std::string::npos) Fail("snippet spans lines", i);
    if (f.message.empty()) Fail("empty message", i);
    if (!ValidUtf8(f.message)) Fail("message is not valid UTF-8", i);
    if (f.message.find('\n') != std::string::npos) Fail("message spans lines", i);
    if (i > 0) {
      const sc::Finding& p = findings[i - 1];
      if (!(std::tie(p.line, p.column, p.rule_id) < std::tie(f.line, f.column, f.rule_id))) {
        Fail("findings not strictly sorted by (line, column, rule_id)", i);
      }
    }
  }
  return 0;
}
