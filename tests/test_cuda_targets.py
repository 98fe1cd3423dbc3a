"""NVIDIA targets without a GPU: the sm_80 catalogue entry, compute
capabilities, which target a CUDA device runs (PTX runs forward), which one a
bundle picks, and discovery that never needs torch or a driver."""

from __future__ import annotations

import pytest

from boo_build.loader import bundle as bundlemod
from boo_build.loader import devices as devmod
from boo_build.loader.devices import (
    DeviceInfo,
    cuda_can_run,
    gpu_devices,
    libcuda_capabilities,
    match_target,
    nvidia_smi_capabilities,
    parse_nvidia_smi,
)
from boo_build.loader.errors import NoCompatibleDevice
from boo_build.targets import Target, catalogue, cuda_arch, cuda_capability

CPU = DeviceInfo("local-task", "local-task", "x86-64-v3", "cpu")


def nv(arch: str, index: int = 0, name: str = "NVIDIA H200") -> DeviceInfo:
    return DeviceInfo("cuda", f"cuda://{index}", arch, name)


def sm(arch: str) -> Target:
    return Target(arch, "cuda", ("--iree-hal-target-device=cuda", f"--iree-cuda-target={arch}"), arch)


def test_sm80_in_the_catalogue():
    t = catalogue("x86_64")["sm_80"]
    assert (t.driver, t.arch, t.is_cpu) == ("cuda", "sm_80", False)
    assert t.flags == ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80", "--iree-opt-level=O3")
    assert catalogue("aarch64")["sm_80"] == t


def test_compute_capability_names():
    assert cuda_capability("sm_80") == (8, 0, False)
    assert cuda_capability("sm_86") == (8, 6, False)
    assert cuda_capability("sm_90a") == (9, 0, True)
    assert cuda_capability("sm_100") == (10, 0, False)
    assert cuda_capability("sm_120f") == (12, 0, True)
    for bad in ("gfx942", "sm_", "sm_8", "sm_x0", "x86-64-v3", "unknown", ""):
        assert cuda_capability(bad) is None, bad
    assert cuda_arch(9, 0) == "sm_90" and cuda_arch(10, 3) == "sm_103"


def test_ptx_runs_forward_only():
    assert cuda_can_run("sm_90", "sm_80") and cuda_can_run("sm_80", "sm_80") and cuda_can_run("sm_100", "sm_86")
    assert not cuda_can_run("sm_75", "sm_80") and not cuda_can_run("sm_86", "sm_89")
    # architecture-specific code runs on its own capability only
    assert cuda_can_run("sm_90", "sm_90a") and not cuda_can_run("sm_100", "sm_90a")
    # a device whose capability could not be read runs nothing
    assert not cuda_can_run("unknown", "sm_80")


def test_match_nvidia_devices():
    sm80 = catalogue("x86_64")["sm_80"]
    h200, a100, t4 = nv("sm_90"), nv("sm_80", 1, "NVIDIA A100"), nv("sm_75", 2, "Tesla T4")
    assert match_target(sm80, [CPU, h200]) == (h200, "")
    assert match_target(sm80, [CPU, t4, a100]) == (a100, "")
    assert match_target(sm80, [CPU, t4]) == (None, "not run: no device (sm_80); found sm_75")
    assert match_target(sm80, [CPU]) == (None, "not run: no device (sm_80)")
    assert match_target(sm80, [CPU, nv("unknown")]) == (None, "not run: no device (sm_80); found unknown")
    # an AMD GPU never runs a CUDA target, nor an NVIDIA one a gfx target
    mi300 = DeviceInfo("hip", "hip://0", "gfx942", "MI300X")
    assert match_target(sm80, [mi300])[0] is None
    assert match_target(catalogue("x86_64")["gfx942"], [h200])[0] is None


def _index(*targets: Target) -> dict:
    """A bundle index with one available kernel on each target (members are not read here)."""
    sig = {"op": "layer_norm", "input_shape": [2, 8], "normalized_shape": [8], "dtype": "float32", "mask": 1}
    return {
        "targets": {t.name: {"driver": t.driver, "arch": t.arch, "flags": list(t.flags)} for t in targets},
        "kernels": {"k": {"signature": sig, "targets": {t.name: {"status": "available"} for t in targets}}},
    }


@pytest.mark.parametrize("device_arch, chosen", [
    ("sm_90", "sm_89"),   # H200: the newest target it runs
    ("sm_86", "sm_86"),
    ("sm_80", "sm_80"),   # A100: sm_86/sm_89 code does not run
    ("sm_75", "cpu"),     # nothing for Turing: the CPU
])
def test_bundle_picks_the_newest_target_the_gpu_runs(monkeypatch, device_arch, chosen):
    cpu_t = catalogue("x86_64")["cpu"]
    index = _index(cpu_t, sm("sm_80"), sm("sm_86"), sm("sm_89"))
    monkeypatch.setattr(devmod, "discover", lambda **_: (CPU, nv(device_arch)))
    target, dev = bundlemod._select_target(index, None, "b.tar.zst")
    assert target.name == chosen
    assert dev == (CPU if chosen == "cpu" else nv(device_arch))


def test_explicit_cuda_device_honoured_or_refused(monkeypatch):
    index = _index(catalogue("x86_64")["cpu"], sm("sm_80"))
    monkeypatch.setattr(devmod, "discover", lambda **_: (CPU, nv("sm_90"), nv("sm_75", 1, "Tesla T4")))
    target, dev = bundlemod._select_target(index, "cuda://0", "b.tar.zst")
    assert (target.name, dev.uri) == ("sm_80", "cuda://0")
    with pytest.raises(NoCompatibleDevice) as e:
        bundlemod._select_target(index, "cuda://1", "b.tar.zst")
    assert "device cuda://1" in str(e.value) and "not run: no device (sm_80); found sm_75" in str(e.value)
    with pytest.raises(NoCompatibleDevice) as e:
        bundlemod._select_target(index, "cuda://7", "b.tar.zst")
    assert "'cuda://7' is not present" in str(e.value) and "cuda://0 (NVIDIA H200, sm_90)" in str(e.value)


def test_nvidia_smi_output():
    text = ("GPU-6f3b2a1c-0000-1111-2222-333344445555, 9.0\n"
            "GPU-AAAA0000-0000-1111-2222-333344445555, 8.6\n"
            "\n[N/A]\nGPU-broken, x.y\n")
    assert parse_nvidia_smi(text) == {"gpu-6f3b2a1c-0000-1111-2222-333344445555": (9, 0),
                                      "gpu-aaaa0000-0000-1111-2222-333344445555": (8, 6)}
    assert parse_nvidia_smi("") == {}


def test_discovery_without_a_driver_is_empty_not_an_error():
    # this machine has no NVIDIA driver: every source says "nothing", quietly
    assert libcuda_capabilities("libno-such-cuda.so.1") == {}
    if not devmod.glob.glob("/dev/nvidia*"):
        assert libcuda_capabilities() == {}
        assert gpu_devices("cuda") == ()
    assert isinstance(nvidia_smi_capabilities(), dict)
