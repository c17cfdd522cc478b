#pragma once

// Human-readable rendering of an EvaluateResult for `kbox eval` and of a
// CheckResponse for `kbox check`.

#include <string>

#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"

namespace kbox {

std::string SummarizeResult(const v1::EvaluateResult& result);

// One verdict, compiler style, then its snippet on an indented line:
//   candidate.py:14:12: reject py.matmul-operator: MESSAGE
//       return a @ b
// (`candidate.py:14` when the column is unknown, `candidate.py` for the
// whole file). Every line is prefixed by `indent`.
std::string FormatVerdict(const v1::Verdict& verdict, const std::string& indent = "");

// Every verdict, then one summary line ("kbox check: REJECTED ...").
std::string SummarizeCheck(const v1::CheckResponse& response);

}  // namespace kbox
