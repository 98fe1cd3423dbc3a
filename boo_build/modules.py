"""torch.nn.Modules for each (op, mask, implementation), following the calling
convention documented in ``boo_build.signature``.

``aten`` calls the core ATen ops; ``manual`` writes the math out and computes
only the requested gradients. Half-precision inputs are computed in float32
(ATen's opmath type) and rounded once at the end.

The manual math is shaped for IREE's CPU code generation (measured in
docs/cpu-performance.md); every form below computes the same values:

* squares are written ``t.pow(2)``, not ``t * t``: an elementwise op reading
  one operand twice vectorizes 1.3-2.4x worse once fused into the reduction;
* backward row sums with the weight are matrix-vector products
  (``(gy * xm) @ w``), which IREE's CPU codegen handles better than a
  broadcast-multiply-reduce;
* sums over the batch rows (weight and bias gradients) never use a reduction
  over the outer dimension, which IREE's CPU codegen vectorizes with gathers
  (4x slower than a row reduction): ``_col_sum`` adds contiguous row blocks
  elementwise instead (pairwise, so also more accurate). Its block structure
  depends on the row count, so a dynamic signature (rows unknown at export)
  uses ``_col_sum_dynamic``.

Shapes come from the tensors, never from the signature, so that a dynamic
signature (``KernelSignature.is_dynamic``) exports with symbolic dims.
"""

from __future__ import annotations

import os

import torch

from .signature import BIAS_GRAD, INPUT_GRAD, WEIGHT_GRAD, KernelSignature, ModuleId

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Test-only switch: plants an error in the manual implementation so that tests
# can prove validation catches a wrong kernel. Read at module construction.
PLANT_ERROR_ENV = "BOO_BUILD_TEST_PLANT_ERROR"


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


class _Norm(torch.nn.Module):
    def __init__(self, sig: KernelSignature):
        super().__init__()
        self.sig = sig
        nd = len(sig.input_shape)
        self.norm_dims = list(range(nd - len(sig.normalized_shape), nd))
        self.batch_dims = list(range(nd - len(sig.normalized_shape)))
        self.dtype = torch_dtype(sig.dtype)
        self.stats_dtype = torch_dtype(sig.stats_dtype)
        self.compute = torch.float32  # ATen's opmath type for all three dtypes
        self.planted = os.environ.get(PLANT_ERROR_ENV) == "1"

    def _outputs(self, dx, dw, db):
        m = self.sig.mask
        out = []
        if m & INPUT_GRAD:
            out.append(dx.to(self.dtype))
        if m & WEIGHT_GRAD:
            out.append(dw.to(self.dtype))
        if m & BIAS_GRAD:
            out.append(db.to(self.dtype))
        return tuple(out)


# ---------------------------------------------------------------- layer norm
class LayerNormAten(_Norm):
    def forward(self, *args):
        s = self.sig
        if s.is_forward:
            x, w, b = _split_affine(args, s)
            y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(s.normalized_shape), w, b, s.eps)
            return y, _nan_if_inf(mean).to(self.stats_dtype), rstd.to(self.stats_dtype)
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        if w is None and s.affine:
            # ATen needs a weight to size the weight gradient; its value is unused then.
            w = torch.ones(s.normalized_shape, dtype=self.dtype)
        b = torch.zeros(s.normalized_shape, dtype=self.dtype) if s.bias else None
        mask = [bool(s.mask & INPUT_GRAD), bool(s.mask & WEIGHT_GRAD), bool(s.mask & BIAS_GRAD)]
        # ATen on the CPU wants one dtype for all tensors; float32 statistics
        # must not be rounded to half, so the op runs in float32 (as on GPUs).
        c = self.compute
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            gy.to(c), x.to(c), list(s.normalized_shape), mean.to(c), rstd.to(c),
            None if w is None else w.to(c), None if b is None else b.to(c), mask,
        )
        return self._outputs(dx, dw, db)


class LayerNormManual(_Norm):
    def forward(self, *args):
        s = self.sig
        c = self.compute
        if s.is_forward:
            x, w, b = _split_affine(args, s)
            xc = x.to(c)
            mean = xc.mean(dim=self.norm_dims, keepdim=True)
            xm = xc - mean  # two-pass variance: stable under a large mean offset
            var = xm.pow(2).mean(dim=self.norm_dims, keepdim=True)
            rstd = torch.rsqrt(var + s.eps)
            y = xm * rstd
            if w is not None:
                y = y * w.to(c)
            if b is not None:
                y = y + b.to(c)
            if self.planted:
                y = y * 1.01
            return y.to(self.dtype), _nan_if_inf(mean).to(self.stats_dtype), rstd.to(self.stats_dtype)
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        n, width = float(s.width), s.width
        # 2-D views: rows x normalized elements
        gyc = gy.reshape(-1, width).to(c)
        xm = x.reshape(-1, width).to(c) - mean.reshape(-1, 1).to(c)
        rs = rstd.reshape(-1, 1).to(c)
        wc = w.reshape(-1).to(c) if w is not None else None
        dx = dw = db = None
        if s.mask & INPUT_GRAD:
            g = gyc * wc if wc is not None else gyc
            sum_g = _row_dot(gyc, wc)
            sum_gxm = _row_dot(gyc * xm, wc)  # sum(g * xhat) / rstd
            dx = ((g - sum_g / n - xm * (sum_gxm * (rs * rs) / n)) * rs).reshape(x.shape)
        col_sum = _col_sum_dynamic if s.is_dynamic else _col_sum
        if s.mask & WEIGHT_GRAD:
            dw = col_sum((gyc * rs) * xm).reshape(s.normalized_shape)
        if s.mask & BIAS_GRAD:
            db = col_sum(gyc).reshape(s.normalized_shape)
        return self._outputs(dx, dw, db)


# ------------------------------------------------------------------ RMS norm
class RMSNormAten(_Norm):
    def forward(self, *args):
        s = self.sig
        if s.is_forward:
            x, w, _ = _split_affine(args, s)
            y, rstd = torch.ops.aten._fused_rms_norm(x, list(s.normalized_shape), w, s.eps)
            return y, rstd.to(self.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        if w is None and s.affine:
            w = torch.ones(s.normalized_shape, dtype=self.dtype)
        mask = [bool(s.mask & INPUT_GRAD), bool(s.mask & WEIGHT_GRAD)]
        dx, dw = _fused_rms_norm_backward(gy, x, list(s.normalized_shape), rstd, w, mask)
        return self._outputs(dx, dw, None)


class RMSNormManual(_Norm):
    def forward(self, *args):
        s = self.sig
        c = self.compute
        if s.is_forward:
            x, w, _ = _split_affine(args, s)
            xc = x.to(c)
            rstd = torch.rsqrt(xc.pow(2).mean(dim=self.norm_dims, keepdim=True) + s.eps)
            y = xc * rstd
            if w is not None:
                y = y * w.to(c)
            if self.planted:
                y = y * 1.01
            return y.to(self.dtype), rstd.to(self.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        n, width = float(s.width), s.width
        gyc = gy.reshape(-1, width).to(c)
        xc = x.reshape(-1, width).to(c)
        rs = rstd.reshape(-1, 1).to(c)
        wc = w.reshape(-1).to(c) if w is not None else None
        dx = dw = None
        if s.mask & INPUT_GRAD:
            g = gyc * wc if wc is not None else gyc
            sum_gx = _row_dot(gyc * xc, wc)  # sum(g * xhat) / rstd
            dx = ((g - xc * (sum_gx * (rs * rs) / n)) * rs).reshape(x.shape)
        if s.mask & WEIGHT_GRAD:
            col_sum = _col_sum_dynamic if s.is_dynamic else _col_sum
            dw = col_sum((gyc * rs) * xc).reshape(s.normalized_shape)
        return self._outputs(dx, dw, None)


# Row blocks added per level in _col_sum.
_COL_SPLIT = 16


def _row_dot(a: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Per-row sum of ``a * w`` ([R, W], [W] -> [R, 1]) as a matrix-vector product."""
    if w is None:
        return a.sum(dim=-1, keepdim=True)
    return (a @ w).unsqueeze(-1)


def _col_sum(a: torch.Tensor) -> torch.Tensor:
    """Sum over the rows of ``a`` ([R, W] -> [W]) with contiguous adds only.

    Each level adds ``_COL_SPLIT`` row blocks elementwise (R -> R / 16), the
    leftover rows are kept aside, and the last few rows are added one by one:
    IREE vectorizes all of it along W. A plain ``a.sum(0)`` is a reduction over
    the outer dimension, which IREE's CPU codegen vectorizes with gathers.
    """
    extra = []
    while a.shape[0] > _COL_SPLIT:
        rows = a.shape[0]
        m = rows // _COL_SPLIT
        if rows > _COL_SPLIT * m:
            extra.append(a[_COL_SPLIT * m:])
        acc = a[:m]
        for i in range(1, _COL_SPLIT):
            acc = acc + a[i * m:(i + 1) * m]
        a = acc
    total = None
    for t in [a] + extra:
        for i in range(t.shape[0]):
            total = t[i] if total is None else total + t[i]
    return total


def _nan_if_inf(mean: torch.Tensor) -> torch.Tensor:
    """The mean of a row holding an infinity as ATen gives it: NaN (its Welford
    update subtracts infinities; a plain sum gives +-inf). Finite rows keep their
    mean; y and rstd are NaN for such rows either way."""
    return torch.where(torch.isinf(mean), torch.full_like(mean, float("nan")), mean)


def _col_sum_dynamic(a: torch.Tensor) -> torch.Tensor:
    """``_col_sum`` for a symbolic row count: a row reduction of the transpose,
    which IREE's CPU codegen handles 2.3x faster than ``a.sum(0)`` (f32
    1024x768 weight+bias gradients, one thread: 801 us vs 1847 us; static
    ``_col_sum`` 695 us)."""
    return a.t().sum(dim=-1)


def _fused_rms_norm_backward(*args):
    op = torch.ops.aten._fused_rms_norm_backward.default
    try:
        return op(*args)
    except NotImplementedError:
        # torch 2.13 has no CPU kernel for it: run torch's own decomposition
        # (the same one applied at export) so the module also runs eagerly.
        from torch._decomp import decomposition_table

        return decomposition_table[op](*args)


def _split_affine(args, s: KernelSignature):
    x, *rest = args
    w = rest[0] if s.affine else None
    b = rest[1] if s.bias else None
    return x, w, b


_MODULES = {
    ("layer_norm", "aten"): LayerNormAten,
    ("layer_norm", "manual"): LayerNormManual,
    ("rms_norm", "aten"): RMSNormAten,
    ("rms_norm", "manual"): RMSNormManual,
}


def make_module(mid: ModuleId) -> torch.nn.Module:
    return _MODULES[(mid.signature.op, mid.impl)](mid.signature).eval()


def sample_args(sig: KernelSignature, seed: int = 0, offset: float = 0.0) -> tuple[torch.Tensor, ...]:
    """Random arguments in the kernel's calling convention.

    Statistics are computed from the input (float64), as a forward pass would
    have saved them; ``offset`` shifts the input mean (stress for the variance).
    A dynamic signature gets arguments at its export sizes (``example``).
    """
    sig = sig.example()
    g = torch.Generator().manual_seed(seed)
    dt = torch_dtype(sig.dtype)
    x = (torch.randn(sig.input_shape, generator=g, dtype=torch.float64) + offset).to(dt)
    weight = (1 + 0.1 * torch.randn(sig.normalized_shape, generator=g, dtype=torch.float64)).to(dt)
    bias = (0.1 * torch.randn(sig.normalized_shape, generator=g, dtype=torch.float64)).to(dt)
    if sig.is_forward:
        return (x,) + ((weight,) if sig.affine else ()) + ((bias,) if sig.bias else ())
    gy = torch.randn(sig.input_shape, generator=g, dtype=torch.float64).to(dt)
    from .reference import statistics

    stats = tuple(s.to(torch_dtype(sig.stats_dtype)) for s in statistics(sig, x))
    return (gy, x) + stats + ((weight,) if sig.takes_weight else ())
