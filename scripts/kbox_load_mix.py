"""The job mix of scripts/kbox-load: KernelBench-format problems and candidates
with the verdict each must get, and /v1/check payloads.

Three kinds of work:
  * rejected jobs: candidates the strict static checks reject (status
    REJECTED), each text made distinct by a per-job tag so kboxd's checker
    really runs on every one; nothing is compiled or run.
  * real jobs: a few fixed CPU candidates on tiny tensors. Each compiles once
    and then hits the build cache, so what they cost is the run stage.
  * checks: POST /v1/check of a rejected candidate (rejected: true).
"""
import os
import random

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(REPO, "tests", "integration", "cases")


def _read(name):
    with open(os.path.join(CASES, name), "r", encoding="utf-8") as f:
        return f.read()


REF_CLAMP = _read("ref_clamp_scale.py")
REF_MATMUL = _read("ref_matmul_relu.py")

# The clamp-scale C++ kernel of cand_clamp_scale_ok.py, for rejected variants
# that keep a real kernel but break one rule elsewhere.
_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>
%(cpp_extra)s
torch::Tensor clamp_scale(torch::Tensor x, torch::Tensor gain) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    const float* xp = xc.data_ptr<float>();
    const float* gp = gain.contiguous().data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = xp[r * cols + c] * gp[c] * %(scale)s;
            op[r * cols + c] = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
        }
    return out;
}
"""

_ext = load_inline(name="kbox_load_%(tag)s", cpp_sources=_source, functions=["clamp_scale"])
%(py_extra)s

class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
%(forward)s
'''

# Each: (rule the strict profile rejects it by, fields of _KERNEL).
_REJECTED_VARIANTS = [
    ("py.library-compute-in-forward",
     dict(cpp_extra="", py_extra="", forward="        return torch.clamp(x * self.gain, -1.0, 1.0)")),
    ("py.file-io",
     dict(cpp_extra="", py_extra="",
          forward="        open('/tmp/kbox_load_%(tag)s', 'w').close()\n"
                  "        return _ext.clamp_scale(x, self.gain)")),
    ("py.concurrency",
     dict(cpp_extra="", py_extra="import threading\n_lock_%(tag)s = threading.Lock()\n",
          forward="        return _ext.clamp_scale(x, self.gain)")),
    ("cpp.thread",
     dict(cpp_extra="#include <thread>\nstatic void spin_%(tag)s() { std::thread t([]{}); t.join(); }\n",
          py_extra="", forward="        return _ext.clamp_scale(x, self.gain)")),
    ("py.cross-call-cache",
     dict(cpp_extra="", py_extra="_memo_%(tag)s = {}\n",
          forward="        if 'out' not in _memo_%(tag)s:\n"
                  "            _memo_%(tag)s['out'] = _ext.clamp_scale(x, self.gain)\n"
                  "        return _memo_%(tag)s['out']")),
]


def rejected_job(rng, tag):
    """(request, expected status, variant name) of a job the static checks reject."""
    if rng.random() < 0.2:
        # The matmul problem through the @ operator (the integration case).
        source = _read_cached("cand_matmul_operator.py") + "\n# kbox-load %s\n" % tag
        return (_request(REF_MATMUL, source, tag), "REJECTED", "py.matmul-operator")
    rule, fields = _REJECTED_VARIANTS[rng.randrange(len(_REJECTED_VARIANTS))]
    values = {k: v % {"tag": tag} for k, v in fields.items()}
    values.update(tag=tag, scale="%.3ff" % (1.0 + rng.random() / 1000))
    return _request(REF_CLAMP, _KERNEL % values, tag), "REJECTED", rule


_CACHE = {}


def _read_cached(name):
    if name not in _CACHE:
        _CACHE[name] = _read(name)
    return _CACHE[name]


# Real CPU candidates: (case file, expected status). The same text every time,
# so each compiles once and the build cache serves the rest.
REAL_CANDIDATES = [
    ("cand_clamp_scale_ok.py", "CORRECT"),
    ("cand_clamp_scale_off_by_one.py", "INCORRECT"),
]


def real_job(rng, tag, candidates):
    name, expected = candidates[rng.randrange(len(candidates))]
    request = _request(REF_CLAMP, _read_cached(name), tag)
    request["correctness_trials"] = 2
    return request, expected, name


def check_payload(rng, tag):
    request, _, rule = rejected_job(rng, tag)
    return {"candidate_source": request["candidate_source"],
            "reference_source": request["reference_source"], "backend": "BACKEND_CPU"}, rule


def _request(reference, candidate, tag):
    return {"reference_source": reference, "candidate_source": candidate,
            "backend": "BACKEND_CPU", "client_request_id": "load-" + tag,
            "measure_performance": False, "time_limit_s": 60}


class Mix(object):
    """Draws the next piece of work: ('job', request, expected, variant) or
    ('check', payload, None, variant)."""

    def __init__(self, seed, real_share, check_share, real_candidates=None):
        self.rng = random.Random(seed)
        self.real_share = real_share
        self.check_share = check_share
        self.real_candidates = real_candidates or REAL_CANDIDATES

    def draw(self, tag):
        u = self.rng.random()
        if u < self.check_share:
            payload, rule = check_payload(self.rng, tag)
            return "check", payload, None, rule
        if u < self.check_share + self.real_share:
            request, expected, name = real_job(self.rng, tag, self.real_candidates)
            return "job", request, expected, name
        request, expected, rule = rejected_job(self.rng, tag)
        return "job", request, expected, rule
