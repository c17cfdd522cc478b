"""The candidate's process in the run stage.

Forked by the judge (run_stage.py) before CUDA exists and before the
reference or kboxd's seed is read, so nothing in this address space ever held
the reference's model, its outputs, the comparison or the trial seeds: a
candidate's native code can read all of this process's memory and finds none
of them. Right after the fork it takes its boundary (boundary.py: its own
cgroup, uid and environment), closes the result pipe (only the
judge reports to kboxd), installs the strict seccomp filter and the audit
hook, imports the candidate, and then serves the judge's commands one at a
time (docs/judge-boundary.md):

  setup   harness only: CUDA, the strict filter, the guard's snapshot
  import  the candidate's module
  build   ModelNew(*init inputs)
  call    one forward on inputs the judge sent: loaded into fresh tensors,
          timed by the process's clock, its output kept (every forward of
          the stage is a call, correctness trials and timed calls alike;
          observe adds the op trace and the launch probe)
  save    the kept output (and changed inputs) back to the judge

Between commands it runs nothing: the judge freezes its cgroup while it works.
The loop is the only harness code that runs after the candidate's import, and
every function it calls was bound before the candidate loaded; the guard
checks after every command that nothing the loop or a timer relies on was
replaced (and puts back what was).

What this process says is untrusted: the judge compares the outputs itself,
checks the reported times against its own clock, and takes findings from here
as evidence against the candidate, never for it.
"""
import ctypes
import os
import signal
import sys

import torch

from . import (audit, boundary, candidate_import, channel, crossing, dynamic_checks, errors,
               exchange, extension_hook, inputs, launch_probe, modules, protocol, sanitize,
               stage, strict_filter, timing)

_PR_SET_PDEATHSIG = 1
_DTYPES = {"PRECISION_FP16": torch.float16, "PRECISION_BF16": torch.bfloat16}
_MAX_KERNEL_NAMES = 64
# Harness modules whose functions the guard watches (besides torch and time).
_GUARDED_MODULES = (channel, crossing, dynamic_checks, errors, exchange, inputs, launch_probe, modules,
                    sanitize, timing)
_no_grad = torch.no_grad
# Commands after which the guard also checks the wide namespaces.
_WIDE_CHECK_OPS = frozenset(("import", "build", "save"))

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
    def __init__(self, cmd_fd, reply_fd, audit_fd, arena=None, in_arena=None, sock=None):
        self.reader = channel.LineReader(cmd_fd)
        # Outputs go out through `arena`, inputs come in through `in_arena`;
        # what does not fit crosses as a memfd on `sock` (crossing.py).
        self.crossing = crossing.Crossing(sock, send_arena=arena, receive_arena=in_arena)
        self.arena = arena
        self.in_arena = in_arena
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
        self.kept = None  # (output, inputs, inputs unchanged) of the last call
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
                reply = {"harness_error": errors.exception_line(e), "at": errors.harness_frame(e)}
            except BaseException as e:  # Our own failure: the judge reports HARNESS_FAILED.
                reply = {"harness_error": errors.one_line(errors.exception_line(e), 1000),
                         "at": errors.harness_frame(e)}
            # After every command, whatever it ran: nothing the loop or the
            # timers rely on may stay replaced into the next one. The wide
            # namespaces too after the commands where the candidate's own
            # code sets up or is observed, and after every save (asked after
            # a random share of the timed calls: no call can count on being
            # unchecked).
            self._check_guard(wide=op in _WIDE_CHECK_OPS or bool(cmd.get("observe")))
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
        watched function the candidate replaced is put back and reported
        before the harness goes on."""
        try:
            return fn(*args)
        except extension_hook.InfraError:
            raise
        except BaseException as e:
            raise CandidateRaised(e)
        finally:
            self._check_guard(wide=False)

    def _check_guard(self, wide=True):
        if self.guard is None:
            return
        replaced = self.guard.check(wide)
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
        # Whatever the op trace's first use imports (torch._dynamo, ~6 s on
        # the GPU host, before trace_ops stopped PyTorch's wrapper from
        # loading it): here, during set-up, not on the device's turn; and
        # before the guard's snapshot (torch._dynamo rebinds torch.manual_seed).
        t0 = timing.now_ms()
        dynamic_checks.preload_dispatch_tracing()
        phase["candidate_trace_preload"] = timing.now_ms() - t0
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
        init = self.crossing.receive(cmd.get("init"))
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

    # -- one call -------------------------------------------------------------------
    def _forward(self, x):
        with _no_grad():
            out = self.model(*x)
        timing.device_sync(self.device)  # async CUDA errors belong to the candidate
        return out

    def _inputs(self, cmd):
        """The inputs a command names, as fresh tensors of their own on the
        device (each at offset 0, as get_inputs() would have made it)."""
        x = self.crossing.receive(cmd.get("inputs"), device=self.device)
        if not isinstance(x, list):
            raise ValueError("the judge sent inputs that are not a list")
        return x

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

    def op_call(self, cmd):
        """One forward on the inputs the command names, the same path for
        every forward of the stage. Flags: cover (GPU: the launch cover, see
        timing.Clock; false for the judge's uncovered calls), check_inputs
        (copy them first, to tell whether forward changed them), observe
        (the op trace and, with probe, the launch probe: the correctness
        trials), fit (size the cover on these inputs instead of timing a
        call), empty (time an empty body: the judge's calibration)."""
        self.kept = None
        pinned_before = self._pin_ms()
        t0 = timing.now_ms()
        x = self._inputs(cmd)
        kept = _copy_if_small(x) if cmd.get("check_inputs") else None
        t1 = timing.now_ms()
        reply = {}
        if cmd.get("fit"):
            self.client(self.clock.fit, lambda: self._forward(x))
            return {"cover_ms": self.clock.cover_ms}
        # The judge's calibration (empty): the same path as a timed call,
        # the inputs' load and the checks after it included, with nothing in
        # the timed region.
        body = (lambda: None) if cmd.get("empty") else (lambda: self._forward(x))
        before = dynamic_checks.thread_snapshot()
        if cmd.get("observe"):
            out, observed = self._observed(x, bool(cmd.get("kernels")), bool(cmd.get("launch_probe")))
            reply.update(observed)
            if cmd.get("copies"):
                # Evidence of a cache that replays results: the model keeps a
                # copy of what it returned (the judge compares with the
                # reference's).
                reply["output_copies"] = self.client(dynamic_checks.output_copies, self.model, out)
        else:
            t = self.client(self.clock.time, body, cmd.get("cover", True) is not False)
            out = t.out
            reply.update(ms=t.ms, host_ms=t.host_ms, outran=t.outran, cover_gpu_ms=t.cover_gpu_ms)
        left = dynamic_checks.new_threads(before)
        if left:
            self.findings.add("run.thread-started", "forward left %d thread(s) running (%s)" % (
                len(left), ", ".join(sorted({t.name for t in left}))[:80]))
        t2 = timing.now_ms()
        broken, aliases = self._contract(out, x)
        if broken:
            reply["contract"] = broken
        else:
            unchanged = kept is not None and dynamic_checks.same_values(x, kept)
            self.kept = (out, x, unchanged)
            reply.update(aliases=aliases, inputs_kept=unchanged)
        del kept
        # Where a call's time goes on this side (the judge's phase_ms):
        # load, forward, the input check; pin: the arenas' page-locking.
        reply["steps_ms"] = {"load": t1 - t0, "forward": t2 - t1, "save_check": timing.now_ms() - t2,
                             "pin": self._pin_ms() - pinned_before,
                             "pin_failed": self._pin_ms(failed=True)}
        return reply

    def op_save(self, cmd):
        """Sends the last call's output back (with its inputs when asked and
        changed); asked only after the call, so the candidate cannot know
        which calls are looked at. Its output is then poisoned: a memoised
        copy is worthless from now on."""
        if self.kept is None:
            raise ValueError("no kept output to save")
        out, x, unchanged = self.kept
        self.kept = None
        with_inputs = bool(cmd.get("inputs")) and not unchanged
        t0 = timing.now_ms()
        where = self.crossing.send({"out": out, "inputs": x} if with_inputs else {"out": out})
        self.write_ms = timing.now_ms() - t0
        keep = list(dynamic_checks.tensors(x))
        if isinstance(self.model, torch.nn.Module):
            keep += list(self.model.parameters()) + list(self.model.buffers())
        dynamic_checks.poison(out, keep)
        return {"output": where, "steps_ms": {"save_write": self.write_ms}}

    def _pin_ms(self, failed=False):
        return sum(a.pin_ms for a in (self.arena, self.in_arena)
                   if a is not None and (a.pin_failed or not failed))

    # -- observation (the correctness trials) ---------------------------------------
    def _observed(self, x, kernels, use_launch_probe):
        """(output, reply fields) of one forward under the ATen dispatch trace
        and, on a GPU with kernels to look for, a launch probe: which library
        ops ran and which kernels launched. The probe is CUPTI's callback API
        (launch_probe) when use_launch_probe, else torch.profiler; the
        reply's "probe" says which."""
        fallback = None
        if self.device.type == "cuda" and kernels and use_launch_probe:
            probe = self.launch_probe
            try:
                if probe is None:
                    raise launch_probe.ProbeUnavailable(self.launch_probe_error or "not prepared")
                probe.start()
            except (launch_probe.ProbeUnavailable, launch_probe.ProbeRefused) as e:
                fallback = "%s: %s" % (type(e).__name__, errors.one_line(str(e))[:200])
            else:
                try:
                    out, ops = self._trace(x)
                finally:
                    probe.stop()
                seen = probe.result()
                return out, {"ops": ops, "profiled": True, "probe": "cupti",
                             "kernels": seen["kernels"][:_MAX_KERNEL_NAMES * 4],
                             "graph_launches": seen["graph_launches"], "dropped": seen["dropped"]}
        out, reply = self._profiled(x, kernels)
        if fallback:
            reply["cupti_error"] = fallback
        return out, reply

    def _profiled(self, x, want_kernels):
        kernels = set()
        if self.device.type == "cuda" and want_kernels and _profile is not None:
            try:
                prof = _profile(activities=[_ProfilerActivity.CUDA])
                prof.__enter__()
            except Exception as e:
                out, ops = self._trace(x)
                return out, {"ops": ops, "profiler_error": errors.exception_line(e)[:200]}
            try:
                out, ops = self._trace(x)
            finally:
                prof.__exit__(None, None, None)
            for event in prof.events():
                if "CUDA" in str(getattr(event, "device_type", "")):
                    kernels.add(str(event.name)[:200])
            return out, {"ops": ops, "profiled": True, "probe": "profiler",
                         "kernels": sorted(kernels)[:_MAX_KERNEL_NAMES * 4]}
        out, ops = self._trace(x)
        return out, {"ops": ops, "profiled": False, "probe": "profiler", "kernels": []}

    def _trace(self, x):
        out, ops = self.client(dynamic_checks.trace_ops, lambda: self._forward(x))
        return out, dynamic_checks.library_ops(ops)


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


def child_main(cmd_fd, reply_fd, audit_fd, close_fds, arena=None, in_arena=None, spec_boundary=None,
               sock=None):
    """Entry point after fork; never returns. The boundary's steps come first
    (boundary.enter_candidate): a child that cannot take them serves nothing."""
    try:
        try:
            boundary.enter_candidate(spec_boundary, close_fds)
        except (boundary.BoundaryError, OSError) as e:
            os.write(2, ("kbox: the candidate's process could not take its boundary: %s\n"
                         % errors.one_line(str(e))).encode("utf-8", "replace"))
            os._exit(_BOUNDARY_FAILED)
        stage.apply_deferred_threads()
        if spec_boundary is None:
            _die_with_parent()
        os.set_blocking(audit_fd, False)
        Worker(cmd_fd, reply_fd, audit_fd, arena, in_arena, sock).serve()
    except BaseException:
        pass
    os._exit(0)


# The child's exit status when its boundary could not be set up.
_BOUNDARY_FAILED = 3


def _die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


class CandidateProcess(object):
    """The judge's handle on the candidate's process."""

    def __init__(self, result_fd, arena=None, in_arena=None, spec_boundary=None, cgroup_fds=()):
        """arena, in_arena: the judge's exchange.Arenas; the forked process
        shares their mappings, writes its outputs to arena and reads the
        judge's inputs from in_arena. spec_boundary: the StageSpec's
        CandidateBoundary (boundary.py), or None. cgroup_fds: descriptors of
        the judge's that the child must not keep."""
        cmd_r, cmd_w = os.pipe()
        reply_r, reply_w = os.pipe()
        audit_r, audit_w = os.pipe()
        judge_sock, candidate_sock = crossing.socketpair()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            # Only this thread survives fork; nothing else of the judge runs here.
            # The arena's mapping is inherited; its descriptor is not needed.
            close = (cmd_w, reply_r, audit_r, result_fd, judge_sock.fileno()) + tuple(
                a.fd for a in (arena, in_arena) if a is not None) + tuple(cgroup_fds)
            child_main(cmd_r, reply_w, audit_w, close, arena, in_arena, spec_boundary, candidate_sock)
        os.close(cmd_r)
        os.close(reply_w)
        os.close(audit_w)
        candidate_sock.close()
        # Inputs go out through in_arena, outputs come back through arena.
        self.crossing = crossing.Crossing(judge_sock, send_arena=in_arena, receive_arena=arena)
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
        self.last_op = str(cmd.get("op", ""))
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
