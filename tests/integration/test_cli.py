"""The kbox CLI against the session's kboxd (binary protobuf on the wire)."""
import json
import os
import subprocess

import pytest

import kbox_it as it


class Ran(object):
    def __init__(self, p):
        self.returncode = p.returncode
        self.stdout_bytes, self.stderr_bytes = p.stdout, p.stderr
        self.stdout = p.stdout.decode("utf-8", "replace")
        self.stderr = p.stderr.decode("utf-8", "replace")


def kbox(*args, env=None, timeout=60):
    return Ran(subprocess.run([os.path.join(it.bin_dir(), "kbox")] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              env=env))


def example(name):
    return os.path.join(it.EXAMPLE_DIR, name)


@pytest.mark.waits_for_jobs
def test_eval_json_on_bundled_example(jobs):
    p, _ = jobs.cli()   # submitted at session start, server taken from KBOX_SERVER
    p = Ran(p)
    assert p.returncode == 0, "rc %d\nstdout:\n%s\nstderr:\n%s" % (
        p.returncode, p.stdout, p.stderr)
    r = json.loads(p.stdout)
    assert r["status"] == "CORRECT", it.describe(r)
    assert r["rewardable"] is True
    # The flags reached the server through the binary request.
    assert r["client_request_id"] == "it-cli-example"
    assert r["settings"]["seed"] == "99"
    assert r["settings"]["correctness_trials"] == 3
    assert r["settings"]["measure_performance"] is False
    assert len(r["trials"]) == 3 and all(t["passed"] for t in r["trials"])
    assert "candidate_timing" not in r


def test_eval_missing_file_is_usage_error(daemon, tmp_path):
    p = kbox("eval", "--server", daemon.url, "--reference", example("reference.py"),
             "--candidate", str(tmp_path / "does_not_exist.py"))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "does_not_exist.py" in p.stderr


def test_eval_missing_candidate_flag_is_usage_error(daemon):
    p = kbox("eval", "--server", daemon.url, "--reference", example("reference.py"))
    assert p.returncode == 2, (p.returncode, p.stderr)


def refused_eval(daemon, tmp_path):
    """kbox eval with an empty candidate: the server answers 400 [candidate_source]."""
    empty = tmp_path / "empty.py"
    empty.write_text("")
    return kbox("eval", "--server", daemon.url, "--reference", example("reference.py"),
                "--candidate", str(empty))


def test_eval_refused_request_exits_2(daemon, tmp_path):
    p = refused_eval(daemon, tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "400" in p.stderr and "candidate_source" in p.stderr, p.stderr


def test_eval_refusal_is_readable(daemon, tmp_path):
    p = refused_eval(daemon, tmp_path)
    p.stderr_bytes.decode("utf-8")  # strict: no raw protobuf bytes
    assert "refused the request (400) [candidate_source]: candidate_source is required" \
        in p.stderr, p.stderr


def test_eval_closed_port_is_connection_error(tmp_path):
    p = kbox("eval", "--server", "http://127.0.0.1:%d" % it.closed_port(),
             "--reference", example("reference.py"), "--candidate", example("candidate.py"))
    assert p.returncode == 3, (p.returncode, p.stderr)


def test_info_lists_cpu_backend(daemon):
    p = kbox("info", "--server", daemon.url)
    assert p.returncode == 0, (p.returncode, p.stderr)
    info = json.loads(p.stdout)
    assert "BACKEND_CPU" in info["backends"], info
    assert info["cpu_run_slots"] == 2, info


def test_the_cli_reads_the_python_clients_server_variable():
    """$KBOX_URL (its first URL) before $KBOX_SERVER, as kbox_client does."""
    env = dict(os.environ, KBOX_URL="http://127.0.0.1:1,http://127.0.0.1:2", KBOX_SERVER="http://127.0.0.1:3")
    p = subprocess.run([os.path.join(it.bin_dir(), "kbox"), "info"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 3 and "127.0.0.1:1" in p.stderr, p.stderr
    del env["KBOX_URL"]
    p = subprocess.run([os.path.join(it.bin_dir(), "kbox"), "info"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 3 and "127.0.0.1:3" in p.stderr, p.stderr
