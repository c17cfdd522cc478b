"""Times model calls with clock functions captured before client code loads.

This module is imported by the stage before the candidate is, so a candidate
that replaces time.perf_counter or torch.cuda.synchronize/Event cannot change
what we measure with.
"""
import math
import time

import torch

_perf_counter = time.perf_counter
_cuda_sync = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time

_OUTSIDE_RESOLUTION_MS = 0.25

METHOD_CPU = "perf_counter"
METHOD_CUDA = "cuda_event+device_sync"  # see timed_call


def device_sync(device):
    """Waits for all work on the device (all streams), so async errors surface here."""
    if device.type == "cuda":
        _cuda_sync(device)


class L2Flush(object):
    """A buffer of twice the GPU's L2 cache, overwritten before every timed
    call so no call starts with the previous call's data in cache."""

    def __init__(self, device):
        self.buf = None
        if device.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (64 << 20)
            self.buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self):
        if self.buf is not None:
            self.buf.fill_(0x5A5A5A5A)


def timed_call(fn, device, flush, latency_ms=0.0):
    """(milliseconds, output) of one call of fn(), with the L2 flushed first.

    On a GPU two figures are taken from one start event: `end`, recorded on
    the current stream right after fn() returns (the GPU time of the work
    ordered before it, free of host latency), and `after`, recorded once a
    device-wide synchronisation has returned (all work of every stream and
    thread, plus the host's wake-up latency). The call's time is the stream
    figure plus whatever the device-wide one exceeds it by beyond this
    process's calibrated latency (latency_ms, see sync_latency): an honest
    kernel is timed by its events, and work left on a side stream or queued
    from a thread after the end event is counted all the same."""
    if device.type == "cuda":
        flush()
        _cuda_sync(device)
        start = _CudaEvent(enable_timing=True)
        end = _CudaEvent(enable_timing=True)
        after = _CudaEvent(enable_timing=True)
        _event_record(start)
        out = fn()
        _event_record(end)
        _cuda_sync(device)
        _event_record(after)
        _cuda_sync(device)
        return device_counted(float(_event_elapsed(start, end)), float(_event_elapsed(start, after)),
                              latency_ms), out
    t0 = _perf_counter()
    out = fn()
    return (_perf_counter() - t0) * 1e3, out


def device_counted(stream_ms, device_ms, latency_ms):
    """The stream-ordered time plus work the device-wide figure shows beyond
    the synchronisation's own latency."""
    return stream_ms + max(0.0, device_ms - stream_ms - latency_ms)


def sync_latency(device, flush, calls=20):
    """This process's device-wide-sync latency on the GPU: how much later
    than the stream's end event the `after` event of an empty call lands
    (the 90th percentile of `calls` empty calls; 0 on the CPU). Measured by
    harness code before any candidate code runs in the process."""
    if device.type != "cuda":
        return 0.0
    gaps = []
    for _ in range(calls):
        flush()
        _cuda_sync(device)
        start = _CudaEvent(enable_timing=True)
        end = _CudaEvent(enable_timing=True)
        after = _CudaEvent(enable_timing=True)
        _event_record(start)
        _event_record(end)
        _cuda_sync(device)
        _event_record(after)
        _cuda_sync(device)
        gaps.append(float(_event_elapsed(end, after)))
    return _percentile(sorted(gaps), 0.9)


def outside_disagrees(inside_ms, outside_ms, overhead_ms):
    """Why the candidate's in-process times cannot be right, or None.

    outside_ms are the judge's wall-clock times of the same calls (request to
    reply), overhead_ms those of empty calls through the same path, measured
    before the candidate's code loaded. The in-process median may sit below
    the outside one by the overhead and noise, not by more. Time hidden
    from the in-process clock below about 0.25 ms a call goes unnoticed here;
    the guard and the spot checks are the defence at that scale."""
    if len(inside_ms) < 3 or len(outside_ms) < 3 or not overhead_ms:
        return None
    inside = _percentile(sorted(inside_ms), 0.5)
    outside = _percentile(sorted(outside_ms), 0.5)
    overhead = _percentile(sorted(overhead_ms), 0.5)
    expected = outside - overhead
    # The outside clock resolves about a tenth of a millisecond (a pipe round
    # trip, a Python loop on each side): a gap is believed only when it is
    # both large in absolute terms and half the expected time or more.
    if expected - inside > max(_OUTSIDE_RESOLUTION_MS, 0.5 * expected):
        return ("the candidate's process measured a median of %.4g ms, the judge %.4g ms for the "
                "same calls (%.4g ms of it overhead)" % (inside, outside, overhead))
    return None


def _percentile(s, q):
    """Linear-interpolated percentile of sorted s."""
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median_ci(times):
    """(low, high) of a ~95 % distribution-free confidence interval of the
    median (order statistics); min and max for fewer than 6 samples."""
    s = sorted(times)
    n = len(s)
    if n < 6:
        return (s[0], s[-1]) if s else (0.0, 0.0)
    half = 0.98 * math.sqrt(n)
    lo = max(0, int(math.floor(n / 2.0 - half)))
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)))
    return s[lo], s[hi]


def relative_ci(times):
    """Half-width of the median's confidence interval over the median."""
    if len(times) < 6:
        return float("inf")
    s = sorted(times)
    median = _percentile(s, 0.5)
    lo, hi = median_ci(s)
    return (hi - lo) / (2.0 * median) if median > 0 else float("inf")


def stats(times, method):
    """A kbox.v1.Timing dict."""
    n = len(times)
    if not n:
        return {"count": 0, "method": method}
    s = sorted(times)
    mean = sum(s) / n
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0
    std = math.sqrt(sum((t - mean) ** 2 for t in s) / n)
    lo, hi = median_ci(s)
    return {"mean_ms": mean, "median_ms": median, "std_ms": std, "min_ms": s[0],
            "max_ms": s[-1], "count": n, "method": method,
            "iqr_ms": _percentile(s, 0.75) - _percentile(s, 0.25),
            "median_ci_low_ms": lo, "median_ci_high_ms": hi}


def now_ms():
    return _perf_counter() * 1e3
