"""Imports the candidate under the extension hook and classifies the result.

Shared by both stages: the compile stage builds the extensions, the run stage
imports again (load_inline then only loads what the compile stage built, and
never runs a build tool: the run stage's strict filter forbids exec).
"""
import os

from . import compile_log, errors, extension_hook, modules, protocol, sanitize, timing


class CandidateImport(object):
    def __init__(self):
        self.module = None
        self.exc = None
        self.hook = None
        self.ms = 0.0

    @property
    def not_built(self):
        """Run stage: the name of an extension the compile stage did not build."""
        return self.hook.not_built if self.hook is not None else None

    @property
    def build_failed(self):
        return self.hook is not None and self.hook.failure is not None

    def syntax_error(self, candidate_path):
        e = self.exc
        if isinstance(e, SyntaxError) and errors.same_file(e.filename, candidate_path):
            return e
        return None


def import_candidate(spec, pipe):
    result = CandidateImport()
    result.hook = extension_hook.ExtensionHook(
        spec.build_dir, build=spec.stage != "STAGE_RUN",
        light=spec.light_headers, pch_dir=spec.pch_dir,
        per_operator=spec.cuda_per_operator_headers,
        report_sources=spec.report_extension_sources, candidate_path=spec.candidate_path,
        read_roots=_job_directories(spec)).install()
    pipe.enter(protocol.CANDIDATE)
    t0 = timing.now_ms()
    try:
        result.module = modules.load_module(modules.CANDIDATE_MODULE, spec.candidate_path)
    except extension_hook.InfraError:
        raise  # the build machinery is broken: a harness failure, not the candidate's
    except BaseException as e:  # SystemExit from client code is the client's too
        result.exc = e
    result.ms = timing.now_ms() - t0
    pipe.enter(protocol.HARNESS)
    return result


def _job_directories(spec):
    """Where load(sources=[files]) files are read for the compile report:
    the job's source directory, its build directory, its HOME and TMPDIR."""
    dirs = [os.path.dirname(os.path.abspath(spec.candidate_path)) if spec.candidate_path else "",
            spec.build_dir, os.environ.get("HOME", ""), os.environ.get("TMPDIR", "")]
    return [d for d in dirs if d and os.path.isabs(d) and d != "/"]


def _candidate_text(path):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def build_failure(spec, imp, scrubber):
    """(message, CompileLog) for a failed extension build."""
    failure = imp.hook.failure
    log, headline = compile_log.build_failure_log(
        failure["output"], imp.hook.calls, spec.candidate_path,
        _candidate_text(spec.candidate_path), spec.build_dir, scrubber, spec.max_log_bytes)
    return "extension build failed: " + errors.one_line(headline or "see compile log"), log


def not_built_failure(spec, name, scrubber):
    """(message, CompileLog) for an extension the run stage asked for but the
    compile stage did not build (the candidate chose other sources at run time)."""
    text = sanitize.sanitize("extension %s was not built in the compile stage" % name, scrubber)
    text, truncated = sanitize.bound(text, spec.max_log_bytes)
    return errors.one_line(text), {"text": text, "truncated": truncated, "first_error_line": 0}


def syntax_failure(spec, e, scrubber):
    """(message, CompileLog) for a SyntaxError in candidate.py."""
    line = int(e.lineno or 0)
    text = "candidate.py:%d: %s: %s" % (line, type(e).__name__, e.msg)
    text = sanitize.sanitize(text, scrubber)
    text, truncated = sanitize.bound(text, spec.max_log_bytes)
    return (errors.one_line("syntax error: " + text),
            {"text": text, "truncated": truncated, "first_error_line": line})


def default_scrubber(spec):
    extra = []
    try:
        import torch
        extra.append((os.path.dirname(os.path.abspath(torch.__file__)), "<torch>"))
    except Exception:
        pass
    return sanitize.PathScrubber(spec.candidate_path, spec.reference_path, spec.build_dir, extra)
