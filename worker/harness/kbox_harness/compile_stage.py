"""STAGE_COMPILE: import the candidate with no device so its extensions build."""
import re

from . import candidate_import, errors, fingerprint, light_headers, protocol, sanitize, strict_filter

# gcc's driver, when a program it ran (cc1plus, as, ld) died by SIGKILL.
_COMPILER_KILLED = re.compile(r"^\S*: fatal error: Killed signal terminated program \S+$",
                              re.MULTILINE)


def run(spec, pipe):
    pipe.enter(protocol.HARNESS)
    import torch  # noqa: F401  (imported under HARNESS: a crash here is ours)
    scrubber = candidate_import.default_scrubber(spec)
    # Candidate code runs in this process (and the compilers under it): it
    # must not be able to send SIGKILL, which kboxd reads as an outside kill.
    strict_filter.install_no_sigkill()
    report = {"fingerprint": fingerprint.software()}
    imp = candidate_import.import_candidate(spec, pipe)
    report["phase_ms"] = {"import_candidate": imp.ms}
    if spec.report_extension_sources:
        # kboxd checks these before anything runs (the static checks could
        # not read some call's C++); only when asked: the report stays small.
        report["extension_sources"] = imp.hook.reported
    light = imp.hook.light_summary()
    if light:
        report["light_headers"] = light
    if light and imp.hook.pch_state:
        report["precompiled_header"] = imp.hook.pch_state
    per_op = imp.hook.per_operator_summary()
    if per_op:
        report["cuda_per_operator_headers"] = per_op
    if light == light_headers.FELL_BACK:
        # Included in import_candidate: what the failed light builds cost.
        report["phase_ms"]["light_headers_failed_build"] = imp.hook.light_ms

    if imp.build_failed:
        # Checked first: even if the candidate caught the failure and fell back
        # to something else, its extension did not build.
        message, log = candidate_import.build_failure(spec, imp, scrubber)
        report.update(outcome="COMPILE_FAILED", message=message, compile_log=log)
        if _COMPILER_KILLED.search(str(imp.hook.failure.get("output") or "")):
            report["compiler_killed"] = True
        return report
    syntax = imp.syntax_error(spec.candidate_path)
    if syntax is not None:
        message, log = candidate_import.syntax_failure(spec, syntax, scrubber)
        report.update(outcome="COMPILE_FAILED", message=message, compile_log=log)
        return report
    if imp.exc is not None:
        # No device here: top-level code touching CUDA fails now but not in
        # the run stage, which imports again and reports the error properly.
        line = sanitize.sanitize(errors.exception_line(imp.exc), scrubber)
        report.update(outcome="OK", message=errors.one_line(
            "import deferred to the run stage: " + line))
        return report
    names = [c["name"] for c in imp.hook.calls]
    report.update(outcome="OK", message=("built %s" % ", ".join(names)) if names
                  else "imported; no extension to build")
    return report
