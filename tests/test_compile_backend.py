"""The ``torch.compile`` backend ``"boo"`` (``boo_build.loader.backend``): a model
whose norms are modules, functional calls of all three ops and an ATen op call
trains through the bundle's dynamic kernels at two batch sizes from one graph,
gradients checked against float64; what runs each norm (kernel masks, frozen
weights, inference), the bundle's records deciding, a norm it lacks, no graph
break, options, the token keyed on the bundle's sha256. Real kernels (width 8),
AOT autograd without Inductor but in one test (Inductor compiles cost seconds)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from helpers import BC, BG, BL, BW, assert_close, backend_sigs, with_prefer_eager

from boo_build.loader import open_bundle
from boo_build.loader.backend import Backend, NormNotServed, Runs, Why, explain

W, C, L, G = BW, BC, BL, BG  # the norms' width; the group norm's channels, length and groups
_sigs = backend_sigs  # the bundle's kernels (shared with tests/test_inline_norms.py)


def key(op: str, mask: int) -> str:
    """The key of this file's kernel of ``op`` and ``mask``."""
    return next(s.key for s, _ in _sigs() if s.op == op and s.mask == mask)


@pytest.fixture
def bundle(backend_built):
    return open_bundle(backend_built, device="local-task")


class Model(torch.nn.Module):
    """Module norms (LayerNorm, GroupNorm, RMSNorm), functional ones of all three
    ops and an ATen op call, between linear layers."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(W, W), torch.nn.Linear(W, W), torch.nn.Linear(L, L)
        self.ln, self.rms = torch.nn.LayerNorm(W), torch.nn.RMSNorm(W, eps=1e-6)
        self.gn = torch.nn.GroupNorm(G, C)
        self.w = torch.nn.Parameter(1 + 0.3 * torch.randn(W))
        self.b = torch.nn.Parameter(0.3 * torch.randn(W))
        self.gw = torch.nn.Parameter(1 + 0.3 * torch.randn(C))
        self.gb = torch.nn.Parameter(0.3 * torch.randn(C))
        with torch.no_grad():
            for p in (self.ln.weight, self.ln.bias, self.rms.weight, self.gn.weight, self.gn.bias):
                p.add_(0.3 * torch.randn_like(p))

    def forward(self, x, z):
        h = self.ln(self.fc1(x))                                             # module
        h = F.rms_norm(torch.tanh(h), (W,), self.w, 1e-6)                    # functional
        h = torch.ops.aten.native_layer_norm(self.fc2(h), [W], self.w, self.b, 1e-5)[0]  # an ATen op
        h = self.rms(F.layer_norm(h, (W,), self.w, self.b) + 1)              # functional, module
        g = F.group_norm(self.fc3(z), G, self.gw, self.gb)                   # functional
        return h, self.gn(torch.tanh(g))                                     # module


def _model(seed=0) -> Model:
    torch.manual_seed(seed)
    return Model()


def _inputs(batch, seq=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, seq, W, generator=g), torch.randn(batch, C, L, generator=g),
            torch.randn(batch, seq, W, generator=g), torch.randn(batch, C, L, generator=g))


def _step(model, x, z, gy, gz):
    model.zero_grad(set_to_none=True)
    h, g = model(x, z)
    ((h * gy).sum() + (g * gz).sum()).backward()
    return [h.detach(), g.detach()] + [p.grad for p in model.parameters() if p.requires_grad]


def _marked(*ts):
    for t in ts:
        torch._dynamo.mark_dynamic(t, 0)
    return ts


def _by_op(decisions):
    return sorted((d.spelling, d.runs.value, d.masks) for d in decisions)


SPELLINGS = ["F.group_norm", "F.group_norm", "F.layer_norm", "F.layer_norm", "aten.native_layer_norm",
             "torch.rms_norm", "torch.rms_norm"]


def test_trains_through_the_kernels_at_two_batch_sizes_from_one_graph(bundle):
    torch._dynamo.reset()
    model = _model()
    ref = copy.deepcopy(model).double()
    backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
    run = torch.compile(model, backend=backend, fullgraph=True)
    for batch in (3, 6):  # the second batch size runs the same graph: the kernels are dynamic
        x, z, gy, gz = _inputs(batch)
        got = _step(run, *_marked(x, z), gy, gz)
        want = _step(ref, x.double(), z.double(), gy.double(), gz.double())
        for i, (o, r) in enumerate(zip(got, want)):
            assert_close(o, r, "float32", f"batch {batch}: output/gradient {i}")
    assert backend.graphs == 1
    assert [d.spelling for d in sorted(backend.decisions, key=lambda d: d.spelling)] == SPELLINGS
    assert all(d.runs is Runs.KERNEL and d.why is Why.SERVED for d in backend.decisions), backend.decisions
    masks = {d.op: d.masks for d in backend.decisions}
    assert masks == {"layer_norm": (1, 14), "rms_norm": (1, 6), "group_norm": (1, 14)}
    hits = {k: v["hits"] for k, v in bundle.stats().items()}
    # per step: layer norm 3 calls, rms norm 2, group norm 2; forward and backward each
    for k, n in ((key("layer_norm", 1), 6), (key("layer_norm", 14), 6),
                   (key("rms_norm", 1), 4), (key("rms_norm", 6), 4),
                   (key("group_norm", 1), 4), (key("group_norm", 14), 4)):
        assert hits.get(k) == n, (k, hits)
    assert bundle.stats(totals=True)["misses"] == 0 and backend.stats(totals=True)["dynamic_hits"] == 28


def test_frozen_weights_run_the_input_gradient_kernel(bundle):
    torch._dynamo.reset()
    model = _model()
    for p in model.parameters():
        p.requires_grad_(False)  # only the input needs a gradient
    x, z, gy, gz = _inputs(3)
    x.requires_grad_(True)
    z.requires_grad_(True)
    backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
    h, g = torch.compile(model, backend=backend)(x, z)
    ((h * gy).sum() + (g * gz).sum()).backward()
    rx, rz = x.detach().double().requires_grad_(True), z.detach().double().requires_grad_(True)
    rh, rg = copy.deepcopy(model).double()(rx, rz)
    ((rh * gy.double()).sum() + (rg * gz.double()).sum()).backward()
    assert_close(x.grad, rx.grad, "float32", "input gradient")
    assert_close(z.grad, rz.grad, "float32", "group norm input gradient")
    assert {d.masks for d in backend.decisions} == {(1, 2)}
    hits = bundle.stats()
    assert hits[key("layer_norm", 2)]["hits"] == 3
    assert hits[key("group_norm", 2)]["hits"] == 2
    assert key("layer_norm", 14) not in hits


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_inference_runs_forward_kernels_only(bundle, mode):
    torch._dynamo.reset()
    model = _model()
    x, z, _, _ = _inputs(4)
    backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
    with getattr(torch, mode)():
        h, g = torch.compile(model, backend=backend)(x, z)
        rh, rg = copy.deepcopy(model).double()(x.double(), z.double())
    assert_close(h, rh, "float32", "output")
    assert_close(g, rg, "float32", "group norm output")
    assert {d.masks for d in backend.decisions} == {(1,)}
    assert all(k.endswith("-m1") for k in bundle.stats()) and bundle.stats(totals=True)["dynamic_hits"] == 7


@pytest.mark.slow
def test_inductor_by_name_with_the_bundles_records(backend_built, tmp_path):
    """``backend="boo"`` by name (the entry point), Inductor inside, the default
    decisions: a kernel the records call slower than torch eager keeps the graph's
    code, the others run; no graph break added."""
    torch._dynamo.reset()
    slower = with_prefer_eager(backend_built, tmp_path / "slower.tar.zst", [key("rms_norm", 6)])
    b = open_bundle(slower, device="local-task")
    model = _model()
    x, z, gy, gz = _inputs(3)
    run = torch.compile(model, backend="boo", options={"bundle": b}, fullgraph=True)
    got = _step(run, x, z, gy, gz)
    want = _step(copy.deepcopy(model).double(), x.double(), z.double(), gy.double(), gz.double())
    for i, (o, r) in enumerate(zip(got, want)):
        assert_close(o, r, "float32", f"output/gradient {i}")
    hits = b.stats()
    assert hits[key("layer_norm", 14)]["hits"] == 3
    assert not any(k.startswith("rms_norm") for k in hits), hits  # its backward: torch eager faster
    ex = torch._dynamo.explain(model)(x, z)
    assert ex.graph_break_count == 0 and ex.graph_count == 1
    torch._dynamo.reset()
    why = explain(model, x, z, bundle=b)
    rms = [d for d in why.norms if d.op == "rms_norm"]
    assert {d.why for d in rms} == {Why.EAGER_FASTER} and len(why.served) == 5, str(why)
    assert key("rms_norm", 6) in str(why) and "rms (RMSNorm)" in str(why)


class Wider(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.other = torch.nn.LayerNorm(W), torch.nn.LayerNorm(2 * W)

    def forward(self, x, y):
        return self.ln(x), self.other(y)


def test_a_norm_the_bundle_lacks_keeps_the_graphs_code(bundle, caplog):
    torch._dynamo.reset()
    model = Wider()
    # inputs that need a gradient (else the first norm's backward asks for mask 12, which the bundle lacks)
    x, y = torch.randn(2, 3, W, requires_grad=True), torch.randn(2, 3, 2 * W, requires_grad=True)
    backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
    with caplog.at_level(logging.INFO, logger="boo_build.loader.backend"):
        out, other = torch.compile(model, backend=backend)(x, y)
    assert_close(other, F.layer_norm(y.detach().double(), (2 * W,), model.other.weight.double(), model.other.bias.double()),
                 "float32", "the norm left to the graph")
    assert_close(out, F.layer_norm(x.detach().double(), (W,), model.ln.weight.double(), model.ln.bias.double()), "float32",
                 "the norm served")
    by = {d.where: d for d in backend.decisions}
    assert by["ln (LayerNorm)"].runs is Runs.KERNEL
    left = by["other (LayerNorm)"]
    assert left.runs is Runs.GRAPH and left.why is Why.NO_KERNEL and "layer_norm-f32-2x3x16-n16-wb-m1" in left.detail
    assert "other (LayerNorm)" in caplog.text and "the graph's code" in caplog.text
    (out.sum() + other.sum()).backward()
    assert set(bundle.stats()) == {key("layer_norm", 1), key("layer_norm", 14)}

    torch._dynamo.reset()
    strict = torch.compile(model, backend="boo", options={"bundle": bundle, "fallback": None, "inner": "aot_eager"})
    with pytest.raises(Exception) as e:
        strict(x, y)
    assert isinstance(e.value.__cause__ or e.value, NormNotServed) or "NormNotServed" in str(e.value), e.value
    assert "other (LayerNorm)" in str(e.value) and "layer_norm-f32-2x3x16-n16-wb-m1" in str(e.value)


def test_mixed_dtypes_ask_for_the_inputs_kernel(bundle):
    """A bfloat16 input beside float32 parameters asks for the bfloat16 kernel (its parameters
    cast to bfloat16, as the modules do; tests/test_hand_written_norms.py runs one), which this
    bundle lacks: the graph keeps its code, the decision naming the kernel. ATen's native op with
    the mix is left for its statistics' dtypes."""
    w, b = torch.randn(W), torch.randn(W)
    x = torch.randn(2, 3, W, dtype=torch.bfloat16)
    for fn, why, words in ((lambda t: F.layer_norm(t, (W,), w, b), Why.NO_KERNEL, "no kernel layer_norm-bf16-2x3x8"),
                           (lambda t: torch.ops.aten.native_layer_norm(t, [W], w, b, 1e-5)[0], Why.DTYPE,
                            "weight float32, bias float32 beside a bfloat16 input to ATen's native op")):
        torch._dynamo.reset()
        backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
        with torch.no_grad():
            out = torch.compile(fn, backend=backend)(x)
        assert torch.equal(out, fn(x))
        (d,) = backend.decisions
        assert d.runs is Runs.GRAPH and d.why is why and words in d.detail, str(d)


def test_symbolic_sizes_need_dynamic_kernels(built):
    """A static kernel serves its size only: with symbolic sizes the graph keeps its code."""
    b = open_bundle(built.path, device="local-task")  # the session's static float32 4x6x10 kernels
    model = torch.nn.LayerNorm(10)
    x = torch.randn(4, 6, 10)
    for dynamic, runs in ((False, Runs.KERNEL), (True, Runs.GRAPH)):
        torch._dynamo.reset()
        backend = Backend(b, prefer_eager=False, inner="aot_eager")
        with torch.no_grad():
            out = torch.compile(model, backend=backend)(*(_marked(x.clone()) if dynamic else (x,)))
        assert_close(out, F.layer_norm(x.detach().double(), (10,), model.weight.double(), model.bias.double()), "float32",
                     f"dynamic={dynamic}")
        (d,) = backend.decisions
        assert d.runs is runs, d
        if dynamic:
            assert d.why is Why.STATIC_ONLY and "serves [4, 6, 10] only" in d.detail


def test_options_and_the_token(bundle, backend_built, tmp_path):
    path = backend_built
    torch._dynamo.reset()
    model = torch.nn.LayerNorm(W)
    x = torch.randn(2, 3, W)
    with pytest.raises(Exception, match="no option 'bundel'"):
        torch.compile(model, backend="boo", options={"bundel": path})(x)
    with pytest.raises(ValueError, match="fallback must be one of"):
        Backend(bundle, fallback="torch")
    with pytest.raises(TypeError, match="bundle must be a Bundle"):
        Backend(3)
    # a path is opened once per process; the token names the file's sha256 and the options
    a, b = Backend(path, prefer_eager=False), Backend(path, prefer_eager=False)
    (ba, ta), (bb, tb) = a.serving(), b.serving()
    assert ba is bb and ta == tb and bundle.sha256 in ta and ta.endswith("+kernels")
    assert Backend(bundle).serving()[1] != ta  # the default decisions: another token
    other = with_prefer_eager(path, tmp_path / "other.tar.zst", [key("layer_norm", 1)])
    to = Backend(other, prefer_eager=False).serving()[1]
    assert to != ta and open_bundle(other).sha256 in to
