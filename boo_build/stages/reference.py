"""Float64 reference: torch autograd of a plain forward.

Deliberately independent of the implementations (no shared math): the
reference differentiates a textbook forward (the op's ``forward64``), so a
mistake in a hand-written backward cannot hide in both.
"""

from __future__ import annotations

import torch

from .. import ops
from ..signature import BIAS_GRAD, INPUT_GRAD, WEIGHT_GRAD, KernelSignature


def _forward64(sig: KernelSignature, x, w, b):
    dims = tuple(range(x.dim() - len(sig.normalized_shape), x.dim()))
    y, stats = ops.get(sig.op).forward64(sig, x, dims)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
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
    a = [t.to(torch.float64) for t in args]
    if sig.is_forward:
        x, rest = a[0], a[1:]
        w = rest[0] if sig.affine else None
        b = rest[1] if sig.bias else None
        y, stats = _forward64(sig, x, w, b)
        return (y,) + stats
    op = ops.get(sig.op)
    n_stats = len(op.stats)
    gy, x = a[0], a[1]
    w_given = a[2 + n_stats] if sig.takes_weight else None
    x = x.clone().requires_grad_(True)
    w = b = None
    if sig.affine:
        w = (w_given if w_given is not None
             else torch.ones(sig.normalized_shape, dtype=torch.float64, device=x.device))
        w = w.clone().requires_grad_(True)
    if sig.bias:
        b = torch.zeros(sig.normalized_shape, dtype=torch.float64, device=x.device, requires_grad=True)
    y, _ = _forward64(sig, x, w, b)
    given = {INPUT_GRAD: x, WEIGHT_GRAD: w, BIAS_GRAD: b}
    tensors = [given[bit] for bit in op.grads if sig.mask & bit]
    return tuple(torch.autograd.grad(y, tensors, grad_outputs=gy))
