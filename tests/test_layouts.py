"""Every route of every op gives torch's own answer, on every call, for any
layout a caller or autograd hands it (docs/loader.md, "Arrays, autograd, edge
inputs").

The routes: the kernel (the bundle opened with ``prefer_eager=False``);
torch's op where the build found torch eager faster (a copy of the bundle
whose every entry says so, ``helpers.with_prefer_eager``: set up, not left to
a build's timing); the ``fallback="eager"`` miss path (a shape no kernel
has); an unserved call (float64: no kernel takes it, torch's op runs). Each
op's ATen-style entry points are called three times per layout, for every
mask: a key's first call goes through the full checks (which copy), the later
ones straight through the key's route (which must not hand ATen a layout its
CPU kernels misread: ``ops.base.dense``). Every result is checked against
the float64 reference.

The custom ops' autograd is checked the same way with the layout that showed
the bug: ``y = norm(x.transpose(1, 2)).transpose(1, 2)`` (diffusers' attention
block), whose backward gets a transposed ``grad_out``, three steps.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import F32_EPS, _ln, _rms32, assert_close, compiles, with_extra_kernels, with_prefer_eager

from boo_build import ops
from boo_build.loader import nn as boo_nn
from boo_build.loader import open_bundle
from boo_build.signature import KernelSignature
from boo_build.stages.reference import reference
from boo_build.stages.torch_modules import sample_args


def _gn(mask, shape=(2, 4, 3)):
    return KernelSignature("group_norm", shape, (), "float32", mask, groups=2)


# op -> every mask's signature: the session's kernels (helpers.KERNELS), the masks they lack (EXTRA), and
# the session's group-norm build (helpers.GN_MANIFEST)
EXTRA = [(_ln(4), "aten"), (_ln(8), "aten"), (_ln(10), "manual"), (_ln(12), "manual"), (_rms32(4), "manual")]
SIGS = {
    "layer_norm": [_ln(m) for m in ops.get("layer_norm").masks],
    "rms_norm": [_rms32(m) for m in ops.get("rms_norm").masks],
    "group_norm": [_gn(m) for m in ops.get("group_norm").masks],
}
# a shape of each op no kernel in those bundles serves: the fallback's misses
MISS_SHAPE = {"layer_norm": (3, 6, 10), "rms_norm": (3, 6, 10), "group_norm": (3, 4, 3)}
LAYOUTS = ("contiguous", "transposed", "strided", "expanded")
ROUTES = ("kernel", "torch", "miss", "unserved")


# ------------------------------------------------------------------ layouts
def _transposed(t: torch.Tensor, a: int = 0, b: int = -1) -> torch.Tensor:
    """``t``'s values, its dims ``a`` and ``b`` swapped in memory (a 1-d tensor: strided)."""
    if t.dim() < 2:
        return _strided(t)
    return t.transpose(a, b).contiguous().transpose(a, b)


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values, every other element of a buffer twice as wide in the last dim."""
    buf = torch.full(t.shape[:-1] + (2 * t.shape[-1],), float("nan"), dtype=t.dtype)
    buf[..., ::2] = t
    return buf[..., ::2]


def _in_layout(layout: str, tensors: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """(the values, the same values in ``layout``): ``expanded`` broadcasts
    grad_out over its first dim (a zero stride, as the gradient of a sum) and
    lays the input out channels-last (dims 1 and -1 swapped); the others apply to every tensor."""
    values = dict(tensors)
    if layout == "expanded" and "gy" in values:
        values["gy"] = values["gy"][:1].expand_as(values["gy"]).contiguous()
    out = {}
    for name, t in values.items():
        if t is None:
            out[name] = None
        elif layout == "transposed":
            out[name] = _transposed(t)
        elif layout == "strided":
            out[name] = _strided(t)
        elif layout == "expanded" and name == "gy":
            out[name] = t[:1].expand_as(t)
        elif layout == "expanded" and name == "x":
            out[name] = _transposed(t, 1, -1)
        else:
            out[name] = t
    for name, t in out.items():
        if t is not None:
            assert torch.equal(t, values[name])
            assert layout == "contiguous" or name not in ("gy", "x") or not t.is_contiguous(), (layout, name)
    return values, out


# ------------------------------------------------------------------ the entry points
def _forward(bundle, sig, x, w, b):
    ns, eps = list(sig.normalized_shape), sig.eps
    if sig.op == "layer_norm":
        return bundle.native_layer_norm(x, ns, w, b, eps)
    if sig.op == "rms_norm":
        return bundle.fused_rms_norm(x, ns, w, eps)
    n, c = x.shape[0], x.shape[1]
    return bundle.native_group_norm(x, w, b, n, c, math.prod(x.shape[2:]), sig.groups, eps)


def _backward(bundle, sig, gy, x, stats, w, b):
    """The gradients the mask asks for (the entry point's Nones dropped)."""
    asked = [bool(sig.mask & bit) for bit in ops.get(sig.op).grads]
    ns = list(sig.normalized_shape)
    if sig.op == "layer_norm":
        out = bundle.native_layer_norm_backward(gy, x, ns, *stats, w, b, asked)
    elif sig.op == "rms_norm":
        out = bundle.fused_rms_norm_backward(gy, x, ns, *stats, w, asked, eps=sig.eps)
    else:
        n, c = x.shape[0], x.shape[1]
        out = bundle.native_group_norm_backward(gy, x, *stats, w, n, c, math.prod(x.shape[2:]), sig.groups, asked)
    assert [o is not None for o in out] == asked, (sig.key, [o is not None for o in out])
    return tuple(o for o in out if o is not None)


def _case(sig: KernelSignature, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """gy, x, the statistics (as the forward saved them), weight and bias of ``sig``'s shape."""
    fwd = sig.replace(mask=1)
    x, *params = sample_args(fwd, seed=seed)
    w, b = (params + [None, None])[:2]
    if b is None and ops.get(sig.op).has_bias:
        b = 0.1 * torch.randn(sig.param_shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    back = sample_args(sig.replace(mask=2) if sig.is_forward else sig, seed=seed)
    n = len(ops.get(sig.op).stats)
    case = {"gy": back[0], "x": x, **{f"s{i}": s for i, s in enumerate(back[2:2 + n])}, "w": w,
            "b": None if b is None else b.to(x.dtype)}
    return {k: None if v is None else v.to(dtype) for k, v in case.items()}


def _run(bundle, sig: KernelSignature, dtype: torch.dtype, route: str) -> None:
    """Three calls per layout of ``sig``'s entry point on ``bundle``, each against the reference."""
    check = "float32"  # float64 calls (unserved) are held to float32's tolerance: torch's op is far closer
    n = len(ops.get(sig.op).stats)
    for li, layout in enumerate(LAYOUTS):
        values, given = _in_layout(layout, _case(sig, dtype, seed=10 * li))
        stats_v = tuple(values[f"s{i}"] for i in range(n))
        stats_g = tuple(given[f"s{i}"] for i in range(n))
        if sig.is_forward:
            args = (values["x"],) + ((values["w"],) if sig.affine else ()) + ((values["b"],) if sig.bias else ())
        else:
            args = (values["gy"], values["x"]) + stats_v + ((values["w"],) if sig.takes_weight else ())
        ref = reference(sig, args)
        for call in range(3):
            what = f"{route} route, {sig.key}, {layout}, call {call + 1}"
            if sig.is_forward:
                out = _forward(bundle, sig, given["x"], given["w"], given["b"])
            else:
                out = _backward(bundle, sig, given["gy"], given["x"], stats_g, given["w"], given["b"])
            assert len(out) == len(ref), what
            for o, r in zip(out, ref):
                assert o.dtype == dtype, what
                assert_close(o.reshape(r.shape), r, check, what)
            for name, t in given.items():  # the caller's tensors are left as they were
                assert t is None or torch.equal(t, values[name]), (what, name)


# ------------------------------------------------------------------ the bundles
@pytest.fixture(scope="module")
@compiles
def paths(gn_built, tmp_path_factory):
    """op -> (its bundle, a copy whose every entry routes torch tensors to torch's op)."""
    d = tmp_path_factory.mktemp("layouts")
    out = {}
    session = with_extra_kernels(tmp_path_factory, EXTRA, "layouts")
    for name, src in (("session", session), ("gn", gn_built / "gn-test-0.1.0.tar.zst")):
        keys = open_bundle(src, device="local-task").keys()
        out[name] = (src, with_prefer_eager(src, d / f"{name}-routed.tar.zst", keys))
    return {"layer_norm": out["session"], "rms_norm": out["session"], "group_norm": out["gn"]}


def _open(paths, op: str, route: str):
    plain, routed = paths[op]
    if route == "torch":
        return open_bundle(routed, device="local-task")
    if route == "kernel":
        return open_bundle(plain, device="local-task", prefer_eager=False)
    return open_bundle(plain, device="local-task", fallback="eager")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op", sorted(SIGS))
def test_every_mask_and_layout_on_every_route(paths, op, route):
    bundle = _open(paths, op, route)
    for sig in SIGS[op]:
        if route == "miss":
            sig = sig.replace(input_shape=MISS_SHAPE[op])
        _run(bundle, sig, torch.float64 if route == "unserved" else torch.float32, route)
    # the route each call took, as the bundle counted it: 3 calls x every layout per key
    stats = bundle.stats()
    calls = 3 * len(LAYOUTS)
    for sig in SIGS[op]:
        if route == "kernel":
            assert stats[sig.key] == {"hits": calls, "misses": 0, "eager": 0}, (sig.key, stats.get(sig.key))
        elif route == "torch":
            assert stats[sig.key] == {"hits": 0, "misses": 0, "eager": calls}, (sig.key, stats.get(sig.key))
        elif route == "miss":
            key = sig.replace(input_shape=MISS_SHAPE[op]).key
            assert stats[key]["misses"] == calls, (key, stats.get(key))
    if route == "unserved":
        assert sum(v["misses"] for k, v in stats.items() if k.startswith(f"{op}:dtype=float64")) == \
            calls * len(SIGS[op])


# ------------------------------------------------------------------ autograd
def _modules(op: str, bundle):
    """(the bundle's module, torch's, in float64) of the signatures' norm, same parameters."""
    g = torch.Generator().manual_seed(1)
    if op == "layer_norm":
        ours, ref = boo_nn.LayerNorm(10, bundle=bundle), torch.nn.LayerNorm(10, dtype=torch.float64)
    elif op == "rms_norm":
        ours, ref = boo_nn.RMSNorm(10, bundle=bundle), torch.nn.RMSNorm(10, eps=F32_EPS, dtype=torch.float64)
    else:
        ours, ref = boo_nn.GroupNorm(2, 4, bundle=bundle), torch.nn.GroupNorm(2, 4, dtype=torch.float64)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g) if name == "weight" else 0.1 * torch.randn(p.shape,
                                                                                                          generator=g))
            getattr(ref, name).copy_(p.double())
    return ours, ref


# the shape fed to the transposed model: its transpose(1, 2) is the kernels' shape
TRANSPOSED_INPUT = {"layer_norm": (4, 10, 6), "rms_norm": (4, 10, 6), "group_norm": (2, 3, 4)}


@pytest.mark.parametrize("route", ("torch", "kernel"))
@pytest.mark.parametrize("op", sorted(SIGS))
def test_transposed_model_trains_right_on_every_call(paths, op, route):
    """``y = norm(x.transpose(1, 2)).transpose(1, 2)``: autograd hands the backward a
    transposed grad_out (and layer and RMS norm a transposed input); three steps."""
    bundle = _open(paths, op, route)
    ours, ref = _modules(op, bundle)
    g = torch.Generator().manual_seed(2)
    for step in range(3):
        x = torch.randn(TRANSPOSED_INPUT[op], generator=g) + 2
        r = torch.randn(TRANSPOSED_INPUT[op], generator=g)
        x64 = x.double().requires_grad_(True)
        x32 = x.clone().requires_grad_(True)
        (ref(x64.transpose(1, 2)).transpose(1, 2) * r.double()).sum().backward()
        (ours(x32.transpose(1, 2)).transpose(1, 2) * r).sum().backward()
        what = f"{route} route, {op}, step {step + 1}"
        assert_close(x32.grad, x64.grad, "float32", f"{what}: input gradient")
        for name, p in ours.named_parameters():
            # the gradients accumulate over the steps, in both models alike
            assert_close(p.grad, getattr(ref, name).grad, "float32", f"{what}: {name} gradient")
    counted = bundle.stats()
    kind = "eager" if route == "torch" else "hits"
    backward = next(s for s in SIGS[op] if s.mask == max(ops.get(op).masks))
    assert counted[backward.key][kind] == 3, counted
