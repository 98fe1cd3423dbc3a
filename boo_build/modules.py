"""torch.nn.Modules for each (op, mask, implementation), following the calling
convention documented in ``boo_build.signature``.

``aten`` calls the core ATen ops; ``manual`` writes the math out and computes
only the requested gradients. Half-precision inputs are computed in float32
(ATen's opmath type) and rounded once at the end.
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
            return y, mean.to(self.stats_dtype), rstd.to(self.stats_dtype)
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
            var = (xm * xm).mean(dim=self.norm_dims, keepdim=True)
            rstd = torch.rsqrt(var + s.eps)
            y = xm * rstd
            if w is not None:
                y = y * w.to(c)
            if b is not None:
                y = y + b.to(c)
            if self.planted:
                y = y * 1.01
            return y.to(self.dtype), mean.to(self.stats_dtype), rstd.to(self.stats_dtype)
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        gyc = gy.to(c)
        dx = dw = db = None
        if s.mask & (INPUT_GRAD | WEIGHT_GRAD):
            xhat = (x.to(c) - mean.to(c)) * rstd.to(c)
        if s.mask & INPUT_GRAD:
            g = gyc * w.to(c) if w is not None else gyc
            n = float(s.width)
            sum_g = g.sum(dim=self.norm_dims, keepdim=True)
            sum_gx = (g * xhat).sum(dim=self.norm_dims, keepdim=True)
            dx = (g - (sum_g + xhat * sum_gx) / n) * rstd.to(c)
        if s.mask & WEIGHT_GRAD:
            dw = (gyc * xhat).sum(dim=self.batch_dims) if self.batch_dims else gyc * xhat
        if s.mask & BIAS_GRAD:
            db = gyc.sum(dim=self.batch_dims) if self.batch_dims else gyc
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
            rstd = torch.rsqrt((xc * xc).mean(dim=self.norm_dims, keepdim=True) + s.eps)
            y = xc * rstd
            if w is not None:
                y = y * w.to(c)
            if self.planted:
                y = y * 1.01
            return y.to(self.dtype), rstd.to(self.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        gyc = gy.to(c)
        xhat = x.to(c) * rstd.to(c)
        dx = dw = None
        if s.mask & INPUT_GRAD:
            g = gyc * w.to(c) if w is not None else gyc
            mean_gx = (g * xhat).mean(dim=self.norm_dims, keepdim=True)
            dx = (g - xhat * mean_gx) * rstd.to(c)
        if s.mask & WEIGHT_GRAD:
            dw = (gyc * xhat).sum(dim=self.batch_dims) if self.batch_dims else gyc * xhat
        return self._outputs(dx, dw, None)


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
    """
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
