"""Vulkan targets on a real (software) device: Mesa's lavapipe, which runs IREE's GPU
pipeline (workgroups, subgroups, device buffers) on the CPU.

A small manifest (each op, forward and combined backward, float32 and a half type,
static and dynamic, and a 768-wide float32 forward whose single dispatch neither
Vulkan target compiles: its fallback ships) built for ``vulkan-llvmpipe`` and the
portable ``vulkan`` target: validated on lavapipe by the build, then run through the loader's
entry points with numpy arrays and torch tensors (host staging both ways), through
``replace_norms`` in a training step checked against float64, and through the
``torch.compile`` backend. The device-matching rules (a Vulkan kernel computes
wrong results on a device of another subgroup size, without an error) are unit
tests on recorded device descriptions, run everywhere."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO, assert_close, boo, compiles

from boo_build.loader import NoCompatibleDevice, open_bundle
from boo_build.loader.devices import parse_vulkan_info, vulkan_can_run
from boo_build.loader.nn import replace_norms
from boo_build.stages.reference import reference
from boo_build.stages.torch_modules import sample_args
from boo_build.targets import catalogue, dtype_problem

MANIFEST = """\
[bundle]
name = "vk"
version = "0.1.0"
targets = ["vulkan-llvmpipe", "vulkan"]

[[kernels]]
op = "layer_norm"
input_shape = [4, 8, 64]
dtype = ["float32", "float16"]
masks = [1, 14]
impls = ["manual"]

[[kernels]]
op = "rms_norm"
input_shape = ["batch", "seq", 64]
dtype = ["float32", "bfloat16"]
eps = 1e-6
masks = [1, 6]
impls = ["manual"]

[[kernels]]
op = "group_norm"
input_shape = [2, 8, 4, 4]
groups = 4
dtype = ["float32", "float16"]
masks = [1, 14]
impls = ["manual"]

# BERT's hidden size: iree-compile 3.13 fails on this forward's single dispatch for both
# targets (from 16 rows on); the build's fallback step ships the lanes export without it
[[kernels]]
op = "layer_norm"
input_shape = [16, 768]
dtype = "float32"
masks = [1]
impls = ["manual"]
"""
WIDE = "layer_norm-f32-16x768-n768-wb-m1"


@pytest.fixture(scope="module")
@compiles
def vk(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vulkan")
    (tmp / "vk.toml").write_text(MANIFEST)
    proc = boo("build", str(tmp / "vk.toml"), "--out", str(tmp / "out"), "--allow-missing", cwd=tmp)
    return tmp / "out" / "vk-0.1.0.tar.zst", proc


def _kernels(path, target):
    b = open_bundle(path, device="vulkan")
    return {k: e for k, e in b.index["kernels"].items() if target in e["targets"]}


@pytest.mark.vulkan
def test_the_build_validates_on_llvmpipe_and_says_it_is_software(vk):
    path, proc = vk
    assert ("vulkan-llvmpipe available 13 (an implementation ships), failed 0, validated 13 (ran on llvmpipe, a "
            "software device: numerics and host side, not a GPU's timings)") in proc.stdout, proc.stdout
    assert f"{'vulkan':14s} available 9 (an implementation ships), failed 4, validated 9 (ran on llvmpipe" \
        in proc.stdout  # the portable target: float32 kernels, and bfloat16 as words; no float16
    # a software device times nothing, on purpose: its benchmarks are "NOT RUN", not an ERROR
    assert re.search(r"NOT RUN +bench:vk/vulkan-llvmpipe/", proc.stdout) and not re.search(r"\bERROR\b", proc.stdout)
    index = open_bundle(path, device="vulkan").index
    for key, entry in index["kernels"].items():
        soft = entry["targets"]["vulkan-llvmpipe"]
        impl = soft["impls"][soft["selected"]]
        assert impl["validation"]["status"] == "passed" and impl["validation"]["software"] == "llvmpipe", key
        assert "not timed: llvmpipe is a software device" in soft["reason"], (key, soft["reason"])
        # the traffic model covers Vulkan as the other GPU targets, and decides the default
        assert impl["traffic"]["dispatches"] >= 1 and soft["reason"].startswith("least modelled traffic"), key
        portable = entry["targets"]["vulkan"]
        if "-f32-" in key:
            assert portable["status"] == "available", (key, portable)
        elif "-bf16-" in key:  # no 16-bit types: read and written as 32-bit words, validated as any kernel
            assert portable["status"] == "available" and portable["selected"].endswith("words"), (key, portable)
            assert portable["impls"][portable["selected"]]["validation"]["status"] == "passed", (key, portable)
        else:  # float16: the portable target has no 16-bit types
            assert portable["status"] == "unavailable" and "has no 16-bit types" in portable["reason"], portable


@pytest.mark.vulkan
def test_a_768_wide_forward_ships_its_fallback_on_both_targets(vk):
    """iree-compile fails on the single dispatch of a 768-wide float32 forward for both
    Vulkan targets (the portable one: 49 KiB of workgroup memory where it has 16; llvmpipe:
    "failed to legalize operation 'arith.constant'"). Before the kernel is declared
    missing, the build tries the fallback variants: the first, the manual lanes export
    without the single-dispatch attribute, compiles and passes validation on lavapipe
    (``nosd`` alone sums each row serially and misses the offset case by 1.2x its bound)."""
    path, proc = vk
    entry = open_bundle(path, device="vulkan").index["kernels"][WIDE]
    for target in ("vulkan", "vulkan-llvmpipe"):
        te = entry["targets"][target]
        assert te["selected"] == "manual+lanes.nosd", te
        assert te["impls"]["manual+lanes.nosd"]["validation"]["status"] == "passed"
        assert te["rejected"]["manual"].startswith("compile failed: "), te["rejected"]
        assert set(te["candidates"]) == {"manual", "manual+lanes.nosd"}  # the first that works: nosd not tried
        assert (f"fallback {WIDE} on {target}: none of its 1 candidate module(s) compiled; tried manual+lanes.nosd "
                "(compiled, passed validation)") in proc.stdout


def _entry(b, sig, args, kind):
    """The kernel ``sig`` through its op's ATen-style entry point, on ``args`` (its calling
    convention) as torch tensors or numpy arrays (``kind``); outputs as torch tensors."""
    from boo_build.loader.arrays import numpy_from_torch, torch_from_numpy

    conv = (lambda t: t) if kind == "torch" else numpy_from_torch
    a = [conv(t) for t in args]
    ns, eps = list(sig.normalized_shape), sig.eps
    if sig.op == "group_norm":
        n, c = sig.input_shape[0], sig.input_shape[1]
        hw = int(np.prod(sig.input_shape[2:]))
    if sig.is_forward:
        if sig.op == "layer_norm":
            out = b.native_layer_norm(a[0], ns, a[1], a[2], eps)
        elif sig.op == "rms_norm":
            out = b.fused_rms_norm(a[0], ns, a[1], eps)
        else:
            out = b.native_group_norm(a[0], a[1], a[2], n, c, hw, sig.groups, eps)
    else:
        w = a[-1]  # the weight the kernel takes (its last argument), which the reference uses
        bias = conv(sample_args(sig.replace(mask=1), 0)[-1])  # only its presence counts: it asks for its gradient
        if sig.op == "layer_norm":
            out = b.native_layer_norm_backward(a[0], a[1], ns, a[2], a[3], w, bias, [True, True, True])
        elif sig.op == "rms_norm":
            out = b.fused_rms_norm_backward(a[0], a[1], ns, a[2], w, [True, True])
        else:
            out = b.native_group_norm_backward(a[0], a[1], a[2], a[3], w, n, c, hw, sig.groups, [True, True, True])
    assert all(type(o) is (torch.Tensor if kind == "torch" else np.ndarray) for o in out), [type(o) for o in out]
    return [o if kind == "torch" else torch_from_numpy(o) for o in out]


@pytest.mark.vulkan
@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_the_loader_runs_every_kernel_with_host_arrays(vk, kind):
    """Each kernel (dynamic ones at a size the build never ran) through the entry points,
    host memory in and out, against float64."""
    from boo_build.signature import KernelSignature

    b = open_bundle(vk[0], device="vulkan")
    assert b.target.name == "vulkan-llvmpipe" and b.device.software and b.device_type == "cpu"
    for key in _kernels(vk[0], "vulkan-llvmpipe"):
        sig = KernelSignature.parse(key)
        run = sig.bind((3, 5, 64)) if sig.is_dynamic else sig
        args = sample_args(run, seed=3)
        expected = reference(run, args)
        out = _entry(b, run, args, kind)
        for o, e in zip(out, expected):
            assert_close(o.reshape(e.shape), e, sig.dtype, f"{key} ({kind})")
    stats = b.stats(totals=True)
    assert stats["misses"] == 0 and stats["static_hits"] + stats["dynamic_hits"] == 13, stats


@pytest.mark.vulkan
def test_the_portable_target_runs_bfloat16_as_words(vk):
    """On a Vulkan device without 16-bit types only the portable target runs (lavapipe told it
    has none): its bfloat16 kernels take and give bfloat16 tensors (words inside), dynamic ones
    at a size the build never ran, against float64; its float16 kernels are not there."""
    import dataclasses

    from boo_build.loader.devices import vulkan_devices
    from boo_build.signature import KernelSignature

    lvp = next(d for d in vulkan_devices() if d.arch == "llvmpipe")
    b = open_bundle(vk[0], device=dataclasses.replace(lvp, half=False))
    assert b.target.name == "vulkan"
    words = [k for k, e in _kernels(vk[0], "vulkan").items()
             if "-bf16-" in k and e["targets"]["vulkan"]["status"] == "available"]
    assert len(words) == 2, words
    for key in words:
        sig = KernelSignature.parse(key)
        run = sig.bind((3, 5, 64))
        args = sample_args(run, seed=4, offset=3.0)
        out = _entry(b, run, args, "torch")
        assert out[0].dtype == torch.bfloat16
        for o, e in zip(out, reference(run, args)):
            assert_close(o.reshape(e.shape), e, sig.dtype, key)
    assert b.stats(totals=True)["misses"] == 0


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.ln = torch.nn.LayerNorm(64)
        self.rms = torch.nn.RMSNorm(64, eps=1e-6)
        self.gn = torch.nn.GroupNorm(4, 8)

    def forward(self, x):
        h = self.rms(self.ln(self.lin(x)))  # [4, 8, 64]
        return self.gn(h[:2].reshape(2, 8, 4, 4, 4).sum(-1))  # [2, 8, 4, 4]


@pytest.mark.vulkan
def test_a_replace_norms_training_step_on_vulkan_matches_float64(vk):
    b = open_bundle(vk[0], device="vulkan")
    torch.manual_seed(0)
    model = _Net()
    with torch.no_grad():
        for m in (model.ln, model.rms, model.gn):
            m.weight.normal_(1, 0.3)
    ref = copy.deepcopy(model).double()
    report = replace_norms(model, b)
    assert len(report.replaced) == 3 and not report.left, report
    x = torch.randn(4, 8, 64)
    loss = model(x).pow(2).sum()
    loss.backward()
    ref_loss = ref(x.double()).pow(2).sum()
    ref_loss.backward()
    assert_close(loss.detach(), ref_loss.detach(), "float32", "loss")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, "float32", f"grad of {name}")
    stats = b.stats()
    assert all(v["misses"] == 0 for v in stats.values()) and len(stats) == 6, stats  # 3 forwards, 3 backwards


@pytest.mark.vulkan
@pytest.mark.slow
def test_the_compile_backend_runs_the_kernels_on_vulkan(vk):
    b = open_bundle(vk[0], device="vulkan").with_options(prefer_eager=False)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.RMSNorm(64, eps=1e-6))
    x = torch.randn(3, 7, 64)
    expected = model(x)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="boo", options={"bundle": b})
    got = compiled(x)
    got.sum().backward()
    assert_close(got.detach(), expected.detach(), "float32", "compiled forward")
    stats = b.stats()
    assert {k.rsplit("-", 1)[1] for k, v in stats.items() if v["hits"]} == {"m1", "m6"}, stats


@pytest.mark.vulkan
@pytest.mark.slow
def test_the_gpu_run_script_runs_against_the_vulkan_device(vk, tmp_path):
    """The prepared GPU run (``benchmarks/gpu/run.sh``) end to end on lavapipe: the device
    listed, ``boo-build measure``, the loader's checks on a device that takes host memory
    (it took every non-CPU target for CUDA's and asked torch for a "cuda" tensor), one
    summary. (How many kernels measure's budget reaches depends on the machine's load:
    the benchmark table of a GPU variant is checked apart, below.)"""
    results = tmp_path / "results"
    env = {**os.environ, "PYTHON": sys.executable, "BUDGET": "2", "COMPILE_BUDGET": "0"}  # the first kernel runs
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu" / "run.sh"), "--vulkan", "--bundle", str(vk[0]),
                           "--out", str(results)], env=env, capture_output=True, text=True, timeout=600)
    summary = (results / "summary.md").read_text()
    # measure exits 1 only where the budget left kernels unmeasured; the loader's checks must pass
    assert proc.returncode in (0, 1) and "ordering exit 0" in summary, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "driver='vulkan'" in (results / "device.txt").read_text()
    ordering = (results / "ordering.md").read_text()
    assert re.search(r"^- PASS: layer_norm-f32-\S+ with numpy arrays on vulkan://", ordering, re.M), ordering
    # measure on the software device: the report says whose times these are; they decide nothing (the
    # traffic model does, as in the build) and stay out of the new bundle
    assert "a software device on the CPU (lavapipe): its times are the CPU's, not a GPU's" in \
        (results / "results.md").read_text()
    new = open_bundle(results / "measured.tar.zst", device="vulkan")
    measured = [e["targets"]["vulkan-llvmpipe"] for e in new.index["kernels"].values()
                if "measured" in e["targets"]["vulkan-llvmpipe"]]
    assert measured  # the budget is checked before each kernel: the first always runs
    for te in measured:
        assert te["reason"].startswith("least modelled traffic"), te["reason"]
        assert all(r["benchmark"]["status"] == "not run" for r in te["impls"].values()), te["impls"]


def test_measure_keys_a_gpu_variants_rows_as_the_build_does():
    """The new bundle's benchmark table keyed a measured GPU variant as an implementation
    ("unknown implementation 'manual+fused'": measure failed after measuring)."""
    from boo_build.measure.runner import _module_key
    from boo_build.signature import KernelSignature

    sig = KernelSignature.parse("layer_norm-f32-4x8x64-n64-wb-m14")
    assert _module_key(sig, "manual+fused") == "layer_norm-f32-4x8x64-n64-wb-m14-manual+fused"
    assert _module_key(sig, "aten") == "layer_norm-f32-4x8x64-n64-wb-m14-aten"


@pytest.mark.vulkan
def test_device_choice_never_picks_the_software_device_by_itself(vk):
    with pytest.raises(NoCompatibleDevice, match="only llvmpipe, a software device on the CPU, runs it: never "
                                                 "chosen by itself; open with device='vulkan'"):
        open_bundle(vk[0])
    portable = open_bundle(vk[0], device="vulkan")
    assert portable.target.name == "vulkan-llvmpipe"  # the named target before the portable one


# ------------------------------------------------ device matching (no device needed)
LAVAPIPE = """name: llvmpipe (LLVM 15.0.6, 256 bits)
path: GPU-6d65736132322e332e36000000000000
type: cpu
vendor_id: 0x10005
driver: llvmpipe
features: bufferDeviceAddress=yes storageBuffer16BitAccess=yes shaderInt8=yes shaderFloat16=yes
subgroup: size=8 operations=0x000000bf quadOperationsInAllStages=no minSubgroupSize=8 maxSubgroupSize=8
"""
NVIDIA = """name: NVIDIA H100 80GB HBM3
type: discrete
vendor_id: 0x10de
driver: NVIDIA
features: storageBuffer16BitAccess=yes shaderFloat16=yes
subgroup: size=32 operations=0x000000ff minSubgroupSize=32 maxSubgroupSize=32
"""
RDNA = NVIDIA.replace("0x10de", "0x1002").replace("NVIDIA H100 80GB HBM3", "AMD Radeon RX 7900 XTX (RADV NAVI31)") \
    .replace("size=32 operations=0x000000ff minSubgroupSize=32", "size=64 operations=0x000000ff minSubgroupSize=32") \
    .replace("maxSubgroupSize=32", "maxSubgroupSize=64")


def test_vulkan_devices_run_only_the_targets_built_for_their_subgroups():
    lvp = parse_vulkan_info(LAVAPIPE, "GPU-6d6573", "llvmpipe")
    nv = parse_vulkan_info(NVIDIA, "GPU-1", "nv")
    amd = parse_vulkan_info(RDNA, "GPU-2", "amd")
    assert (lvp.arch, lvp.software, lvp.subgroups, lvp.half, lvp.uri) == ("llvmpipe", True, (8, 8), True,
                                                                          "vulkan://GPU-6d6573")
    assert (nv.arch, nv.software, nv.subgroups, amd.arch, amd.subgroups) == ("nvidia", False, (32, 32), "amd", (32, 64))
    cat = catalogue()
    runs = {(d.arch, t): vulkan_can_run(d, cat[t])[0] for d in (lvp, nv, amd)
            for t in ("vulkan", "vulkan-llvmpipe", "vulkan-ampere", "vulkan-rdna3")}
    assert {k for k, ok in runs.items() if ok} == {
        ("llvmpipe", "vulkan"), ("llvmpipe", "vulkan-llvmpipe"), ("nvidia", "vulkan"), ("nvidia", "vulkan-ampere"),
        ("amd", "vulkan"), ("amd", "vulkan-rdna3")}
    # an NVIDIA-like device of another subgroup size, or one without 16-bit types, is refused with why
    odd = parse_vulkan_info(NVIDIA.replace("=32", "=16"), "GPU-3", "odd")
    assert vulkan_can_run(odd, cat["vulkan-ampere"])[1].endswith("runs subgroups of 16-16, vulkan-ampere's code "
                                                                 "those of 32")
    old = parse_vulkan_info(NVIDIA.replace("shaderFloat16=yes", "shaderFloat16=no"), "GPU-4", "old")
    assert "lacks 16-bit arithmetic" in vulkan_can_run(old, cat["vulkan-ampere"])[1]
    assert "is NVIDIA's; vulkan-rdna3 is built for AMD RDNA3" in vulkan_can_run(nv, cat["vulkan-rdna3"])[1]


def test_words_carry_every_bfloat16_exactly_and_round_as_torch_does():
    """The ``words`` variant's conversions (stages/torch_modules.py), run by torch here: every
    one of the 65536 bfloat16 bit patterns widens to its float32 exactly, and float32 values
    (ties, subnormals, infinities, NaN, the largest finite) round to bfloat16 as
    ``Tensor.to(torch.bfloat16)`` does, bit for bit except NaN's payload."""
    from boo_build.stages.torch_modules import words_in, words_out

    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).reshape(256, 256)
    wide = words_in(every)
    same = wide.view(torch.int32) == every.float().view(torch.int32)
    assert bool((same | torch.isnan(every.float())).all()) and bool(torch.isnan(wide).eq(torch.isnan(every)).all())
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-2**31, 2**31 - 1, (4096,), generator=g, dtype=torch.int64).to(torch.int32)
    ties = (torch.arange(-2048, 2048, dtype=torch.int32) * 65536 + 32768)  # exactly halfway: to even
    special = torch.tensor([0.0, -0.0, 1e-40, -1e-45, 3.4e38, float("inf"), float("-inf"), float("nan"),
                            torch.finfo(torch.float32).max, 1.00390625, 1.01171875, -2.5])
    y = torch.cat((bits.view(torch.float32), ties.view(torch.float32), special))
    got, want = words_out(y), y.to(torch.bfloat16)
    nan = torch.isnan(want)
    assert bool(torch.isnan(got).eq(nan).all())
    assert bool((got.view(torch.int16) == want.view(torch.int16))[~nan].all())


def test_vulkan_targets_and_their_dtypes():
    cat = catalogue()
    assert cat["vulkan"].flags == ("--iree-hal-target-device=vulkan", "--iree-vulkan-target=vp_android_baseline_2022")
    assert cat["vulkan-llvmpipe"].flags[-1] == "--iree-vulkan-target=llvmpipe"
    assert all(cat[t].torch_device_type == "cpu" for t in ("vulkan", "vulkan-llvmpipe", "cpu"))
    assert cat["sm_80"].torch_device_type == "cuda"
    assert dtype_problem(cat["vulkan"], "float32") is None and dtype_problem(cat["vulkan-llvmpipe"], "float16") is None
    assert "has no 16-bit types, so no bfloat16 kernel" in dtype_problem(cat["vulkan"], "bfloat16")
