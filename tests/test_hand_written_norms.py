"""Norms written by hand, found by their math with no class named: transformers' Llama,
Qwen2, Gemma (1 + weight) and T5 traced by ``boo-build trace`` (no ``--rms-class``),
built, then trained at a size the trace never saw under ``torch.compile(backend="boo")``
and after ``replace_norms``, every norm module served, each kernel called exactly once
forward and once backward per norm (under the backend, the norms after an add fused with it:
the trace records the fused residual form, the graph handed on holds no add feeding a norm); a bfloat16 Llama; float32 weights beside bfloat16
activations; look-alikes left with their reasons, the probe changing nothing.

The models are transformers 5.24.0's (the ``test`` extra), one layer, random weights
(tests/fixtures/hand_norms/hand_models.py). Compiled steps run AOT autograd without
Inductor (``inner="aot_eager"``: what the backend adds is the graph it hands over;
Inductor compiles cost seconds each)."""

from __future__ import annotations

import copy
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import RMSNormGated, assert_close, boo, compiles

from boo_build.loader import open_bundle
from boo_build.loader.backend import Backend, Runs, Why, explain
from boo_build.loader.nn import LayerNorm, RMSNorm, replace_norms
from boo_build.probe import GATED, NOT_A_NORM, PER_HEAD, norm_form
from boo_build.trace import record_norms

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hand_norms"
sys.path.insert(0, str(FIXTURES))
from hand_models import EPS, HIDDEN, NAMES, NORM_CLASSES, UNTRACED, loss, model, norm_modules  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # transformers' own


def _key(mask: int, dtype: str = "f32", offset: str = "") -> str:
    return f"rms_norm-{dtype}-BATCHxSEQx{HIDDEN}-n{HIDDEN}-w-eps1em06{offset}-m{mask}"


def _keys(name: str, dtype: str = "f32") -> tuple[str, str]:
    offset = "-off1.0" if name == "gemma" else ""
    return _key(1, dtype, offset), _key(6, dtype, offset)


def _res(key: str) -> str:
    """The fused residual form's key of a plain kernel's."""
    head, mask = key.rsplit("-m", 1)
    return f"{head}-res-m{mask}"


def _fused(path: str) -> bool:
    """Whether the norm module at ``path`` follows an add (every one but a block's first: after the
    embedding, or T5's first sub-layer's)."""
    return not path.endswith(("input_layernorm", "layer.0.layer_norm"))


def _final(path: str) -> bool:
    """A model's last norm: the sum before it has no other user (its backward takes no grad_h)."""
    return path == "model.norm" or path.endswith("final_layer_norm")


def _recording(graphs: list):
    """An inner backend keeping the graph ``backend="boo"`` hands it, then AOT autograd's (no Inductor)."""
    from torch._dynamo import lookup_backend

    def inner(gm, example_inputs):
        graphs.append(gm.graph)
        return lookup_backend("aot_eager")(gm, example_inputs)

    return inner


def _fused_calls(graphs: list) -> int:
    """The fused norm calls in the graphs handed on, each plain norm call checked to read no add that fuses."""
    from boo_build.loader import graph_functions as gf
    from boo_build.residual_adds import residual_add

    fused = 0
    for g in graphs:
        for n in g.nodes:
            if n.op != "call_function":
                continue
            if n.target in (gf.boo_add_rms_norm, gf.boo_add_layer_norm):
                fused += 1
            elif n.target in (gf.boo_rms_norm, gf.boo_layer_norm):
                add = residual_add(n.args[0])
                assert add is None or not add.fuses, f"{n} reads an add that fuses: {add}"
    return fused


@pytest.fixture(scope="module")
@compiles
def built(tmp_path_factory) -> tuple[Path, str]:
    """``boo-build trace`` of the training script (every model, no class named), then the build for the CPU."""
    tmp = tmp_path_factory.mktemp("hand")
    out = tmp / "hand.toml"
    proc = boo("trace", "--out", str(out), "--name", "hand-norms", "--targets", "cpu", "--static", "0",
               str(FIXTURES / "train.py"), cwd=tmp)
    boo("build", str(out), "--out", str(tmp / "out"), "--no-bench", "-q", cwd=tmp)
    return tmp / "out" / "hand-norms-0.1.0.tar.zst", out.read_text() + proc.stdout


@pytest.fixture
def bundle(built):
    return open_bundle(built[0], device="local-task")


@pytest.mark.build
def test_trace_records_every_norm_with_no_class_named(built):
    _, text = built
    for name in NAMES:  # each model's class is recorded, by its own name, at both sizes
        assert f"{name} float32 (1, 6): loss" in text and NORM_CLASSES[name] in text, (name, text)
    assert "unrecorded" not in text.lower() and "probed:" not in text, text
    # six dynamic entries: the plain form (Llama, Qwen2, T5) in float32 and bfloat16, Gemma's offset form, and
    # the fused residual form of each (every model adds before a norm: post-attention and final norms)
    assert text.count("[[kernels]]") == 6 and text.count("residual = true") == 3, text
    assert text.count("weight_offset = 1.0") == 2 and text.count('dtype = "bfloat16"') == 2, text
    assert "rms_norm-f32-2x8x32-n32-w-eps1em06-res-m1" in text and "-res-m6" in text, text


def _grads(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n.removeprefix("_orig_mod."): p.grad for n, p in m.named_parameters() if p.grad is not None}


def _step(m: torch.nn.Module):
    out = loss(m, UNTRACED)
    out.loss.backward()
    return out


def _check_step(model_, ref, dtype: str, what: str) -> None:
    """One training step of ``model_`` and of the untouched ``ref`` at the untraced size:
    the loss, the logits' dtype and every parameter's gradient."""
    out, ref_out = _step(model_), _step(ref)
    assert out.logits.dtype == ref_out.logits.dtype and out.loss.dtype == ref_out.loss.dtype, what
    assert_close(out.loss.detach(), ref_out.loss.detach(), dtype, f"{what} loss")
    grads, ref_grads = _grads(model_), _grads(ref)
    assert grads.keys() == ref_grads.keys(), what
    for n, g in grads.items():
        assert_close(g, ref_grads[n], dtype, f"{what} grad of {n}")


def _served_once_per_norm(bundle, name: str, norms: int, dtype: str = "f32") -> None:
    """Exactly one forward and one backward kernel call per norm: the model's kernels and no other."""
    hits = {k: v["hits"] for k, v in bundle.stats().items() if v["hits"] or v["misses"] or v["eager"]}
    assert hits == dict.fromkeys(_keys(name, dtype), norms), (name, bundle.stats())


CASES = [(n, torch.float32) for n in NAMES] + [("llama", torch.bfloat16)]


@pytest.mark.build
@pytest.mark.slow
@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{str(d)[6:]}" for n, d in CASES])
def test_compiled_training_step_serves_every_norm(bundle, name, dtype):
    m, ref = model(name, dtype), model(name, dtype)
    norms = norm_modules(name, m)
    graphs: list = []
    backend = Backend(bundle, prefer_eager=False, inner=_recording(graphs))
    torch._dynamo.reset()
    dt = str(dtype).removeprefix("torch.")
    _check_step(torch.compile(m, backend=backend, dynamic=True), ref, dt, f"{name} compiled")
    served = {d.where.split(" (")[0]: d for d in backend.decisions}
    assert set(served) == set(norms), (norms, [str(d) for d in backend.decisions])
    fwd, bwd = _keys(name, _code(dtype))
    for path, d in served.items():
        assert d.runs is Runs.KERNEL and d.why is Why.SERVED and d.masks == (1, 6), str(d)
        assert d.spelling == f"{NORM_CLASSES[name]}.forward" and d.fused is _fused(path) and not d.add, str(d)
        # fused with the add before it: the fused forward, and the fused backward where the sum has another
        # user (the next residual), the plain one of the sum before the model's last norm
        want = (fwd, bwd) if not d.fused else (_res(fwd), bwd if _final(path) else _res(bwd))
        assert d.kernels == want, str(d)
    # the graph handed to the inner backend: the fused calls, and no add feeding a norm
    assert _fused_calls(graphs) == sum(map(_fused, norms)) >= 2
    hits = {k: v["hits"] for k, v in bundle.stats().items() if v["hits"] or v["misses"] or v["eager"]}
    assert hits == Counter(k for d in served.values() for k in d.kernels), bundle.stats()  # once per norm


def _code(dtype: torch.dtype) -> str:
    return "bf16" if dtype == torch.bfloat16 else "f32"


@pytest.mark.build
@pytest.mark.parametrize("name", NAMES)
def test_replace_norms_swaps_every_norm_with_no_class_named(bundle, name):
    m, ref = model(name), model(name)
    report = replace_norms(m, bundle)
    norms = norm_modules(name, ref)
    assert sorted(s.name for s in report.replaced) == sorted(norms) and not report.left, report
    offset = 1.0 if name == "gemma" else 0.0
    for path in norms:
        swapped = m.get_submodule(path)
        assert type(swapped) is RMSNorm and swapped.weight_offset == offset and swapped.eps == EPS
        assert swapped.weight is dict(m.named_parameters())[f"{path}.weight"]
    _check_step(m, ref, "float32", f"{name} eager")
    _served_once_per_norm(bundle, name, len(norms))


@pytest.mark.build
def test_explain_lists_every_norm_module(bundle):
    """``explain`` (inference, default decisions: no benchmark ran, so no record says torch eager
    is faster) finds each of Llama's norms and what runs it."""
    m = model("llama").eval()
    with torch.no_grad():
        found = explain(lambda ids: m(input_ids=ids).logits, torch.zeros(2, 4, dtype=torch.long), bundle=bundle)
    assert sorted(d.where.split(" (")[0] for d in found.norms) == sorted(norm_modules("llama", m)), str(found)
    for d in found.norms:
        fused = _fused(d.where.split(" (")[0])
        assert d.masks == (1,) and d.spelling == "LlamaRMSNorm.forward" and d.fused is fused, str(d)
        assert d.kernels == ((_res(_key(1)),) if fused else (_key(1),)), str(d)
        assert d.runs is Runs.KERNEL and d.why is Why.SERVED, str(d)
    assert len(found.fused) == 2 and str(found).startswith(
        "3 norms in 1 graph: 3 run the bundle's kernels, 0 the graph's code (2 fused with the add before them)"), \
        str(found)
    assert str(found).count("LlamaRMSNorm.forward fused with its add float32 2x4x32") == 2, str(found)
    with torch.no_grad():  # fusion off: the plain kernels (the traced manifest holds them beside the fused)
        plain = explain(lambda ids: m(input_ids=ids).logits, torch.zeros(2, 4, dtype=torch.long), bundle=bundle,
                        fuse_adds=False)
    assert not plain.fused and {d.kernels for d in plain.norms} == {(_key(1),)}, str(plain)


# ------------------------------------------------------------ dtypes the model's code gives
@pytest.mark.build
def test_float32_weights_beside_bfloat16_activations(bundle):
    """Llama's norm with float32 weights on a bfloat16 input returns float32 (the promotion), T5's
    with bfloat16 weights on a float32 input returns bfloat16 (its weight's): swapped and served,
    each runs the kernel of its input's dtype, returns the original's dtype, within the tolerance."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    torch.manual_seed(1)
    cases = [(LlamaRMSNorm(HIDDEN, eps=EPS), torch.bfloat16, "bf16", torch.float32),
             (T5LayerNorm(HIDDEN, eps=EPS).to(torch.bfloat16), torch.float32, "f32", torch.bfloat16)]
    for norm, x_dtype, code, out_dtype in cases:
        with torch.no_grad():
            norm.weight.copy_(1 + 0.3 * torch.randn(HIDDEN))
        x = (torch.randn(3, 5, HIDDEN) + 0.5).to(x_dtype).requires_grad_()
        expected = norm(x)
        assert expected.dtype == out_dtype
        gy = torch.randn_like(expected)
        ref_dx, ref_dw = torch.autograd.grad(expected, (x, norm.weight), gy)
        tol = "bfloat16"
        for route in ("compiled", "swapped"):
            bundle.reset_stats()
            if route == "compiled":
                torch._dynamo.reset()
                backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
                y = torch.compile(norm, backend=backend, dynamic=True)(x)
                (d,) = backend.decisions
                assert d.runs is Runs.KERNEL and "cast to" in d.detail, str(d)
            else:
                holder = torch.nn.Module()
                holder.norm = copy.deepcopy(norm)
                assert len(replace_norms(holder, bundle).replaced) == 1
                y = holder.norm(x)
            assert y.dtype == out_dtype, (route, y.dtype)
            assert_close(y.detach(), expected.detach(), tol, f"{type(norm).__name__} {route} forward")
            weight = norm.weight if route == "compiled" else holder.norm.weight
            dx, dw = torch.autograd.grad(y, (x, weight), gy)
            assert dx.dtype == x.dtype and dw.dtype == weight.dtype
            assert_close(dx, ref_dx, tol, f"{route} input gradient")
            assert_close(dw, ref_dw, tol, f"{route} weight gradient")
            assert {k for k, v in bundle.stats().items() if v["hits"]} == {_key(1, code), _key(6, code)}, route


# ------------------------------------------------------------ look-alikes
class PerHeadRMSNorm(torch.nn.Module):
    """An RMS norm over each head's dims, with a weight per head: [heads, head_dim]."""

    def __init__(self, heads=4, dim=8, eps=EPS):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(heads, dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ExtraTermRMSNorm(torch.nn.Module):
    """Llama's math plus a term of the input (a skip inside the norm)."""

    def __init__(self, dim=HIDDEN, eps=EPS):
        super().__init__()
        self.weight, self.variance_epsilon = torch.nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)) + 0.1 * x


class LookAlikes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(HIDDEN, HIDDEN)
        self.gated = RMSNormGated(HIDDEN, eps=EPS)
        self.per_head = PerHeadRMSNorm()
        self.extra = ExtraTermRMSNorm()
        self.bn = torch.nn.BatchNorm1d(HIDDEN)

    def forward(self, x, gate):
        h = self.gated(self.fc(x), gate)
        h = self.per_head(h.unflatten(-1, (4, 8))).flatten(-2)
        return self.bn(self.extra(h).transpose(1, 2)).transpose(1, 2)


REASONS = {"gated": GATED, "per_head": PER_HEAD, "extra": NOT_A_NORM, "bn": "a batch norm"}


@pytest.mark.build
def test_lookalikes_are_left_with_their_reasons_and_the_probe_changes_nothing(bundle):
    torch.manual_seed(2)
    m = LookAlikes()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    m.bn.train()(torch.randn(4, 3, HIDDEN).transpose(1, 2))  # running statistics of its own
    x, gate = torch.randn(2, 3, HIDDEN), torch.randn(2, 3, HIDDEN)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with torch.no_grad():
        expected = m.eval()(x, gate)
    calls = []
    for mod in m.modules():
        mod.register_forward_hook(lambda *a: calls.append(1))
    rng = torch.random.get_rng_state()

    for mod in (m.gated, m.per_head, m.extra):  # each named apart, leading with the reason's words
        name = next(k for k, v in m.named_children() if v is mod)
        assert norm_form(mod).problems[0].startswith(REASONS[name]), (name, norm_form(mod))
    report = replace_norms(m, bundle)
    assert not calls, "the probe called a hook of the model"
    assert not report.replaced and {s.name for s in report.left} == REASONS.keys(), report
    for s in report.left:
        assert REASONS[s.name] in s.reason and (s.name == "bn" or s.reason.startswith("probed: ")), report
    with torch.no_grad():
        found = explain(m, x, gate, bundle=bundle)
    reasons = {d.where.split(" (")[0]: (d.why, d.detail) for d in found.norms}
    assert reasons.keys() == REASONS.keys(), str(found)
    for where, (why, detail) in reasons.items():
        assert why is (Why.KIND if where == "bn" else Why.FORM) and REASONS[where] in detail, str(found)
    assert not found.served and "3 modules probed, no norm a kernel computes" in str(found), str(found)

    # nothing of the model changed: parameters, buffers, outputs (bit for bit), the random stream
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    assert torch.equal(torch.random.get_rng_state(), rng)
    with torch.no_grad():
        torch.testing.assert_close(m(x, gate), expected, rtol=0, atol=0)
    assert all(type(getattr(m, k)) not in (RMSNorm, LayerNorm) for k in REASONS)


@pytest.mark.build
def test_auto_false_names_the_candidates_it_did_not_probe(bundle):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    m = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), LlamaRMSNorm(HIDDEN, eps=EPS))
    report = replace_norms(m, bundle, auto=False)
    assert not report.replaced and len(report.left) == 1 and "not probed (auto=False)" in report.left[0].reason
    assert "0 replaced, 1 left" in str(report)
    with record_norms(auto=False) as rec:
        m(torch.randn(2, HIDDEN))
    assert not rec.calls
    with record_norms() as rec:
        m(torch.randn(2, HIDDEN))
    assert [c.signature.key for c in rec.calls] == ["rms_norm-f32-2x32-n32-w-eps1em06-m1"]
    assert len(replace_norms(m, bundle).replaced) == 1


# ------------------------------------------------------------ Gemma's offset kernels in the loader
@pytest.mark.build
def test_offset_kernels_serve_offset_calls_only_and_older_loaders_refuse_them(built, monkeypatch):
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    from boo_build.loader import BundleFormatError
    from boo_build.loader import format as bundle_format

    b = open_bundle(built[0], device="local-task")
    torch.manual_seed(3)
    x, w = torch.randn(3, 5, HIDDEN), torch.randn(HIDDEN) * 0.3
    # a call without the offset is another norm: Llama's kernel serves it, not Gemma's
    plain, _ = b.fused_rms_norm(x, [HIDDEN], w, EPS)
    y, rstd = b.fused_rms_norm(x, [HIDDEN], w, EPS, 1.0)
    assert {k: v["hits"] for k, v in b.stats().items() if v["hits"]} == {_key(1): 1, _key(1, offset="-off1.0"): 1}
    gemma = GemmaRMSNorm(HIDDEN, eps=EPS)
    with torch.no_grad():
        gemma.weight.copy_(w)
        assert_close(y, gemma(x), "float32", "offset forward")
        assert not torch.allclose(plain, y, rtol=0.05, atol=0.05)
    # a dtype no kernel takes runs torch's op with the same offset math (fallback="eager")
    h = x.half()
    eager = b.with_fallback("eager")
    with torch.no_grad():
        gemma.half()
        y16, rstd16 = eager.fused_rms_norm(h, [HIDDEN], w.half(), EPS, 1.0)
        assert_close(y16, gemma(h), "float16", "fallback forward")
    hr, gy = h.clone().requires_grad_(), torch.randn_like(h)
    dx, dw = torch.autograd.grad(gemma(hr), (hr, gemma.weight), gy)
    gx, gw = eager.fused_rms_norm_backward(gy, h, [HIDDEN], rstd16, w.half(), (True, True), 1.0, eps=EPS)
    assert_close(gx, dx, "float16", "fallback input gradient")
    assert_close(gw, dw, "float16", "fallback weight gradient")
    with pytest.raises(ValueError, match="weight_offset must be a finite number"):
        b.fused_rms_norm(x, [HIDDEN], w, EPS, float("nan"))
    # the traced manifest holds fused residual kernels too: format 6 (offset kernels alone need 5); a loader
    # that reads formats 1-4 (before format 5's frames) refuses it, naming the upgrade
    assert b.index["format_version"] == bundle_format.RESIDUAL_FORMAT_VERSION == 6
    monkeypatch.setattr(bundle_format, "READABLE_VERSIONS", (1, 2, 3, 4))
    with pytest.raises(BundleFormatError, match="format version 6 is not supported.*upgrade boo-build"):
        open_bundle(built[0])
