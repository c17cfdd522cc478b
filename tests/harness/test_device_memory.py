"""run_stage._candidate_holds_device_memory: a reference that runs out of GPU
memory while the candidate's process holds most of the device is blamed on the
candidate; anything else stays the reference's error."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import run_stage  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_errors_other_than_out_of_memory_stay_the_references():
    assert run_stage._candidate_holds_device_memory(ValueError("shape mismatch")) is None


def test_out_of_memory_without_cuda_stays_the_references():
    # The CPU backend (or a CUDA never initialised): no device memory to blame.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("CUDA already initialised in this process")
    assert run_stage._candidate_holds_device_memory(
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")) is None


@needs_cuda
def test_out_of_memory_with_a_free_gpu_stays_the_references():
    torch.ones(1, device="cuda")  # initialises CUDA; nothing else holds the GPU
    error = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 900.00 GiB")
    assert run_stage._candidate_holds_device_memory(error) is None
