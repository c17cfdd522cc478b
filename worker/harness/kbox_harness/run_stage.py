"""STAGE_RUN: the judge. Runs the reference, compares, times; never runs candidate code.

The stage is two processes (docs/anticheat.md, "Two processes"). This one,
the judge, forks the candidate's process first (candidate_worker.py: before
CUDA, before the reference loads, before kboxd's seed is read), then holds
the reference model, the trial inputs, the reference's outputs and the
comparison. It hands the candidate's process each input as a file, reads the
candidate's output back from a file it opens itself, and times the reference
and the candidate in interleaved rounds, checking the candidate's own clock
against its own.
"""
import ctypes
import json
import os
import random
import select
import sys
import tempfile

import torch

from . import (boundary, candidate_worker, channel, compare, crossing, dynamic_checks, errors,
               exchange, fingerprint, inputs, modules, native_check, sanitize, strict_filter, timing)
from . import candidate_import, judge_cached_timing, judge_timing, judging, protocol, rounding, stage
from .protocol import CANDIDATE, HARNESS, REFERENCE

_DTYPES = {"PRECISION_FP16": torch.float16, "PRECISION_BF16": torch.bfloat16}

_MAX_EXCHANGE_BYTES = 8 << 30



def _arena(capacity, name):
    """Shared memory that tensors cross between the judge and the
    candidate's process (exchange.Arena), or None (capacity 0, or no memfd
    here): they then go through files."""
    if not capacity:
        return None
    try:
        return exchange.Arena.create(capacity, name)
    except (OSError, ValueError) as e:
        sys.stderr.write("kbox: exchange arena not used (%s); outputs go through files\n"
                         % errors.one_line(str(e)))
        return None


def _output_can_cross(ref_out):
    """Raises exchange.TooLarge when an output as large as the reference's
    could not cross back from the candidate's process: kbox's limit, found
    here, where it is kbox's failure. Met first in the candidate's process,
    after candidate code ran there, it would read as the candidate's."""
    limit = exchange.crossing_limit()
    need = exchange.layout_bytes({"out": ref_out})
    if limit is not None and need > limit:
        raise exchange.TooLarge("the candidate's output (%d bytes, as large as the reference's) cannot "
                                "cross back from its process: over the stage's file size limit (%d bytes)"
                                % (need, limit))


def read_secret(spec):
    """kboxd's seed. From the secret file when kboxd wrote one (it is deleted
    at once, after the candidate's process was forked, so that process never
    sees it); else from the spec (tests, and the insecure mode's old specs)."""
    if not spec.secret_path:
        return spec.seed
    with open(spec.secret_path, "r", encoding="utf-8") as f:
        secret = json.load(f)
    try:
        os.unlink(spec.secret_path)
    except OSError:
        pass
    return int(secret["seed"])


class RunStage(judge_timing.TimingRounds, judge_cached_timing.CachedReferenceTiming):
    def __init__(self, spec, pipe):
        self.spec = spec
        self.pipe = pipe
        self.device = torch.device("cpu" if not spec.is_gpu else "cuda:0")
        self.dtype = _DTYPES.get(spec.precision, torch.float32)
        self.scrubber = candidate_import.default_scrubber(spec)
        self.phase_ms = {}
        self.trials = []
        self.report = {"phase_ms": self.phase_ms}
        self.findings = dynamic_checks.Findings()
        self.rng = random.SystemRandom()
        self.child = None
        self.seed = 0
        self.arena = None  # the candidate's outputs (exchange.Arena), or None: files
        self.in_arena = None  # inputs for the candidate's process, likewise
        self.outputs_via = {"arena_outputs": 0, "memfd_outputs": 0}  # the report's counts
        self.ref_sample = None  # (inputs, reference output) of trial 0, for the floor
        self.tolerances = {}  # atol per input set (_tolerance)
        self.rounding = rounding.RoundingAllowance(self)  # the reference's own rounding error, allowed
        self._timing_sets = 0  # timing input sets drawn (judge_timing._timing_set)
        # The empty rounds' (get_inputs, (reference model, graph) or None): judge_timing._calibrate.
        self._calibration = None
        self.cgroup = None  # boundary.CandidateCgroup: the candidate's, frozen while the judge works.
        self.replied_at = 0.0  # receive(): when the last reply was read (timing.now_ms)
        self.in_flight = False  # a command sent whose reply is not read yet
        self.turn_fd = None  # The device turn's FIFO (_await_turn), when prepared ahead.
        self.notes_fd = None  # This judge's notes to kboxd (_note), with the turn's FIFO.
        # An idle check that found the process busy, awaiting its confirmation
        # (_idle_check): its message and the calls left to confirm it on.
        self._idle_suspect = None
        self._idle_confirmations_left = 0

    # -- running client code ------------------------------------------------
    def call(self, fn, *args):
        """Runs reference code; any exception becomes judging.ClientFailed(REFERENCE).
        The candidate's process is frozen first: nothing of it runs beside
        the reference (its draws, its calls, its timing)."""
        self._freeze()
        self.pipe.enter(REFERENCE)
        try:
            return fn(*args)
        except BaseException as e:
            raise judging.ClientFailed(REFERENCE, exc=e)
        finally:
            self.pipe.enter(HARNESS)

    def ask(self, cmd, party=CANDIDATE):
        """Sends one command to the candidate's process and returns its reply.
        While it works, kboxd is told whose code runs (`party`), so a timeout
        or a crash there is blamed correctly. Only the set-up before the
        candidate's import is HARNESS: from the import on, the process is
        the candidate's, and whatever ends it (a finalizer, a thread, a
        signal handler it left) is its doing, whichever command was
        running."""
        self.send(cmd, party)
        return self.receive(party)

    def send(self, cmd, party=CANDIDATE):
        self.pipe.enter(party)
        self._thaw()
        self.in_flight = True
        try:
            self.child.send(cmd)
        except OSError:
            self._child_gone(party)

    def receive(self, party=CANDIDATE, idle_check=False):
        """The reply to the command sent. self.replied_at: this process's
        clock when the reply was read. idle_check: then watch the process for
        work left running (_idle_check)."""
        self.pipe.enter(party)
        try:
            reply = self.child.receive()
            self.in_flight = False
        except channel.ChannelClosed:
            self._child_gone(party)
        except channel.ProtocolError as e:
            self.pipe.enter(HARNESS)
            if party == CANDIDATE:
                raise judging.ClientFailed(CANDIDATE, message="candidate broke the harness protocol: %s" % e)
            raise self._failed_in_candidate_process(str(e))
        self.replied_at = timing.now_ms()
        if idle_check or (self._idle_suspect is not None and getattr(self.child, "last_op", "") == "call"):
            self._idle_check()
        self.pipe.enter(HARNESS)
        self._take_findings(reply.get("findings"))
        if "error" in reply:
            raise judging.ClientFailed(CANDIDATE, error=reply.get("error"),
                               message=str(reply.get("message") or "candidate raised"))
        if "harness_error" in reply:
            if party == CANDIDATE:
                # Raised while candidate code ran: kbox cannot tell it from a
                # candidate that broke the process's harness side.
                raise judging.ClientFailed(CANDIDATE, message="candidate's process failed: %s"
                                   % errors.one_line(str(reply["harness_error"])))
            raise self._failed_in_candidate_process(str(reply["harness_error"]), reply.get("at"))
        return reply

    def _failed_in_candidate_process(self, what, at=None):
        """kbox's own failure in the candidate's process, naming the command
        and, where its reply said, the harness call that raised."""
        where = "candidate's process, command %r" % getattr(self.child, "last_op", "")
        if isinstance(at, str) and at:
            where += ", " + errors.one_line(at, 100)
        e = judging.HarnessFailed("candidate process: %s" % what)
        e.where = where
        return e

    def _thaw(self):
        if self.cgroup is not None:
            self.cgroup.thaw()

    def _freeze(self):
        """Stops the candidate's process, its threads too, before the judge
        runs the reference or reads and compares an output: nothing of it
        runs beside them. It stays frozen until the next command (send). One
        that cannot be frozen is the candidate's doing."""
        if self.cgroup is None or self.cgroup.frozen or self.in_flight:
            # In flight: the judge overlaps work with a command (its set-up
            # beside the candidate's, before any candidate code loads).
            return
        try:
            self.cgroup.freeze()
        except boundary.BoundaryError as e:
            self.pipe.enter(HARNESS)
            self.findings.add("run.background-work", errors.one_line(str(e)))
            raise judging.ClientFailed(CANDIDATE, message=errors.one_line(
                "%s (its threads resisted the judge's freezer)" % e))

    def _idle_check(self):
        """The candidate's process has answered and has nothing to do until
        the next command: after a short settle (threads finishing, OpenMP
        workers going to sleep), any CPU it still uses is work outside the
        call, running beside what the judge does next (the reference's
        timing) or finishing the call's work after its clock stopped
        (run.background-work). Its OS threads are counted too: native ones
        (at::launch's pool, std::thread, OpenMP) are invisible to Python.

        One busy window is a suspicion, confirmed on the replies to the next
        _IDLE_CONFIRM_CALLS calls: a single window also catches what an
        honest process does once (a garbage collection, the end of its reply
        delayed by a loaded host's scheduler: 2 of 210 honest GPU jobs on a
        32-core host building 25 candidates at once), while work a candidate
        leaves running after its calls shows after the next ones too. Work it
        runs only now and then is still frozen while the judge works (the
        freezer is the defence; this check only names it)."""
        if self.cgroup is None:
            return
        t0 = timing.now_ms()
        try:
            _sleep(_IDLE_SETTLE_S)
            c0, w0 = self.cgroup.cpu_ns(), timing.now_ms()
            if c0 is None:
                return
            _sleep(_IDLE_WINDOW_S)
            c1, w1 = self.cgroup.cpu_ns(), timing.now_ms()
            threads = self.cgroup.threads()
        finally:
            self._summed("idle_checks", t0)
        busy = (c1 - c0) / 1e6 / max(w1 - w0, 1e-3)
        if busy <= _IDLE_BUSY_CORES:
            if self._idle_suspect is not None:
                self._idle_confirmations_left -= 1
                if self._idle_confirmations_left <= 0:
                    sys.stderr.write("kbox: the candidate's process %s after a call; not again after "
                                     "the next %d: no finding\n" % (self._idle_suspect, _IDLE_CONFIRM_CALLS))
                    self._idle_suspect = None
            return
        seen = "kept %.1f cores busy for %.0f ms (%s threads)" % (busy, w1 - w0, threads)
        if self._idle_suspect is None:
            self._idle_suspect = seen
            self._idle_confirmations_left = _IDLE_CONFIRM_CALLS
            return
        self.findings.add("run.background-work", (
            "after a call returned, the candidate's process %s, and after a later call %s, while it had "
            "nothing to do: work outside the timed call" % (self._idle_suspect, seen)))
        self._idle_suspect = None

    def _child_gone(self, party):
        self.pipe.enter(HARNESS)
        how = self.child.exit_status()
        self._take_findings(None)
        if party == CANDIDATE and how == "signal SIGSYS":
            raise judging.ClientFailed(CANDIDATE, violation=True, message=(
                "candidate tried to create a process, run a program, or change its limits or "
                "identity, which the sandbox forbids once candidate code runs (killed by the "
                "strict seccomp filter)"))
        if party == CANDIDATE:
            # Candidate code cannot send SIGKILL (strict_filter.install_no_sigkill):
            # the job's cgroup (out of memory) or something outside the job did.
            raise judging.ClientFailed(CANDIDATE, message="candidate's process died (%s)" % how,
                                       killed=how == "signal SIGKILL")
        failed = judging.HarnessFailed(
            "the candidate's process died (%s) before running candidate code" % how)
        failed.candidate_killed = how == "signal SIGKILL"  # from outside the job, or out of memory
        raise failed

    def _take_findings(self, pairs):
        for pair in pairs or []:
            if isinstance(pair, list) and len(pair) == 2:
                rule, message = str(pair[0]), str(pair[1])
                if rule.startswith("run."):
                    self.findings.add(rule, errors.one_line(message))
        for line in self.child.audit.drain():
            rule, _, text = line.partition(" ")
            if rule == "run.forbidden-call":
                self.findings.add(rule, "denied " + text)

    def seed_all(self, seed):
        torch.manual_seed(seed)
        random.seed(seed)
        if self.device.type == "cuda":
            torch.cuda.manual_seed_all(seed)
        try:
            import numpy
            numpy.random.seed(seed % (1 << 32))
        except ImportError:
            pass

    def on_device(self, x):
        """Tensors moved to the stage's device, dtypes as they are."""
        if isinstance(x, torch.Tensor):
            return x.to(self.device)
        if isinstance(x, (list, tuple)):
            return type(x)(self.on_device(v) for v in x)
        return x

    def prepare(self, x):
        """Moves tensors to the device and floating ones to the stage's dtype."""
        if isinstance(x, torch.Tensor):
            x = x.to(self.device)
            return x.to(self.dtype) if x.is_floating_point() else x
        if isinstance(x, (list, tuple)):
            return type(x)(self.prepare(v) for v in x)
        return x

    def build_model(self, cls, init, seed):
        self.seed_all(seed)
        model = cls(*init)
        if isinstance(model, torch.nn.Module):
            model.to(self.device)
            model.to(self.dtype)  # casts floating parameters and buffers only
        return model

    def forward(self, model, x):
        with torch.no_grad():
            out = model(*x)
        timing.device_sync(self.device)  # async CUDA errors belong to this party
        return out

    def draw(self, seed, get_inputs):
        """The reference's get_inputs() under `seed`. On a GPU (torch 2.x)
        its tensor factories make the tensors there, from the GPU's own
        generator: a draw of megabytes on the CPU and the copy over took
        tens of milliseconds, many times per job (every trial and timing
        pool set). The values are other numbers of the same distribution,
        as secret as before (the seed is). A get_inputs that cannot run so
        (a CPU-only call, a NumPy round trip) is drawn on the CPU, as
        KernelBench does. phase_ms "draws" sums their time."""
        def drawn():
            self.seed_all(seed)
            return list(get_inputs())
        t0 = timing.now_ms()
        try:
            if self.device.type == "cuda" and _FACTORIES_FOLLOW_DEVICE:
                try:
                    with self.device:
                        return self.call(drawn)
                except judging.ClientFailed:
                    pass  # drawn again on the CPU below; a failure there is the reference's
            return self.call(drawn)
        finally:
            self._summed("draws", t0)

    def cross(self, x):
        """Sends x to the candidate's process (crossing.py): the field that
        names it in the next command."""
        where = self.child.crossing.send(x)
        return where

    def read_output(self, saved):
        """The candidate's output a save reply names, copied here; None when
        it cannot be read (what the candidate's process wrote is untrusted: a
        hostile output is a failed trial, never an error of kbox)."""
        where = saved.get("output")
        self._freeze()
        try:
            data = self.child.crossing.receive(where, device=self.device, max_bytes=_MAX_EXCHANGE_BYTES,
                                               wait=False)
        except crossing.CrossingError:
            return None
        kind = next(iter(where)) if isinstance(where, dict) and where else ""
        self.outputs_via["arena_outputs" if kind == "arena" else "memfd_outputs"] += 1
        return data

    # -- the stage ----------------------------------------------------------
    def run(self):
        self.pipe.enter(HARNESS)
        t0 = timing.now_ms()
        self.arena = _arena(self.spec.exchange_arena_bytes, "kbox-exchange-outputs")
        self.in_arena = _arena(self.spec.exchange_arena_bytes, "kbox-exchange-inputs") if self.arena else None
        spec_boundary = self.spec.candidate_boundary
        self.child = candidate_worker.CandidateProcess(self.pipe.fd, self.arena, self.in_arena,
                                                       spec_boundary, _cgroup_fds(spec_boundary))
        # The judge's own side of the boundary (docs/judge-boundary.md):
        # CAP_KILL alone from here, before anything of the job is read.
        boundary.settle_judge(spec_boundary)
        stage.apply_deferred_threads()
        self.cgroup = boundary.candidate_cgroup(spec_boundary)
        self._timed("fork_candidate", t0)
        try:
            # Opened after the fork: the candidate's process never holds
            # them, and unlinked, so that its code cannot open them by name;
            # not dumpable, so that it cannot reach them (or this process's
            # memory: the reference's outputs, the seed) through /proc.
            _not_dumpable()
            self.turn_fd = _open_turn(self.spec.device_turn_path)
            self.notes_fd = _open_notes(self.spec.device_notes_path)
            self.seed = read_secret(self.spec)
            # The device's part comes once the candidate's process is setting
            # up (_run): asking for it initialises CUDA here, which would
            # otherwise delay that process's own initialisation by as long.
            self.report["fingerprint"] = fingerprint.software()
            self._run()
        except judging.ClientFailed as f:
            self.pipe.enter(HARNESS)
            self._client_failed(f)
        except judging.StageEnd:
            pass
        except Exception as e:
            # kbox's own code failed (HARNESS_FAILED, INFRA_ERROR) unless it
            # ran out of GPU memory that the candidate's process holds.
            hog = _candidate_holds_device_memory(e)
            if hog is None:
                raise
            self.pipe.enter(HARNESS)
            self._device_memory_held(hog)
        finally:
            self.pipe.enter(HARNESS)
            if self.turn_fd is not None:
                os.close(self.turn_fd)
            self.turn_fd = None
            # Once, and before the candidate's process is stopped: its CUDA
            # teardown would slow the judge's own clean-up down.
            given_back = self._give_back_for_hand_over()
            t0 = timing.now_ms()
            self._thaw()  # a frozen v1 task takes SIGKILL only once thawed
            self.child.stop()
            stop_ms = timing.now_ms() - t0
            # The turn may pass while the killed process's CUDA context is
            # torn down (_hand_over_turn), else once it is reaped.
            handed_over = given_back and self._hand_over_turn(before_reap=True)
            t0 = timing.now_ms()
            self.child.close()
            self.phase_ms["close_candidate"] = stop_ms + timing.now_ms() - t0
            if given_back and not handed_over:
                self._hand_over_turn()
            if self.notes_fd is not None:
                os.close(self.notes_fd)
            self.notes_fd = None
            if self.cgroup is not None:
                self.phase_ms["freeze"] = self.cgroup.freeze_ms
                self.cgroup.close()
            self._take_findings(None)
        if self.trials:
            self.report["trials"] = self.trials
        self.report.update((k, n) for k, n in self.outputs_via.items() if n)
        arenas = [a for a in (self.arena, self.in_arena) if a is not None]
        if any(a.pin_ms for a in arenas):
            # The judge's own page-locking of the arenas (the candidate's is
            # trial_candidate_pin); arena_pin_failed: a cudaHostRegister
            # that failed, after which copies go through the driver's staging.
            self.phase_ms["arena_pin"] = sum(a.pin_ms for a in arenas)
            if any(a.pin_failed for a in arenas):
                self.phase_ms["arena_pin_failed"] = sum(a.pin_ms for a in arenas if a.pin_failed)
        verdicts = self.findings.verdicts()
        if verdicts:
            self.report["verdicts"] = verdicts
        return self.report

    def _client_failed(self, f):
        hog = _candidate_holds_device_memory(f.exc) if f.party == REFERENCE else None
        if hog:
            # A reference that fits an empty GPU but not beside the candidate
            # is the candidate's doing, not the request's (REFERENCE_ERROR).
            self._device_memory_held(hog)
            return
        if f.party == REFERENCE:
            self.report.update(
                outcome="REFERENCE_FAILED",
                message=errors.one_line("reference raised %s" % sanitize.sanitize(
                    errors.exception_line(f.exc), self.scrubber)),
                error=errors.runtime_error(f.exc, "PHASE_RUN", self.scrubber,
                                           self.spec.max_log_bytes, self.spec.candidate_path))
            return
        error = f.error if isinstance(f.error, dict) else {
            "type": "SandboxViolation" if f.violation else "CandidateProcessError",
            "message": f.message, "traceback": "", "candidate_line": 0, "phase": "PHASE_RUN"}
        denied = self._denied(f.message)
        if f.violation:
            outcome, message = "CANDIDATE_VIOLATION", f.message
        elif denied:
            outcome, message = "CANDIDATE_VIOLATION", denied
        else:
            outcome, message = "CANDIDATE_FAILED", f.message
        self.report.update(outcome=outcome, message=errors.one_line(message), error=error)
        if f.killed and outcome == "CANDIDATE_FAILED":
            self.report["candidate_killed"] = True

    def _device_memory_held(self, why):
        # The GPU is this job's alone: memory that neither the judge nor the
        # reference holds is the candidate's process's.
        self.report.update(outcome="CANDIDATE_FAILED", message=errors.one_line(why), error={
            "type": "DeviceMemoryHeld", "message": why, "traceback": "",
            "candidate_line": 0, "phase": "PHASE_RUN"})

    def _denied(self, then):
        """When the candidate failed after the audit hook refused it something,
        what it tried is the story, not the exception it then hit: the message
        for a CANDIDATE_VIOLATION; None when nothing was refused."""
        denied = self.child.audit.drain()
        if not denied:
            return None
        return errors.one_line("candidate tried %s, which the sandbox forbids (then: %s)"
                               % (denied[0].partition(" ")[2], then))

    def _timed(self, name, t0):
        self.phase_ms[name] = timing.now_ms() - t0

    def _summed(self, name, t0):
        """Adds the time since t0 to phase `name` (a step of every trial);
        returns now, the next step's t0."""
        now = timing.now_ms()
        self.phase_ms[name] = self.phase_ms.get(name, 0.0) + (now - t0)
        return now

    def _candidate_steps(self, reply):
        """Adds what the candidate's process says its forward's steps took
        (load, forward, save; pin: its arenas' page-locking within load and
        save) to the trial_candidate_* phases. Diagnostics
        only: the figures come from a process candidate code ran in, so
        anything but a finite number from 0 to an hour is left out."""
        steps = reply.get("steps_ms")
        if not isinstance(steps, dict):
            return
        for step in ("load", "forward", "save", "save_check", "save_write", "pin"):
            ms = steps.get(step)
            if isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0.0 <= ms <= 3.6e6:
                name = "trial_candidate_" + step
                self.phase_ms[name] = self.phase_ms.get(name, 0.0) + float(ms)
        failed = steps.get("pin_failed")
        if isinstance(failed, (int, float)) and not isinstance(failed, bool) and 0.0 < failed <= 3.6e6:
            self.phase_ms["trial_candidate_pin_failed"] = float(failed)  # a running total there

    def _child_spec(self):
        """The spec the candidate's process gets: no seed, nothing of the reference's."""
        spec = self.spec
        return {"stage": spec.stage, "reference_path": spec.reference_path,
                "candidate_path": spec.candidate_path, "build_dir": spec.build_dir,
                "backend": spec.backend, "precision": spec.precision,
                "max_log_bytes": spec.max_log_bytes,
                "strict_seccomp_bpf": spec.strict_seccomp_bpf, "ptxas_path": spec.ptxas_path,
                "launch_probe_library": spec.launch_probe_library}

    def _audit_roots(self):
        """What the candidate's Python code may open: the job's own directories
        and the installed software (read), its own scratch (write): its
        environment's, never the judge's (judge-boundary.md)."""
        spec = self.spec
        env = dict(os.environ)
        if spec.candidate_boundary is not None and spec.candidate_boundary.env:
            env = dict(kv.partition("=")[::2] for kv in spec.candidate_boundary.env)
        job = [os.path.dirname(spec.candidate_path), spec.build_dir]
        scratch = [env.get("TMPDIR") or tempfile.gettempdir()]
        for name in ("HOME", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH"):
            if env.get(name):
                scratch.append(env[name])
        installed = ["/usr", "/opt", "/lib", "/lib64", "/etc/ld.so.cache", "/dev/null",
                     "/dev/urandom", "/dev/shm", "/proc/self/maps", "/proc/cpuinfo"]
        installed += [p for p in [sys.prefix, sys.base_prefix, sys.exec_prefix] + sys.path if p]
        installed.append(os.path.dirname(os.path.dirname(torch.__file__)))
        return {"read_roots": sorted(set(job + scratch + installed)),
                "write_roots": sorted(set(scratch + ["/dev/shm", "/dev/null"]))}

    def _candidate_library_dirs(self):
        """Where the candidate's process can find libraries the compile stage
        left: the build directory and the candidate's Triton cache."""
        dirs = [self.spec.build_dir]
        boundary_env = self.spec.candidate_boundary.env if self.spec.candidate_boundary else []
        for kv in boundary_env:
            name, _, value = kv.partition("=")
            if name == "TRITON_CACHE_DIR" and value:
                dirs.append(value)
        return dirs

    def _init_cuda(self):
        """Everything CUDA sets up once (context, its threads, cuBLAS)
        happens here, before the strict filter, under HARNESS."""
        torch.cuda.init()
        x = torch.ones((16, 16), device=self.device)
        y = (x @ x + 1).sum()
        torch.cuda.synchronize(self.device)
        del x, y

    def _set_up(self):
        """Everything before the candidate's code loads: both processes' CUDA
        start, the reference's import, the strict filter. Returns the
        reference's (Model, get_inputs, get_init_inputs)."""
        spec = self.spec
        # The candidate's process sets itself up while this one does.
        t0 = timing.now_ms()
        self.send({"op": "setup", "spec": self._child_spec()}, HARNESS)
        if self.device.type == "cuda":
            self._init_cuda()
        self.report["fingerprint"].update(fingerprint.device(self.device))
        t1 = timing.now_ms()
        loaded = self.call(_load_reference, spec.reference_path)
        self._timed("import_reference", t1)
        t1 = timing.now_ms()
        for rule, message in native_check.check(self._candidate_library_dirs()):
            self.findings.add(rule, message)
        self._timed("native_imports", t1)
        if spec.strict_seccomp_bpf:
            t1 = timing.now_ms()
            strict_filter.install(spec.strict_seccomp_bpf)
            self._timed("strict_filter", t1)
        setup = self.receive(HARNESS)
        self.phase_ms.update(setup.get("phase_ms") or {})
        self._timed("setup", t0)
        return loaded

    def _set_up_again(self, e):
        """Before the turn another job holds the device (and may have filled
        its memory): kboxd runs the stage again, holding it."""
        self._note(protocol.SET_UP_DONE)
        self._await_turn()
        self.pipe.enter(HARNESS)
        self.report.update(outcome="HARNESS_FAILED", set_up_again=True, message=errors.one_line(
            "set-up failed before the device's turn: %s" % errors.exception_line(e)))
        raise judging.StageEnd()

    def _await_turn(self):
        """A stage prepared ahead (docs/run-stages-ahead.md) waits here for
        the device: nothing of the candidate has run, and nothing of it runs
        before kboxd's byte arrives. End of file: kboxd withdrew the turn."""
        if self.turn_fd is None:
            return
        t0 = timing.now_ms()
        got = os.read(self.turn_fd, 1)
        self._timed("turn_wait", t0)
        if not got:
            self.report.update(outcome="HARNESS_FAILED",
                               message="kboxd withdrew the device's turn before the candidate ran")
            raise judging.StageEnd()

    def _note(self, note):
        """One byte to kboxd (StageSpec.device_notes_path): a
        protocol.DeviceTurnNote (SET_UP_DONE, QUIET_ASKED, QUIET_OVER,
        DONE_WITH_DEVICE)."""
        if self.notes_fd is not None:
            os.write(self.notes_fd, note)

    def _give_back_for_hand_over(self):
        """Whether this stage may hand its turn over (_hand_over_turn) as far
        as the judge goes: kboxd takes hand-overs, the candidate was judged
        correct or incorrect (any other end may leave the device needing a
        probe before the next job, so the turn waits for the stage's end),
        the strict filter holds (the candidate's process can start no other
        to outlive it), and this judge's own device memory is given back (its
        calibration set and sample dropped, at most _HAND_OVER_RESERVED_BYTES
        left in PyTorch's cache), so the next job cannot run out of memory
        for want of this one's. Its time is phase_ms "hand_over"."""
        if self.notes_fd is None or self.report.get("outcome") not in ("OK", "INCORRECT"):
            return False
        if not self.spec.hand_over_turn or not self.spec.strict_seccomp_bpf:
            return False
        t0 = timing.now_ms()
        self.ref_sample = None
        self._calibration = None
        self.rounding = rounding.RoundingAllowance(self)  # drops its float64 copy of the reference
        try:
            return self.device.type != "cuda" or _device_memory_given_back()
        except Exception:  # noqa: BLE001  (the turn then passes at the stage's end)
            return False
        finally:
            self._timed("hand_over", t0)

    def _hand_over_turn(self, before_reap=False):
        """DONE_WITH_DEVICE to kboxd, after _give_back_for_hand_over: this stage is done
        with the device, so the next job's turn may start while this stage's
        processes exit; kboxd waits for that exit before any holder's timing
        (docs/run-stages-ahead.md). Sent once the killed candidate's process
        is reaped, or (before_reap, on a GPU) while it is still being torn
        down if the device has at least _EARLY_HAND_OVER_FREE_SHARE of its
        memory free: a dying process's memory only shrinks, so the next
        job's trials cannot run out of memory for want of it. True when
        DONE_WITH_DEVICE was sent."""
        reaped = self.child.exit_status(wait=False) is not None
        if not reaped and not (before_reap and self.device.type == "cuda"):
            return False
        t0 = timing.now_ms()
        try:
            if not reaped and not _mostly_free(*torch.cuda.mem_get_info(self.device)):
                return False
            self._note(protocol.DONE_WITH_DEVICE)
            return True
        except Exception:  # noqa: BLE001  (the turn then passes at the stage's end)
            return False
        finally:
            self._summed("hand_over", t0)

    def _timing_alone(self, measure):
        """Runs measure() with the device to this stage alone: no stage
        prepared ahead is starting CUDA on it meanwhile (kboxd answers the
        QUIET_ASKED note with QUIET_GIVEN once none is, and starts none
        until QUIET_OVER). Without a turn
        (no stages ahead) the device is this stage's anyway."""
        if self.turn_fd is None or self.notes_fd is None:
            return measure()
        t0 = timing.now_ms()
        self._note(protocol.QUIET_ASKED)
        ready, _, _ = select.select([self.turn_fd], [], [], _QUIET_WAIT_S)
        got = os.read(self.turn_fd, 1) if ready else None
        self._timed("quiet_wait", t0)
        if got != protocol.QUIET_GIVEN:
            self.report.update(outcome="HARNESS_FAILED", message=(
                "kboxd did not give the device to this stage alone for timing within %d s"
                % _QUIET_WAIT_S if got is None else "kboxd closed the device's turn during the stage"))
            raise judging.StageEnd()
        try:
            return measure()
        finally:
            self._note(protocol.QUIET_OVER)

    def _run(self):
        """The judge's phases, in order: set-up (ahead of the turn when kboxd
        prepares stages ahead), the candidate's import, both models, the
        correctness trials, the second looks, the timing. A phase that ends
        the stage raises judging.StageEnd or judging.ClientFailed, or (the
        trials) reports INCORRECT."""
        Model, get_inputs, get_init_inputs = self._set_up_for_the_turn()
        t_turn = timing.now_ms()  # The device is this job's from here (or from the start).
        self._import_candidate()
        ref_model, init = self._build_models(Model, get_init_inputs)
        # The device's share of this job's start: its turn (or its stage)
        # until the first trial, the candidate's import and both models' build.
        self._timed("turn_start", t_turn)
        first = self._correctness(ref_model, get_inputs)
        if self._incorrect():
            return
        if first is not None:
            t0 = timing.now_ms()
            self._second_looks(ref_model, *first)
            self._timed("dynamic_checks", t0)
        if self.spec.measure_performance and self.spec.performance_trials > 0:
            t0 = timing.now_ms()
            try:
                self._measure_timing(ref_model, get_inputs, init)
            finally:
                self._timed("timing", t0)
        self.report.update(outcome="OK", message="correct on %d trials" % len(self.trials))

    def _set_up_for_the_turn(self):
        """_set_up, then, with stages ahead, the notes that it is over and the
        wait for the turn. (Model, get_inputs, get_init_inputs)."""
        if self.turn_fd is None:
            return self._set_up()
        try:
            loaded = self._set_up()
        except Exception as e:
            if self.spec.run_again:
                # Failed again, holding the device from the start: no other
                # job explains it, and it is final (a reference that does not
                # import is REFERENCE_ERROR, not kbox's).
                raise
            failure = e.exc if isinstance(e, judging.ClientFailed) and e.exc is not None else e
            self._set_up_again(failure)
        self._note(protocol.SET_UP_DONE)
        self._await_turn()
        return loaded

    def _import_candidate(self):
        """The candidate's module imported in its process; a build that
        failed there ends the stage (COMPILE_FAILED, or CANDIDATE_VIOLATION
        when the sandbox refused what it tried)."""
        imported = self.ask(dict({"op": "import"}, **self._audit_roots()))
        self.phase_ms["import_candidate"] = float(imported.get("import_ms") or 0.0)
        if "compile_failed" not in imported:
            return
        failed = imported["compile_failed"]
        message = errors.one_line(str(failed.get("message")))
        denied = self._denied(message)
        if denied:
            self.report.update(outcome="CANDIDATE_VIOLATION", message=denied, error={
                "type": "SandboxViolation", "message": denied, "phase": "PHASE_RUN",
                "traceback": str((failed.get("compile_log") or {}).get("text", "")),
                "candidate_line": int((failed.get("compile_log") or {}).get("first_error_line") or 0)})
        else:
            self.report.update(outcome="COMPILE_FAILED", message=message,
                               compile_log=failed.get("compile_log"))
        raise judging.StageEnd()

    def _build_models(self, Model, get_init_inputs):
        """Both models from the same init inputs and seed: (the reference's
        model here, the init inputs)."""
        t0 = timing.now_ms()
        model_seed = judging.trial_seed(self.seed, "model")
        init = self.call(lambda: (self.seed_all(model_seed), list(get_init_inputs()))[1])
        try:
            init_where = self.cross(init)
        except (TypeError, ValueError) as e:
            raise judging.ClientFailed(REFERENCE, exc=ValueError(
                "get_init_inputs() returned values kbox cannot pass on: %s" % e))
        ref_model = self.call(self.build_model, Model, init, model_seed)
        self.ask({"op": "build", "init": init_where, "model_seed": model_seed})
        self._timed("build_models", t0)
        return ref_model, init

    def _correctness(self, ref_model, get_inputs):
        """The seeded trials, into self.trials. (inputs, the candidate's
        output, atol) of trial 0 when it passed, for the second looks; else
        None."""
        t0 = timing.now_ms()
        first = None
        try:
            for i in range(self.spec.correctness_trials):
                result, cand_out, atol = self._trial(i, ref_model, get_inputs)
                self.trials.append(result)
                if i == 0 and result["passed"]:
                    first = (self.ref_sample[0], cand_out, atol)
                del cand_out
        finally:
            self._timed("correctness", t0)
        return first

    def _incorrect(self):
        """Reports INCORRECT when a trial failed; whether one did."""
        failed = [t for t in self.trials if not t["passed"]]
        if not failed:
            return False
        worst = judging.worst([t["max_abs_diff"] for t in self.trials])
        message = "%d of %d trials differ; max abs diff %s" % (
            len(failed), len(self.trials), judging.fmt(worst))
        reasons = [t["failure"] for t in failed if t.get("failure")]
        if reasons:
            message += "; " + reasons[0]
        self.report.update(outcome="INCORRECT", message=errors.one_line(message))
        return True

    # -- one correctness trial ------------------------------------------------
    def _trial_inputs(self, i, get_inputs, ref_model):
        """(distribution, inputs, reference inputs after forward, reference output)."""
        seed = judging.trial_seed(self.seed, i)
        raw = self.draw(seed, get_inputs)
        name = inputs.for_trial(i)
        if name != inputs.AS_DRAWN:
            # Redrawn on the device, in the draw's own dtype (as on the CPU
            # before), then cast to the stage's.
            x = self.prepare(inputs.transform(self.on_device(raw), name,
                                              judging.trial_seed(self.seed, "dist-%d" % i)))
            ref_in = inputs.clone(x)
            out = self.call(self.forward, ref_model, ref_in)
            if _all_finite(out) or not _all_finite_sample(self.ref_sample):
                return name, x, ref_in, out
            # The reference is not defined off its own distribution here
            # (NaN or Inf where the drawn inputs gave none): use the draw.
        x = self.prepare(raw)
        ref_in = inputs.clone(x)
        out = self.call(self.forward, ref_model, ref_in)
        return inputs.AS_DRAWN, x, ref_in, out

    def _tolerance(self, ref_out, input_set):
        """The request's atol, tightened when a trivial output would pass,
        computed once per input set (("trial", i), ("timing", j)): the second
        look at trial 0 reuses its trial's. Whether a trivial output passes
        is a property of the reference's output on that input set, which the
        candidate cannot choose or see."""
        if input_set in self.tolerances:
            return self.tolerances[input_set]
        t0 = timing.now_ms()
        found = dynamic_checks.degenerate(ref_out, self.spec.atol, self.spec.rtol)
        self._summed("degenerate_checks", t0)
        if found is None:
            atol = self.spec.atol
        else:
            name, atol = found
            self.findings.add("run.degenerate-problem",
                              "%s would pass atol=%g on this problem; judged at atol=%g"
                              % (name, self.spec.atol, atol))
        self.tolerances[input_set] = atol
        return atol

    def _trial(self, i, ref_model, get_inputs):
        """(TrialResult, candidate output, atol used) of trial i."""
        # Each step's time is summed over the trials into phase_ms
        # (trial_reference, trial_write, trial_candidate, trial_read,
        # trial_compare; the candidate's own split in trial_candidate_*).
        seed = judging.trial_seed(self.seed, i)
        t = timing.now_ms()
        name, x, ref_in, ref_out = self._trial_inputs(i, get_inputs, ref_model)
        if i == 0:
            self.ref_sample = (x, ref_out)
        ref_kept = dynamic_checks.same_values(ref_in, x)
        t = self._summed("trial_reference", t)
        if i == 0:
            _output_can_cross(ref_out)
        where = self.cross(x)
        t = self._summed("trial_write", t)
        # A call like every other of the stage, under the op trace (the
        # library compute the text did not show: ATen ops dispatched from
        # Python or from the candidate's C++, on every compared call).
        # The first and the last trial also look for copies of the output
        # the model keeps (run.output-kept).
        last = i == self.spec.correctness_trials - 1
        self.send({"op": "call", "inputs": where, "observe": True, "check_inputs": True,
                   "copies": i == 0 or last})
        idle_check = i == 0
        # While the candidate's process works, this trial's tolerance (it
        # depends on the reference's output alone: kbox's own bounded GPU
        # work, no client code). kboxd reads the window as the candidate's,
        # the only client code running then: a flood, a hang or a memory
        # limit hit meanwhile is the candidate's. The next trial's reference
        # is not made here: reference code running beside the candidate's
        # could not be told from it when a limit stops the stage.
        atol = self._tolerance(ref_out, ("trial", i))
        reply = self.receive(idle_check=idle_check)
        t = self._summed("trial_candidate", t)
        self._candidate_steps(reply)
        self._library_ops(reply)
        self._output_copies(reply, ref_model, ref_out, i)
        cand_out, broken = self._candidate_output(reply, ref_in, ref_out)
        t = self._summed("trial_read", t)
        if broken is None and cand_out is not None:
            result = self.rounding.compare(ref_model, x, ref_out, cand_out["out"], atol, "trial %d" % i)
            cand_in = cand_out["inputs"] if "inputs" in cand_out else x
            if not dynamic_checks.same_values(cand_in, x) and not dynamic_checks.same_values(cand_in, ref_in):
                broken = "candidate changed its inputs (the reference leaves them as they were)" \
                    if ref_kept else "candidate changed its inputs differently from the reference"
                self.findings.add("run.input-mutation", broken)
        self._summed("trial_compare", t)
        if broken is not None:
            result = judging.failed(broken)
        result = dict(result, seed=seed, distribution=name)
        return result, (cand_out or {}).get("out"), atol

    def _output_copies(self, reply, ref_model, ref_out, i):
        """run.output-kept: the candidate's model kept a copy of an output it
        returned, where the reference's, on this trial, keeps none."""
        kept = [str(k) for k in reply.get("output_copies") or []]
        if not kept or self.findings.has("run.output-kept"):
            return
        if self.call(dynamic_checks.output_copies, ref_model, ref_out):
            return
        self.findings.add("run.output-kept", (
            "after trial %d the model held a copy of the output it returned (%s): a store of results "
            "to replay in later calls; the reference's model keeps none" % (i, ", ".join(kept[:4]))))

    def _library_ops(self, reply):
        library = [str(op) for op in reply.get("ops") or []]
        if library:
            self.findings.add("run.library-compute",
                              "forward dispatched library compute: " + ", ".join(library[:8]))

    def _candidate_output(self, reply, ref_in, ref_out, with_inputs=True):
        """({"out", "inputs"} read back ({"out"} without with_inputs), why the
        output breaks the contract or None), of the call `reply` answers."""
        if reply.get("contract"):
            broken = errors.one_line(str(reply["contract"]))
            self.findings.add("run.output-contract", broken)
            return None, broken
        saved = self.ask({"op": "save", "inputs": with_inputs})
        self._candidate_steps(saved)
        data = self.read_output(saved)
        unreadable = None, "the candidate's output could not be read"
        if not isinstance(data, dict) or "out" not in data:
            return unreadable
        # Inputs the candidate's process found unchanged (inputs_kept) do not
        # travel back: the trial then takes the judge's own copy for them.
        if with_inputs and "inputs" not in data and reply.get("inputs_kept") is not True:
            return unreadable
        aliases = reply.get("aliases") or []
        ref_ptrs = {dynamic_checks.storage_ptr(t) for t in dynamic_checks.tensors(ref_in)}
        refs = dynamic_checks.flatten_outputs(ref_out)
        for k, r in enumerate(refs):
            ref_aliases = isinstance(r, torch.Tensor) and dynamic_checks.storage_ptr(r) in ref_ptrs
            if k < len(aliases) and aliases[k] is True and not ref_aliases:
                where = "output %d " % k if len(refs) > 1 else "output "
                broken = where + "shares storage with an input (the reference's does not)"
                self.findings.add("run.output-contract", broken)
                return None, broken
        return data, None

    def _second_looks(self, ref_model, x, first_out, atol):
        """Trial 0's input again: the same answer (determinism, within the
        reference's own rounding error: an honest kernel that adds with
        atomics may round differently from call to call), and the ATen ops
        and kernels forward dispatches (library compute the text did not
        show, a decoy kernel that never launches)."""
        t0 = timing.now_ms()
        kernels = list(self.spec.candidate_kernels)
        reply = self.ask({"op": "call", "inputs": self.cross(x), "observe": True, "kernels": bool(kernels),
                          "launch_probe": bool(self.spec.launch_probe_library)})
        # On a GPU the probe starts here, once per job; torch.profiler's
        # start is ~6 s on the H100, CUPTI's callback API's 21-24 ms
        # (docs/anticheat.md, kernel launches).
        self._timed("dynamic_probe", t0)
        probe = reply
        self._library_ops(reply)
        data = None
        if not reply.get("contract"):
            saved = self.ask({"op": "save", "inputs": False})
            data = self.read_output(saved)
        if isinstance(data, dict) and "out" in data:
            same = self.rounding.compare(ref_model, x, self.ref_sample[1], data["out"], atol,
                                         "trial 0's second call", baseline=first_out)
            if not same["passed"]:
                self.findings.add("run.nondeterministic",
                                  "trial 0's input gave different outputs on a second call (max abs diff %s)"
                                  % judging.fmt(same["max_abs_diff"]))
        self._timed("dynamic_second_call", t0)
        if probe.get("cupti_error"):
            sys.stderr.write("kbox: CUPTI launch probe not used: %s\n" % errors.one_line(str(probe["cupti_error"])))
        launched = [str(k) for k in probe.get("kernels") or []]
        missed = probe.get("profiled") and kernels and \
            not any(_names_kernel(k, name) for k in launched for name in kernels)
        if missed and probe.get("probe") == "cupti":
            # CUPTI's callbacks name no kernel launched inside a CUDA graph,
            # and a name may read otherwise than the profiler's: a miss
            # counts only when the profiler (the activity record of every
            # kernel that ran) sees it too.
            t0 = timing.now_ms()
            again = self.ask({"op": "call", "inputs": self.cross(x), "observe": True, "kernels": True,
                              "launch_probe": False})
            self._timed("dynamic_probe_confirm", t0)
            if again.get("profiled"):
                probe, launched = again, [str(k) for k in again.get("kernels") or []]
                missed = not any(_names_kernel(k, name) for k in launched for name in kernels)
            elif probe.get("graph_launches"):
                missed = False  # neither probe can tell: the check is skipped, as below
                probe = again
        if missed:
            self.findings.add("run.kernel-not-launched",
                              "none of the candidate's kernels (%s) launched during forward; "
                              "%d other kernel(s) did" % (", ".join(kernels[:4]), len(launched)))
        elif kernels and probe.get("profiler_error"):
            # Shown in the job's output tail; the check is skipped, not failed.
            sys.stderr.write("kbox: kernel launch probe unavailable: %s\n"
                             % errors.one_line(str(probe["profiler_error"])))

    def _compare(self, ref_out, cand_out, atol=None):
        self._freeze()
        try:
            return compare.compare_outputs(ref_out, cand_out, self.spec.atol if atol is None else atol,
                                           self.spec.rtol)
        except Exception as e:
            # Odd outputs the comparison cannot handle count as a difference,
            # not as a crash of the harness.
            return judging.failed("outputs could not be compared: " + errors.exception_line(e))

def _cgroup_fds(spec_boundary):
    """The candidate cgroup's descriptors kboxd gave the judge (the child
    keeps only the ones it joins through, until it has)."""
    cgroup = spec_boundary.cgroup if spec_boundary is not None else None
    if cgroup is None:
        return ()
    return tuple(fd for fd in (cgroup.freeze_fd, cgroup.state_fd, cgroup.cpu_fd, cgroup.threads_fd)
                 if fd >= 0)


def _candidate_holds_device_memory(exc):
    """When the judge (the reference or kbox's own code) ran out of GPU memory
    while other processes (the candidate's) held more than half of the device:
    why, in one line; else None."""
    text = "%s: %s" % (type(exc).__name__, exc)
    if "out of memory" not in text.lower():
        return None
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        free, total = torch.cuda.mem_get_info()
        others = total - free - torch.cuda.memory_reserved()
    except Exception:  # the device is what failed: the reference's error stands
        return None
    if others * 2 <= total:
        return None
    gib = float(1 << 30)
    return ("the judge ran out of GPU memory while the candidate's process held "
            "%.1f of the GPU's %.1f GiB: a candidate that takes the device's memory cannot be "
            "judged" % (others / gib, total / gib))


# torch >= 2.0: a torch.device is a context manager under which tensor
# factories without a device argument make their tensors on it.
_FACTORIES_FOLLOW_DEVICE = hasattr(torch.device("cpu"), "__enter__")

# The idle check (RunStage._idle_check): a settle, then a window in which the
# candidate's process may use at most this share of a core. OpenMP workers
# sleep at once (OMP_WAIT_POLICY=PASSIVE in every run stage), so what is
# left after the settle is the candidate's own.
_IDLE_SETTLE_S = 0.002
_IDLE_WINDOW_S = 0.003
_IDLE_BUSY_CORES = 0.5
# Calls after a busy window whose replies are checked the same way; one more
# busy window among them makes the finding (_idle_check).
_IDLE_CONFIRM_CALLS = 2
_sleep = __import__("time").sleep

# How long a stage waits for the device to itself before timing: the set-up
# of a stage prepared ahead (its CUDA start) takes seconds at most.
_QUIET_WAIT_S = 120
# What the judge may still hold in PyTorch's device cache when it hands the
# turn over (_hand_over_turn): a small allocation or two, not the job's data.
_HAND_OVER_RESERVED_BYTES = 64 << 20
# The turn passes before the killed candidate's process is reaped only while
# this share of the device's memory is free: on an 80 GB card, at most 8 GB
# held by everything on it (the dying process, stages set up ahead, this
# judge). A candidate that held more (a hog) is reaped first, as before.
_EARLY_HAND_OVER_FREE_SHARE = 0.9


def _mostly_free(free_bytes, total_bytes):
    return total_bytes > 0 and free_bytes >= _EARLY_HAND_OVER_FREE_SHARE * total_bytes


def _device_memory_given_back():
    """Empties PyTorch's device cache (cuBLAS's workspaces too, where this
    torch can): whether at most _HAND_OVER_RESERVED_BYTES stay reserved."""
    torch.cuda.synchronize()
    clear_cublas = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_cublas is not None:
        clear_cublas()
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved() <= _HAND_OVER_RESERVED_BYTES


def _open_fifo(path, mode):
    """One end of a FIFO kboxd made and holds open read-write (so this open
    never blocks, a read waits for data or end of file, a write always
    finds the reader), or None without a path. The name is unlinked once
    open: candidate code cannot open it."""
    if not path:
        return None
    fd = os.open(path, mode | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(fd, True)
    _remove(path)
    return fd


def _open_turn(path):
    """The read end of kboxd's turn FIFO (StageSpec.device_turn_path)."""
    return _open_fifo(path, os.O_RDONLY)


def _open_notes(path):
    """The write end of kboxd's notes FIFO (StageSpec.device_notes_path)."""
    return _open_fifo(path, os.O_WRONLY)


def _not_dumpable():
    """PR_SET_DUMPABLE 0: /proc/<this pid>/{mem,fd,environ,...} belong to
    root, so the candidate's process (the same uid, in the same pid
    namespace) cannot read this process's memory or open its descriptors:
    ptrace and process_vm_readv are refused by seccomp, /proc/PID/mem by
    this. A failure ends the stage (HarnessFailed): never judged without."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise judging.HarnessFailed("prctl(PR_SET_DUMPABLE, 0) failed: errno %d" % ctypes.get_errno())


_PR_SET_DUMPABLE = 4


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _load_reference(path):
    ref = modules.load_module(modules.REFERENCE_MODULE, path)
    return tuple(modules.require(ref, name, "reference")
                 for name in ("Model", "get_inputs", "get_init_inputs"))


def _names_kernel(launched, name):
    """True when a launched kernel's name is the candidate's kernel `name`:
    the profiler's demangled "name(float*, ...)" or "void name<...>(...)",
    CUPTI's mangled "_Z4namePf" or "_ZN2ns4nameE..." (the Itanium ABI writes
    each name as its length and its characters), Triton's plain "name"."""
    import re
    if re.search(r"(^|[^A-Za-z0-9_])%s($|[^A-Za-z0-9_])" % re.escape(name), launched):
        return True
    return launched.startswith("_Z") and \
        re.search(r"[^0-9]%d%s" % (len(name), re.escape(name)), launched) is not None


def _all_finite(out):
    for t in dynamic_checks.tensors(list(out) if isinstance(out, (list, tuple)) else out):
        if (t.is_floating_point() or t.is_complex()) and t.numel() and not bool(torch.isfinite(t).all()):
            return False
    return True


def _all_finite_sample(sample):
    return sample is not None and _all_finite(sample[1])


def run(spec, pipe):
    return RunStage(spec, pipe).run()
