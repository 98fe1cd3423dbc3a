"""The fused residual form of layer norm and RMS norm (``KernelSignature.residual``:
``h = x + residual``, then the norm of h; its backward ``dh = norm_backward(grad_y) +
grad_h``), from the manifest to the loader.

The unit tests here (signature, manifest, commands, the export's modules, torch eager's
form, the loader's checks and its torch route) build nothing; the build tests share one
session build of ``RES_MANIFEST`` (``res_built``): every fused kernel validated against
float64 by the build (static and dynamic, float32 and a half type, every mask, with and
without grad_h), and a two-layer residual stack trained through the loader and the
``boo::`` ops against plain torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import build_unbenchmarked, compiles

from boo_build.errors import SignatureError
from boo_build.manifest import parse_command
from boo_build.manifest.entries import entry_requests
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.benchmark import eager_fn
from boo_build.stages.reference import reference
from boo_build.stages.torch_modules import make_module, sample_args
from boo_build.stages.validate import _checked, validate_eager

FIXTURES = Path(__file__).parent / "fixtures"


def _sig(op="layer_norm", mask=1, shape=(3, 5, 16), dtype="float32", **kw):
    kw.setdefault("bias", op == "layer_norm")
    return KernelSignature(op, shape, (16,), dtype, mask, residual=True, **kw)


# ------------------------------------------------------------------ signature
def test_key_calling_convention_and_json():
    fwd, bwd = _sig(), _sig(mask=14)
    assert fwd.key == "layer_norm-f32-3x5x16-n16-wb-res-m1"
    assert _sig("rms_norm", 6, ("batch", 16), eps=1e-6).key == "rms_norm-f32-BATCHx16-n16-w-eps1em06-res-m6"
    for s in (fwd, bwd, _sig("rms_norm", 2, ("batch", 16))):
        assert KernelSignature.parse(s.key) == s
        assert KernelSignature.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert [n for n, _, _ in fwd.inputs()] == ["input", "residual", "weight", "bias"]
    assert [n for n, _, _ in fwd.outputs()] == ["output", "h", "mean", "rstd"]
    assert [n for n, _, _ in bwd.inputs()] == ["grad_output", "input", "mean", "rstd", "weight", "grad_h"]
    assert [n for n, _, _ in bwd.outputs()] == ["grad_input", "grad_weight", "grad_bias"]
    # the plain form's JSON has no residual field (as before the field existed)
    assert "residual" not in fwd.replace(residual=False).to_json()


def test_signature_refusals_name_the_problem():
    with pytest.raises(SignatureError, match="mask 4 with residual: a backward without the input gradient"):
        _sig(mask=4)
    with pytest.raises(SignatureError, match="group_norm has no fused residual form"):
        KernelSignature("group_norm", (2, 4, 3), (), "float32", 1, groups=2, residual=True)
    with pytest.raises(SignatureError, match="residual must be true or false"):
        KernelSignature("layer_norm", (2, 16), (16,), "float32", 1, residual="yes")


# ------------------------------------------------------------------- manifest
def test_manifest_entry_builds_the_fused_and_the_plain_backwards():
    reqs, errors = entry_requests(dict(op="layer_norm", input_shape=[4, 16], residual=True, masks=[1, 4, 14]))
    assert errors == []
    assert sorted(r.signature.key for r in reqs) == sorted([
        "layer_norm-f32-4x16-n16-wb-res-m1",   # the fused forward
        "layer_norm-f32-4x16-n16-wb-m4",       # a weight-only mask: no grad_h, the plain kernel of h
        "layer_norm-f32-4x16-n16-wb-res-m14",  # with grad_h
        "layer_norm-f32-4x16-n16-wb-m14",      # without: h's only user is the norm
    ])
    _, errors = entry_requests(dict(op="group_norm", input_shape=[2, 4, 3], groups=2, residual=True))
    assert errors == ["group_norm has no fused residual form (x + residual, then the norm): remove residual"]
    _, errors = entry_requests(dict(op="rms_norm", input_shape=[4, 16], residual=1))
    assert errors == ["residual must be true or false, got 1"]


def test_miopen_style_commands():
    assert parse_command("addlayernormbfp16 -X 2x8x16 -F 14 -m 1").signature.key == \
        "layer_norm-bf16-2x8x16-n16-wb-res-m14"
    assert parse_command("addrmsnormfp16 -X 2x8x16 -m 1").signature.key == "rms_norm-f16-2x8x16-n16-w-res-m1"
    assert not parse_command("layernorm -X 2x8x16 -F 14 -m 1").signature.residual
    with pytest.raises(SignatureError, match="takes no grad_h"):
        parse_command("addrmsnorm -X 2x8x16 -F 4 -m 1")


def test_gpu_candidates_are_the_plain_kernels():
    """The fused form has the plain kernel's GPU variants (the export wraps each variant's
    module in the add), which the traffic model ranks: fused backwards, the dynamic
    layer-norm forward's fused variant, nosplit where the target splits reductions."""
    from boo_build.candidates import candidates
    from boo_build.targets import catalogue

    cat = catalogue()
    for sig in (_sig(mask=14), _sig("rms_norm", 6), _sig(shape=("rows", 16))):
        for t in ("sm_80", "gfx942"):
            def names(s):
                return [str(c) for c in candidates(("aten", "manual"), cat[t], lambda i: ModuleId(s, i), False,
                                                   model=True)]
            assert names(sig) == names(sig.replace(residual=False))
            assert "manual+fused" in names(sig)


# ------------------------------------------------- the export's modules, eager
# (ATen's half-precision CPU kernels, run eagerly, round the statistics to half: the build
# test checks the aten implementation in half precision compiled)
@pytest.mark.parametrize("sig,impl", [
    (s, i) for s in (_sig(), _sig(mask=14), _sig("rms_norm"), _sig("rms_norm", 6)) for i in ("aten", "manual")
] + [(_sig(mask=2, dtype="bfloat16", bias=False), "manual"), (_sig("rms_norm", 6, dtype="float16"), "manual")],
    ids=lambda v: getattr(v, "key", v))
def test_modules_compute_the_fused_form(sig, impl):
    """The modules export traces (each implementation with the add around it), run by torch
    here, against the float64 reference: h as stored, the norm of it, dh with grad_h."""

    def run(csig, seed, offset):
        args = sample_args(csig, seed, offset)
        return make_module(ModuleId(csig, impl))(*args), args

    r = _checked(sig, run, {"module": sig.key, "target": "cpu", "tolerance": {}}, (0,), True, None, "kernel")
    assert r.status == "passed", r.reason
    # h is x + residual in the input's dtype, exactly
    if sig.is_forward:
        args = sample_args(sig)
        y, h, *_ = make_module(ModuleId(sig, impl))(*args)
        assert torch.equal(h, args[0] + args[1])
        assert torch.equal(reference(sig, args)[1], (args[0] + args[1]).double())


def test_a_wrong_grad_h_fails_validation():
    """A backward that leaves grad_h out is caught (the reference adds it)."""
    sig = _sig(mask=14)

    def run(csig, seed, offset):
        args = sample_args(csig, seed, offset)
        plain = make_module(ModuleId(csig.replace(residual=False), "manual"))
        return plain(*args[:-1]), args

    r = _checked(sig, run, {"module": sig.key, "target": "cpu", "tolerance": {}}, (0,), False, None, "kernel")
    assert r.status == "failed" and r.reason.startswith("grad_input")


def test_torch_eager_is_the_add_then_the_norm():
    """What the benchmark times as torch eager (``eager_fn``) and what the loader routes to
    torch (``residual_route``, validated as a kernel is)."""
    sig = _sig(mask=14)
    x, r, w, b = sample_args(_sig())
    y, mean, rstd = eager_fn(_sig())()  # torch's add, then native_layer_norm
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x + r, [16], w, b), rtol=0, atol=0)
    # the backward: the norm's, then grad_h added to its input gradient, grad_h drawn after grad_y
    h = (x + r).requires_grad_()
    g = torch.Generator().manual_seed(0)
    gy, gh = torch.randn(sig.input_shape, generator=g), torch.randn(sig.input_shape, generator=g)
    want = torch.autograd.grad(torch.nn.functional.layer_norm(h, [16], w, b), h, gy)[0] + gh
    dx, dw, db = eager_fn(sig)()
    torch.testing.assert_close(dx, want)
    assert dw.shape == db.shape == (16,)
    for s in (_sig(), sig, _sig("rms_norm", 6)):
        assert validate_eager(s).status == "passed"


# ------------------------------------------------- the loader, without a kernel
def _no_kernels():
    """A bundle holding no kernel these tests call (a fixture's), with the eager fallback."""
    from boo_build.loader import open_bundle

    return open_bundle(FIXTURES / "pre-kinds-0.1.0.tar.zst", device="local-task", fallback="eager")


def _stack(b, loss_of_h2: bool, op="layer_norm"):
    """A two-layer residual stack: h1 = x + r, y1 = norm1(h1); h2 = lin(y1) + h1,
    y2 = norm2(h2) -> its loss and every gradient, through the loader (``b``) or plain
    torch (``b`` None). ``loss_of_h2``: h2 has another user (the fused backward with
    grad_h runs for both layers), else only the first layer's h has one."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 16, generator=g).requires_grad_()
    r = torch.randn(2, 3, 16, generator=g).requires_grad_()
    w1, w2 = ((1 + 0.1 * torch.randn(16, generator=g)).requires_grad_() for _ in range(2))
    b1 = (0.1 * torch.randn(16, generator=g)).requires_grad_()
    lw = (0.2 * torch.randn(16, 16, generator=g)).requires_grad_()
    F = torch.nn.functional
    if b is None:
        h1 = x + r
        y1 = F.layer_norm(h1, [16], w1, b1)
        h2 = y1 @ lw + h1
        y2 = F.rms_norm(h2, [16], w2, 1e-6)
    else:
        y1, h1, _, _ = b.add_layer_norm(x, r, [16], w1, b1)
        y2, h2, _ = b.add_rms_norm(y1 @ lw, h1, [16], w2, 1e-6)
    loss = (y2 * y2).mean() + ((h2 * 0.5).sum() if loss_of_h2 else 0)
    return loss, torch.autograd.grad(loss, [x, r, w1, b1, lw, w2])


def _trains_as_torch(b) -> None:
    """``_stack`` through ``b`` gives plain torch's loss and gradients, with and without h2's other user."""
    for other_user in (True, False):
        want, got = _stack(None, other_user), _stack(b, other_user)
        torch.testing.assert_close(got[0], want[0])
        for a, e in zip(got[1], want[1]):
            torch.testing.assert_close(a, e)


def test_the_torch_route_trains_as_plain_torch():
    """With no kernel for these shapes (``fallback="eager"``), the entry points and their
    ``boo::`` ops run torch's add and norm: the same loss and gradients, the calls counted
    as misses under the fused keys."""
    b = _no_kernels()
    _trains_as_torch(b)
    s = b.stats()
    assert s["layer_norm-f32-2x3x16-n16-wb-res-m14"]["misses"] == 2  # h1 has another user both times
    assert s["rms_norm-f32-2x3x16-n16-w-eps1em06-res-m6"]["misses"] == 1  # h2's only with its loss term
    assert s["rms_norm-f32-2x3x16-n16-w-eps1em06-m6"]["misses"] == 1  # else the plain backward of h


def test_loader_checks_the_residual_against_the_input():
    b = _no_kernels()
    x = torch.randn(2, 16)
    with pytest.raises(TypeError, match="residual and input must have one dtype"):
        b.add_layer_norm(x, x.double(), [16])
    with pytest.raises(ValueError, match=r"residual has shape \[1, 16\], expected \[2, 16\]"):
        b.add_rms_norm(x, x[:1], [16])
    y, h, mean, rstd = b.add_layer_norm(x[:0], x[:0], [16])  # zero rows: torch's results, no kernel
    assert y.shape == h.shape == (0, 16) and mean.shape == (0, 1)


# ----------------------------------------------------------- the build tests
RES_MANIFEST = """\
[bundle]
name = "res-test"
version = "0.1.0"
targets = ["cpu"]

# layer norm, float32, static: every mask, fused (with grad_h) and plain (without)
[[kernels]]
op = "layer_norm"
input_shape = [2, 3, 16]
residual = true
impls = ["manual"]

[[kernels]]
op = "layer_norm"
input_shape = [2, 3, 16]
residual = true
masks = [1, 14]
impls = ["aten"]

# layer norm, bfloat16, dynamic rows: every mask taking grad_h (and their plain forms)
[[kernels]]
op = "layer_norm"
input_shape = ["rows", 16]
dtype = "bfloat16"
residual = true
masks = [1, 2, 6, 10, 14]
impls = ["manual"]

# RMS norm, float32, dynamic (the stack's second layer): every mask taking grad_h
[[kernels]]
op = "rms_norm"
input_shape = ["batch", "seq", 16]
eps = 1e-6
residual = true
masks = [1, 2, 6]
impls = ["manual"]

# RMS norm, float16, static: every mask, with and without grad_h; aten for the forward and mask 6
[[kernels]]
op = "rms_norm"
input_shape = [2, 3, 16]
dtype = "float16"
residual = true
impls = ["manual"]

[[kernels]]
op = "rms_norm"
input_shape = [2, 3, 16]
dtype = "float16"
residual = true
masks = [1, 6]
impls = ["aten"]
"""


@pytest.fixture(scope="session")
@compiles
def res_built(tmp_path_factory):
    """``RES_MANIFEST`` built by ``boo-build build`` (validated, not benchmarked) -> its output folder."""
    return build_unbenchmarked(tmp_path_factory, "res", RES_MANIFEST)


def test_fused_kernels_validate_against_float64(res_built):
    """Every kernel of the build, each implementation: passed against the float64 reference;
    the fused ones cover static and dynamic, float32 and a half type, every mask with
    grad_h, and the plain ones every mask without it."""
    records = sorted((res_built / "res-test" / "validate" / "cpu").glob("*.json"))
    keys = {}
    for p in records:
        rec = json.loads(p.read_text())
        assert rec["status"] == "passed", (p.name, rec["reason"])
        keys.setdefault(ModuleId.parse(rec["module"].split("+")[0]).signature, set()).add(rec["module"])
    fused = {s for s in keys if s.residual}
    want = {(op, dt, dyn, m) for op, dt, dyn, masks in (
        ("layer_norm", "float32", False, (1, 2, 6, 10, 14)), ("layer_norm", "bfloat16", True, (1, 2, 6, 10, 14)),
        ("rms_norm", "float32", True, (1, 2, 6)), ("rms_norm", "float16", False, (1, 2, 6))) for m in masks}
    assert {(s.op, s.dtype, s.is_dynamic, s.mask) for s in fused} == want
    plain = {(s.op, s.dtype, s.mask) for s in keys if not s.residual}
    assert {("layer_norm", "float32", m) for m in (2, 4, 6, 8, 10, 12, 14)} <= plain
    assert {("rms_norm", "float16", m) for m in (2, 4, 6)} <= plain
    modules = set().union(*keys.values())
    assert {"rms_norm-f16-2x3x16-n16-w-res-m6-aten", "layer_norm-f32-2x3x16-n16-wb-res-m14-aten"} <= modules
    # every case of a dynamic kernel ran at several sizes, the offset case included
    rec = json.loads((res_built / "res-test" / "validate" / "cpu" /
                      "layer_norm-bf16-ROWSx16-n16-wb-res-m14-manual.json").read_text())
    cases = {o["case"] for o in rec["outputs"]}
    assert any("offset" in c for c in cases) and len({c.split("@")[1] for c in cases}) >= 3


def test_a_residual_stack_trains_with_the_fused_kernels(res_built):
    """A two-layer residual stack (layer norm, then RMS norm) trained eagerly through the
    loader and the ``boo::`` ops: the loss and every gradient as plain torch's, every norm
    call run by a kernel (no fallback), the fused ones counted."""
    from boo_build.loader import open_bundle

    b = open_bundle(next(res_built.glob("*.tar.zst")), device="local-task")
    _trains_as_torch(b)
    s = b.stats()
    assert s["layer_norm-f32-2x3x16-n16-wb-res-m1"]["hits"] == 2
    assert s["layer_norm-f32-2x3x16-n16-wb-res-m14"]["hits"] == 2  # h1's other user: h2 = ... + h1
    assert s["rms_norm-f32-BATCHxSEQx16-n16-w-eps1em06-res-m1"]["hits"] == 2
    assert s["rms_norm-f32-BATCHxSEQx16-n16-w-eps1em06-res-m6"]["hits"] == 1  # h2's loss term
    assert s["rms_norm-f32-BATCHxSEQx16-n16-w-eps1em06-m6"]["hits"] == 1  # the final norm: no grad_h
    assert all(v["misses"] == 0 and v["eager"] == 0 for v in s.values())


def test_a_bundle_with_fused_kernels_is_format_6_and_older_loaders_refuse_it(res_built, monkeypatch):
    """The fused kernels' bundle is written as format 6 (``RESIDUAL_FORMAT_VERSION``): a loader
    that reads only 1-5 refuses it asking for an upgrade, instead of failing on the ``res`` key."""
    from boo_build.loader import format as bundle_format
    from boo_build.loader import open_bundle
    from boo_build.loader.errors import BundleFormatError

    path = next(res_built.glob("*.tar.zst"))
    assert open_bundle(path, device="local-task").index["format_version"] == bundle_format.RESIDUAL_FORMAT_VERSION == 6
    monkeypatch.setattr(bundle_format, "READABLE_VERSIONS", (1, 2, 3, 4, 5))
    with pytest.raises(BundleFormatError, match=r"format version 6 is not supported; .* \(upgrade boo-build"):
        open_bundle(path, device="local-task")


def test_second_derivatives_through_the_fused_ops():
    """A gradient of a gradient (``create_graph=True``) through ``boo::add_layer_norm`` and
    ``boo::add_rms_norm`` and their backward ops: as plain torch's."""
    b = _no_kernels()
    F = torch.nn.functional

    def grads(use):
        g = torch.Generator().manual_seed(1)
        x, r = (torch.randn(2, 16, generator=g, dtype=torch.float64).to(torch.float32).requires_grad_()
                for _ in range(2))
        w = (1 + 0.1 * torch.randn(16, generator=g)).requires_grad_()
        if use:
            y, h, *_ = b.add_layer_norm(x, r, [16], w, None)
            z, h2, _ = b.add_rms_norm(y, h, [16], w)
        else:
            h = x + r
            y = F.layer_norm(h, [16], w, None)
            h2 = y + h
            z = F.rms_norm(h2, [16], w)
        loss = (z * z.detach().sin()).sum() + (h2 * h2).sum()
        gx, gw = torch.autograd.grad(loss, [x, w], create_graph=True)
        return torch.autograd.grad((gx * gx).sum() + gw.sum(), [x, r, w])

    for a, e in zip(grads(True), grads(False)):
        torch.testing.assert_close(a, e)


def test_info_and_the_report_page_say_what_a_fused_kernel_is(res_built):
    import io

    from boo_build.cli.info import cmd_info

    out = io.StringIO()
    assert cmd_info(next(res_built.glob("*.tar.zst")), out=out) == 0
    text = out.getvalue()
    assert ("    layer_norm-f32-2x3x16-n16-wb-res-m1\n      fused residual: h = x + residual, then the norm of h "
            "(returns h too); compared with torch eager's add, then the norm\n") in text
    assert "layer_norm-f32-2x3x16-n16-wb-m14\n      cpu" in text  # a plain kernel: no such line
    page = (res_built / "res-test" / "report.html").read_text()
    assert "A fused residual kernel (<code>-res-</code> in its key" in page


def test_the_fused_ops_pass_torch_opcheck():
    """The ``boo::add_*`` ops' schemas, fake implementations (what torch.compile traces) and
    autograd registration, by ``torch.library.opcheck``."""
    from boo_build.loader.library import registered

    b = _no_kernels()
    registered(b.by_token)
    g = torch.Generator().manual_seed(0)
    x, r, gy, gh = (torch.randn(2, 3, 16, generator=g) for _ in range(4))
    w, bias = torch.randn(16, generator=g), torch.randn(16, generator=g)
    checks = ("test_schema", "test_faketensor", "test_autograd_registration")
    ops = torch.ops.boo
    torch.library.opcheck(ops.add_layer_norm.default, (x.requires_grad_(), r, [16], w, bias, 1e-5, b.token()),
                          test_utils=checks)
    torch.library.opcheck(ops.add_rms_norm.default, (x, r, [16], w, None, 0.0, b.token()), test_utils=checks)
    h = (x + r).detach()
    _, _, mean, rstd = b.add_layer_norm(x.detach(), r, [16], w, bias)
    (rms_rstd,) = b.add_rms_norm(x.detach(), r, [16], w)[2:]
    torch.library.opcheck(ops.add_layer_norm_backward.default,
                          (gy, h, [16], mean, rstd, w, bias, [True, True, True], gh, None, b.token()),
                          test_utils=checks[:2])
    torch.library.opcheck(ops.add_rms_norm_backward.default,
                          (gy, h, [16], rms_rstd, w, [True, True], 0.0, gh, None, b.token()), test_utils=checks[:2])


# ------------------------------------------- the add before a norm: compile backend and trace
def _adds(a, b, w, wl, bl):
    """A norm after each kind of add: one that fuses (its sum used again after), then the look-alikes
    (in place twice, alpha=, broadcasting, mixed dtypes), then a layer norm of a sum with no other user."""
    F = torch.nn.functional
    h = a + b
    y = F.rms_norm(h, [16], w, 1e-6)
    c = a.clone()
    c += b
    e = a.clone().add_(b)
    looks = [F.rms_norm(v, [16], w, 1e-6) for v in (c, e, torch.add(a, b, alpha=2), a + w, a.bfloat16() + b)]
    z = F.layer_norm(y + h, [16], wl, bl)
    return (z * z).sum() + sum((v * v).sum() for v in looks) + (h * 0.5).sum()


def _add_args():
    g = torch.Generator().manual_seed(4)
    a, b = (torch.randn(2, 3, 16, generator=g).requires_grad_() for _ in range(2))
    w, wl = ((1 + 0.2 * torch.randn(16, generator=g)).requires_grad_() for _ in range(2))
    return a, b, w, wl, (0.1 * torch.randn(16, generator=g)).requires_grad_()


def test_the_compile_backend_fuses_the_adds_that_fuse(res_built, monkeypatch):
    """Under ``backend="boo"`` (prefer_eager=False), a training step: the add that fuses and its norm run
    the fused kernels (the backward taking grad_h where the sum has another user, the plain one of the sum
    where not); each look-alike is left with its reason; the loss and every gradient are torch's."""
    from torch._dynamo import lookup_backend

    from boo_build.loader import graph_functions as gf
    from boo_build.loader import open_bundle
    from boo_build.loader.backend import Backend, Explanation
    from boo_build.residual_adds import ALPHA, BROADCAST, DTYPES, IN_PLACE

    b = open_bundle(next(res_built.glob("*.tar.zst")), device="local-task")
    graphs = []

    def inner(gm, example_inputs):
        graphs.append(gm.graph)
        return lookup_backend("aot_eager")(gm, example_inputs)

    backend = Backend(b, prefer_eager=False, inner=inner)
    torch._dynamo.reset()
    args = _add_args()
    loss = torch.compile(_adds, backend=backend)(*args)
    grads = torch.autograd.grad(loss, args)
    want = _adds(*args)
    torch.testing.assert_close(loss, want)
    for got, exp in zip(grads, torch.autograd.grad(want, args)):
        torch.testing.assert_close(got, exp)
    d = backend.decisions
    assert [x.fused for x in d] == [True] + [False] * 5 + [True], [str(x) for x in d]
    assert d[0].kernels == ("rms_norm-f32-BATCHxSEQx16-n16-w-eps1em06-res-m1",
                            "rms_norm-f32-BATCHxSEQx16-n16-w-eps1em06-res-m6")  # h's other users: grad_h
    assert d[-1].kernels == ("layer_norm-f32-2x3x16-n16-wb-res-m1", "layer_norm-f32-2x3x16-n16-wb-m14")
    for x, why in zip(d[1:6], (IN_PLACE, IN_PLACE, ALPHA + "2", BROADCAST + " (2x3x16 + 16)", DTYPES)):
        assert x.add.startswith(why), str(x)
    assert {k: v["hits"] for k, v in b.stats().items() if v["hits"]} == dict.fromkeys(d[0].kernels + d[-1].kernels, 1)
    # the graph handed on: two fused calls, no add left before them
    (g,) = graphs
    fused = [n for n in g.nodes if n.target in (gf.boo_add_rms_norm, gf.boo_add_layer_norm)]
    assert len(fused) == 2 and all(a.op == "placeholder" or a.target is not torch.add for a in fused[0].args[:2])
    # what explain prints for them (explain itself, and fuse_adds=False's plain kernels, run in
    # tests/test_hand_written_norms.py: no second compile here)
    text = str(Explanation(tuple(d), backend.graphs))
    assert "2 fused with the add before them); 5 adds before a norm not fused" in text, text
    monkeypatch.setenv("BOO_FUSE_ADDS", "0")  # fusion off where the option is not given
    assert Backend(b).fuse_adds is False and Backend(b, fuse_adds=True).fuse_adds


def test_trace_records_the_fused_form_with_the_same_predicate():
    """``record_norms`` records a norm after an add that fuses as the fused kernel's call (a module's and a
    function's), its backward fused where the sum has other users; the look-alikes as plain calls; the
    manifest holds a ``residual = true`` entry and the plain forward beside it."""
    from boo_build.trace import record_norms

    torch.manual_seed(0)
    ln, rms = torch.nn.LayerNorm(16), torch.nn.RMSNorm(16, eps=1e-6)
    F = torch.nn.functional

    def step(a, b):
        h = a + b
        y = ln(h)  # h used again below: the fused backward takes grad_h
        c = y.clone()
        c += b
        return (rms(c) + F.rms_norm(torch.add(y, h, alpha=2), [16], eps=1e-6) + F.layer_norm(y + h, [16])).sum()

    with record_norms() as rec:
        step(torch.randn(2, 3, 16, requires_grad=True), torch.randn(2, 3, 16)).backward()
    assert {c.signature.key for c in rec.calls} == {
        "layer_norm-f32-2x3x16-n16-wb-res-m1", "layer_norm-f32-2x3x16-n16-wb-res-m14",  # the module, grad_h
        "layer_norm-f32-2x3x16-n16-nw-res-m1", "layer_norm-f32-2x3x16-n16-nw-m2",  # F.layer_norm: no other user
        "rms_norm-f32-2x3x16-n16-w-eps1em06-m1", "rms_norm-f32-2x3x16-n16-w-eps1em06-m6",  # after +=
        "rms_norm-f32-2x3x16-n16-nw-eps1em06-m1", "rms_norm-f32-2x3x16-n16-nw-eps1em06-m2"}  # after alpha=
    text = rec.manifest(targets=["cpu"])
    assert text.count("residual = true") == 2, text
    from boo_build.manifest.reader import parse_toml

    keys = {s.key for s in parse_toml(text, "<traced>").signatures}
    assert {"layer_norm-f32-2x3x16-n16-wb-m1", "layer_norm-f32-2x3x16-n16-nw-m1"} <= keys  # the plain forwards
    assert {"layer_norm-f32-2x3x16-n16-wb-res-m14", "layer_norm-f32-2x3x16-n16-nw-res-m1"} <= keys
