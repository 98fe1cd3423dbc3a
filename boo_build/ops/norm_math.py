"""torch building blocks the norm ops' ``manual`` implementations share.

Imports torch: the op modules import it only inside the functions that build
torch code. The forms are shaped for IREE's CPU code generation (measured in
docs/cpu-performance.md); every form computes the same values:

* squares are written ``t.pow(2)``, not ``t * t``: an elementwise op reading
  one operand twice vectorizes worse once fused into the reduction;
* backward row sums with the weight are matrix-vector products
  (``(gy * xm) @ w``, ``row_dot``), which IREE's CPU codegen handles better
  than a broadcast-multiply-reduce;
* sums over the batch rows (weight and bias gradients) never use a reduction
  over the outer dimension, which IREE's CPU codegen vectorizes with gathers
  (several times slower than a row reduction): ``col_sum`` adds contiguous row blocks
  elementwise instead (pairwise, so also more accurate). Its block structure
  depends on the row count, so a dynamic signature (rows unknown at export)
  uses ``col_sum_dynamic``.
"""

from __future__ import annotations

import torch

from .base import BIAS_GRAD, INPUT_GRAD, LANE_WIDTH, WEIGHT_GRAD

# Row blocks added per level in col_sum.
COL_SPLIT = 16


def row_sum(a: torch.Tensor) -> torch.Tensor:
    """Per-row sum of ``a`` ([R, W] -> [R, 1]) with ``LANE_WIDTH`` lanes kept
    apart until the end (the ``lanes`` export variant; W a multiple of them).
    ``a.sum(-1)`` makes llvm-cpu reduce every loaded vector to a scalar and add
    it to a scalar accumulator (a serial chain of horizontal adds); summing
    ``[R, W / 8, 8]`` over the middle dim accumulates whole vectors, then one
    small [R, 8] reduction (faster than torch eager per core for a 768-wide
    forward; ``docs/cpu-performance.md``). The order differs (8 partial sums),
    the accuracy is as good."""
    w = a.shape[-1]
    return a.reshape(-1, w // LANE_WIDTH, LANE_WIDTH).sum(dim=1).sum(dim=-1, keepdim=True)


def lanes_forward(m, x, w, b, bias_free: bool = False):
    """The manual forward of the ``lanes`` variant on 2-D rows: (y, mean or
    None, rstd), y in ``x``'s shape, statistics in the stats layout, all in the
    compute type. ``bias_free``: RMS norm (no mean subtracted)."""
    s, c = m.sig, m.compute
    width, n = s.width, float(s.width)
    k = len(s.normalized_shape)
    stats = tuple(x.shape[:x.dim() - k]) + (1,) * k
    x2 = x.reshape(-1, width).to(c)
    mean = None
    if not bias_free:
        mean = row_sum(x2) / n
        x2 = x2 - mean  # two-pass variance, as the baseline
    rstd = torch.rsqrt(row_sum(x2.pow(2)) / n + s.eps)
    y = x2 * rstd
    if w is not None:
        y = y * offset(s, w.reshape(-1).to(c))
    if b is not None:
        y = y + b.reshape(-1).to(c)
    return y.reshape(x.shape), None if mean is None else mean.reshape(stats), rstd.reshape(stats)


def fused_backward(m, gy, x, mean, rstd, w):
    """The ``fused`` export variant of a manual combined backward (GPU targets):
    (dx, dw, db), each None where ``m.sig.mask`` does not ask for it; ``mean``
    None for RMS norm (no mean subtracted, no bias).

    Written so that no full-size value has two consumers: iree-compile 3.13
    materializes such a value in a dispatch of its own (written, then read back
    by each consumer), which is most of the baseline's traffic. Each use of
    ``x - mean``, ``grad_y * w`` or ``x * rstd`` is therefore its own expression
    (``x - mean``, ``x + (-mean)``, ``(-mean) + x``: equal values, ops that
    common-subexpression elimination keeps apart), and the row factors are folded
    into per-row scalars. What remains: the row sums, the input gradient in the
    same row pass, the column sums (weight and bias in one). ``docs/gpu-traffic.md``
    has the figures."""
    s, c = m.sig, m.compute
    n, width = float(s.width), s.width
    gyc = gy.reshape(-1, width).to(c)
    xc = x.reshape(-1, width).to(c)
    rs = rstd.reshape(-1, 1).to(c)
    mu = None if mean is None else mean.reshape(-1, 1).to(c)
    wc = None if w is None else offset(s, w.reshape(-1).to(c))
    dx = dw = db = None
    if s.mask & INPUT_GRAD:
        centred = xc if mu is None else xc - mu
        # sum(g * xhat) / rstd, with g = grad_y * w
        c1 = (centred * (gyc if wc is None else wc * gyc)).sum(-1, keepdim=True)
        g_rs = gyc * rs if wc is None else (gyc * rs) * wc
        x_part = xc if mu is None else xc + (-mu)
        dx = g_rs - x_part * (rs * rs * rs * (c1 / n))
        if mu is not None:  # layer norm: the mean's gradient, sum(g) / N per row
            c2 = (gyc if wc is None else gyc * wc).sum(-1, keepdim=True)
            dx = dx - rs * (c2 / n)
        dx = dx.reshape(x.shape)
    if s.mask & WEIGHT_GRAD:
        xhat = xc * rs if mu is None else ((-mu) + xc) * rs
        if s.mask & BIAS_GRAD:
            # both column sums in one reduction over rows, [R, 2, W] -> [2, W]: the second
            # factor is 1, written as a select on a constant index (a concatenation would be
            # a tensor of its own), so grad_y is read once for both
            first = torch.arange(2).view(1, 2, 1) == 0
            cols = (gyc.unsqueeze(1) * torch.where(first, xhat.unsqueeze(1), 1.0)).sum(0)
            return dx, cols[0].reshape(s.param_shape), cols[1].reshape(s.param_shape)
        dw = (gyc * xhat).sum(0).reshape(s.param_shape)
    if s.mask & BIAS_GRAD:
        db = gyc.sum(0).reshape(s.param_shape)
    return dx, dw, db


def offset(sig, wc: torch.Tensor) -> torch.Tensor:
    """The factor a weight ``wc`` (in the compute type) scales by: ``sig.weight_offset
    + wc`` (Gemma's ``1 + weight``, added in float32 as Gemma does), ``wc`` itself
    where there is no offset (the graph, and so the kernel, as without the field)."""
    return wc + sig.weight_offset if sig.weight_offset else wc


def row_dot(a: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Per-row sum of ``a * w`` ([R, W], [W] -> [R, 1]) as a matrix-vector product."""
    if w is None:
        return a.sum(dim=-1, keepdim=True)
    return (a @ w).unsqueeze(-1)


def col_sum(a: torch.Tensor) -> torch.Tensor:
    """Sum over the rows of ``a`` ([R, W] -> [W]) with contiguous adds only.

    Each level adds ``COL_SPLIT`` row blocks elementwise (R -> R / 16), the
    leftover rows are kept aside, and the last few rows are added one by one:
    IREE vectorizes all of it along W. A plain ``a.sum(0)`` is a reduction over
    the outer dimension, which IREE's CPU codegen vectorizes with gathers.
    """
    extra = []
    while a.shape[0] > COL_SPLIT:
        rows = a.shape[0]
        m = rows // COL_SPLIT
        if rows > COL_SPLIT * m:
            extra.append(a[COL_SPLIT * m:])
        acc = a[:m]
        for i in range(1, COL_SPLIT):
            acc = acc + a[i * m:(i + 1) * m]
        a = acc
    total = None
    for t in [a] + extra:
        for i in range(t.shape[0]):
            total = t[i] if total is None else total + t[i]
    return total


def col_sum_dynamic(a: torch.Tensor) -> torch.Tensor:
    """``col_sum`` for a symbolic row count: a row reduction of the transpose,
    which IREE's CPU codegen handles about twice as fast as ``a.sum(0)``, and
    nearly as fast as the static ``col_sum`` (docs/cpu-performance.md)."""
    return a.t().sum(dim=-1)


def col_sum_for(sig):
    return col_sum_dynamic if sig.is_dynamic else col_sum


def nan_if_inf(mean: torch.Tensor) -> torch.Tensor:
    """The mean of a row holding an infinity as ATen gives it: NaN (its Welford
    update subtracts infinities; a plain sum gives +-inf). Finite rows keep their
    mean; y and rstd are NaN for such rows either way."""
    return torch.where(torch.isinf(mean), torch.full_like(mean, float("nan")), mean)


def split_affine(args, s):
    """(x, weight or None, bias or None) of a forward kernel's arguments."""
    x, *rest = args
    w = rest[0] if s.affine else None
    b = rest[1] if s.bias else None
    return x, w, b
