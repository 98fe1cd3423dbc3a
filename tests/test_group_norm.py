"""Group norm, the third op, end to end: its signature and key, manifest entries
and MIOpen ``groupnorm`` lines, the bundle format version, and one small build
for the cpu target (every mask in float32; the forward and the full backward in
float16 and bfloat16; 1 and 3 spatial dims, groups == C, groups == 1; a dynamic
batch) run through the loader's entry points, numpy arrays, ``nn.GroupNorm``
and ``replace_norms`` (eagerly and under ``torch.compile(fullgraph=True)``)."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import BIN, assert_close, env, errors_of, keys, load

from boo_build.errors import SignatureError
from boo_build.loader import format as bundle_format
from boo_build.loader import open_bundle
from boo_build.loader.errors import BundleFormatError, KernelNotFound
from boo_build.manifest import miopen
from boo_build.signature import KernelSignature


def gn(shape, mask=1, dtype="float32", groups=2, **kw):
    return KernelSignature("group_norm", shape, (), dtype, mask, groups=groups, **kw)


# ------------------------------------------------------------------ the signature
def test_key_names_groups_and_parses_back():
    sig = gn((2, 320, 64, 64), 14, "float16", 32)
    assert sig.key == "group_norm-f16-2x320x64x64-g32-wb-m14"
    assert KernelSignature.parse(sig.key) == sig
    assert KernelSignature.from_json(sig.to_json()) == sig and sig.to_json()["groups"] == 32
    assert "groups" not in KernelSignature("layer_norm", (4, 8), (8,), "float32", 1).to_json()
    # statistics [N, groups] in the input's dtype (ATen's CPU kernel); weight and bias [C]
    assert sig.stats_shape == (2, 32) and sig.stats_dtype == "float16" and sig.param_shape == (320,)
    assert sig.inputs() == (("grad_output", (2, 320, 64, 64), "float16"), ("input", (2, 320, 64, 64), "float16"),
                            ("mean", (2, 32), "float16"), ("rstd", (2, 32), "float16"),
                            ("weight", (320,), "float16"))
    assert [o[1] for o in sig.outputs()] == [(2, 320, 64, 64), (320,), (320,)]
    dyn = gn(("batch", 320, 64, 64), 1, groups=32, eps=1e-6)
    assert dyn.key == "group_norm-f32-BATCHx320x64x64-g32-wb-eps1em06-m1"
    assert KernelSignature.parse(dyn.key) == dyn
    assert dyn.bind((5, 320, 64, 64)).key == "group_norm-f32-5x320x64x64-g32-wb-eps1em06-m1"
    with pytest.raises(SignatureError, match="takes 4-d inputs"):
        dyn.bind((5, 320, 4096))


@pytest.mark.parametrize("key, match", [
    ("group_norm-f32-2x8x3-n3-wb-m1", "expected g<groups>, got 'n3'"),
    ("layer_norm-f32-2x8-g2-wb-m1", "expected n<normalized shape>, got 'g2'"),
    ("group_norm-f32-2x8x3-g3-wb-m1", "groups 3 does not divide the 8 channels"),
])
def test_bad_keys(key, match):
    with pytest.raises(SignatureError, match=match):
        KernelSignature.parse(key)


@pytest.mark.parametrize("kw, match", [
    (dict(input_shape=(2, 30, 4), groups=4), r"groups 4 does not divide the 30 channels \(input_shape\[1\]\)"),
    (dict(input_shape=(8,), groups=1), r"rank 2 to 5 .* got input_shape \[8\] \(rank 1\)"),
    (dict(input_shape=(2, 8, 1, 1, 1, 1), groups=1), "rank 2 to 5"),
    (dict(input_shape=(2, 8, 3), normalized_shape=(3,)), "group_norm takes no normalized_shape"),
    (dict(input_shape=(2, 8, 3), groups=None), "group_norm needs groups"),
    (dict(input_shape=(2, "c", 3), groups=1), r"dimension 1 \('c'\) is the channels C: group_norm takes a dynamic batch only"),
    (dict(input_shape=("batch", 8, "h", "w"), groups=2), r"dimension 2 \('h'\) is spatial dimension 2: group_norm "
                                                          "takes a dynamic batch only"),
])
def test_bad_signatures_say_why(kw, match):
    fields = dict(normalized_shape=(), dtype="float32", mask=1)
    fields.update(kw)
    with pytest.raises(SignatureError, match=match):
        KernelSignature("group_norm", **fields)
    with pytest.raises(SignatureError, match="layer_norm takes no groups"):
        KernelSignature("layer_norm", (4, 8), (8,), "float32", 1, groups=2)


# ------------------------------------------------------------------ manifests
def test_manifest_entry(tmp_path):
    m = load(tmp_path, """
        [[kernels]]
        op = "group_norm"
        input_shape = [2, 320, 64, 64]
        groups = 32
        dtype = "float16"
        masks = [1, 14]
        [[kernels]]
        op = "group_norm"
        input_shape = ["batch", 320, 64, 64]
        groups = 32
        affine = false
        """)
    assert keys(m) == ["group_norm-f16-2x320x64x64-g32-wb-m1", "group_norm-f16-2x320x64x64-g32-wb-m14",
                       "group_norm-f32-BATCHx320x64x64-g32-nw-m1", "group_norm-f32-BATCHx320x64x64-g32-nw-m2"]


def test_every_problem_of_an_entry_is_named(tmp_path):
    errs = errors_of(tmp_path, """
        [[kernels]]
        op = "group_norm"
        input_shapes = [[2, 30, 4], [8]]
        groups = 4
        [[kernels]]
        op = "group_norm"
        input_shape = [2, 8, 3]
        normalized_shape = [3]
        groups = 2
        [[kernels]]
        op = "group_norm"
        input_shape = [2, 8, 3]
        [[kernels]]
        op = "group_norm"
        input_shape = ["batch", 8, "h"]
        groups = 0
        [[kernels]]
        op = "group_norm"
        input_shape = ["batch", 8, "h"]
        groups = 2
        [[kernels]]
        op = "layer_norm"
        input_shape = [2, 8]
        groups = 2
        """)
    text = "\n".join(errs)
    assert "kernels[0]: groups 4 does not divide the 30 channels (input_shape[1]) of [2, 30, 4]" in text
    assert "kernels[0]: group_norm needs an input [N, C, *spatial] of rank 2 to 5" in text  # rank below 2
    assert "kernels[1]: group_norm takes no normalized_shape" in text
    assert "kernels[2]: group_norm needs groups" in text
    assert "kernels[3]: groups must be a positive integer, got 0" in text
    assert "kernels[4]: input_shape dimension 2 ('h') is spatial dimension 2" in text
    assert "kernels[5]: layer_norm takes no groups" in text


@pytest.mark.parametrize("line, shape, groups, dtype, mask, affine, eps", [
    # MIOpen's defaults: -n 100 -c 6 -D 0 -H 32 -W 32 -g 3 -m 0 -F 1 -e 1e-5 (D 0: a 4-d input)
    ("groupnorm", (100, 6, 32, 32), 3, "float32", 1, False, 1e-5),
    ("groupnorm -n 2 -c 320 -H 64 -W 64 -g 32 -m 1 -F 14", (2, 320, 64, 64), 32, "float32", 14, True, 1e-5),
    ("groupnormfp16 -n 2 -c 8 -D 4 -H 5 -W 6 -g 4 -m 1", (2, 8, 4, 5, 6), 4, "float16", 1, True, 1e-5),
    ("groupnormbfp16 -n 2 -c 8 -H 0 -W 6 -g 2 -e 1e-6", (2, 8, 6), 2, "bfloat16", 1, False, 1e-6),
    ("MIOpenDriver groupnorm --batchsize=4 --in_channels=12 --num_groups=6 -F 2 -t 1 -i 10",
     (4, 12, 32, 32), 6, "float32", 2, False, 1e-5),
    ("groupnorm -n 2 -c 8 -D 3 -H 0 -W 5 -g 2", (2, 8, 5), 2, "float32", 1, False, 1e-5),  # H 0: [n, c, W]
])
def test_miopen_groupnorm_lines(line, shape, groups, dtype, mask, affine, eps):
    sig = miopen.parse_command(line)
    assert sig == gn(shape, mask, dtype, groups, affine=affine, bias=affine, eps=eps)


@pytest.mark.parametrize("line, match", [
    ("groupnorm -n 2 -c 6 -g 4", "groups 4 does not divide the 6 channels"),
    ("groupnorm -X 2x6x4", "unknown flag '-X' for groupnorm: use -n/--batchsize"),
    ("groupnorm -n 0", "n, c and W must be non-zero"),
    ("groupnorm -g 3 -F 4", r"asks for a weight gradient but affine = false \(-m 0 has no weight or bias"),
])
def test_miopen_groupnorm_errors(line, match):
    with pytest.raises(SignatureError, match=match):
        miopen.parse_command(line)


def test_format_version():
    """Every bundle is written as format 5 (the split container), group norms too; format 3,
    which first held them, is still read (tests/test_format_versions.py)."""
    ln = KernelSignature("layer_norm", ("batch", 8), (8,), "float32", 1)
    assert bundle_format.format_version_for([ln]) == bundle_format.SPLIT_FORMAT_VERSION == 5
    assert bundle_format.format_version_for([ln, gn((2, 4))]) == 5 > bundle_format.OP_FORMAT_VERSION == 3
    assert bundle_format.OP_FORMAT_VERSION in bundle_format.READABLE_VERSIONS


def test_autocast_runs_the_op_in_float32_on_cuda():
    """As torch's group_norm (an AutocastCUDA kernel): the custom op casts to float32
    there. (Under CPU autocast torch runs group_norm in float32 too; this op does not:
    docs/torch.md.)"""
    from boo_build.loader import custom_ops

    assert "cuda" in custom_ops.AUTOCAST_FLOAT32
    assert torch._C._dispatch_has_kernel_for_dispatch_key("boo::group_norm", "AutocastCUDA")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("boo::group_norm", "AutocastCPU")


# ------------------------------------------------------------------ one build
# (helpers.GN_MANIFEST, built once per session: tests/test_layouts.py runs it too)
@pytest.fixture(scope="module")
def built(gn_built):
    return gn_built


@pytest.fixture(scope="module")
def bundle(built):
    return open_bundle(built / "gn-test-0.1.0.tar.zst", device="local-task")


def _aten(x, w, b, groups, eps=1e-5):
    n, c = x.shape[0], x.shape[1]
    return torch.ops.aten.native_group_norm(x, w, b, n, c, math.prod(x.shape[2:]), groups, eps)


def _case(shape, dtype, groups, seed=0, affine=True):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) + 3).to(dt)
    c = shape[1]
    w = (1 + 0.1 * torch.randn(c, generator=g, dtype=torch.float64)).to(dt) if affine else None
    b = (0.1 * torch.randn(c, generator=g, dtype=torch.float64)).to(dt) if affine else None
    return x, w, b


def test_bundle_is_format_5_and_an_older_loader_refuses_it(built, bundle, monkeypatch):
    index = json.loads(subprocess.run(["tar", "--zstd", "-xOf", str(built / "gn-test-0.1.0.tar.zst"),
                                       "bundle.json"], capture_output=True, check=True).stdout)
    assert index["format_version"] == 5
    assert len(bundle.keys()) == 18
    monkeypatch.setattr(bundle_format, "READABLE_VERSIONS", (1, 2))  # a loader from before group norm
    with pytest.raises(BundleFormatError, match=r"format version 5 is not supported.*upgrade boo-build"):
        open_bundle(built / "gn-test-0.1.0.tar.zst", device="local-task")


def test_bench_info_and_report_show_group_norm(built):
    with open(built / "gn-test" / "bench.csv") as f:
        rows = [r for r in csv.DictReader(f)]
    assert {r["key"] for r in rows if r["op"] == "group_norm"} >= {
        "group_norm-f32-2x4x3-g2-wb-m14", "group_norm-f32-BATCHx8x6x6-g4-wb-m1"}
    info = subprocess.run([str(BIN / "boo-build"), "info", str(built / "gn-test-0.1.0.tar.zst")], env=env(),
                          capture_output=True, text=True, check=True).stdout
    assert "group_norm-bf16-3x6x2x2-g1-wb-m14" in info and "group_norm-f16-2x4x2x2x3-g4-wb-m1" in info
    assert "group_norm-f16-2x4x2x2x3-g4-wb-m14" in (built / "gn-test" / "report.html").read_text()


@pytest.mark.parametrize("shape, dtype, groups, affine", [
    ((2, 4, 3), "float32", 2, True), ((2, 4, 3), "float32", 2, False), ((2, 4, 2, 2, 3), "float16", 4, True),
    ((3, 6, 2, 2), "bfloat16", 1, True), ((5, 8, 6, 6), "float32", 4, True), ((2, 4, 3), "float32", 2, None),
])
def test_forward_and_backward_match_aten(bundle, shape, dtype, groups, affine):
    """Every kernel's results against ATen's in float64 (``affine`` None: a weight only)."""
    x, w, b = _case(shape, dtype, groups, affine=affine is not False)
    if affine is None:
        b = None
    n, c, hw = shape[0], shape[1], math.prod(shape[2:])
    y, mean, rstd = bundle.native_group_norm(x, w, b, n, c, hw, groups, 1e-5)
    ry, rmean, rrstd = _aten(x.double(), None if w is None else w.double(), None if b is None else b.double(), groups)
    assert mean.shape == rstd.shape == (n, groups) and mean.dtype == rstd.dtype == x.dtype  # ATen's on the CPU
    for got, ref, what in ((y, ry, "y"), (mean, rmean, "mean"), (rstd, rrstd, "rstd")):
        assert_close(got, ref, dtype, what)
    gy = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(x.dtype)
    masks = [(True, False, False)] if affine is False else [(True, True, affine is not None)]
    if shape == (2, 4, 3) and affine:  # every mask (the dynamic kernels: 1 and 14)
        masks = [tuple(bool(m & bit) for bit in (2, 4, 8)) for m in (2, 4, 6, 8, 10, 12, 14)]
    for om in masks:
        got = bundle.native_group_norm_backward(gy, x, mean, rstd, w, n, c, hw, groups, om)
        want = torch.ops.aten.native_group_norm_backward(gy.double(), x.double(), rmean, rrstd,
                                                         None if w is None else w.double(), n, c, hw, groups,
                                                         [om[0], om[1], om[2]])
        for k, (g, r) in enumerate(zip(got, want)):
            assert (g is None) == (not om[k]), (om, k)
            if g is not None:
                assert_close(g, r, dtype, f"mask {om} grad {k}")


def test_numpy_and_a_dynamic_batch_the_manifest_never_names(bundle):
    bundle.reset_stats()
    for batch in (1, 3, 7):
        x, w, b = _case((batch, 8, 6, 6), "float32", 4, seed=batch)
        y, mean, rstd = bundle.native_group_norm(x.numpy(), w.numpy(), b.numpy(), batch, 8, 36, 4, 1e-5)
        assert isinstance(y, np.ndarray) and y.shape == (batch, 8, 6, 6) and mean.shape == (batch, 4)
        ry, rmean, _ = _aten(x.double(), w.double(), b.double(), 4)
        assert_close(torch.from_numpy(y), ry, "float32", f"batch {batch}")
        assert_close(torch.from_numpy(mean), rmean, "float32", f"batch {batch} mean")
    assert bundle.stats(totals=True)["dynamic_hits"] == 3


def test_edge_cases(bundle):
    # empty batch: ATen's results without a kernel
    x = torch.empty(0, 4, 3)
    y, mean, rstd = bundle.native_group_norm(x, torch.ones(4), torch.zeros(4), 0, 4, 3, 2, 1e-5)
    assert y.shape == (0, 4, 3) and mean.shape == rstd.shape == (0, 2)
    # infinities: the group holding one is NaN (ATen's), the other group is not
    x, w, b = _case((2, 4, 3), "float32", 2)
    x[0, 0, 0] = math.inf
    y, mean, rstd = bundle.native_group_norm(x, w, b, 2, 4, 3, 2, 1e-5)
    ry, rmean, rrstd = _aten(x, w, b, 2)
    assert torch.isnan(y[0, :2]).all() and torch.isfinite(y[0, 2:]).all() and torch.isfinite(y[1]).all()
    assert torch.isnan(mean[0, 0]) == torch.isnan(rmean[0, 0]) and torch.isfinite(mean[1]).all()
    # ATen's sizes must describe the input; the groups must divide C
    with pytest.raises(ValueError, match="N=3, C=4, HxW=3 do not describe the input"):
        bundle.native_group_norm(x, w, b, 3, 4, 3, 2, 1e-5)
    with pytest.raises(ValueError, match="group 3 does not divide the 4 channels"):
        bundle.native_group_norm(torch.randn(2, 4, 3), None, None, 2, 4, 3, 3, 1e-5)
    # a shape no kernel serves: KernelNotFound, or torch's op with fallback="eager"
    x, w, b = _case((2, 4, 5), "float32", 2)
    with pytest.raises(KernelNotFound, match="group_norm-f32-2x4x5-g2-wb-m1"):
        bundle.native_group_norm(x, w, b, 2, 4, 5, 2, 1e-5)
    eager = bundle.with_fallback("eager")
    y, mean, rstd = eager.native_group_norm(x, w, b, 2, 4, 5, 2, 1e-5)
    ry, rmean, rrstd = _aten(x, w, b, 2)
    torch.testing.assert_close(y, ry)
    torch.testing.assert_close(mean, rmean)
    # a dtype no kernel takes (float64): torch's op with the fallback, forward and backward
    x64, w64, b64 = (t.double() for t in _case((2, 4, 3), "float32", 2))
    y, mean, rstd = eager.native_group_norm(x64, w64, b64, 2, 4, 3, 2, 1e-5)
    assert y.dtype == mean.dtype == torch.float64 and mean.shape == (2, 2)
    gx, gw, gb = eager.native_group_norm_backward(torch.ones_like(x64), x64, mean, rstd, w64, 2, 4, 3, 2)
    assert gx.shape == x64.shape and gw.shape == gb.shape == (4,)
    # autograd: the entry point records the call through boo::group_norm
    x, w, b = _case((2, 4, 3), "float32", 2)
    xr, wr, br = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    y, mean, rstd = bundle.native_group_norm(xr, wr, br, 2, 4, 3, 2, 1e-5)
    assert y.requires_grad and not mean.requires_grad and not rstd.requires_grad  # as ATen's
    y.sum().backward()
    xe, we, be = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    torch.nn.functional.group_norm(xe, 2, we, be).sum().backward()
    for got, ref in ((xr.grad, xe.grad), (wr.grad, we.grad), (br.grad, be.grad)):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm1 = torch.nn.GroupNorm(4, 8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.norm2 = torch.nn.GroupNorm(4, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = torch.nn.functional.silu(self.norm1(self.conv1(x)))
        x = torch.nn.functional.silu(self.norm2(self.conv2(x)))
        return self.head(x.mean(dim=(2, 3)))


def _step(model, x, target):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    return loss.detach()


def test_replace_norms_trains_a_conv_net_eagerly_and_compiled(bundle):
    from boo_build.loader.nn import GroupNorm, replace_norms

    torch.manual_seed(0)
    ref = ConvNet()
    x, target = torch.randn(4, 3, 6, 6), torch.randn(4, 2)
    for compiled in (False, True):
        ours = ConvNet()
        ours.load_state_dict(ref.state_dict())
        report = replace_norms(ours, bundle)
        assert [s.name for s in report.replaced] == ["norm1", "norm2"] and not report.left
        assert isinstance(ours.norm1, GroupNorm) and ours.norm1.weight.requires_grad
        bundle.reset_stats()
        run = torch.compile(ours, fullgraph=True) if compiled else ours
        theirs = ConvNet()
        theirs.load_state_dict(ref.state_dict())
        loss_ours, loss_torch = _step(run, x, target), _step(theirs, x, target)
        torch.testing.assert_close(loss_ours, loss_torch, atol=1e-5, rtol=1e-5)
        for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5, msg=name)
        stats = bundle.stats()
        assert stats == {"group_norm-f32-BATCHx8x6x6-g4-wb-m1": {"hits": 2, "misses": 0, "eager": 0},
                         "group_norm-f32-BATCHx8x6x6-g4-wb-m14": {"hits": 2, "misses": 0, "eager": 0}}, stats
    # torch.fx.symbolic_trace of the swapped model (its sizes are computed at run time)
    gm = torch.fx.symbolic_trace(ours)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), ours(x))
    # channels-last input, inference: made contiguous, same values as torch's
    with torch.no_grad():
        xc = torch.randn(3, 8, 6, 6).to(memory_format=torch.channels_last)
        torch.testing.assert_close(ours.norm1(xc), torch.nn.functional.group_norm(
            xc, 4, ours.norm1.weight, ours.norm1.bias), atol=1e-5, rtol=1e-5)


def test_replace_norms_leaves_a_group_norm_without_kernels(bundle):
    from boo_build.loader.nn import replace_norms

    model = torch.nn.Sequential(torch.nn.GroupNorm(2, 6), torch.nn.GroupNorm(4, 8, affine=False))
    report = replace_norms(model, bundle)
    assert not report.replaced
    assert "no group_norm kernel for 2 groups of 6 channels, float32, weight and bias" in report.left[0].reason
    assert "no group_norm kernel for 4 groups of 8 channels, any dtype, no weight" in report.left[1].reason


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
