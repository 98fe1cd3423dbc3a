"""Norms written inline in a bigger module's ``forward`` (``boo_build/inline_norms.py``),
found in the Dynamo graph's dataflow by the ``"boo"`` backend: each spelling (RMS with
and without a float32 upcast, with ``1 + w``, ``1 / sqrt`` and a division; the layer norm
written out with and without its affine parameters; ConvNeXt's channels-first form,
served through a permutation) trains through the kernels at two batch sizes from one
graph, outputs and every gradient matching the uncompiled model, each kernel call
counted; ``explain`` lists them. Look-alikes are left with their reasons, their numbers
torch's. The matcher's reasons, on graphs of no bundle.

One bundle for the file, shared with tests/test_compile_backend.py
(``helpers.backend_bundle``: dynamic width-8 kernels); AOT autograd without Inductor."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import BW, assert_close, backend_sigs

from boo_build import inline_norms as inl
from boo_build.loader import open_bundle
from boo_build.loader.backend import Backend, Runs, Why, explain

W = BW


def _key(op: str, mask: int, dtype: str = "float32", affine: bool = True, offset: float = 0.0) -> str:
    return next(s.key for s, _ in backend_sigs() if (s.op, s.mask, s.dtype, s.affine, s.weight_offset) ==
                (op, mask, dtype, affine, offset))


@pytest.fixture
def bundle(backend_built):
    return open_bundle(backend_built, device="local-task")


def _param(*shape, base=0.0):
    return torch.nn.Parameter(base + 0.3 * torch.randn(*shape))


class Spellings(torch.nn.Module):
    """Every spelling the matcher serves, written inline in one forward."""

    def __init__(self):
        super().__init__()
        self.eps = 1e-6
        # a weight each: two norms of the same input and weight would be one call (AOT autograd's CSE)
        self.w1, self.w2, self.w3, self.w4 = (_param(W, base=1.0) for _ in range(4))
        self.gw = _param(W)
        self.w, self.b, self.cw, self.cb = _param(W, base=1.0), _param(W), _param(W, base=1.0), _param(W)

    def forward(self, x, xb, y):
        out = []
        h = xb.float()                                      # Llama's math inline: bfloat16 in, float32 upcast
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out.append((h * self.w1).to(xb.dtype))
        out.append(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w2)  # no upcast
        out.append(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + self.gw))  # Gemma's 1 + w
        out.append(x * (1 / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + 1e-6)) * self.w3)  # 1 / sqrt
        out.append(self.w4 * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)))  # a division
        u = x.mean(-1, keepdim=True)                        # the BERT port's layer norm
        s = (x - u).pow(2).mean(-1, keepdim=True)
        out.append(self.w * ((x - u) / torch.sqrt(s + 1e-5)) + self.b)
        out.append((x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5))
        u = y.mean(1, keepdim=True)                         # ConvNeXt's channels-first [N, C, H, W]
        s = (y - u).pow(2).mean(1, keepdim=True)
        z = (y - u) / torch.sqrt(s + 1e-5)
        out.append(self.cw[:, None, None] * z + self.cb[:, None, None])
        return out


SPELLINGS = {  # output index -> (words of its spelling, op, masks)
    0: ("inline rms_norm (mean of squares, rsqrt)", "rms_norm", (1, 6)),
    1: ("inline rms_norm (mean of squares, rsqrt)", "rms_norm", (1, 6)),
    2: ("inline rms_norm (mean of squares, rsqrt)", "rms_norm", (1, 6)),
    3: ("inline rms_norm (mean of squares, 1 / sqrt)", "rms_norm", (1, 6)),
    4: ("inline rms_norm (mean of squares, 1 / sqrt)", "rms_norm", (1, 6)),
    5: ("inline layer_norm (mean and biased variance, 1 / sqrt)", "layer_norm", (1, 14)),
    6: ("inline layer_norm (mean and var, rsqrt)", "layer_norm", (1, 2)),
    7: ("inline layer_norm (mean and biased variance, 1 / sqrt) over dims [1], permuted last", "layer_norm",
        (1, 14)),
}


def _inputs(batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 5, W, generator=g) + 0.5
    return (x.requires_grad_(), (torch.randn(batch, 5, W, generator=g) + 0.5).bfloat16().requires_grad_(),
            (torch.randn(batch, W, 3, 2, generator=g) + 0.5).requires_grad_())


def _step(model, inputs, seed, dynamic=False):
    model.zero_grad(set_to_none=True)
    ins = [t.detach().clone().requires_grad_() for t in inputs]
    for t in ins if dynamic else ():
        torch._dynamo.mark_dynamic(t, 0)
    outs = model(*ins)
    g = torch.Generator().manual_seed(seed)
    losses = [(o.float() * torch.randn(o.shape, generator=g)).sum() for o in outs]
    sum(losses).backward()
    grads = {n.removeprefix("_orig_mod."): p.grad for n, p in model.named_parameters()}
    return outs, losses, grads, [t.grad for t in ins]


@pytest.mark.build
def test_each_spelling_trains_through_the_kernels(bundle):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Spellings()
    ref = copy.deepcopy(model)
    backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
    run = torch.compile(model, backend=backend)
    for batch in (3, 6):  # the second size runs the same graph (the batch is marked dynamic)
        inputs = _inputs(batch, batch)
        outs, losses, grads, in_grads = _step(run, inputs, batch, dynamic=True)
        r_outs, r_losses, r_grads, r_in_grads = _step(ref, inputs, batch)
        for i, (o, r) in enumerate(zip(outs, r_outs)):
            dt = "bfloat16" if i == 0 else "float32"
            assert o.dtype == r.dtype and o.shape == r.shape, i
            assert_close(o.detach(), r.detach(), dt, f"batch {batch}: output {i} ({SPELLINGS[i][0]})")
            assert_close(losses[i].detach(), r_losses[i].detach(), dt, f"batch {batch}: loss {i}")
        assert grads.keys() == r_grads.keys()
        for n, g in grads.items():
            assert_close(g, r_grads[n], "bfloat16" if n == "w1" else "float32", f"batch {batch}: grad of {n}")
        for i, (g, r) in enumerate(zip(in_grads, r_in_grads)):
            assert_close(g, r, "bfloat16" if i == 1 else "float32", f"batch {batch}: grad of input {i}")
    assert backend.graphs == 1
    ds = backend.decisions
    assert len(ds) == len(SPELLINGS), "\n".join(map(str, ds))
    for d, (spelling, op, masks) in zip(ds, SPELLINGS.values()):
        assert d.runs is Runs.KERNEL and d.why is Why.SERVED, str(d)
        assert (d.spelling, d.op, d.masks) == (spelling, op, masks), str(d)
    # per step: 3 plain f32 RMS norms, 1 of offset 1, 1 bfloat16; 2 affine layer norms, 1 plain; forward and backward
    want = {_key("rms_norm", 1): 3, _key("rms_norm", 6): 3,
            _key("rms_norm", 1, offset=1.0): 1, _key("rms_norm", 6, offset=1.0): 1,
            _key("rms_norm", 1, "bfloat16"): 1, _key("rms_norm", 6, "bfloat16"): 1,
            _key("layer_norm", 1): 2, _key("layer_norm", 14): 2,
            _key("layer_norm", 1, affine=False): 1, _key("layer_norm", 2, affine=False): 1}
    hits = {k: v["hits"] for k, v in bundle.stats().items() if v["hits"] or v["misses"]}
    assert hits == {k: 2 * n for k, n in want.items()}, hits


@pytest.mark.build
def test_explain_lists_each_spelling(bundle):
    torch.manual_seed(0)
    model = Spellings()
    with torch.no_grad():
        found = explain(model, *(t.detach() for t in _inputs(2, 0)), bundle=bundle, prefer_eager=False)
    assert str(found).startswith("8 norms in 1 graph: 8 run the bundle's kernels, 0 the graph's code"), str(found)
    for d, (spelling, op, _) in zip(found.norms, SPELLINGS.values()):
        assert (d.spelling, d.op, d.masks, d.runs) == (spelling, op, (1,), Runs.KERNEL), str(d)
        assert d.where == d.source and d.source.startswith("test_inline_norms.py:"), str(d)  # the compiled module


# ------------------------------------------------------------ look-alikes
class LookAlikes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w, self.per_head = _param(W, base=1.0), _param(4, W, base=1.0)
        self.cw, self.cb = _param(2 * W, base=1.0), _param(2 * W)

    def forward(self, x, gate, q, y):
        out = []
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)          # an intermediate reused
        out += [x * rstd * self.w, rstd]
        out.append(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * F.silu(gate) * self.w)  # gated
        out.append(x * torch.rsqrt(x.pow(2).mean((-2, -1), keepdim=True) + 1e-6))  # over [seq, 8]: no kernel
        out.append(q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * self.per_head)  # a [4, 8] weight
        u = y.mean(1, keepdim=True)                         # channels-first, 16 channels: no kernel
        s = (y - u).pow(2).mean(1, keepdim=True)
        out.append(self.cw[:, None, None] * ((y - u) / torch.sqrt(s + 1e-5)) + self.cb[:, None, None])
        return out


LEFT = [(Why.FORM, inl.REUSED), (Why.FORM, inl.GATE), (Why.NO_KERNEL, "no kernel rms_norm-f32-3x5x8-n5x8"),
        (Why.FORM, inl.WEIGHT_SHAPE), (Why.NO_KERNEL, "normalized over dim 1: no kernel layer_norm-f32-")]


@pytest.mark.build
def test_lookalikes_are_left_with_their_reasons(bundle):
    torch._dynamo.reset()
    torch.manual_seed(1)
    model = LookAlikes()
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(3, 5, W, generator=g), torch.randn(3, 5, W, generator=g),
              torch.randn(3, 5, 4, W, generator=g), torch.randn(3, 2 * W, 2, 2, generator=g)]
    for t in inputs:
        t.requires_grad_()
        torch._dynamo.mark_dynamic(t, 0)
    backend = Backend(bundle, prefer_eager=False, inner="aot_eager")
    outs = torch.compile(model, backend=backend)(*inputs)
    sum(o.sum() for o in outs).backward()
    ds = backend.decisions
    assert [(d.why, d.runs) for d in ds] == [(why, Runs.GRAPH) for why, _ in LEFT], "\n".join(map(str, ds))
    for d, (_, words) in zip(ds, LEFT):
        assert words in d.detail, str(d)
    assert not bundle.stats(), bundle.stats()
    grads = [t.grad for t in inputs] + [p.grad for p in model.parameters()]
    model.zero_grad()
    ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    ref = model(*ref_inputs)
    sum(o.sum() for o in ref).backward()
    for o, r in zip(outs, ref):  # the graph's own code: torch's numbers
        torch.testing.assert_close(o, r, rtol=1e-6, atol=1e-6)
    for g_, r in zip(grads, [t.grad for t in ref_inputs] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(g_, r, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        found = explain(model, *(t.detach() for t in inputs), bundle=bundle)
    assert "3 look-alikes written inline, left as written" in str(found), str(found)


# ------------------------------------------------------------ the matcher alone (no bundle)
def _found(fn, *inputs, dynamic=False) -> list[inl.InlineNorm]:
    got: list[inl.InlineNorm] = []

    def capture(gm, _):
        got.extend(inl.find(gm.graph))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, dynamic=dynamic)(*inputs)
    return got


def test_the_matcher_names_each_lookalike():
    x, y, g = torch.randn(2, 3, W), torch.randn(2, 3, W), torch.randn(2, 3, W)
    w, w3, b = torch.randn(W), torch.randn(3, W), torch.randn(W)

    def rms(t):
        return t.pow(2).mean(-1, keepdim=True)

    def centred(t):
        return t - t.mean(-1, keepdim=True)

    cases = {  # in graph order: one compile
        inl.UNBIASED: lambda: centred(x) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5),
        inl.DIMS: lambda: (x - x.mean(-2, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, correction=0) + 1e-5),
        inl.OTHER_INPUT: lambda: y * torch.rsqrt(rms(x) + 1e-6) * w,
        inl.EXTRA: lambda: x * torch.rsqrt(rms(x) + 1e-6) + 0.1 * x,
        inl.SCALED: lambda: x * torch.rsqrt(rms(x) + 1e-6) * 0.5 * w,
        inl.CASTS: lambda: (x.float() * torch.rsqrt(rms(x) + 1e-6)).half() * w.half(),
        inl.BIAS_ONLY: lambda: centred(x) * torch.rsqrt(centred(x).pow(2).mean(-1, keepdim=True) + 1e-5) + b,
        inl.OFFSET_LN: lambda: centred(x) * torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5) * (1 + w),
        inl.WEIGHT_SHAPE: lambda: x * torch.rsqrt(rms(x) + 1e-6) * w3,  # a weight per position
        inl.GATE: lambda: x * torch.rsqrt(rms(x) + 1e-6) * torch.sigmoid(g),
        None: lambda: (((x - y) ** 2).mean() + torch.sqrt(x.pow(2).mean() + 1),  # no norms: an MSE, no keepdim,
                       torch.softmax(x, -1) * torch.rsqrt(x.abs() + 1e-6)),  # an rsqrt of no statistic
    }
    found = _found(lambda: [fn() for fn in cases.values()])
    reasons = [r for r in cases if r]
    assert len(found) == len(reasons) and all(n.problem.startswith(r) for n, r in zip(found, reasons)), \
        [n.problem for n in found]


def test_the_matcher_reads_an_eps_attribute_under_dynamic_shapes():
    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.eps = torch.nn.Parameter(torch.ones(W)), 1e-6

        def forward(self, x):
            h = x.to(torch.float32)
            return (self.w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype))

    (n,) = _found(Norm(), torch.randn(2, 3, W, dtype=torch.bfloat16), dynamic=True)
    assert not n.problem and n.eps == 1e-6 and n.eps_input is not None and n.op == "rms_norm", n
    assert n.normalized_shape == (W,) and n.dims == (2,) and n.permutation is None


# ------------------------------------------------------------ record_norms (boo-build trace)
def test_record_norms_records_the_kernels_the_pass_asks_for():
    """Each spelling recorded as the kernel the backend's pass calls (the channels-first norm by its
    permuted, channels-last shape), forward and backward; the look-alikes the pass leaves, unrecorded
    with their reasons; the model's results unchanged."""
    from boo_build.trace import record_norms

    torch.manual_seed(0)
    model, look = Spellings(), LookAlikes()
    inputs = _inputs(3, 0)
    g = torch.Generator().manual_seed(2)
    others = [torch.randn(3, 5, W, generator=g), torch.randn(3, 5, W, generator=g),
              torch.randn(3, 5, 4, W, generator=g), torch.randn(3, 2 * W, 2, 2, generator=g)]
    expected = [o.detach() for o in model(*inputs)]
    with record_norms() as rec:
        torch.nn.Embedding(4, W, padding_idx=0)  # its padding row set in place under no_grad: a view's grad_fn raises
        outs = model(*inputs)
        sum(o.float().sum() for o in outs).backward()
        with torch.no_grad():
            look(*others)
    assert all(torch.equal(o.detach(), e) for o, e in zip(outs, expected))
    rms, ln = "rms_norm-f32-3x5x8-n8-w-eps1em06", "layer_norm-f32-3x5x8-n8"
    want = {f"{rms}-m1": 3, f"{rms}-m6": 3, f"{rms}-off1.0-m1": 1, f"{rms}-off1.0-m6": 1,
            "rms_norm-bf16-3x5x8-n8-w-eps1em06-m1": 1, "rms_norm-bf16-3x5x8-n8-w-eps1em06-m6": 1,
            f"{ln}-wb-m1": 1, f"{ln}-wb-m14": 1, f"{ln}-nw-m1": 1, f"{ln}-nw-m2": 1,
            "layer_norm-f32-3x3x2x8-n8-wb-m1": 1, "layer_norm-f32-3x3x2x8-n8-wb-m14": 1,  # channels-first, permuted
            # the look-alikes the pass finds exact: kernels a bundle could hold (over [5, 8]; 16 channels)
            "rms_norm-f32-3x5x8-n5x8-nw-eps1em06-m1": 1, "layer_norm-f32-3x2x2x16-n16-wb-m1": 1}
    assert {c.signature.key: c.calls for c in rec.calls} == want, rec.table()
    assert all(s.startswith("inline ") for c in rec.calls for s in c.sources), rec.table()
    left = sorted(u.reason.removeprefix("left as written: ").split(" (")[0] for u in rec.unrecorded)
    assert left == sorted([inl.REUSED, inl.GATE, inl.WEIGHT_SHAPE]), rec.table()
    assert 'torch.compile(model, backend="boo") serves them' in rec.table()
