"""The physical floor of a forward call: the least time a GPU needs to read
its inputs and write its outputs once at the device's copy bandwidth.

A candidate timed below this floor did not do the work it claims (it cached
results, ran on a side stream the timer missed, returned a lazy view, ...),
so the floor must err low: bytes are counted once per byte of memory the
tensors can address, and the bandwidth gets a margin (see floor_ms).
"""
import math

import torch

# Captured at import, before any candidate code loads, as timing.py does: a
# candidate that patches torch.cuda.Event cannot fake the measured bandwidth.
_CudaEvent = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_device = torch.cuda.device

# No kernel beats the measured device-to-device copy rate by this factor.
# cudaMemcpy-class copies reach ~80-90 % of the DRAM's theoretical peak; a
# tuned kernel may do somewhat better (no read/write turnaround when it only
# reads, better access patterns), but not past the peak itself, i.e. not more
# than ~1.1-1.25x the copy rate. 1.25 keeps the floor a lower bound with room
# to spare (H100 80GB HBM3: copy 2.80 TB/s, x1.25 = 3.50 TB/s, above the
# 3.35 TB/s peak). The floor assumes a cold L2 (timing.L2Flush runs before
# each call).
MARGIN = 1.25


def measure_copy_bandwidth(device, nbytes=256 << 20, repeats=3):
    """Bytes per second of a device-to-device copy of nbytes (read + write:
    2*nbytes moved), best of repeats; None on a non-CUDA device. The default
    of 256 MiB is far larger than any L2, so this is the DRAM rate."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    with _cuda_device(device):
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(0x5A)
        dst = torch.empty_like(src)
        # Warm-up: first touch of the pages, clocks ramping up, lazy init.
        dst.copy_(src)
        best = math.inf
        for _ in range(max(1, repeats)):
            start = _CudaEvent(enable_timing=True)
            end = _CudaEvent(enable_timing=True)
            _event_record(start)
            dst.copy_(src)
            _event_record(end)
            _event_sync(end)
            best = min(best, float(_event_elapsed(start, end)))
        del src, dst
    if not best > 0:  # below the event timer's resolution: no usable figure
        return None
    return 2.0 * nbytes / (best / 1e3)


def _walk(obj, out, seen):
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple, dict)):
        # Outputs come from the candidate; a self-referencing list must not
        # recurse forever.
        if id(obj) in seen:
            return
        seen.add(id(obj))
        for v in (obj.values() if isinstance(obj, dict) else obj):
            _walk(v, out, seen)


def _span(t):
    """(address space, first byte, end byte) of the memory t can address."""
    if t.numel() == 0:
        return None
    try:
        size = t.element_size()
        start = t.data_ptr()
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    except (RuntimeError, NotImplementedError):
        # No plain storage (sparse, functorch wrappers): count the elements,
        # as if the tensor were alone in its own memory.
        return ("id", id(t)), 0, t.numel() * t.element_size()
    return ("ptr", str(t.device)), start, start + (last + 1) * size


def bytes_moved(inputs, outputs):
    """Bytes of memory addressed by the tensors in inputs and outputs (nested
    lists/tuples/dicts; other values ignored). Each byte counts once: views
    and aliases of one storage share bytes, an expanded (stride-0) tensor
    counts the memory it reads, not its numel."""
    tensors = []
    _walk(inputs, tensors, set())
    _walk(outputs, tensors, set())
    # Merging address ranges per device rather than summing storage sizes:
    # a small slice of a large buffer moves only the slice, and the floor
    # must not overstate the work.
    spans = {}
    for t in tensors:
        s = _span(t)
        if s is not None:
            spans.setdefault(s[0], []).append((s[1], s[2]))
    total = 0
    for ranges in spans.values():
        ranges.sort()
        lo, hi = ranges[0]
        for a, b in ranges[1:]:
            if a > hi:
                total += hi - lo
                lo, hi = a, b
            else:
                hi = max(hi, b)
        total += hi - lo
    return total


def floor_ms(nbytes, bandwidth):
    """Milliseconds to move nbytes at MARGIN times bandwidth (bytes/s);
    0.0 when the bandwidth is unknown (CPU)."""
    if not bandwidth:
        return 0.0
    return nbytes / (MARGIN * bandwidth) * 1e3
