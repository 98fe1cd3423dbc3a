"""The loader's GPU call path, the parts that run without a GPU: staging of
CPU tensors and numpy arrays (host copies in, device copies out: the same
runtime calls on any IREE device, run here on local-task), refusing
arguments on another device, and HAL -> torch dtypes for device copies."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from helpers import GOOD, compiles, kernel_set

from boo_build.loader.arrays import numpy_from_torch, torch_dtype_of
from boo_build.loader.hal import open_device
from boo_build.loader.invoke import KernelRunner
from boo_build.loader.native import runtime as _rt
from boo_build.stages.torch_modules import sample_args

CASES = [GOOD[0], GOOD[4]]  # layer norm float32 forward; bfloat16 backward (input + weight gradients)


@pytest.fixture(scope="module")
@compiles
def runners():
    kernels, dev = kernel_set(), open_device("local-task")
    out = {}
    for mid in CASES:
        cpu = KernelRunner(dev, kernels[(mid.key, False)], mid.func_name)
        staged = KernelRunner(dev, kernels[(mid.key, False)], mid.func_name)
        staged._cpu = False  # call it as a GPU runner: every host argument is staged
        out[mid.key] = (mid, cpu, staged)
    return out


@pytest.mark.parametrize("mid", CASES, ids=lambda m: m.key)
def test_host_arguments_are_staged(runners, mid):
    _, cpu, staged = runners[mid.key]
    args = sample_args(mid.signature, seed=3)
    want = cpu(*args)  # zero-copy DLPack on the CPU
    got = staged(*args)
    assert all(isinstance(g, torch.Tensor) and g.device.type == "cpu" for g in got)
    assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
    got_np = staged(*[numpy_from_torch(a) for a in args])
    assert all(isinstance(g, np.ndarray) for g in got_np)
    for g, w in zip(got_np, want):
        if w.dtype == torch.bfloat16:
            assert g.dtype == np.dtype(ml_dtypes.bfloat16)
            g = g.view(np.int16)
            w = w.view(torch.int16)
        assert np.array_equal(g, w.numpy())


def test_arguments_on_another_device_are_refused(runners):
    mid, _, staged = runners[CASES[0].key]
    args = list(sample_args(mid.signature, seed=0))
    args[1] = args[1].to("meta")
    with pytest.raises(ValueError) as e:
        staged(*args)
    assert "arguments are on cpu, meta" in str(e.value) and "runs on local-task" in str(e.value)


def test_hal_element_types_to_torch():
    E = _rt().HalElementType
    assert torch_dtype_of(torch, int(E.FLOAT_32)) == torch.float32
    assert torch_dtype_of(torch, int(E.FLOAT_16)) == torch.float16
    assert torch_dtype_of(torch, int(E.BFLOAT_16)) == torch.bfloat16
    with pytest.raises(TypeError):
        torch_dtype_of(torch, 0x12345678)
