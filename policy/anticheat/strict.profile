# strict: the default profile. Every rule rejects except where a pattern is
# common in honest kernels; docs/anticheat.md gives each rule's rationale.
# It names every rule, so a new rule cannot slip in ungraded (a test checks).
cpp.aten-compute               reject     # the extension must compute, not call ATen's kernels (H1)
cpp.dispatcher                 reject     # ops looked up, redispatched or registered by name, or the probe's dispatch keys read (H1, H2)
cpp.dynamic-loading            reject     # code loaded at run time was never checked
cpp.graph-capture              reject     # a replayed graph runs what was recorded, whatever the input (H22)
cpp.include-path               reject     # compile diagnostics would echo host files (compile-time disclosure)
cpp.kernel-never-launched      reject     # a kernel that never runs did not earn the reward (H2)
cpp.precision-downgrade        reject     # an fp32 task computed in half precision (H15)
cpp.process-or-io              reject     # no honest kernel starts processes or touches files (H25)
cpp.side-stream                reject     # work off the current stream escapes stream-ordered timing (H7)
cpp.static-cache               reject     # state that outlives a call can replay results (H10)
cpp.thread                     reject     # a thread can finish the work after the clock stops (H8)
cpp.vendor-library             reject     # cuBLAS/cuDNN doing the work is a passthrough (H1)
kernel.none                    reject     # without a kernel there is nothing to reward
py.call-counter                reject     # behaviour keyed on the call count skips timed calls (H11)
py.concurrency                 reject     # threads and processes finish work after the clock stops (H8)
py.cross-call-cache            reject     # a cache that outlives the call replays results (H10)
py.defines-get-inputs          reject     # inputs come from the reference; redefining them shrinks the problem (H18)
py.dynamic-code                reject     # code built at run time was never checked
py.empty-forward               reject     # no forward of its own: nothing to evaluate (H4)
py.evaluator-access            reject     # frame walking and interpreter state read the checker's data (H21)
py.file-io                     reject     # files can hold precomputed answers or leak data (H25)
py.forward-skips-kernel        reject     # a kernel compiled but never used is a decoy (H2)
py.forward-stores-state        suspicious # often a lazily allocated workspace; reported, not rejected
py.graph-capture               reject     # a replayed graph runs what was recorded, whatever the input (H22)
py.identity-key                reject     # object identity keys replay caches (H10)
py.library-compute-in-forward  reject     # torch doing the work is a passthrough (H1)
py.library-module-in-forward   reject     # an nn layer doing the work is a passthrough (H1)
py.matmul-operator             reject     # a @ b is torch.matmul (H1)
py.network                     reject     # no network: answers must not be fetched (H25)
py.patch-library               reject     # patching torch/time/the harness fools timers and comparisons (H12)
py.precision-downgrade         reject     # an fp32 task computed in half precision (H15)
py.process                     reject     # no processes or native calls outside the checked extension (H25)
py.reference-reuse             reject     # the reference's own code earns no reward (H4)
py.side-stream                 reject     # work off the current stream escapes stream-ordered timing (H7)
py.tensor-method-compute       reject     # x.softmax() is the library's softmax (H1)
py.tensor-subclass             reject     # a tensor subclass can defer or fake its values (H9)
py.try-fallback                reject     # an except branch can fall back to PyTorch (H3)
py.unparseable                 reject     # what kbox cannot read it cannot vouch for
py.unresolved-extension-source reject     # C++ kbox cannot read cannot be checked
run.background-work            reject     # CPU used between calls or while the judge works slows the reference or finishes late (H26, H8)
run.below-physical-floor       suspicious # below moving its data once; a candidate may skip reading inputs, so reported (H20)
run.degenerate-problem         info       # reported: the candidate was judged at the tightened tolerance
run.forbidden-call             reject     # ctypes, processes, sockets, gc and files outside scratch reach past the job (H25, H21)
run.harness-tampering          reject     # patched timers and comparisons (H12); kbox measures with its own copies anyway
run.input-mutation             reject     # zeroed or rewritten inputs fool a checker that runs the reference after (H6)
run.kernel-not-launched        reject     # a kernel compiled but never launched is a decoy; forward did the work another way (H2)
run.library-compute            reject     # the op trace sees passthrough the text hides, C++ ATen calls included (H1)
run.native-dispatcher          reject     # the built library imports the dispatcher's lookup, redispatch, registration or key TLS (H1, H2)
run.native-forbidden-call      reject     # the built library imports loading, processes, signals, limits, syscalls, files or sockets (H25)
run.native-library-compute     reject     # the built library imports ATen compute, BLAS/LAPACK or cuBLAS/cuDNN (H1)
run.native-thread              reject     # the built library imports thread creation: work can outlive the timed call (H8)
run.native-unreadable          reject     # a built library kbox cannot parse cannot be vouched for
run.nondeterministic           reject     # races and reads of uninitialised memory that pass by luck (H19)
run.output-contract            reject     # lazy tensors, subclasses and aliased outputs lie to the comparison (H9)
run.output-kept                reject     # a model holding copies of its outputs replays them in later calls (H10)
run.rounding-allowance         info       # reported: an output passed with 32x the reference's own rounding error allowed
run.thread-started             reject     # a thread can finish the work after the clock stops (H8)
run.timed-output-mismatch      reject     # timed calls that skip or replay work (H10, H11)
run.timing-mismatch            reject     # an in-process clock that disagrees with the outside one was tampered with (H12)
