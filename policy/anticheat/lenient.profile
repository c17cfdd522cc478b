# lenient: for tasks where the kernel may lean on PyTorch for glue (a fused
# epilogue next to a library GEMM, say). Passthrough, streams, graphs and
# precision become `suspicious`: reported, never rejected. Everything that
# fools the evaluator or reaches outside the job still rejects, and the
# candidate must still run a kernel of its own.
extends strict                     # every rule not named here keeps its strict severity
cpp.aten-compute               suspicious # the extension must compute, not call ATen's kernels (H1)
cpp.graph-capture              suspicious # a replayed graph runs what was recorded, whatever the input (H22)
cpp.precision-downgrade        suspicious # an fp32 task computed in half precision (H15)
cpp.side-stream                suspicious # work off the current stream escapes stream-ordered timing (H7)
cpp.static-cache               suspicious # state that outlives a call can replay results (H10)
cpp.thread                     suspicious # a thread can finish the work after the clock stops (H8)
cpp.vendor-library             suspicious # cuBLAS/cuDNN doing the work is a passthrough (H1)
py.call-counter                suspicious # behaviour keyed on the call count skips timed calls (H11)
py.forward-stores-state        info       # often a lazily allocated workspace; reported, not rejected
py.graph-capture               suspicious # a replayed graph runs what was recorded, whatever the input (H22)
py.library-compute-in-forward  suspicious # torch doing the work is a passthrough (H1)
py.library-module-in-forward   suspicious # an nn layer doing the work is a passthrough (H1)
py.matmul-operator             suspicious # a @ b is torch.matmul (H1)
py.precision-downgrade         suspicious # an fp32 task computed in half precision (H15)
py.side-stream                 suspicious # work off the current stream escapes stream-ordered timing (H7)
py.tensor-method-compute       suspicious # x.softmax() is the library's softmax (H1)
py.try-fallback                suspicious # an except branch can fall back to PyTorch (H3)
run.kernel-not-launched        suspicious # tolerated passthrough may leave the own kernel unlaunched; reported (H2)
run.library-compute            suspicious # the op trace sees passthrough the text hides, C++ ATen calls included (H1)
run.native-library-compute     suspicious # the built library imports ATen compute or vendor BLAS: a passthrough (H1)
run.native-thread              suspicious # a thread in the built library can finish the work after the clock stops (H8)
