"""Prints one JSON object describing the worker's Python, torch and GPUs.

Usage: python3 -s -B kbox_probe.py
       python3 -s -B kbox_probe.py --device-check
         kboxd's health probe of a quarantined GPU (daemon/device_health.h): run
         with CUDA_VISIBLE_DEVICES naming that GPU alone; exits 0 when CUDA
         initialises there and a small matmul gives the right answer, else
         prints why and exits 1.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kbox_harness import fingerprint  # noqa: E402


def python_paths():
    """Directories the interpreter needs, for the sandbox's read-only binds:
    its prefixes and every existing sys.path entry (a venv such as
    /opt/torch/.venv lives outside /usr)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted(os.path.realpath(p) for p in paths)


def triton_ptxas():
    """Triton's bundled ptxas, which it runs at a kernel's first launch."""
    try:
        import triton
    except Exception:
        return ""
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return path if os.access(path, os.X_OK) else ""


def probe():
    info = {"python_version": fingerprint.python_version(), "torch_version": "",
            "cuda_version": "", "triton_version": fingerprint.triton_version(allow_import=True),
            "driver_version": fingerprint.driver_version(), "gpus": [],
            "python_paths": python_paths(), "ptxas_path": triton_ptxas()}
    try:
        import torch
    except Exception:
        return info
    info["torch_version"] = str(torch.__version__)
    info["cuda_version"] = str(torch.version.cuda or "")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            uuid = getattr(props, "uuid", None)  # torch >= 2.0
            info["gpus"].append({"index": i, "name": str(props.name),
                                 "compute_capability": "%d.%d" % (props.major, props.minor),
                                 "memory_bytes": int(props.total_memory),
                                 "uuid": "GPU-%s" % uuid if uuid is not None else ""})
    return info


def device_check():
    """None when the one visible GPU works, else why not."""
    try:
        import torch
        if not torch.cuda.is_available():
            return "CUDA is not available"
        torch.cuda.init()
        x = torch.ones((64, 64), device="cuda:0")
        total = float((x @ x).sum().item())
        torch.cuda.synchronize(0)
    except Exception as e:  # the device (or its driver) is what failed
        return "%s: %s" % (type(e).__name__, e)
    expected = 64.0 * 64 * 64
    if total != expected:
        return "matmul gave %r, expected %r" % (total, expected)
    return None


if __name__ == "__main__":
    if sys.argv[1:] == ["--device-check"]:
        error = device_check()
        sys.stdout.write(("device ok" if error is None else "device check failed: " + error) + "\n")
        sys.stdout.flush()
        sys.exit(0 if error is None else 1)
    sys.stdout.write(json.dumps(probe()) + "\n")
    sys.stdout.flush()
    sys.exit(0)
