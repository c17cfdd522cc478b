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

METHOD_CPU = "perf_counter"
METHOD_CUDA = "cuda_event+device_sync"


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


def timed_call(fn, device, flush):
    """(milliseconds, output) of one call of fn(), with the L2 flushed first
    and the clock stopped only after a device-wide synchronisation (work on
    side streams counts)."""
    if device.type == "cuda":
        flush()
        _cuda_sync(device)
        start = _CudaEvent(enable_timing=True)
        end = _CudaEvent(enable_timing=True)
        _event_record(start)
        out = fn()
        _event_record(end)
        _cuda_sync(device)
        return float(_event_elapsed(start, end)), out
    t0 = _perf_counter()
    out = fn()
    return (_perf_counter() - t0) * 1e3, out


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
