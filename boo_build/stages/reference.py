"""Float64 reference: torch autograd of a plain forward.

Deliberately independent of the implementations (no shared math): the
reference differentiates a textbook forward (the op's ``forward64``), so a
mistake in a hand-written backward cannot hide in both.

``formula_errors``: the same formula evaluated with float32-sized rounding
errors (Monte Carlo arithmetic), for the conditioning floor of the tolerance
rule (``tolerances``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import ops
from ..ops.base import BIAS_GRAD, INPUT_GRAD, WEIGHT_GRAD
from ..signature import KernelSignature
from . import tolerances


def _forward64(sig: KernelSignature, x, w, b):
    dims = tuple(range(x.dim() - len(sig.normalized_shape), x.dim()))
    y, stats = ops.get(sig.op).forward64(sig, x, dims)
    if w is not None:  # RMS norm's weight offset (Gemma's 1 + weight) is part of the scale; only
        # where there is one: formula_errors' rounded arithmetic would perturb even an added 0
        y = y * (w + sig.weight_offset if sig.weight_offset else w).reshape(sig.param_view)
    if b is not None:
        y = y + b.reshape(sig.param_view)
    return y, stats


def statistics(sig: KernelSignature, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The op's statistics of ``x`` (e.g. (mean, rstd)) in float64, in ATen's stats layout."""
    _, stats = _forward64(sig, x.to(torch.float64), None, None)
    return stats


def reference(sig: KernelSignature, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Expected outputs of the kernel for ``args`` (its calling convention), in float64.

    Backward kernels are given the saved statistics, but the reference
    recomputes them from the input in float64: it checks the whole chain.
    """
    return _formula(sig, _leaves(sig, args))


def _leaves(sig: KernelSignature, args) -> dict[str, Any]:
    """The formula's inputs in float64: x (and gy) as given, the weight (a
    backward that is not given one gets 1) and bias (a backward's is 0)."""
    if sig.residual and sig.is_forward:
        # h = x + residual as the kernel stores it (the input's dtype, rounded: what the
        # model's code normalizes), then the norm of it, a leaf as the norm's input is
        x, r, *params = args
        return _leaves(sig.replace(residual=False), ((x + r).to(x.dtype), *params))
    if sig.residual:
        *args, gh = args
        return {**_leaves(sig.replace(residual=False), args), "gh": gh.to(torch.float64)}
    a = [t.to(torch.float64) for t in args]
    if sig.is_forward:
        rest = a[1:]
        return dict(x=a[0], w=rest[0] if sig.affine else None, b=rest[1] if sig.bias else None)
    n_stats = len(ops.get(sig.op).stats)
    x = a[1]
    w_given = a[2 + n_stats] if sig.takes_weight else None
    w = b = None
    if sig.affine:
        w = w_given if w_given is not None else torch.ones(sig.param_shape, dtype=torch.float64, device=x.device)
    if sig.bias:
        b = torch.zeros(sig.param_shape, dtype=torch.float64, device=x.device)
    return dict(gy=a[0], x=x, w=w, b=b)


def _formula(sig: KernelSignature, leaves: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    if sig.is_forward:
        y, stats = _forward64(sig, leaves["x"], leaves["w"], leaves["b"])
        return (y, leaves["x"]) + stats if sig.residual else (y,) + stats
    x, w, b = (None if leaves[k] is None else leaves[k].detach().requires_grad_(True) for k in ("x", "w", "b"))
    y, _ = _forward64(sig, x, w, b)
    given = {INPUT_GRAD: x, WEIGHT_GRAD: w, BIAS_GRAD: b}
    tensors = [given[bit] for bit in ops.get(sig.op).grads if sig.mask & bit]
    grads = tuple(torch.autograd.grad(y, tensors, grad_outputs=leaves["gy"]))
    if sig.residual:  # dh: the norm's input gradient and the one h gets from its other users
        return (grads[0] + leaves["gh"],) + grads[1:]
    return grads


def formula_errors(sig: KernelSignature, args: tuple[torch.Tensor, ...],
                   expected: tuple[torch.Tensor, ...] | None = None) -> tuple[float, ...]:
    """Per output, the largest ``|value - expected|`` over ``tolerances.SAMPLES``
    evaluations of the reference formula in Monte Carlo arithmetic
    (``_Rounding``): what float32 evaluation of a correct formula can be
    expected to miss by on these arguments. Seeded: the same on every run;
    torch's thread count moves the figures only in float64's last bits (and
    validation runs on one thread)."""
    leaves = _leaves(sig, args)
    if expected is None:
        expected = _formula(sig, leaves)
    worst = [0.0] * len(expected)
    gen = torch.Generator().manual_seed(tolerances.SEED)
    for _ in range(tolerances.SAMPLES):
        with _Rounding(tolerances.UNIT_ROUNDOFF, gen):
            got = _formula(sig, leaves)
        worst = [max(w, float((g.detach() - e).abs().max())) if e.numel() else w
                 for w, g, e in zip(worst, got, expected)]
    return tuple(worst)


def _abs(v):
    return v.abs() if isinstance(v, torch.Tensor) else abs(v) if isinstance(v, (int, float)) else v


class _Rounding(TorchDispatchMode):
    """Every floating result of an aten op (forward and autograd's backward) is
    moved by ``u * d * size``, ``d`` uniform in [-1, 1] per element (from
    ``gen``), ``size`` the magnitude the operation's rounding is relative to:
    for sums and differences (add, sub, rsub, sum, mean) the same operation on
    the magnitudes of its operands, so that a difference of two large numbers
    carries their rounding (``x - mean`` at a mean offset of 100: ``u * 200``);
    otherwise the result's own magnitude. Views and in-place ops are left
    exact. Inputs are exact, as the kernel is given them."""

    def __init__(self, u: float, gen: torch.Generator):
        super().__init__()
        self.u, self.gen = u, gen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or func._schema.is_mutable:
            return out
        magnitude = None
        if func.overloadpacket in _SUMS:
            packet = _SUMS[func.overloadpacket]
            overload = getattr(packet, func._overloadname)
            if func.overloadpacket in _TERMS:  # add/sub: every argument is a term
                magnitude = overload(*(_abs(a) for a in args), **{k: _abs(v) for k, v in kwargs.items()})
            else:  # sum/mean: the reduced tensor's magnitudes, the same dims
                magnitude = overload(_abs(args[0]), *args[1:], **kwargs)
        if isinstance(out, torch.Tensor):
            return self._moved(out, magnitude)
        if isinstance(out, (tuple, list)):
            return type(out)(self._moved(t, None) if isinstance(t, torch.Tensor) else t for t in out)
        return out

    def _moved(self, t: torch.Tensor, magnitude):
        if not t.is_floating_point() or t.numel() == 0:
            return t
        size = t.abs() if magnitude is None else torch.maximum(magnitude, t.abs())
        d = torch.rand(t.shape, generator=self.gen, dtype=t.dtype).to(t.device) * 2 - 1
        return t + self.u * d * size


_aten = torch.ops.aten
_TERMS = {_aten.add: _aten.add, _aten.sub: _aten.add, _aten.rsub: _aten.add}
_SUMS = {**_TERMS, _aten.sum: _aten.sum, _aten.mean: _aten.mean}
