"""The result's fingerprint names the host's GPU index, not the sandbox's
(where CUDA_VISIBLE_DEVICES is 0 whichever GPU the stage holds)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "harness"))
from kbox_harness import fingerprint  # noqa: E402


def test_the_hosts_index_wins_over_the_sandboxs(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("KBOX_GPU_INDEX", "3")
    assert fingerprint.device_index_from_env() == 3


def test_without_kboxs_index_the_visible_device_is_the_index(monkeypatch):
    monkeypatch.delenv("KBOX_GPU_INDEX", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert fingerprint.device_index_from_env() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert fingerprint.device_index_from_env() == 0
