#pragma once

// Name tables of the Python rules: which qualified names are library compute,
// which are harmless allocation or layout, which modules mean process,
// network, file or evaluator access. Kept apart from the analysis so a
// reviewer sees every list in one place (docs/anticheat.md quotes them).

#include <string_view>

namespace kbox::static_check {

// The rule a fully qualified name ("torch.cuda.Stream", "os.system") breaks
// wherever it appears in the candidate; empty when none.
std::string_view RuleForQualifiedName(std::string_view qual);

// The rule an `import` of this module breaks on its own (the import runs the
// module's code and no honest kernel needs it); empty when none.
std::string_view RuleForImport(std::string_view module);

// True when calling `qual` from forward is library compute (H1): torch ops,
// torch.nn.functional, torch.ops.aten, numpy/scipy/cupy/jax. Allocation,
// layout and device queries are not.
bool IsLibraryCompute(std::string_view qual);

// True for torch.nn layer classes (nn.Linear, nn.Conv2d); containers and
// nn.Parameter are not layers.
bool IsLibraryLayer(std::string_view qual);

// True for tensor methods that compute (x.softmax(), x.exp(), x.sum()), and
// their in-place variants (x.addmm_(a, b)).
bool IsComputeMethod(std::string_view name);

// The names that run a module: layer.forward(x), layer.__call__(x),
// layer._call_impl(x).
bool IsLayerCallName(std::string_view name);

// Attribute names that reach into frames, code objects or the interpreter.
bool IsIntrospectionAttribute(std::string_view name);

// Half/bfloat16/fp8 dtypes and TF32 switches (fp32 tasks only).
bool IsLowPrecisionName(std::string_view qual);

// Builtins the rules care about when the candidate has not rebound them.
std::string_view RuleForBuiltinCall(std::string_view name);

}  // namespace kbox::static_check
