"""The candidate's process in the run stage.

Forked by the judge (run_stage.py) before CUDA exists and before the
reference or kboxd's seed is read, so nothing in this address space ever held
the reference's model, its outputs, the comparison or the trial seeds: a
candidate's native code can read all of this process's memory and finds none
of them. It closes the result pipe at once (only the judge reports to kboxd),
installs the strict seccomp filter and the audit hook, imports the candidate,
and then serves the judge's commands one at a time: build the model, run
forward on an input file and write what came back to an output file, time a
call, probe one forward for its ATen ops and kernel launches.

What this process says is untrusted: the judge compares the files itself,
checks the reported times against its own clock, and takes findings from here
as evidence against the candidate, never for it.
"""
import ctypes
import os
import signal
import sys

import torch

from . import (audit, candidate_import, channel, dynamic_checks, errors, exchange, extension_hook,
               inputs, launch_probe, modules, protocol, sanitize, strict_filter, timing)

_PR_SET_PDEATHSIG = 1
_DTYPES = {"PRECISION_FP16": torch.float16, "PRECISION_BF16": torch.bfloat16}
_MAX_KERNEL_NAMES = 64
# Harness modules whose functions the guard watches (besides torch and time).
_GUARDED_MODULES = (channel, dynamic_checks, errors, exchange, inputs, launch_probe, modules, sanitize,
                    timing)

try:  # Taken before the candidate loads: what the launch probe records with.
    from torch.profiler import profile as _profile, ProfilerActivity as _ProfilerActivity
except ImportError:  # pragma: no cover
    _profile = _ProfilerActivity = None


class CandidateRaised(Exception):
    def __init__(self, exc):
        Exception.__init__(self)
        self.exc = exc


class _SilentPipe(object):
    """candidate_import announces parties; here the judge does that."""

    def enter(self, party):
        pass


class Worker(object):
    def __init__(self, cmd_fd, reply_fd, audit_fd, arena=None, in_arena=None):
        self.reader = channel.LineReader(cmd_fd)
        self.arena = arena  # exchange.Arena for outputs, or None: files
        self.in_arena = in_arena  # the judge's inputs, likewise
        self.reply_fd = reply_fd
        self.audit_fd = audit_fd
        self.findings = dynamic_checks.Findings()
        self.sent = set()
        self.spec = None
        self.device = None
        self.dtype = torch.float32
        self.scrubber = None
        self.guard = None
        self.broker = None
        self.model = None
        self.model_cls = None
        self.clock = None
        self.pool = []
        self.prepared = None
        self.kept = None
        self.write_ms = 0.0

    # -- the loop ---------------------------------------------------------------
    def serve(self):
        while True:
            try:
                cmd = self.reader.read()
            except channel.ChannelClosed:
                os._exit(0)
            op = str(cmd.get("op", ""))
            if op == "exit":
                os._exit(0)
            handler = getattr(self, "op_" + op, None)
            try:
                if handler is None:
                    raise ValueError("unknown command %r" % op)
                reply = handler(cmd) or {}
            except CandidateRaised as c:
                reply = {"error": errors.runtime_error(c.exc, "PHASE_RUN", self.scrubber,
                                                       self._max_log(), self._candidate_path()),
                         "message": errors.one_line("candidate raised " + sanitize.sanitize(
                             errors.exception_line(c.exc), self.scrubber))}
            except extension_hook.InfraError as e:
                reply = {"harness_error": errors.exception_line(e)}
            except BaseException as e:  # Our own failure: the judge reports HARNESS_FAILED.
                reply = {"harness_error": errors.one_line(errors.exception_line(e), 1000)}
            reply["findings"] = self._new_findings()
            reply["n"] = cmd.get("n")  # which command this answers
            channel.write_line(self.reply_fd, reply)

    def _max_log(self):
        return self.spec.max_log_bytes if self.spec else protocol.DEFAULT_MAX_LOG_BYTES

    def _candidate_path(self):
        return self.spec.candidate_path if self.spec else ""

    def _new_findings(self):
        out = []
        for v in self.findings.verdicts():
            if v["rule_id"] not in self.sent:
                self.sent.add(v["rule_id"])
                out.append([v["rule_id"], v["message"]])
        return out

    def client(self, fn, *args):
        """Runs candidate code; its exceptions become CandidateRaised. Every
        watched function the candidate replaced is put back and reported."""
        try:
            return fn(*args)
        except extension_hook.InfraError:
            raise
        except BaseException as e:
            raise CandidateRaised(e)
        finally:
            self._check_guard()

    def _check_guard(self):
        if self.guard is None:
            return
        replaced = self.guard.check()
        if replaced:
            self.findings.add("run.harness-tampering", "candidate replaced %s" % ", ".join(replaced[:6]))

    # -- set-up -----------------------------------------------------------------
    def op_setup(self, cmd):
        """Harness-only: CUDA, Triton, the strict filter, the guard."""
        spec = self.spec = protocol.StageSpec(cmd["spec"])
        self.device = torch.device("cpu" if not spec.is_gpu else "cuda:0")
        self.dtype = _DTYPES.get(spec.precision, torch.float32)
        self.scrubber = candidate_import.default_scrubber(spec)
        phase = {}
        if spec.ptxas_path:
            t0 = timing.now_ms()
            from . import tool_broker
            self.broker = tool_broker.Broker(spec.ptxas_path).start()  # before CUDA exists here
            phase["tool_broker"] = timing.now_ms() - t0
        if self.device.type == "cuda":
            t0 = timing.now_ms()
            torch.cuda.init()
            x = torch.ones((16, 16), device=self.device)
            (x @ x + 1).sum().item()
            torch.cuda.synchronize(self.device)
            phase["candidate_cuda_init"] = timing.now_ms() - t0
        if spec.backend == "BACKEND_TRITON" and (spec.strict_seccomp_bpf or self.broker):
            from . import triton_prep
            if spec.strict_seccomp_bpf:
                triton_prep.warm()
            if self.broker is not None:
                triton_prep.install(self.broker)
        if spec.strict_seccomp_bpf:
            import torch.utils.cpp_extension as _ce  # noqa: F401  (looks for nvcc with `which`)
            # No SIGKILL from candidate code, to itself or the judge: the
            # judge and kboxd read a SIGKILL as an outside kill (kbox's fault).
            # Before the strict filter, which kills any later seccomp().
            strict_filter.install_no_sigkill()
            strict_filter.install(spec.strict_seccomp_bpf)
        self.launch_probe, self.launch_probe_error = prepare_launch_probe(spec, self.device)
        self.clock = timing.Clock(self.device)
        self.guard = dynamic_checks.Guard(_GUARDED_MODULES)
        return {"phase_ms": phase}

    def op_import(self, cmd):
        spec = self.spec
        audit.install({os.path.realpath(spec.candidate_path)}, cmd.get("read_roots", []),
                      cmd.get("write_roots", []), self._report_audit)
        imp = candidate_import.import_candidate(spec, _SilentPipe())
        self._check_guard()
        syntax = imp.syntax_error(spec.candidate_path)
        if imp.not_built is not None:
            message, log = candidate_import.not_built_failure(spec, imp.not_built, self.scrubber)
        elif imp.build_failed:
            message, log = candidate_import.build_failure(spec, imp, self.scrubber)
        elif syntax is not None:
            message, log = candidate_import.syntax_failure(spec, syntax, self.scrubber)
        elif imp.exc is not None:
            err = errors.runtime_error(imp.exc, "PHASE_RUN", self.scrubber, spec.max_log_bytes,
                                       spec.candidate_path)
            message = "candidate failed to import: " + sanitize.sanitize(
                errors.exception_line(imp.exc), self.scrubber)
            text, truncated = sanitize.bound(err["traceback"], spec.max_log_bytes)
            log = {"text": text, "truncated": truncated, "first_error_line": err["candidate_line"]}
        elif not isinstance(getattr(imp.module, "ModelNew", None), type):
            message = "candidate defines no class ModelNew"
            log = {"text": "candidate.py: " + message, "truncated": False, "first_error_line": 0}
        else:
            self.model_cls = imp.module.ModelNew
            return {"import_ms": imp.ms}
        return {"compile_failed": {"message": errors.one_line(message), "compile_log": log},
                "import_ms": imp.ms}

    def _report_audit(self, text):
        line = ("run.forbidden-call " + text.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace")
        try:
            os.write(self.audit_fd, line)
        except OSError:
            pass  # a full pipe: the judge already holds enough reports

    def op_build(self, cmd):
        init = exchange.load(cmd["init"])
        seed = int(cmd["model_seed"])

        def build():
            torch.manual_seed(seed)
            if self.device.type == "cuda":
                torch.cuda.manual_seed_all(seed)
            model = self.model_cls(*init)
            if isinstance(model, torch.nn.Module):
                model.to(self.device)
                model.to(self.dtype)
            return model
        self.model = self.client(build)
        return {}

    # -- forward ------------------------------------------------------------------
    def _forward(self, x):
        with torch.no_grad():
            out = self.model(*x)
        timing.device_sync(self.device)  # async CUDA errors belong to the candidate
        return out

    def _load_inputs(self, path):
        # Cloned: each input gets storage of its own at offset 0, as
        # get_inputs() would have made it (load() returns views into one
        # buffer on the CPU).
        return list(inputs.clone(exchange.load(path, device=self.device)))

    def _cmd_inputs(self, cmd):
        """The inputs a command names: in the input arena (each tensor is
        already a copy of its own there) or in a file (cloned, nested lists
        too)."""
        if "inputs_arena" in cmd and self.in_arena is not None:
            return exchange.load_from_arena(self.in_arena, cmd["inputs_arena"], device=self.device)
        return self._load_inputs(cmd["inputs"])

    def _contract(self, out, x):
        """(why the output breaks the contract or None, per-output alias flags).
        Looks at types before anything touches the output: a subclass may run
        code when used."""
        flat = dynamic_checks.flatten_outputs(out)
        in_ptrs = {dynamic_checks.storage_ptr(t) for t in dynamic_checks.tensors(x)}
        aliases = []
        for i, c in enumerate(flat):
            where = "output %d " % i if len(flat) > 1 else "output "
            if isinstance(c, torch.Tensor) and type(c) is not torch.Tensor:
                return where + "is a %s, not a plain torch.Tensor" % type(c).__name__, []
            if not isinstance(c, (torch.Tensor, bool, int, float, type(None))):
                return where + "is a %s, not a tensor" % type(c).__name__, []
            if isinstance(c, torch.Tensor):
                if c.device.type != self.device.type:
                    return where + "is on %s, not on %s" % (c.device, self.device), []
                aliases.append(dynamic_checks.storage_ptr(c) in in_ptrs)
            else:
                aliases.append(False)
        return None, aliases

    def _save(self, path, out, x, with_inputs=True):
        broken, aliases = self._contract(out, x)
        if broken:
            return {"contract": broken}
        reply = self._write_output(path, {"out": out, "inputs": x} if with_inputs else {"out": out})
        keep = list(dynamic_checks.tensors(x))
        if isinstance(self.model, torch.nn.Module):
            keep += list(self.model.parameters()) + list(self.model.buffers())
        # A memoised copy the candidate kept is useless from now on.
        dynamic_checks.poison(out, keep)
        return dict(reply, aliases=aliases)

    def _write_output(self, path, obj):
        """{"arena_bytes": n} when obj went into the arena; else it goes to
        the file at path, and {}."""
        t0 = timing.now_ms()
        try:
            if self.arena is not None:
                n = exchange.save_to_arena(self.arena, obj)
                if n is not None:
                    return {"arena_bytes": n}
            exchange.save(path, obj)
            return {}
        finally:
            self.write_ms = timing.now_ms() - t0

    def _pin_ms(self, failed=False):
        return sum(a.pin_ms for a in (self.arena, self.in_arena)
                   if a is not None and (a.pin_failed or not failed))

    def op_forward(self, cmd):
        pinned_before = self._pin_ms()
        t0 = timing.now_ms()
        x = list(self._cmd_inputs(cmd))
        kept = _copy_if_small(x)
        t1 = timing.now_ms()
        before = dynamic_checks.thread_snapshot()
        out = self.client(self._forward, x)
        left = dynamic_checks.new_threads(before)
        if left:
            self.findings.add("run.thread-started", "forward left %d thread(s) running (%s)" % (
                len(left), ", ".join(sorted({t.name for t in left}))[:80]))
        t2 = timing.now_ms()
        unchanged = kept is not None and dynamic_checks.same_values(x, kept)
        t3 = timing.now_ms()
        self.write_ms = 0.0
        if unchanged:
            # Unchanged: the judge takes its own copy for them, and the
            # inputs need not travel back with the output.
            reply = self._save(cmd["out"], out, x, with_inputs=False)
            if "contract" not in reply:
                reply["inputs_kept"] = True
        else:
            reply = self._save(cmd["out"], out, x)
        del out, kept
        # Where a trial's time goes on this side (the judge's phase_ms).
        # save: the input check, the output's writing and its poisoning;
        # pin: the arenas' page-locking within load and save; pin_failed:
        # the time of those that failed (copies then use staging buffers).
        reply["steps_ms"] = {"load": t1 - t0, "forward": t2 - t1, "save": timing.now_ms() - t2,
                             "save_check": t3 - t2, "save_write": self.write_ms,
                             "pin": self._pin_ms() - pinned_before,
                             "pin_failed": self._pin_ms(failed=True)}
        return reply

    def op_probe(self, cmd):
        """One forward under the ATen dispatch trace and, on a GPU, a launch
        probe: which library ops ran and which kernels launched. The probe
        is CUPTI's callback API (launch_probe) when the judge names its
        library, else torch.profiler; the reply's "probe" says which."""
        x = list(self._cmd_inputs(cmd))
        fallback = None
        if self.device.type == "cuda" and cmd.get("kernels") and cmd.get("launch_probe"):
            probe = self.launch_probe
            try:
                if probe is None:
                    raise launch_probe.ProbeUnavailable(self.launch_probe_error or "not prepared")
                probe.start()
            except (launch_probe.ProbeUnavailable, launch_probe.ProbeRefused) as e:
                fallback = "%s: %s" % (type(e).__name__, errors.one_line(str(e))[:200])
            else:
                try:
                    ops = self._trace(x)
                finally:
                    probe.stop()
                seen = probe.result()
                return {"ops": ops, "profiled": True, "probe": "cupti",
                        "kernels": seen["kernels"][:_MAX_KERNEL_NAMES * 4],
                        "graph_launches": seen["graph_launches"], "dropped": seen["dropped"]}
        reply = self._profiled_probe(x, bool(cmd.get("kernels")))
        if fallback:
            reply["cupti_error"] = fallback
        return reply

    def _profiled_probe(self, x, want_kernels):
        kernels = set()
        profiled = False
        if self.device.type == "cuda" and want_kernels and _profile is not None:
            try:
                prof = _profile(activities=[_ProfilerActivity.CUDA])
                prof.__enter__()
            except Exception as e:
                return {"ops": self._trace(x), "profiler_error": errors.exception_line(e)[:200]}
            try:
                ops = self._trace(x)
            finally:
                prof.__exit__(None, None, None)
            for event in prof.events():
                if "CUDA" in str(getattr(event, "device_type", "")):
                    kernels.add(str(event.name)[:200])
            profiled = True
        else:
            ops = self._trace(x)
        return {"ops": ops, "profiled": profiled, "probe": "profiler",
                "kernels": sorted(kernels)[:_MAX_KERNEL_NAMES * 4]}

    def _trace(self, x):
        traced, ops = self.client(dynamic_checks.trace_ops, lambda: self._forward(x))
        del traced
        return dynamic_checks.library_ops(ops)

    # -- timing ---------------------------------------------------------------------
    def op_pool(self, cmd):
        self.pool = [list(x) for x in self._cmd_inputs(cmd)]
        return {}

    def op_prep(self, cmd):
        """The judge's chosen timing input: pool entry, value perturbation and
        address shift, made before the clock starts."""
        self.prepared = None
        self.kept = None
        self.prepared = inputs.perturbed_shifted(self.pool[int(cmd["pool"])], float(cmd["scale"]),
                                                 int(cmd["shift"]))
        return {}

    def op_fit(self, cmd):
        """Sizes the launch cover to the warm model (timing.Clock.fit) on
        the prepared input."""
        x = self.prepared
        self.client(self.clock.fit, lambda: self._no_grad(x))
        return {"cover_ms": self.clock.cover_ms}

    def op_time(self, cmd):
        if cmd.get("empty"):
            # The judge's calibration: the same path as a timed call (guard
            # check and cover included), with nothing in the timed region.
            t = self.client(self.clock.time, lambda: None)
            return {"ms": t.ms, "host_ms": t.host_ms, "outran": t.outran, "cover_gpu_ms": t.cover_gpu_ms}
        x = self.prepared
        t = self.client(self.clock.time, lambda: self._no_grad(x), bool(cmd.get("cover", True)))
        self.kept = (t.out, x)
        return {"ms": t.ms, "host_ms": t.host_ms, "outran": t.outran, "cover_gpu_ms": t.cover_gpu_ms}

    def _no_grad(self, x):
        with torch.no_grad():
            return self.model(*x)

    def op_save(self, cmd):
        """Writes the last timed call's output; asked only after the call, so
        the candidate cannot know which calls are checked."""
        if self.kept is None:
            raise ValueError("no timed output to save")
        out, x = self.kept
        self.kept = None
        # A spot check compares the output only (input mutation is judged on
        # the correctness trials), so the inputs, as large again, stay here.
        return self._save(cmd["out"], out, x, with_inputs=bool(cmd.get("inputs", True)))


# Inputs up to this size are copied on the device before forward, so that
# this process can tell whether forward changed them; larger ones travel
# back to the judge, which compares them itself.
INPUT_COPY_MAX_BYTES = 1 << 30


def _copy_if_small(x):
    """A copy of the inputs on their device, or None when they are larger
    than INPUT_COPY_MAX_BYTES (the copy would take that much memory more)."""
    size = sum(t.numel() * t.element_size() for t in dynamic_checks.tensors(x))
    return inputs.clone(x) if size <= INPUT_COPY_MAX_BYTES else None


def prepare_launch_probe(spec, device):
    """(LaunchProbe or None, why not): on a GPU with the StageSpec's library,
    the probe loaded in set-up, before the candidate's code: its CUPTI is the
    one torch mapped, else torch's bundled or the toolkit's, never a library
    the candidate maps under that name later."""
    if device.type != "cuda" or not spec.launch_probe_library:
        return None, None
    try:
        return launch_probe.LaunchProbe(spec.launch_probe_library, launch_probe.cupti_path()), None
    except launch_probe.ProbeUnavailable as e:
        return None, str(e)


def _die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def child_main(cmd_fd, reply_fd, audit_fd, close_fds, arena=None, in_arena=None):
    """Entry point after fork; never returns."""
    try:
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        _die_with_parent()
        os.set_blocking(audit_fd, False)
        Worker(cmd_fd, reply_fd, audit_fd, arena, in_arena).serve()
    except BaseException:
        pass
    os._exit(0)


class CandidateProcess(object):
    """The judge's handle on the candidate's process."""

    def __init__(self, result_fd, arena=None, in_arena=None):
        """arena, in_arena: the judge's exchange.Arenas; the forked process
        shares their mappings, writes its outputs to arena and reads the
        judge's inputs from in_arena."""
        cmd_r, cmd_w = os.pipe()
        reply_r, reply_w = os.pipe()
        audit_r, audit_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            # Only this thread survives fork; nothing else of the judge runs here.
            # The arena's mapping is inherited; its descriptor is not needed.
            close = (cmd_w, reply_r, audit_r, result_fd) + tuple(
                a.fd for a in (arena, in_arena) if a is not None)
            child_main(cmd_r, reply_w, audit_w, close, arena, in_arena)
        os.close(cmd_r)
        os.close(reply_w)
        os.close(audit_w)
        self.pid = pid
        self.cmd_fd = cmd_w
        self.replies = channel.LineReader(reply_r)
        self.audit = channel.AuditReader(audit_r)
        self.status = None
        self.expected = None

    def send(self, cmd):
        # Each command carries a fresh number its reply must echo: a line the
        # candidate's code slips into the reply pipe (from native code, which
        # can write to any descriptor of its process) cannot pass for the
        # answer to a command it did not see, and a stray reply never shifts
        # every later one by a place.
        self.expected = int.from_bytes(os.urandom(8), "little") >> 2
        channel.write_line(self.cmd_fd, dict(cmd, n=self.expected))

    def receive(self):
        reply = self.replies.read()
        if reply.get("n") != self.expected:
            raise channel.ProtocolError("a reply to a command that was not sent")
        return reply

    def exit_status(self, wait=True):
        """How the process ended ('exit code N' / 'signal NAME'), or None while it runs."""
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, 0 if wait else os.WNOHANG)
            except ChildProcessError:
                return "gone"
            if pid == 0:
                return None
            self.status = status
        if os.WIFSIGNALED(self.status):
            sig = os.WTERMSIG(self.status)
            try:
                return "signal " + signal.Signals(sig).name
            except ValueError:
                return "signal %d" % sig
        return "exit code %d" % os.WEXITSTATUS(self.status)

    def stop(self):
        """Ends the process without waiting for it: SIGKILL (after an exit
        request that a well-behaved process may act on first)."""
        try:
            self.send({"op": "exit"})
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def close(self):
        """stop(), then waits until the process is reaped."""
        self.stop()
        self.exit_status()
