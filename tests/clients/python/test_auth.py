"""Bearer tokens against a kboxd with a tokens file (--api-tokens-file, the
auth interface agreed for issue 7). Skipped on a kboxd built before it."""
import os
import subprocess

import pytest

import kbox_it as it
from conftest import _await_ready, _launch, rejected_job
from kbox_client import Client, Unauthenticated

SECRET = "pyclient-secret-%d-abcdefghijklmnop" % os.getpid()


def _supports_tokens():
    kboxd = os.path.join(it.bin_dir(), "kboxd")
    try:
        out = subprocess.run([kboxd, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--api-tokens-file" in out


@pytest.fixture(scope="module")
def kboxd_auth(tmp_path_factory):
    if not _supports_tokens():
        pytest.skip("this kboxd has no --api-tokens-file")
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text("# name secret [max_concurrent_jobs]\npyclient %s 0\n" % SECRET)
    daemon = _launch("auth", ["--api-tokens-file", str(tokens)])
    try:
        _await_ready(daemon)
        yield daemon
    finally:
        daemon.stop()


def test_the_token_is_sent_and_never_shown(kboxd_auth, monkeypatch):
    events = []
    monkeypatch.delenv("KBOX_TOKEN", raising=False)
    with pytest.raises(Unauthenticated) as no_token:
        Client(kboxd_auth.url, on_retry=events.append).evaluate(rejected_job())
    assert no_token.value.status == 401 and events == []  # not retried
    with pytest.raises(Unauthenticated) as wrong:
        Client(kboxd_auth.url, token="not-" + SECRET).evaluate(rejected_job())
    assert SECRET not in str(wrong.value) and SECRET not in repr(wrong.value)

    monkeypatch.setenv("KBOX_TOKEN", SECRET)
    client = Client(kboxd_auth.url)  # from $KBOX_TOKEN
    assert client.evaluate(rejected_job())["status"] == "REJECTED"
    assert SECRET not in repr(client) and SECRET not in repr(vars(client))
    with open(os.path.join(kboxd_auth.root, "kboxd.stderr"), errors="replace") as f:
        assert SECRET not in f.read()
