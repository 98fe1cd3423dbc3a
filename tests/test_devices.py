"""Loader world: device discovery, target matching, and the in-process call
path (loader/invoke.py): zero-copy DLPack, numpy and bfloat16, threads."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from helpers import GOOD, REPO, compiles, kernel_set

from boo_build.loader import devices as devmod
from boo_build.loader.arrays import ALIGNMENT, aligned_empty
from boo_build.loader.devices import (
    DeviceInfo,
    cpu_device,
    cpu_flags,
    discover,
    gpu_devices,
    match_target,
    x86_level,
)
from boo_build.loader.hal import cpu_threads, open_device
from boo_build.loader.invoke import KernelError, KernelRunner
from boo_build.stages.torch_modules import sample_args
from boo_build.targets import Target, catalogue

V2 = "fpu sse sse2 cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3"
V3 = V2 + " avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
V4 = V3 + " avx512f avx512bw avx512cd avx512dq avx512vl"


def cpuinfo(flags: str, model: str = "Test CPU") -> str:
    return f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"


# ----------------------------------------------------------------- CPU level
def test_x86_levels_from_flags():
    assert x86_level(cpu_flags(cpuinfo("fpu sse sse2"))) == "x86-64"
    assert x86_level(cpu_flags(cpuinfo(V2))) == "x86-64-v2"
    assert x86_level(cpu_flags(cpuinfo(V3))) == "x86-64-v3"
    assert x86_level(cpu_flags(cpuinfo(V4))) == "x86-64-v4"
    # one missing flag drops the level; a higher level's flags do not skip one
    assert x86_level(set(V3.split()) - {"movbe"}) == "x86-64-v2"
    assert x86_level(set(V4.split()) - {"avx512vl"}) == "x86-64-v3"
    assert x86_level(set(V4.split()) - {"sse4_2"}) == "x86-64"


def test_cpu_device_from_cpuinfo_text():
    d = cpu_device(cpuinfo(V4, "AMD EPYC 9654"), machine="x86_64")
    assert d == DeviceInfo(driver="local-task", uri="local-task", arch="x86-64-v4", name="AMD EPYC 9654")
    assert d.is_cpu
    arm = cpu_device("processor\t: 0\nFeatures\t: fp asimd\n", machine="aarch64")
    assert arm.arch == "generic" and arm.driver == "local-task"


def test_discover_this_machine_is_cheap_and_pure():
    found = discover()
    assert found[0].driver == "local-task" and found[0].uri == "local-task"
    assert found == discover()  # no hidden state, same answer
    if Path("/proc/cpuinfo").exists() and devmod.platform.machine() == "x86_64":
        assert found[0].arch == x86_level(cpu_flags(Path("/proc/cpuinfo").read_text()))
    # hip/cuda drivers that cannot load mean "no GPU", not an error
    assert all(d.driver in ("hip", "cuda") for d in found[1:])
    assert gpu_devices("hip") == () or all(d.driver == "hip" for d in gpu_devices("hip"))
    assert gpu_devices("no-such-driver") == ()


def test_discover_imports_nothing_heavy_without_gpus():
    code = textwrap.dedent("""
        import sys
        from boo_build.loader.devices import discover
        from boo_build.loader import invoke
        discover()
        heavy = [m for m in ("torch", "iree.compiler", "iree.turbine", "doit", "boo_build.stages.torch_modules")
                 if m in sys.modules]
        print(heavy, "iree.runtime" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    heavy, runtime = out.stdout.strip().rsplit(" ", 1)
    assert heavy == "[]", out.stdout
    if not Path("/dev/kfd").exists() and not list(Path("/dev").glob("nvidia*")):
        assert runtime == "False"  # iree.runtime is only imported to open a device


# ---------------------------------------------------------------- matching
def _cpu(arch):
    return DeviceInfo("local-task", "local-task", arch, "cpu")


def test_match_cpu_levels():
    cat = catalogue("x86_64")
    v3, v4 = cat["cpu"], cat["cpu-x86-64-v4"]
    assert match_target(v3, [_cpu("x86-64-v3")]) == (_cpu("x86-64-v3"), "")
    assert match_target(v3, [_cpu("x86-64-v4")])[0] == _cpu("x86-64-v4")  # v4 runs v3 code
    assert match_target(v4, [_cpu("x86-64-v3")]) == (None, "not run: CPU lacks x86-64-v4 (has x86-64-v3)")
    assert match_target(v3, [_cpu("generic")])[1] == "not run: CPU is generic, target needs x86-64-v3"
    arm = catalogue("aarch64")["cpu"]
    assert match_target(arm, [_cpu("generic")])[0] is not None
    assert match_target(arm, [_cpu("x86-64-v4")])[0] is None


def test_match_gpus():
    cat = catalogue("x86_64")
    here = [_cpu("x86-64-v3")]
    for name in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):
        assert match_target(cat[name], here) == (None, f"not run: no device ({name})")
    mi300 = DeviceInfo("hip", "hip://0", "gfx942", "AMD Instinct MI300X")
    assert match_target(cat["gfx942"], here + [mi300]) == (mi300, "")
    dev, why = match_target(cat["gfx90a"], here + [mi300])
    assert dev is None and why == "not run: no device (gfx90a); found gfx942"
    # features after the colon do not matter
    full = DeviceInfo("hip", "hip://1", "gfx942:sramecc+:xnack-", "MI300X")
    assert match_target(cat["gfx942"], [full])[0] == full
    sm90 = Target("sm_90", "cuda", (), "sm_90")
    h200 = DeviceInfo("cuda", "cuda://0", "sm_90", "H200")
    assert match_target(sm90, [h200])[0] == h200 and match_target(sm90, here)[0] is None


def test_match_this_machine():
    found = discover()
    for t in catalogue().values():
        dev, why = match_target(t, found)
        assert (dev is None) == bool(why)
        if not t.is_cpu and not any(d.driver == "hip" for d in found):
            assert why == f"not run: no device ({t.arch})"


# ---------------------------------------------------------------- invoke
@pytest.fixture(scope="module")
@compiles
def kernels():
    return kernel_set()


@pytest.fixture(scope="module")
def device():
    return open_device("local-task")


def runner_for(kernels, device, mid):
    return KernelRunner(device, kernels[(mid.key, False)], mid.func_name)


class Spy:
    """Records the host address behind every buffer view crossing the boundary."""

    def __init__(self, fn):
        self.fn, self.addresses = fn, []

    def __call__(self, *a):
        if len(a) == 1:  # from_dlpack_capsule(capsule) -> buffer view
            bv = self.fn(*a)
            view = bv
        else:  # create_dlpack_capsule(bv, code, index) -> capsule
            view, bv = a[0], self.fn(*a)
        arr = view.map().asarray(view.shape, np.dtype(np.uint8))
        self.addresses.append(arr.ctypes.data)
        return bv


def test_torch_zero_copy_in_and_out(kernels, device):
    mid = GOOD[0]  # layer_norm f32 forward
    r = runner_for(kernels, device, mid)
    args = sample_args(mid.signature, 0)
    assert all(a.data_ptr() % ALIGNMENT == 0 for a in args)  # torch's CPU allocator aligns to 64
    r._from_capsule, r._to_capsule = Spy(r._from_capsule), Spy(r._to_capsule)
    outs = r(*args)
    # inputs: the HAL buffers wrap the tensors' own memory
    assert r._from_capsule.addresses == [a.data_ptr() for a in args]
    # outputs: torch tensors over the HAL buffers' memory
    assert all(isinstance(o, torch.Tensor) for o in outs)
    assert [o.data_ptr() for o in outs] == r._to_capsule.addresses
    expected = torch.ops.aten.native_layer_norm(args[0], [10], args[1], args[2], 1e-5)
    for o, e in zip(outs, expected):
        assert o.dtype == e.dtype and o.shape == e.shape
        torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)


def test_misaligned_and_strided_inputs_are_copied(kernels, device):
    mid = GOOD[0]
    r = runner_for(kernels, device, mid)
    x, w, b = sample_args(mid.signature, 0)
    want = r(x, w, b)
    big = torch.empty(x.numel() + 1)
    mis = big[1:].view(x.shape)  # 4 bytes off: IREE's heap import refuses it
    mis.copy_(x)
    strided = torch.empty(x.shape[::-1]).permute(2, 1, 0)
    strided.copy_(x)
    assert mis.data_ptr() % ALIGNMENT and not strided.is_contiguous()
    r._from_capsule = spy = Spy(r._from_capsule)
    for variant in (mis, strided, x.clone().requires_grad_()):
        spy.addresses.clear()
        got = r(variant, w, b)
        assert all(torch.equal(g, e) for g, e in zip(got, want))
        assert spy.addresses[1:] == [w.data_ptr(), b.data_ptr()]  # only the odd one was copied
        if variant is not strided and variant.data_ptr() % ALIGNMENT == 0:
            assert spy.addresses[0] == variant.data_ptr()
        else:
            assert spy.addresses[0] != variant.data_ptr()


@pytest.mark.parametrize("mid", [GOOD[2], GOOD[6]], ids=lambda m: m.key)
def test_numpy_and_bfloat16(kernels, device, mid):
    r = runner_for(kernels, device, mid)
    args = sample_args(mid.signature, 1)
    want = r(*args)

    def to_np(t):
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()

    arrays = []
    for t in args:  # aligned copies, so that the zero-copy path is the one taken
        a = aligned_empty(t.shape, to_np(t).dtype)
        a[...] = to_np(t)
        arrays.append(a)
    r._from_capsule = spy = Spy(r._from_capsule)
    got = r(*arrays)
    assert spy.addresses == [a.ctypes.data for a in arrays]
    assert all(isinstance(g, np.ndarray) for g in got)
    for g, w in zip(got, want):
        assert g.dtype == to_np(w).dtype and g.shape == tuple(w.shape)
        assert np.array_equal(g.view(np.uint8), to_np(w).view(np.uint8))
    # unaligned / read-only numpy arrays work through a copy
    ro = [np.array(a) for a in arrays]
    for a in ro:
        a.setflags(write=False)
    got2 = r(*ro)
    assert all(np.array_equal(g.view(np.uint8), h.view(np.uint8)) for g, h in zip(got, got2))


def test_outputs_outlive_the_runner(kernels, device):
    mid = GOOD[3]
    r = runner_for(kernels, device, mid)
    args = sample_args(mid.signature, 2)
    outs = r(*args)
    copies = [o.clone() for o in outs]
    del r
    gc.collect()
    junk = [torch.full((4096,), 7.0) for _ in range(64)]  # reuse freed memory if it was freed
    assert all(torch.equal(o, c) for o, c in zip(outs, copies))
    del junk


def test_call_errors(kernels, device):
    mid = GOOD[0]
    r = runner_for(kernels, device, mid)
    x, w, b = sample_args(mid.signature, 0)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        r(x, w)
    with pytest.raises(TypeError):
        r(x, w.numpy(), b)
    with pytest.raises(KernelError, match=mid.func_name):
        r(torch.zeros(5, 6, 10), w, b)  # wrong shape: the module's own check
    with pytest.raises(KeyError, match="no function"):
        KernelRunner(device, kernels[(mid.key, False)], "nope")
    assert r(x, w, b)[0].shape == x.shape  # still usable after errors


def test_threads_share_a_runner(kernels, device):
    mid = GOOD[4]  # layer_norm bf16 backward (input + weight gradients)
    r = runner_for(kernels, device, mid)
    inputs = [sample_args(mid.signature, s) for s in range(4)]
    want = [r(*a) for a in inputs]
    errors, results = [], {}

    def work(i):
        try:
            for _ in range(15):
                got = r(*inputs[i])
                assert all(torch.equal(g, e) for g, e in zip(got, want[i]))
            results[i] = True
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    assert 1 <= len(r._pool) <= 4  # contexts created only when all were busy


def test_cpu_thread_count(device):
    n = cpu_threads()
    assert n >= 1 and device.threads() == n
