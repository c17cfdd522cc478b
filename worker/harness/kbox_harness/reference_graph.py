"""The reference's timed calls replayed from a CUDA graph.

The reference is trusted code with nothing to hide, and its timing carried
most of the speedup's spread: PyTorch's 0.03-0.06 ms kernels behind 0.1 ms
and more of host Python, in a judge process that has just woken from waiting
on the candidate's, so the host now and then fell behind the launch cover
and whole runs timed host latency (docs/gpu-verification.md). Captured once
as a CUDA graph, a timed call of the reference is one replay launch: its
kernels reach the GPU in one batch, whatever the host does meanwhile.

The graph runs the kernels the eager forward ran, on the same shapes; what
it no longer has is the gap between launches, so the reference times at
most what it did eagerly and the speedup never grows from it. It is used
only when capture works and a replay on another input gives the eager
forward's answer: forwards that synchronise with the host, move data to the
CPU, or branch on values keep the eager, covered clock (`Capture.why_not`
says why, and the report shows which method timed the reference).
"""
import torch

from . import dynamic_checks, errors, inputs

METHOD = "cuda_graph_replay+covered_cuda_event+device_sync"
_WARM_CALLS = 3  # on a side stream before capture, as torch.cuda.graphs asks


def _signature(x):
    """The structure, shapes, dtypes and non-tensor values of an input list:
    what a captured graph fixes."""
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), x.dtype, x.device)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_signature(v) for v in x))
    return ("V", repr(x))


class Capture(object):
    """forward(*inputs) of a warm model captured as a CUDA graph over static
    input buffers. load(x) copies an input set into the buffers; replay()
    runs the graph and returns its (static, overwritten by the next replay)
    output. If capture or its check failed, `graph` is None and `why_not`
    says why."""

    def __init__(self, forward, pool, same, device):
        """forward: x -> output, the model under no_grad. pool: the timing
        input sets (all of one signature, or no capture). same(a, b): whether
        two outputs agree at the judged tolerance."""
        self.graph = None
        self.why_not = None
        self.static = None
        self.out = None
        if device.type != "cuda":
            self.why_not = "not a CUDA device"
            return
        if len({repr(_signature(x)) for x in pool}) != 1:
            self.why_not = "the timing inputs differ in shape or structure"
            return
        try:
            self._capture(forward, pool[0], device)
        except Exception as e:  # a forward that cannot be captured is timed eagerly
            self.graph, self.out = None, None
            self.why_not = "capture failed: " + errors.exception_line(e)
            torch.cuda.synchronize(device)
            return
        # The replay must answer a different input as the eager forward does
        # (values the forward read on the host are frozen into the graph).
        probe = pool[1 % len(pool)]
        eager = forward(inputs.clone(probe))
        self.load(probe)
        replayed = self.replay()
        torch.cuda.synchronize(device)
        if not same(eager, replayed):
            self.graph, self.out = None, None
            self.why_not = "a replay on another input differed from the eager forward"

    def _capture(self, forward, x, device):
        self.static = inputs.clone(x)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(_WARM_CALLS):
                forward(self.static)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.out = forward(self.static)
        self.graph = graph

    def load(self, x):
        """Copies x's tensors into the static inputs (x has their signature)."""
        for dst, src in zip(dynamic_checks.tensors(self.static), dynamic_checks.tensors(x)):
            dst.copy_(src)

    def replay(self):
        self.graph.replay()
        return self.out
