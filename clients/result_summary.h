#pragma once

// Human-readable rendering of an EvaluateResult for `kbox eval`.

#include <string>

#include "kbox/v1/evaluation.pb.h"

namespace kbox {

std::string SummarizeResult(const v1::EvaluateResult& result);

}  // namespace kbox
