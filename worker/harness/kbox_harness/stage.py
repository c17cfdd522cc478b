"""Entry point logic: read the spec, run the stage, always end with a report."""
import argparse
import os
import sys

from . import errors, protocol, sanitize

# A stage forked from a zygote (kbox_zygote.py) inherits libgomp's one
# thread; it gets torch's usual count, as an exec'd stage does, but only
# once its processes have taken their boundary steps (boundary.py): those
# need a single thread, and torch.set_num_threads starts the pool at once.
_deferred_threads = None


def defer_threads(count):
    """Called by the zygote's child before main(): the count to apply."""
    global _deferred_threads
    _deferred_threads = count


def apply_deferred_threads():
    """Applies defer_threads' count in this process (the judge, the
    candidate's process, a compile stage); nothing for an exec'd stage."""
    if _deferred_threads:
        import torch
        torch.set_num_threads(_deferred_threads)


def _harness_failed(exc, phase, spec):
    max_bytes = spec.max_log_bytes if spec else protocol.DEFAULT_MAX_LOG_BYTES
    scrubber = sanitize.PathScrubber(spec.candidate_path, spec.reference_path,
                                     spec.build_dir) if spec else None
    # Which process and which call of kbox's failed: the judge's own frame,
    # or what a failure in the candidate's process said of itself.
    where = getattr(exc, "where", "") or ("judge, " + errors.harness_frame(exc)
                                          if errors.harness_frame(exc) else "")
    report = {
        "outcome": "HARNESS_FAILED",
        "message": errors.one_line("harness failed" + (" (%s)" % where if where else "") + ": " +
                                   sanitize.sanitize(errors.exception_line(exc), scrubber)),
        "error": errors.runtime_error(exc, phase, scrubber, max_bytes),
    }
    if getattr(exc, "candidate_killed", False):
        report["candidate_killed"] = True
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description="kbox evaluation harness stage")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)

    pipe = protocol.ResultPipe(args.result_fd)
    pipe.enter(protocol.HARNESS)
    spec = None
    phase = "PHASE_UNSPECIFIED"
    try:
        spec = protocol.read_spec(args.spec)
        if spec.stage == "STAGE_COMPILE":
            phase = "PHASE_COMPILE"
            apply_deferred_threads()  # No boundary in a compile stage.
            from . import compile_stage
            report = compile_stage.run(spec, pipe)
        elif spec.stage == "STAGE_RUN":
            phase = "PHASE_RUN"
            from . import run_stage
            report = run_stage.run(spec, pipe)
        else:
            raise ValueError("unknown stage %r" % spec.stage)
    except BaseException as e:  # anything reaching here is kbox's own failure
        pipe.enter(protocol.HARNESS)
        report = _harness_failed(e, phase, spec)
    pipe.enter(protocol.HARNESS)
    pipe.report(report)
    # Skip interpreter teardown: client threads, atexit hooks or CUDA teardown
    # must not hang or crash the process after the report (nothing may follow it).
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)
