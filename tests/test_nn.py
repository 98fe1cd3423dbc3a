"""boo_build.loader.nn: drop-in LayerNorm / RMSNorm trained against torch's."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import _ln, _rms32

from boo_build.dtypes import tolerance
from boo_build.loader import KernelNotFound, open_bundle
from boo_build.loader import nn as boo_nn

TOL = tolerance("float32")


class Net(torch.nn.Module):
    def __init__(self, ln=torch.nn.LayerNorm, rms=torch.nn.RMSNorm, norm_first=False, **kw):
        super().__init__()
        self.norm_first = norm_first
        self.fc1 = torch.nn.Linear(10, 10)
        self.ln = ln(10, **kw)
        self.fc2 = torch.nn.Linear(10, 10)
        self.rms = rms(10, **kw)

    def forward(self, x):
        h = self.ln(x) if self.norm_first else self.ln(self.fc1(x))
        h = self.rms(self.fc2(torch.tanh(h)))
        return h if self.norm_first else self.fc1(h)


def _pair(bundle, **kw):
    torch.manual_seed(0)
    ref = Net(**kw)
    with torch.no_grad():  # non-trivial affine parameters
        for p in (ref.ln.weight, ref.ln.bias, ref.rms.weight):
            p.add_(0.1 * torch.randn_like(p))
    boo = Net(ln=lambda *a, **k: boo_nn.LayerNorm(*a, bundle=bundle, **k),
              rms=lambda *a, **k: boo_nn.RMSNorm(*a, bundle=bundle, **k), **kw)
    boo.load_state_dict(ref.state_dict())  # same parameters, same names
    return ref, boo


def _train(model, steps=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 6, 10, generator=g)
        target = torch.randn(4, 6, 10, generator=g)
        opt.zero_grad()
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _assert_same(ref, boo):
    for (name, p), q in zip(ref.named_parameters(), boo.parameters()):
        scale = max(1.0, p.abs().max().item())
        err = (p - q).abs().max().item()
        assert err <= 10 * (TOL.atol * scale), f"{name}: differs by {err:.3g}"


def test_drop_in(built):
    b = open_bundle(built.path, device="local-task")
    m = boo_nn.LayerNorm(10, bundle=b)
    assert isinstance(m, torch.nn.LayerNorm) and m.weight.shape == (10,) and m.eps == 1e-5
    r = boo_nn.RMSNorm([10], eps=None, bundle=built.path)  # a path opens the bundle
    assert isinstance(r, torch.nn.RMSNorm) and r.bundle.target.name == "cpu"
    assert "bundle=test-norms-1.2.3" in repr(m)
    assert copy.deepcopy(m).bundle is b  # copies share the bundle
    x = torch.randn(4, 6, 10)
    assert torch.allclose(m(x), torch.nn.functional.layer_norm(x, (10,), m.weight, m.bias), atol=1e-5)
    with torch.no_grad():
        y = r(x)
    assert torch.allclose(y, torch.nn.functional.rms_norm(x, (10,), r.weight), atol=1e-5)


def test_training_matches_torch(built):
    b = open_bundle(built.path, device="local-task")
    ref, boo = _pair(b)
    l_ref, l_boo = _train(ref), _train(boo)
    assert l_ref == pytest.approx(l_boo, rel=1e-4, abs=1e-5)
    _assert_same(ref, boo)
    s = b.stats()
    # forward kernels and ONE combined backward kernel each, nothing else
    assert set(s) == {_ln(1).key, _ln(14).key, _rms32(1).key, _rms32(6).key}
    assert all(v == {"hits": 4, "misses": 0, "eager": 0} for v in s.values())


def test_fx_symbolic_trace_of_swapped_norms(built):
    """``torch.fx.symbolic_trace`` traces a model whose norms are the drop-ins (the
    parameter cast is a leaf of the graph, the norm the custom op): the traced
    module gives the model's results, from the bundle's kernels, and trains alike."""
    b = open_bundle(built.path, device="local-task")
    ref, boo = _pair(b)
    gm = torch.fx.symbolic_trace(boo)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.boo.layer_norm in targets and torch.ops.boo.rms_norm in targets
    x = torch.randn(4, 6, 10)
    with torch.no_grad():
        assert torch.equal(gm(x), boo(x))
    b.reset_stats()
    _train(gm, steps=2)
    s = b.stats()
    assert set(s) == {_ln(1).key, _ln(14).key, _rms32(1).key, _rms32(6).key}
    assert all(v == {"hits": 2, "misses": 0, "eager": 0} for v in s.values())
    _train(ref, steps=2)
    _assert_same(ref, gm)


def test_frozen_norm_weights_use_the_input_gradient_kernel(built):
    b = open_bundle(built.path, device="local-task")
    ref, boo = _pair(b)
    for model in (ref, boo):
        for m in (model.ln, model.rms):
            m.weight.requires_grad_(False)
        model.ln.bias.requires_grad_(False)
    _assert_same(ref, boo)
    _train(ref, steps=3), _train(boo, steps=3)
    _assert_same(ref, boo)
    assert torch.equal(ref.ln.weight, boo.ln.weight)  # frozen: untouched
    s = b.stats()
    assert set(s) == {_ln(1).key, _ln(2).key, _rms32(1).key, _rms32(2).key}
    assert s[_ln(2).key] == s[_rms32(2).key] == {"hits": 3, "misses": 0, "eager": 0}


def test_missing_backward_kernel_and_fallback(built):
    """A norm on the model's input needs only weight gradients (masks 12 and 4):
    not in the bundle. Without a fallback that is an error naming the key; with
    fallback='eager' training still matches torch and the misses are counted."""
    b = open_bundle(built.path, device="local-task")
    _, boo = _pair(b, norm_first=True)
    with pytest.raises(KernelNotFound, match=r"layer_norm-f32-4x6x10-n10-wb-m12"):
        _train(boo, steps=1)

    b = open_bundle(built.path, device="local-task", fallback="eager")
    ref, boo = _pair(b, norm_first=True)
    _train(ref, steps=3), _train(boo, steps=3)
    _assert_same(ref, boo)
    s = b.stats()
    assert s[_ln(12).key] == {"hits": 0, "misses": 3, "eager": 0}
    assert s[_ln(1).key] == s[_rms32(6).key] == {"hits": 3, "misses": 0, "eager": 0}


def test_default_bundle(built, monkeypatch):
    boo_nn.set_default_bundle(None)
    monkeypatch.delenv(boo_nn.BUNDLE_ENV, raising=False)
    m = boo_nn.LayerNorm(10)
    with pytest.raises(RuntimeError, match="no bundle"):
        m(torch.randn(4, 6, 10))
    monkeypatch.setenv(boo_nn.BUNDLE_ENV, str(built.path))
    try:
        assert m(torch.randn(4, 6, 10)).shape == (4, 6, 10)
        assert boo_nn.default_bundle().path == str(built.path)
    finally:
        boo_nn.set_default_bundle(None)
