"""Times model calls with clock functions captured before client code loads.

This module is imported by the stage before the candidate is, so a candidate
that replaces time.perf_counter or torch.cuda.synchronize/Event cannot change
what we measure with.
"""
import collections
import math
import time

import torch

_perf_counter = time.perf_counter
_cuda_sync = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_sleep = torch.cuda._sleep

_OUTSIDE_RESOLUTION_MS = 0.25

METHOD_CPU = "perf_counter"
METHOD_CUDA = "covered_cuda_event+device_sync"  # see Clock


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


# The launch cover (see Clock): host time of a warm call times this, plus a
# margin, capped.
_COVER_FACTOR = 2.0
_COVER_MARGIN_MS = 0.05
_COVER_MAX_MS = 20.0
_FIT_CALLS = 10
_LATENCY_CALLS = 16
# Uncovered calls may exceed covered ones by their host time and this
# (hidden_by_cover): the last launch's way to the GPU, sync and event
# jitter. 0.05 ms, not less: on an H100 honest launch-bound calls
# (0.007 ms kernels behind 0.08 ms of host Python) exceeded their covered
# time plus host time by 0.023-0.024 ms (docs/gpu-verification.md), and an
# allowance of 0.02 ms rejected them; hidden work under 0.05 ms a call is
# the documented residual (docs/threat-model.md).
_HIDDEN_SLACK_MS = 0.05
_HIDDEN_SLACK_SHARE = 0.1
# A covered call whose host launch work did not end this long before its
# cover did is counted as outran: the doorbell of the last launch still has
# to reach the GPU.
_LAUNCH_MARGIN_MS = 0.01
# One timed call: milliseconds, the call's output, host milliseconds of the
# call itself, whether the host was still launching when the cover ended
# (the time then includes host latency: see Clock), and the GPU milliseconds
# the cover took (a fixed count of clock cycles: its time shows the SM clock
# of that call; 0 without a cover).
Timed = collections.namedtuple("Timed", "ms out host_ms outran cover_gpu_ms")


class Clock(object):
    """Times calls of one model on one device.

    On a GPU a call is timed by CUDA events around it on the current stream,
    with a busy-wait kernel (the *cover*) queued before the start event: the
    host launches the call's work while the cover spins, so the events
    measure the GPU executing the call, not the host's Python and launch
    latency (host latency is what made eager timings swing by 10-30 %
    between processes: docs/gpu-verification.md). Work still running on any
    stream after the end event is added: a device-wide synchronisation is
    followed by a third event, and its lag behind the end event beyond the
    calibrated latency of that synchronisation is counted.

    The judge's clock for the reference (trusted code, nothing to hide) is
    made with generous=True: a cover four times the fitted host time plus
    0.1 ms, since calls made between the two processes' turns run slower on
    the host than the warm fit does. The candidate's is twice it plus
    0.05 ms: what could hide under it is what the uncovered calls expose.

    Work a candidate starts on another stream without ordering it after the
    cover would run hidden while the cover spins; calls without the cover
    (time(fn, cover=False): start event on an idle GPU, so everything the
    call launches lands after it) expose it, and the judge compares the two
    (judge_timing). On the CPU a call's time is its wall time."""

    def __init__(self, device, generous=False):
        self.device = device
        self._factor, self._margin = (4.0, 0.1) if generous else (_COVER_FACTOR, _COVER_MARGIN_MS)
        self.flush = L2Flush(device)
        self.cover_ms = 0.0
        self.latency_ms = 0.0
        self._wait_ms = 0.0
        self._cycles_per_ms = 0.0  # measured by fit, on a warm GPU

    def fit(self, fn):
        """Sizes the cover to fn's warm host time (a multiple of its 90th
        percentile plus a margin, at most 20 ms), then calibrates the sync
        latency with empty calls that wait as long as a covered call of fn
        does (a host thread woken after a longer wait wakes later). fn must
        be warm. Until fit, calls are timed without a cover."""
        if self.device.type != "cuda":
            return
        hosts = []
        for _ in range(_FIT_CALLS):
            _cuda_sync(self.device)
            t0 = _perf_counter()
            fn()
            hosts.append((_perf_counter() - t0) * 1e3)
            _cuda_sync(self.device)
        self.cover_ms = min(_COVER_MAX_MS, self._factor * _percentile(sorted(hosts), 0.9) + self._margin)
        self._cycles_per_ms = _sleep_rate(self.device)
        busy = sorted(self._events(fn, True)[0] for _ in range(5))
        self._wait_ms = busy[2]
        gaps = sorted(self._events(lambda: None, True)[2] for _ in range(_LATENCY_CALLS))
        self._wait_ms = 0.0
        self.latency_ms = _percentile(gaps, 0.9)

    def time(self, fn, cover=True):
        """A Timed of one call of fn(), the L2 flushed first."""
        if self.device.type != "cuda":
            t0 = _perf_counter()
            out = fn()
            ms = (_perf_counter() - t0) * 1e3
            return Timed(ms, out, ms, False, 0.0)
        stream_ms, host_ms, lag_ms, outran, cover_gpu_ms, out = self._events(fn, cover)
        return Timed(device_counted(stream_ms, stream_ms + lag_ms, self.latency_ms), out, host_ms, outran,
                     cover_gpu_ms)

    def _events(self, fn, cover):
        """(stream ms, host ms, end-to-after lag ms, outran, cover GPU ms, output)
        of one call.

        An event recorded before the cover shows how long the GPU spent on
        the cover; if the host's time from recording it to the end of the
        call's launches was not shorter, the GPU may have waited for a launch
        inside the timed region (outran)."""
        _cuda_sync(self.device)
        self.flush()
        covered = cover and self.cover_ms > 0
        pre = _CudaEvent(enable_timing=True) if covered else None
        start = _CudaEvent(enable_timing=True)
        end = _CudaEvent(enable_timing=True)
        after = _CudaEvent(enable_timing=True)
        if covered:
            t_pre = _perf_counter()
            _event_record(pre)
            _sleep(int((self.cover_ms + self._wait_ms) * self._cycles_per_ms))
        _event_record(start)
        t0 = _perf_counter()
        out = fn()
        t1 = _perf_counter()
        _event_record(end)
        _cuda_sync(self.device)
        _event_record(after)
        _cuda_sync(self.device)
        outran, cover_gpu_ms = False, 0.0
        if covered:
            cover_gpu_ms = float(_event_elapsed(pre, start))
            outran = (t1 - t_pre) * 1e3 + _LAUNCH_MARGIN_MS >= cover_gpu_ms
        return (float(_event_elapsed(start, end)), (t1 - t0) * 1e3, float(_event_elapsed(end, after)),
                outran, cover_gpu_ms, out)


def _sleep_rate(device):
    """GPU clock cycles of torch.cuda._sleep per millisecond (the fastest
    of a few tries: a cover sized at a slow clock would be too short)."""
    best = 0.0
    for _ in range(3):
        _cuda_sync(device)
        a = _CudaEvent(enable_timing=True)
        b = _CudaEvent(enable_timing=True)
        _event_record(a)
        _sleep(200000)
        _event_record(b)
        _cuda_sync(device)
        ms = float(_event_elapsed(a, b))
        if ms > 0:
            best = max(best, 200000 / ms)
    return best or 1.0e6


def hidden_by_cover(covered_ms, uncovered_ms, uncovered_host_ms):
    """Why covered calls hid work, or None.

    An uncovered call starts its clock on an idle GPU, so it counts the
    host's launch work and everything the call ran on any stream; it can
    exceed the covered time of the same work by the host time of the call
    plus the way of the last launch to the GPU and the events' latency
    (about 0.023 ms on an H100). More than that, beyond the allowance, means
    work that ran while the cover spun, unseen by its events."""
    if len(covered_ms) < 3 or len(uncovered_ms) < 3:
        return None
    covered = _percentile(sorted(covered_ms), 0.5)
    uncovered = _percentile(sorted(uncovered_ms), 0.5)
    host = _percentile(sorted(uncovered_host_ms), 0.5)
    if uncovered - host > covered + max(_HIDDEN_SLACK_MS, _HIDDEN_SLACK_SHARE * covered):
        return ("calls timed behind the launch cover took a median of %.4g ms; calls without it %.4g ms, "
                "%.4g ms of which the host spent launching: work ran on the GPU unseen by the covered "
                "calls' clock" % (covered, uncovered, host))
    return None


def device_counted(stream_ms, device_ms, latency_ms):
    """The stream-ordered time plus work the device-wide figure shows beyond
    the synchronisation's own latency."""
    return stream_ms + max(0.0, device_ms - stream_ms - latency_ms)


def outside_disagrees(inside_ms, outside_ms, overhead_ms):
    """Why the candidate's in-process times cannot be right, or None.

    outside_ms are the judge's wall-clock times of the same calls (request to
    reply), overhead_ms those of empty calls through the same path. The
    in-process median may sit below the outside one by the overhead and
    noise, not by more. Time hidden from the in-process clock below about
    0.25 ms a call goes unnoticed here (more on a host whose load scatters
    the empty rounds); the guard and the spot checks are the defence at that
    scale."""
    if len(inside_ms) < 3 or len(outside_ms) < 3 or not overhead_ms:
        return None
    overhead_sorted = sorted(overhead_ms)
    inside = _percentile(sorted(inside_ms), 0.5)
    outside = _percentile(sorted(outside_ms), 0.5)
    overhead = _percentile(overhead_sorted, 0.5)
    expected = outside - overhead
    # The outside clock resolves about a tenth of a millisecond (a pipe round
    # trip, a Python loop on each side), and on a loaded host its rounds
    # scatter by more (scheduling delays of a millisecond or two on a busy
    # 2-core machine): a gap is believed only when it is large in absolute
    # terms, half the expected time or more, and wider than the empty
    # rounds' own scatter (1.5 times their interquartile range; on a quiet
    # host a few hundredths of a millisecond). Time hidden on every call
    # shifts the whole distribution and clears that; scheduling noise does
    # not. Not the timed calls' scatter: under load a long call's wake-ups
    # scatter them by milliseconds, and hidden time would shelter there.
    scatter = 1.5 * _iqr(overhead_sorted)
    if expected - inside > max(_OUTSIDE_RESOLUTION_MS, 0.5 * expected, scatter):
        return ("the candidate's process measured a median of %.4g ms, the judge %.4g ms for the "
                "same calls (%.4g ms of it overhead)" % (inside, outside, overhead))
    return None


def _iqr(s):
    """Interquartile range of sorted s."""
    return _percentile(s, 0.75) - _percentile(s, 0.25)


def _percentile(s, q):
    """Linear-interpolated percentile of sorted s."""
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# The quantile of each side's timed calls that speedup is computed from.
# Not the median: what disturbs a GPU call from outside (another context's
# work, clock dips, host delays past the cover) only ever adds time, and on
# an H100 it hit 40-60 % of a 0.03 ms reference's calls in some runs and
# few in others, so the median jumped between runs (a 5.7 % speedup CV for
# flash_attn) while the lower quartile moved by 0.2 % (the traces in
# docs/gpu-verification.md). A candidate cannot buy a lower quartile with
# calls that skip work: the timed outputs are spot-checked, and skipping on
# the quarter of calls it would take is caught with probability
# 1 - 0.75^checks (24 checks: 99.9 %).
SPEEDUP_QUANTILE = 0.25


def quantile_ci(times, q):
    """(low, high) of a ~95 % distribution-free confidence interval of the
    q-quantile (order statistics, normal approximation of the binomial);
    min and max for fewer than 6 samples."""
    s = sorted(times)
    n = len(s)
    if n < 6:
        return (s[0], s[-1]) if s else (0.0, 0.0)
    half = 1.96 * math.sqrt(n * q * (1.0 - q))
    lo = max(0, int(math.floor(n * q - half)))
    hi = min(n - 1, int(math.ceil(n * q + half)))
    return s[lo], s[hi]


def median_ci(times):
    """quantile_ci of the median."""
    return quantile_ci(times, 0.5)


def quantile_with_ci(times, q=SPEEDUP_QUANTILE):
    """(the q-quantile, its quantile_ci low, high) of times; None for fewer
    than 6 (no interval yet)."""
    if len(times) < 6:
        return None
    s = sorted(times)
    lo, hi = quantile_ci(s, q)
    return _percentile(s, q), lo, hi


def reported_quantile(stats):
    """(lower quartile, its interval's low, high) from a kbox.v1.Timing
    dict, as quantile_with_ci gives them from the calls; None for fewer
    than 6 calls or a figure missing."""
    keys = ("lower_quartile_ms", "lower_quartile_ci_low_ms", "lower_quartile_ci_high_ms")
    values = [stats.get(k) for k in keys]
    if stats.get("count", 0) < 6 or any(not isinstance(v, (int, float)) for v in values):
        return None
    return tuple(float(v) for v in values)


def speedup_relative_ci(reference, candidate):
    """Half-width of the speedup's interval over the speedup, from each side's
    (lower quartile, its interval's low, high) as quantile_with_ci gives them,
    the way kboxd reports the interval (result_mapper.cc: reference low over
    candidate high to reference high over candidate low). inf when either is
    None or not positive."""
    if reference is None or candidate is None or min(min(reference), min(candidate)) <= 0:
        return float("inf")
    ref_q, ref_lo, ref_hi = reference
    cand_q, cand_lo, cand_hi = candidate
    return (ref_hi / cand_lo - ref_lo / cand_hi) / (2.0 * ref_q / cand_q)


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
    q_lo, q_hi = quantile_ci(s, SPEEDUP_QUANTILE)
    return {"mean_ms": mean, "median_ms": median, "std_ms": std, "min_ms": s[0],
            "max_ms": s[-1], "count": n, "method": method,
            "iqr_ms": _percentile(s, 0.75) - _percentile(s, 0.25),
            "median_ci_low_ms": lo, "median_ci_high_ms": hi,
            "lower_quartile_ms": _percentile(s, SPEEDUP_QUANTILE),
            "lower_quartile_ci_low_ms": q_lo, "lower_quartile_ci_high_ms": q_hi}


def now_ms():
    return _perf_counter() * 1e3
