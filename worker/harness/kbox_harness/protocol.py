"""Spec reader and result-pipe writer for kbox.v1.StageSpec / HarnessEvent.

The daemon parses every line with protobuf's strict JSON parser (unknown fields
rejected, no bare NaN), so everything written goes through `json_safe`.
"""
import json
import math
import os

# Captured before any client code runs: the candidate may patch os or json.
_os_write = os.write
_dumps = json.dumps

HARNESS = "HARNESS"
REFERENCE = "REFERENCE"
CANDIDATE = "CANDIDATE"

_STAGES = {0: "STAGE_UNSPECIFIED", 1: "STAGE_COMPILE", 2: "STAGE_RUN"}
_BACKENDS = {0: "BACKEND_UNSPECIFIED", 1: "BACKEND_CPU", 2: "BACKEND_CUDA", 3: "BACKEND_TRITON"}
_PRECISIONS = {0: "PRECISION_UNSPECIFIED", 1: "PRECISION_FP32", 2: "PRECISION_FP16",
               3: "PRECISION_BF16"}

# The daemon's defaults, for a spec that leaves a field out (kboxd writes
# every one; the harness's own tests do not). config.proto's max_log_bytes.
DEFAULT_MAX_LOG_BYTES = 16 * 1024
# The device turn's bytes (harness.proto's DeviceTurnSignal and
# DeviceTurnNote; tests/harness/test_protocol.py holds them to it).
TURN_GIVEN = b"g"        # kboxd: the device is this stage's
QUIET_GIVEN = b"q"       # kboxd: no other stage starts CUDA until QUIET_OVER
SET_UP_DONE = b"r"       # judge: set-up on the device over
QUIET_ASKED = b"q"       # judge: the device to itself before timing
QUIET_OVER = b"d"        # judge: timing over
DONE_WITH_DEVICE = b"e"  # judge: the candidate's process gone, no probe needed
# EvaluateRequest's correctness_trials default (evaluation.proto).
DEFAULT_CORRECTNESS_TRIALS = 5
# config.proto's live_recheck_speedup default.
DEFAULT_LIVE_RECHECK_SPEEDUP = 1.0
# config.proto's reference_cache_max_relative_ci default: how settled both lower
# quartiles of a live run must be for its reference figure to be cached.
DEFAULT_CACHE_MAX_RELATIVE_CI = 0.01


def _enum(value, names):
    # proto3 JSON allows an enum as its name or its number; C++ writes names.
    if value is None:
        return names[0]
    if isinstance(value, int):
        return names.get(value, names[0])
    return str(value)


def _int(value):
    # uint64/int64 arrive as JSON strings, uint32 as numbers; absent means 0.
    if value is None or value == "":
        return 0
    return int(value)


def _float(value):
    # Doubles may arrive as numbers or as "NaN"/"Infinity" strings.
    if value is None or value == "":
        return 0.0
    return float(value)


class StageSpec(object):
    """A kbox.v1.StageSpec with proto3 defaults filled in for absent fields."""

    def __init__(self, d):
        self.stage = _enum(d.get("stage"), _STAGES)
        self.reference_path = str(d.get("reference_path") or "")
        self.candidate_path = str(d.get("candidate_path") or "")
        self.build_dir = str(d.get("build_dir") or "")
        self.backend = _enum(d.get("backend"), _BACKENDS)
        self.precision = _enum(d.get("precision"), _PRECISIONS)
        self.seed = _int(d.get("seed"))
        self.atol = _float(d.get("atol"))
        self.rtol = _float(d.get("rtol"))
        # 0 never means "no trials": that would make any candidate "correct".
        self.correctness_trials = _int(d.get("correctness_trials")) or DEFAULT_CORRECTNESS_TRIALS
        self.measure_performance = bool(d.get("measure_performance", False))
        self.performance_trials = _int(d.get("performance_trials"))
        # The speedup's relative interval half-width the timing rounds stop
        # at (judge_timing); 0: they run to their cap.
        self.speedup_precision = _float(d.get("speedup_precision"))
        self.warmup_calls = _int(d.get("warmup_calls"))
        self.max_log_bytes = _int(d.get("max_log_bytes")) or DEFAULT_MAX_LOG_BYTES
        self.strict_seccomp_bpf = str(d.get("strict_seccomp_bpf") or "")
        self.ptxas_path = str(d.get("ptxas_path") or "")
        kernels = d.get("candidate_kernels") or []
        self.candidate_kernels = [str(k) for k in kernels] if isinstance(kernels, list) else []
        self.secret_path = str(d.get("secret_path") or "")
        self.light_headers = bool(d.get("light_headers", False))
        self.pch_dir = str(d.get("pch_dir") or "")
        self.cuda_per_operator_headers = bool(d.get("cuda_per_operator_headers", False))
        # Compile stage: report every load_inline/load call's sources
        # (StageReport.extension_sources); kboxd checks them.
        self.report_extension_sources = bool(d.get("report_extension_sources", False))
        # The reference cache's entry (docs/reference-cache.md); None: none.
        cached = d.get("cached_reference")
        self.cached_reference = None
        if isinstance(cached, dict) and isinstance(cached.get("timing"), dict):
            self.cached_reference = {"timing": dict(cached["timing"]),
                                     "input_signature": str(cached.get("input_signature") or "")}
        self.live_recheck_speedup = _float(d.get("live_recheck_speedup")) or DEFAULT_LIVE_RECHECK_SPEEDUP
        self.fresh_reference_timing = bool(d.get("fresh_reference_timing", False))
        self.launch_probe_library = str(d.get("launch_probe_library") or "")
        self.device_turn_path = str(d.get("device_turn_path") or "")
        self.device_notes_path = str(d.get("device_notes_path") or "")
        # Bytes of shared memory for the candidate's outputs (exchange.Arena);
        # 0: files. proto3 JSON writes a uint64 as a string.
        self.exchange_arena_bytes = _int(d.get("exchange_arena_bytes"))
        # Note DONE_WITH_DEVICE when done with it (run_stage._hand_over_turn).
        self.hand_over_turn = bool(d.get("hand_over_turn", False))
        # The stage run again after set_up_again: a set-up failure is final.
        self.run_again = bool(d.get("run_again", False))
        self.reference_cache_max_relative_ci = _float(d.get("reference_cache_max_relative_ci")) or \
            DEFAULT_CACHE_MAX_RELATIVE_CI
        boundary = d.get("candidate_boundary")
        self.candidate_boundary = CandidateBoundary(boundary) if isinstance(boundary, dict) else None

    @property
    def is_gpu(self):
        return self.backend != "BACKEND_CPU"


def _fd(value):
    """A descriptor number from the spec; -1 when absent (proto3 writes no 0s,
    and 0 is never one of these: stdin is /dev/null)."""
    n = _int(value)
    return n if n > 0 else -1


class CandidateCgroup(object):
    """kbox.v1.CandidateCgroup: the candidate's cgroup as inherited descriptors."""

    def __init__(self, d):
        self.version = _int(d.get("version"))
        fds = d.get("procs_fds") or []
        self.procs_fds = [_fd(f) for f in fds if _fd(f) >= 0] if isinstance(fds, list) else []
        self.freeze_fd = _fd(d.get("freeze_fd"))
        self.state_fd = _fd(d.get("state_fd"))
        self.cpu_fd = _fd(d.get("cpu_fd"))
        self.threads_fd = _fd(d.get("threads_fd"))


class CandidateBoundary(object):
    """kbox.v1.CandidateBoundary (docs/judge-boundary.md)."""

    def __init__(self, d):
        self.uid = _int(d.get("uid"))
        self.gid = _int(d.get("gid"))
        env = d.get("env") or []
        self.env = [str(kv) for kv in env] if isinstance(env, list) else []
        self.cwd = str(d.get("cwd") or "")
        cgroup = d.get("cgroup")
        self.cgroup = CandidateCgroup(cgroup) if isinstance(cgroup, dict) else None


def read_spec(path):
    with open(path, "r", encoding="utf-8") as f:
        return StageSpec(json.load(f))


def _clean_str(s):
    # Lone surrogates (from surrogateescape'd paths) are not valid UTF-8.
    return s.encode("utf-8", "replace").decode("utf-8")


def json_safe(obj):
    """Converts obj to values strict proto3 JSON accepts (non-finite doubles as strings)."""
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isnan(obj):
            return "NaN"
        if math.isinf(obj):
            return "Infinity" if obj > 0 else "-Infinity"
        return obj
    if isinstance(obj, str):
        return _clean_str(obj)
    if isinstance(obj, dict):
        return {_clean_str(str(k)): json_safe(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "__float__"):  # numpy / torch scalars
        return json_safe(float(obj))
    return _clean_str(str(obj))


def encode_line(obj):
    return (_dumps(json_safe(obj), separators=(",", ":"), allow_nan=False,
                   ensure_ascii=False) + "\n").encode("utf-8")


class ResultPipe(object):
    """Writes HarnessEvent lines to the result fd; one os.write per line."""

    def __init__(self, fd):
        self.fd = fd
        self.party = None
        self.reported = False
        try:
            # Child processes (ninja, compilers, candidate subprocesses) must not
            # inherit the result pipe.
            os.set_inheritable(fd, False)
        except OSError:
            pass

    def _write(self, data):
        n = _os_write(self.fd, data)
        while n < len(data):  # Only after a signal interrupted a large write.
            data = data[n:]
            n = _os_write(self.fd, data)

    def enter(self, party):
        """Announces whose code runs next; repeated announcements are elided."""
        if party != self.party:
            self._write(encode_line({"enter": party}))
            self.party = party

    def report(self, report):
        if self.reported:
            return
        try:
            data = encode_line({"report": report})
        except Exception as e:  # A harness bug must still end in a parseable report.
            data = encode_line({"report": {
                "outcome": "HARNESS_FAILED",
                "message": "harness could not encode its report: %s: %s" % (type(e).__name__, e)}})
        self.reported = True
        self._write(data)
