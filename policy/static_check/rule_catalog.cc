#include "policy/static_check/rule_catalog.h"

#include <algorithm>
#include <array>

namespace kbox::static_check {
namespace {

// Keep sorted by id (a test checks); docs/anticheat.md explains each. The
// py.*, cpp.* and kernel.* rules are static (kboxd, before compiling); run.*
// are the run stage's dynamic checks, graded by the same profiles.
constexpr std::array kRules{
    RuleInfo{"cpp.aten-compute", "H1",
             "an ATen/torch compute op (at::matmul, torch::softmax, x.mm(y)) inside the extension"},
    RuleInfo{"cpp.dynamic-loading", "H25",
             "dlopen/dlsym in the extension: loads code kbox never saw"},
    RuleInfo{"cpp.graph-capture", "H22", "CUDA graph capture or replay in the extension"},
    RuleInfo{"cpp.include-path", "H25",
             "#include of an absolute or parent path, or .incbin: reads host files at compile time"},
    RuleInfo{"cpp.kernel-never-launched", "H2",
             "a __global__ kernel is defined but no C++ code launches it"},
    RuleInfo{"cpp.precision-downgrade", "H15",
             "half/bfloat16 types or conversions in a task whose precision is fp32"},
    RuleInfo{"cpp.process-or-io", "H25",
             "system/popen/fork/exec, file or socket I/O in the extension"},
    RuleInfo{"cpp.side-stream", "H7",
             "the extension creates or selects its own CUDA stream"},
    RuleInfo{"cpp.static-cache", "H10",
             "a static variable holding tensors, pointers or a container: results can outlive a call"},
    RuleInfo{"cpp.thread", "H8",
             "std::thread/std::async/pthread_create: work can outlive the timed call"},
    RuleInfo{"cpp.vendor-library", "H1",
             "a cuBLAS/cuDNN/cuFFT/cuSPARSE/cuSOLVER call does the work instead of a kernel"},
    RuleInfo{"kernel.none", "H1",
             "no kernel at all: no __global__ (cuda), no @triton.jit (triton), no load_inline (cpu)"},
    RuleInfo{"py.call-counter", "H11",
             "forward counts its calls (augmented assignment to self or a global)"},
    RuleInfo{"py.concurrency", "H8",
             "threading/multiprocessing/concurrent.futures/asyncio/os.fork: work can outlive the timer"},
    RuleInfo{"py.cross-call-cache", "H10",
             "forward stores into a container that outlives the call (result replay)"},
    RuleInfo{"py.defines-get-inputs", "H18",
             "the candidate defines get_inputs/get_init_inputs or redefines the reference's sizes"},
    RuleInfo{"py.dynamic-code", "H1",
             "eval/exec/compile/__import__/importlib, or getattr/setattr with a computed name"},
    RuleInfo{"py.empty-forward", "H4",
             "ModelNew is missing, has no forward of its own, or forward does nothing"},
    RuleInfo{"py.evaluator-access", "H21",
             "frame walking, gc, inspect, sys.modules, globals(): reaching into the evaluator"},
    RuleInfo{"py.file-io", "H25", "open(), os/pathlib/shutil/tempfile file access, torch.load/save"},
    RuleInfo{"py.forward-skips-kernel", "H2",
             "ModelNew.forward never reaches the compiled extension or a Triton kernel"},
    RuleInfo{"py.forward-stores-state", "H10",
             "forward assigns to self or a global: state carried between calls"},
    RuleInfo{"py.graph-capture", "H22",
             "CUDA graphs, torch.compile, torch.jit or dynamo: capture-and-replay"},
    RuleInfo{"py.identity-key", "H10",
             "data_ptr()/id()/_version/storage(): keys for replaying results"},
    RuleInfo{"py.library-compute-in-forward", "H1",
             "a torch/torch.nn.functional compute op is called from forward"},
    RuleInfo{"py.library-module-in-forward", "H1",
             "forward calls a torch.nn layer (nn.Linear, nn.Conv2d, ...) instead of a kernel"},
    RuleInfo{"py.matmul-operator", "H1", "the @ operator in forward: a library matmul"},
    RuleInfo{"py.network", "H25", "socket/urllib/http/requests: network access"},
    RuleInfo{"py.patch-library", "H12",
             "assigning to an attribute of torch, time, the harness or another imported module"},
    RuleInfo{"py.precision-downgrade", "H15",
             ".half()/.bfloat16()/float16 dtypes/TF32 switches in a task whose precision is fp32"},
    RuleInfo{"py.process", "H25",
             "subprocess/os.system/os.exec*/pty/ctypes: processes or native calls outside the extension"},
    RuleInfo{"py.reference-reuse", "H4",
             "ModelNew subclasses, names or imports the reference Model"},
    RuleInfo{"py.side-stream", "H7", "torch.cuda.Stream or stream switching in the candidate"},
    RuleInfo{"py.tensor-method-compute", "H1",
             "a compute method (x.softmax(), x.exp(), x.sum()) on a tensor in forward"},
    RuleInfo{"py.tensor-subclass", "H9",
             "a torch.Tensor subclass, _make_subclass, __torch_function__/__torch_dispatch__"},
    RuleInfo{"py.try-fallback", "H3", "try/except in forward that can take another path"},
    RuleInfo{"py.unparseable", "H1",
             "kbox could not tokenize or parse the candidate, so it cannot vouch for it"},
    RuleInfo{"py.unresolved-extension-source", "H1",
             "a load_inline source kbox cannot resolve to literal text, so it cannot be checked"},
    RuleInfo{"run.below-physical-floor", "H20",
             "the median time is below what moving the inputs and outputs once at the device's bandwidth takes"},
    RuleInfo{"run.degenerate-problem", "H16",
             "trivial outputs (zeros, a constant, the mean) pass this problem's tolerance, so it was tightened"},
    RuleInfo{"run.forbidden-call", "H25",
             "the candidate tried what the run stage's audit hook denies: ctypes, subprocess, sockets, gc, files"},
    RuleInfo{"run.harness-tampering", "H12",
             "the candidate replaced a timer, synchronisation or comparison function the evaluator uses"},
    RuleInfo{"run.input-mutation", "H6",
             "the candidate changed its inputs where the reference does not"},
    RuleInfo{"run.kernel-not-launched", "H2",
             "none of the candidate's own kernels launched during forward: a decoy compiled but never run"},
    RuleInfo{"run.library-compute", "H1",
             "the ATen trace of forward shows library compute ops (mm, convolution, softmax, ...)"},
    RuleInfo{"run.nondeterministic", "H19",
             "the same input twice gave different outputs"},
    RuleInfo{"run.output-contract", "H9",
             "the output is not a plain torch.Tensor of the reference's dtype, shape and device, or aliases an input"},
    RuleInfo{"run.thread-started", "H8",
             "forward left a thread running after it returned"},
    RuleInfo{"run.timed-output-mismatch", "H11",
             "an output of a timed call differs from the reference: the timed calls skipped or replayed work"},
    RuleInfo{"run.timing-mismatch", "H12",
             "the time measured inside the candidate's process disagrees with the time measured outside it"},
};

}  // namespace

std::span<const RuleInfo> RuleCatalog() { return kRules; }

const RuleInfo* FindRule(std::string_view id) {
  auto it = std::lower_bound(kRules.begin(), kRules.end(), id,
                             [](const RuleInfo& r, std::string_view v) { return r.id < v; });
  return it != kRules.end() && it->id == id ? &*it : nullptr;
}

}  // namespace kbox::static_check
