"""A run stage prepared ahead of its device turn (docs/run-stages-ahead.md):
the judge sets up, then waits on kboxd's FIFO; nothing of the candidate runs
before the byte arrives; end of file ends the stage; a set-up failure before
the turn waits for the turn and asks to be run again."""
import os
import threading
import time

import pytest
import seccomp_bpf
from test_stages import Job, _check

# Writes the moment its module is imported (CLOCK_MONOTONIC is one clock for
# every process) into the job's home, then behaves like ModelNew of
# cand_dyn_honest.py.
CANDIDATE = '''
import os
import time

import torch.nn as nn

with open(os.path.join(os.environ["HOME"], "imported_at"), "w") as f:
    f.write(repr(time.monotonic()))


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x.clamp_min(0.0) * self.scale
'''

# Fails at import, before any turn: the failure set-up meets when the job
# holding the device took its memory.
REFERENCE_FAILING_AT_IMPORT = "raise RuntimeError('no memory left on the device')\n"


def _job(tmp_path, reference=None):
    job = Job(tmp_path, "cand_dyn_honest.py")
    with open(os.path.join(job.root, "candidate.py"), "w") as f:
        f.write(CANDIDATE)
    if reference is not None:
        with open(os.path.join(job.root, "reference.py"), "w") as f:
            f.write(reference)
    fifo = os.path.join(job.root, "home", "kbox_turn")
    os.mkfifo(fifo, 0o600)
    # kboxd's end: read-write, so the judge's open never blocks.
    kboxd_end = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    return job, fifo, kboxd_end


def _imported_at(job):
    path = os.path.join(job.root, "home", "imported_at")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return float(f.read())


def _after(seconds, action):
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def _blocked_on(fifo):
    """Whether some process is asleep in a read of `fifo`: the judge waiting
    for its turn (/proc/PID/syscall names the call and its fd; the read is
    syscall 0 on x86_64 and 63 on aarch64)."""
    read_numbers = {"0", "63"}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
            # The judge unlinks the FIFO once open: its link reads "... (deleted)".
            holding = [fd for fd in fds
                       if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in (fifo, fifo + " (deleted)")]
            if not holding:
                continue
            with open("/proc/%s/syscall" % pid) as f:
                call = f.read().split()
        except OSError:
            continue
        if len(call) > 1 and call[0] in read_numbers and str(int(call[1], 16)) in holding:
            return True
    return False


def _when_waiting(fifo, pause, action, limit=120.0):
    """Runs `action` `pause` seconds after the judge starts waiting on
    `fifo` (or after `limit`, which the test's assertions then catch): no
    guess of how long set-up takes on a loaded host."""
    def wait_then_act():
        deadline = time.monotonic() + limit
        while not _blocked_on(fifo) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(pause)
        action()
    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_candidate_loads_only_after_the_turn(tmp_path):
    job, fifo, kboxd_end = _job(tmp_path)
    seen = {}

    def give():
        seen["imported_before_turn"] = _imported_at(job)
        seen["given_at"] = time.monotonic()
        os.write(kboxd_end, b"g")

    waiter = _when_waiting(fifo, 1.0, give)
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo), "OK")
    finally:
        waiter.join()
        os.close(kboxd_end)
    assert seen["imported_before_turn"] is None
    assert _imported_at(job) > seen["given_at"]
    phases = report["phase_ms"]
    # Set-up finished before the turn; the wait (at least the second the
    # turn was held back after the judge began waiting) is its own phase.
    assert phases["turn_wait"] >= 900, phases
    assert phases["setup"] > 0, phases


def test_withdrawn_turn_ends_the_stage_before_the_candidate(tmp_path):
    job, fifo, kboxd_end = _job(tmp_path)
    timer = _after(1.0, lambda: os.close(kboxd_end))
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo), "HARNESS_FAILED")
    finally:
        timer.join()
    assert "withdrew" in report["message"]
    assert not report.get("set_up_again")
    assert _imported_at(job) is None


def test_set_up_failing_before_the_turn_asks_to_run_again(tmp_path):
    job, fifo, kboxd_end = _job(tmp_path, REFERENCE_FAILING_AT_IMPORT)
    given = {}

    def give():
        given["at"] = time.monotonic()
        os.write(kboxd_end, b"g")

    timer = _after(2.0, give)
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo), "HARNESS_FAILED")
        ended = time.monotonic()
    finally:
        timer.cancel()
        os.close(kboxd_end)
    assert report["set_up_again"] is True
    assert "before the device's turn" in report["message"]
    # It waited for the turn: the stage run again must not meet the job
    # that held the device.
    assert ended > given["at"]
    assert _imported_at(job) is None


def test_set_up_failing_while_holding_the_turn_is_final(tmp_path):
    # The stage run again (kboxd gives its turn before it starts): no other
    # job explains the failure, so it is the reference's, never a request to
    # run again.
    job, fifo, kboxd_end = _job(tmp_path, REFERENCE_FAILING_AT_IMPORT)
    os.write(kboxd_end, b"g")
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo, run_again=True), "REFERENCE_FAILED")
    finally:
        os.close(kboxd_end)
    assert not report.get("set_up_again")


def test_set_up_failing_without_a_turn_is_the_reference_error(tmp_path):
    job, _, kboxd_end = _job(tmp_path, REFERENCE_FAILING_AT_IMPORT)
    os.close(kboxd_end)
    report = _check(job.run("STAGE_RUN"), "REFERENCE_FAILED")
    assert not report.get("set_up_again")


def _notes_fifo(job):
    notes = os.path.join(job.root, "home", "kbox_turn_notes")
    os.mkfifo(notes, 0o600)
    return notes, os.open(notes, os.O_RDWR | os.O_NONBLOCK)


def _read_note(fd, limit=120.0):
    import select
    ready, _, _ = select.select([fd], [], [], limit)
    return os.read(fd, 1) if ready else b""


def test_timing_waits_for_the_device_to_itself(tmp_path):
    # kboxd's side of the notes (device_turns.h): the turn after b"r", the
    # quiet answered a second after b"q" is asked, b"d" once timing is done.
    job, fifo, kboxd_end = _job(tmp_path)
    notes, notes_end = _notes_fifo(job)
    seen = {}

    def kboxd():
        seen["first"] = _read_note(notes_end)
        os.write(kboxd_end, b"g")
        seen["second"] = _read_note(notes_end)
        time.sleep(1.0)
        seen["quiet_at"] = time.monotonic()
        os.write(kboxd_end, b"q")
        seen["third"] = _read_note(notes_end)
    thread = threading.Thread(target=kboxd, daemon=True)
    thread.start()
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo, device_notes_path=notes), "OK")
    finally:
        thread.join(30)
        os.close(kboxd_end)
        os.close(notes_end)
    assert (seen["first"], seen["second"], seen["third"]) == (b"r", b"q", b"d")
    phases = report["phase_ms"]
    assert phases["quiet_wait"] >= 900, phases
    assert "candidate_timing" in report and report["candidate_timing"]["count"] > 0
    # The judge unlinked both FIFOs once it held them: candidate code cannot
    # open them by name.
    assert not os.path.exists(fifo) and not os.path.exists(notes)


@pytest.mark.parametrize("strict,hand_over", [(True, True), (False, True), (True, False)],
                         ids=["strict", "no-filter", "hand-over-off"])
def test_a_judged_stage_hands_its_turn_over_once_its_candidate_is_gone(tmp_path, strict, hand_over):
    # b"e" after b"d" (run_stage._hand_over_turn): the candidate judged, its
    # process reaped, and, with the strict filter, unable to have started
    # another. Without the filter the turn waits for the stage's end, as it
    # does when kboxd's hand_over_turn is off (no clean-up for it either).
    if strict and not seccomp_bpf.available():
        pytest.skip("needs x86_64 and libseccomp")
    job, fifo, kboxd_end = _job(tmp_path)
    notes, notes_end = _notes_fifo(job)
    seen = []

    def kboxd():
        seen.append(_read_note(notes_end))
        os.write(kboxd_end, b"g")
        seen.append(_read_note(notes_end))
        os.write(kboxd_end, b"q")
        seen.append(_read_note(notes_end))
    thread = threading.Thread(target=kboxd, daemon=True)
    thread.start()
    extra = {"hand_over_turn": hand_over}
    if strict:
        extra["strict_seccomp_bpf"] = seccomp_bpf.write_no_spawn_filter(str(tmp_path / "strict.bpf"))
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo, device_notes_path=notes,
                                **extra), "OK")
        thread.join(30)
        try:
            rest = os.read(notes_end, 16)
        except BlockingIOError:
            rest = b""
    finally:
        os.close(kboxd_end)
        os.close(notes_end)
    assert seen == [b"r", b"q", b"d"]
    assert rest == (b"e" if strict and hand_over else b"")
    assert ("hand_over" in report["phase_ms"]) == (strict and hand_over)


# Appends the moment of every forward call to the job's home.
COUNTING_CANDIDATE = CANDIDATE.replace(
    "        return x.clamp_min(0.0) * self.scale",
    "        with open(os.path.join(os.environ['HOME'], 'calls'), 'a') as f:\n"
    "            f.write('%r\\n' % time.monotonic())\n"
    "        return x.clamp_min(0.0) * self.scale")


def _calls_around_the_quiet(tmp_path, warmup_calls):
    """(forward calls before the judge asked for its quiet, calls while it
    waited, calls after kboxd's answer) of one stage."""
    job, fifo, kboxd_end = _job(tmp_path)
    with open(os.path.join(job.root, "candidate.py"), "w") as f:
        f.write(COUNTING_CANDIDATE)
    notes, notes_end = _notes_fifo(job)
    seen = {}

    def kboxd():
        _read_note(notes_end)
        os.write(kboxd_end, b"g")
        _read_note(notes_end)
        seen["asked_at"] = time.monotonic()
        time.sleep(0.5)
        seen["quiet_at"] = time.monotonic()
        os.write(kboxd_end, b"q")
        _read_note(notes_end)
    thread = threading.Thread(target=kboxd, daemon=True)
    thread.start()
    try:
        _check(job.run("STAGE_RUN", device_turn_path=fifo, device_notes_path=notes,
                       warmup_calls=warmup_calls), "OK")
    finally:
        thread.join(30)
        os.close(kboxd_end)
        os.close(notes_end)
    with open(os.path.join(job.root, "home", "calls")) as f:
        calls = [float(line) for line in f]
    return (sum(1 for t in calls if t < seen["asked_at"]),
            sum(1 for t in calls if seen["asked_at"] <= t < seen["quiet_at"]),
            sum(1 for t in calls if t >= seen["quiet_at"]))


def test_warm_up_calls_come_before_the_quiet_and_timed_calls_after(tmp_path):
    # Warm-up calls measure nothing, so they run before the quiet, beside
    # another stage's set-up; every timed call (performance_trials = 5 at
    # least) waits for kboxd's answer.
    before, waiting, after = _calls_around_the_quiet(tmp_path / "warm", 4)
    before_cold, _, _ = _calls_around_the_quiet(tmp_path / "cold", 0)
    assert before - before_cold == 4
    assert waiting == 0
    assert after >= 5


def test_set_up_failing_before_the_turn_still_notes_its_end(tmp_path):
    # A stage whose set-up failed is done setting up too: kboxd must not
    # hold a holder's quiet for it.
    job, fifo, kboxd_end = _job(tmp_path, REFERENCE_FAILING_AT_IMPORT)
    notes, notes_end = _notes_fifo(job)
    got = {}

    def kboxd():
        got["note"] = _read_note(notes_end)
        os.write(kboxd_end, b"g")
    thread = threading.Thread(target=kboxd, daemon=True)
    thread.start()
    try:
        report = _check(job.run("STAGE_RUN", device_turn_path=fifo, device_notes_path=notes),
                        "HARNESS_FAILED")
    finally:
        thread.join(30)
        os.close(kboxd_end)
        os.close(notes_end)
    assert got["note"] == b"r"
    assert report["set_up_again"] is True


def test_the_turn_passes_before_the_reap_only_with_the_device_mostly_free():
    # run_stage._hand_over_turn(before_reap=True): a killed candidate's
    # process may still hold device memory while its context is torn down;
    # the turn passes then only while 90 % of the device's memory is free.
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "harness"))
    from kbox_harness import run_stage
    gib = 1 << 30
    assert run_stage._mostly_free(72 * gib, 80 * gib)
    assert not run_stage._mostly_free(71 * gib, 80 * gib)
    assert not run_stage._mostly_free(1 * gib, 80 * gib)  # a hog: reaped first
    assert not run_stage._mostly_free(0, 0)
