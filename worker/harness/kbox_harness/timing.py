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


def measure(model, inputs, warmup, trials, device):
    """Per-call times in milliseconds of `trials` calls after `warmup` untimed ones."""
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        device_sync(device)
        for _ in range(trials):
            if device.type == "cuda":
                _cuda_sync(device)
                start = _CudaEvent(enable_timing=True)
                end = _CudaEvent(enable_timing=True)
                _event_record(start)
                model(*inputs)
                _event_record(end)
                # Device-wide: work the candidate queued on side streams counts.
                _cuda_sync(device)
                times.append(float(_event_elapsed(start, end)))
            else:
                t0 = _perf_counter()
                model(*inputs)
                times.append((_perf_counter() - t0) * 1e3)
    return times


def stats(times, method):
    """A kbox.v1.Timing dict."""
    n = len(times)
    if not n:
        return {"count": 0, "method": method}
    s = sorted(times)
    mean = sum(s) / n
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0
    std = math.sqrt(sum((t - mean) ** 2 for t in s) / n)
    return {"mean_ms": mean, "median_ms": median, "std_ms": std, "min_ms": s[0],
            "max_ms": s[-1], "count": n, "method": method}


def now_ms():
    return _perf_counter() * 1e3
