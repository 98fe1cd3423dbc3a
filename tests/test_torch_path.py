"""Nothing added where torch runs (loader/torch_path.py): a swapped norm module whose
bundle sends a call's size to torch eager calls torch's function itself, counted as
eager; ``replace_norms`` leaves a norm as it is where the bundle would send every call
of it to torch eager. The per-size decisions are a dynamic kernel's (``by_rows``),
written into a copy of the format-2 fixture (compiled for the CPU: no build)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import _ln, with_prefer_eager

from boo_build.loader import KernelNotFound, calls, open_bundle, read_archive
from boo_build.loader.format import EagerPreference
from boo_build.loader.nn import LayerNorm, replace_norms, set_default_bundle
from boo_build.loader.torch_path import LEFT_TO_TORCH
from boo_build.stages.pack import write_bundle

FIXTURE = Path(__file__).parent / "fixtures" / "format-v2-0.1.0.tar.zst"  # layer_norm f32 BATCHx8, forward


def _routed(tmp_path: Path, by_rows) -> Path:
    """The fixture with its kernel's torch calls decided per size (``by_rows``; None: the kernel everywhere)."""
    a = read_archive(FIXTURE)
    ix = a.bundle_index
    (key, k), = ix.kernels.items()
    te = k.targets["cpu"]
    pref = None if by_rows is None else EagerPreference(1e-5, 2e-5, "torch eager faster", by_rows=by_rows)
    ix = ix.with_entry(key, "cpu", dataclasses.replace(te, prefer_eager=pref))
    return write_bundle(tmp_path / f"routed{len(list(tmp_path.iterdir()))}.tar.zst", ix,
                        {m.member: a.members[m.member] for *_, m in ix.impl_records()}, a.members.get("bench.csv"))


@pytest.fixture
def loader_calls(monkeypatch):
    """The forward calls that took the loader's path (``calls.forward``), by rows."""
    seen: list[int] = []
    real = calls.forward

    def forward(bundle, op, input, *rest, **kw):
        seen.append(input.shape[0])
        return real(bundle, op, input, *rest, **kw)
    monkeypatch.setattr(calls, "forward", forward)
    return seen


def test_a_size_the_bundle_sends_to_torch_runs_torchs_function(tmp_path, loader_calls):
    b = open_bundle(_routed(tmp_path, ((2, True), (4096, False))), device="local-task")
    key = b.keys()[0]
    m, ref = LayerNorm(8, bundle=b), torch.nn.LayerNorm(8)
    with torch.no_grad():
        m.weight.normal_(), m.bias.normal_()
        ref.load_state_dict(m.state_dict())
        for rows in (3, 3, 5000, 3):
            x = torch.randn(rows, 8)
            if rows == 3:
                assert torch.equal(m(x), ref(x))  # torch's own function: the same bits
            else:
                assert (m(x) - ref(x)).abs().max() < 1e-5
    assert loader_calls == [5000]  # the small calls never entered the loader
    assert b.stats()[key] == {"hits": 1, "misses": 0, "eager": 3}
    # grad mode, nothing requiring grad: only the forward runs, torch's
    m.requires_grad_(False)
    m(torch.randn(3, 8))
    assert loader_calls == [5000] and b.stats()[key]["eager"] == 4
    # a gradient wanted: its backward has no kernel here (KernelNotFound, as before): the loader's path
    m.requires_grad_(True)
    m(torch.randn(3, 8))
    assert loader_calls == [5000, 3]
    # the kernels everywhere (prefer_eager=False): the loader's path
    m.bundle = b.with_options(prefer_eager=False)
    with torch.no_grad():
        m(torch.randn(3, 8))
    assert loader_calls == [5000, 3, 3] and b.stats()[key]["hits"] == 2
    # autocast, parameters of another dtype, and tracing take the op's path
    m.bundle = b
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        m(torch.randn(3, 8))
    with torch.no_grad(), pytest.raises(KernelNotFound, match="layer_norm-bf16-3x8"):
        m(torch.randn(3, 8).bfloat16())  # float32 weights: cast to bfloat16, whose kernel the bundle lacks
    assert loader_calls[3:] == [3, 3]
    graph = str(torch.fx.symbolic_trace(m).graph)
    assert "boo.layer_norm" in graph and "functional.layer_norm" not in graph


def test_the_default_bundle_and_another_bundle_are_followed(tmp_path, loader_calls):
    eager = open_bundle(_routed(tmp_path, ((2, True), (4096, True))), device="local-task")
    kernel = open_bundle(_routed(tmp_path, None), device="local-task")
    m = LayerNorm(8)  # the default bundle
    try:
        set_default_bundle(eager)
        with torch.no_grad():
            m(torch.randn(3, 8))
            set_default_bundle(kernel)
            m(torch.randn(3, 8))
    finally:
        set_default_bundle(None)
    assert loader_calls == [3] and eager.stats(totals=True)["eager"] == 1
    assert kernel.stats(totals=True)["dynamic_hits"] == 1


def test_replace_norms_leaves_a_norm_every_call_of_which_goes_to_torch(tmp_path):
    def model():
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.LayerNorm(8, eps=1e-6))

    every = open_bundle(_routed(tmp_path, ((2, True), (4096, True))), device="local-task")
    report = replace_norms(model(), every)
    assert not report.replaced and [(s.name, s.reason) for s in report.left] == [
        ("1", LEFT_TO_TORCH),
        ("2", "the bundle has no layer_norm kernel for normalized shape [8], float32, weight and bias, eps 1e-06 on "
              "target cpu (its layer_norm kernels: [8] float32)")]
    assert "1: torch.nn.LayerNorm: the bundle would send every call of it to torch eager" in str(report)
    # some sizes to the kernel, or the kernels everywhere: swapped
    for b in (open_bundle(_routed(tmp_path, ((2, True), (4096, False))), device="local-task"),
              every.with_options(prefer_eager=False)):
        report = replace_norms(model(), b)
        assert [s.name for s in report.replaced] == ["1"]


class _HandNorm(torch.nn.Module):
    """A layer norm written by hand (no torch class), computing in float64: it returns its
    input's dtype (as Cohere's does, computing in float32), or float64 with ``keep=False``."""

    def __init__(self, n: int, keep: bool = True):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(torch.randn(n)), torch.nn.Parameter(torch.randn(n))
        self.eps, self.keep = 1e-5, keep

    def forward(self, x):
        y = torch.nn.functional.layer_norm(x.double(), self.weight.shape, self.weight.double(), self.bias.double(),
                                           self.eps)
        return y.to(x.dtype) if self.keep else y


@pytest.mark.parametrize("keep", [True, False], ids=["its-input-dtype", "float64"])
def test_a_norm_written_by_hand_routes_as_torchs_and_keeps_its_dtype(tmp_path, loader_calls, keep):
    """A probed norm, swapped, calls torch's function itself for the sizes its bundle sends to
    torch where its code returned the input's dtype; where it returned another (float64), such
    a call takes the loader's path, routed to torch alike, and is cast as the code cast. Either
    way its output dtype is its code's. One every call of which goes to torch is left as it is."""
    torch.manual_seed(0)
    b = open_bundle(_routed(tmp_path, ((2, True), (4096, False))), device="local-task")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), _HandNorm(8, keep))
    hand, ref = model[1], _HandNorm(8, keep)
    ref.load_state_dict(hand.state_dict())
    report = replace_norms(model, b)
    assert [(s.name, s.now) for s in report.replaced] == [("1", "boo_build.loader.nn.LayerNorm")], report
    m = model[1]
    assert m.weight is hand.weight and m.bias is hand.bias
    with torch.no_grad():
        for rows in (3, 5000):
            x = torch.randn(rows, 8)
            y, want = m(x), ref(x)
            assert y.dtype == want.dtype == (torch.float32 if keep else torch.float64), rows
            assert (y - want).abs().max() < 1e-5, rows
    assert loader_calls == ([5000] if keep else [3, 5000])
    assert b.stats()[b.keys()[0]] == {"hits": 1, "misses": 0, "eager": 1}

    every = open_bundle(_routed(tmp_path, ((2, True), (4096, True))), device="local-task")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), _HandNorm(8, keep))
    report = replace_norms(model, every)
    assert not report.replaced and [(s.name, s.reason) for s in report.left] == [("1", LEFT_TO_TORCH)]
    assert type(model[1]) is _HandNorm


@pytest.mark.build
def test_training_where_the_backward_goes_to_torch_too(built, tmp_path, loader_calls):
    """Static kernels the build found torch eager faster for, forward and the full backward
    (mask 14): a training call is torch's own, gradients and all; with the weights frozen,
    the input gradient's kernel (mask 2) runs, through the loader."""
    b = open_bundle(with_prefer_eager(built.path, tmp_path / "b.tar.zst", [_ln(1).key, _ln(14).key]),
                    device="local-task")
    m, ref = LayerNorm(10, bundle=b), torch.nn.LayerNorm(10)
    with torch.no_grad():
        m.weight.normal_(), m.bias.normal_()
        ref.load_state_dict(m.state_dict())
    x = torch.randn(4, 6, 10, requires_grad=True)
    y, yr = m(x), ref(x)
    assert torch.equal(y, yr) and loader_calls == []
    gy = torch.randn_like(y)
    got, want = torch.autograd.grad(y, (x, m.weight, m.bias), gy), torch.autograd.grad(yr, (x, ref.weight, ref.bias),
                                                                                       gy)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert b.stats()[_ln(1).key] == {"hits": 0, "misses": 0, "eager": 1}
    m.requires_grad_(False)
    (gx,) = torch.autograd.grad(m(x), (x,), gy)
    assert loader_calls == [4] and b.stats()[_ln(2).key]["hits"] == 1
    assert (gx - want[0]).abs().max() < 1e-4
