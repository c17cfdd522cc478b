"""Software and device fields for kbox.v1.Fingerprint and the probe."""
import os
import platform
import re


def python_version():
    return platform.python_version()


def triton_version(allow_import=False):
    """Triton's version without importing it (slow; touches CUDA) unless asked."""
    try:
        from importlib import metadata
        return metadata.version("triton")
    except Exception:
        pass
    if allow_import:
        try:
            import triton
            return str(triton.__version__)
        except Exception:
            pass
    return ""


def driver_version(path="/proc/driver/nvidia/version"):
    try:
        with open(path, "r", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue ..." (also
    # the "Open Kernel Module for x86_64" variant): the first dotted number.
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)*)\s", text)
    return m.group(1) if m else ""


def software():
    import torch
    return {
        "torch_version": str(torch.__version__),
        "python_version": python_version(),
        "cuda_version": str(torch.version.cuda or ""),
        "triton_version": triton_version(),
    }


def device_index_from_env():
    """The host's index of the job's GPU: KBOX_GPU_INDEX (kboxd's; in the
    sandbox CUDA_VISIBLE_DEVICES is 0 whichever GPU it is), else the first
    number of CUDA_VISIBLE_DEVICES."""
    for name in ("KBOX_GPU_INDEX", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(name, "").split(",")[0].strip()
        if value.isdigit():
            return int(value)
    return 0


def device(dev):
    """Device fields for the run stage on torch.device `dev`."""
    import torch
    if dev.type != "cuda":
        return {"device_name": "cpu", "compute_capability": "", "driver_version": "",
                "device_index": 0}
    major, minor = torch.cuda.get_device_capability(dev)
    return {"device_name": torch.cuda.get_device_name(dev),
            "compute_capability": "%d.%d" % (major, minor),
            "driver_version": driver_version(),
            "device_index": device_index_from_env()}
