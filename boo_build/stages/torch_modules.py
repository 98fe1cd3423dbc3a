"""torch.nn.Modules for each (op, mask, implementation), following the calling
convention documented in ``boo_build.signature``, and sample arguments.

The math of each implementation is its op's (``Op.implementation``,
``boo_build/ops/``); ``OpModule`` holds what every implementation reads: the
signature, the normalized dims, the dtypes, the opmath type (float32: half
precision is computed in float32 and rounded once). Shapes come from the tensors, never from the signature, so that a
dynamic signature (``KernelSignature.is_dynamic``) exports with symbolic dims.
"""

from __future__ import annotations

import os

import torch

from .. import dtypes, ops
from ..ops.base import BIAS_GRAD, INPUT_GRAD, WEIGHT_GRAD, WORDS
from ..signature import KernelSignature, ModuleId

# Test-only switch: "1" plants an error (output times 1.01) in the manual
# implementation's forward, so that tests can prove validation catches a wrong
# kernel. Read when a module is made (``make_module``); the op math never sees it.
PLANT_ERROR_ENV = "BOO_BUILD_TEST_PLANT_ERROR"
PLANTED_IMPL = "manual"


def torch_dtype(name: str) -> torch.dtype:
    return dtypes.torch_dtype(name)


class OpModule(torch.nn.Module):
    """One kernel: ``forward(*args)`` runs the op's implementation on this module."""

    def __init__(self, sig: KernelSignature, forward, variant: str = ""):
        super().__init__()
        self.sig = sig
        self.variant = variant  # an export variant (candidates.EXPORT_VARIANTS) the implementation reads
        nd = len(sig.input_shape)
        self.norm_dims = list(range(nd - len(sig.normalized_shape), nd))
        self.batch_dims = list(range(nd - len(sig.normalized_shape)))
        self.dtype = torch_dtype(sig.dtype)
        assert sig.stats_dtype is not None  # KernelSignature fills in the default
        self.stats_dtype = torch_dtype(sig.stats_dtype)
        self.compute = torch.float32  # ATen's opmath type for all three dtypes
        self._forward = forward
        self._grads = ops.get(sig.op).grads

    def forward(self, *args):
        return self._forward(self, *args)

    def grad_outputs(self, dx, dw, db):
        """The requested gradients (``sig.mask``), in the kernel's dtype and order."""
        given = {INPUT_GRAD: dx, WEIGHT_GRAD: dw, BIAS_GRAD: db}
        return tuple(given[bit].to(self.dtype) for bit in self._grads if self.sig.mask & bit)


def make_module(mid: ModuleId, variant: str = "") -> torch.nn.Module:
    """The kernel's module, of its export ``variant`` (``candidates.export_variant``: ``lanes``,
    ``fused``, ``words``, or some joined by ``.``)."""
    parts = variant.split(".") if variant else []
    if WORDS in parts:
        rest = ".".join(v for v in parts if v != WORDS)
        sig = mid.signature.replace(dtype="float32", stats_dtype="float32", residual=False)
        return WordsModule(mid.signature, make_module(ModuleId(sig, mid.impl), rest)).eval()
    forward = ops.get(mid.signature.op).implementation(mid.impl)
    if mid.impl == PLANTED_IMPL and mid.signature.is_forward and os.environ.get(PLANT_ERROR_ENV) == "1":
        forward = _planted(forward)
    if mid.signature.residual:
        return ResidualModule(mid.signature, OpModule(mid.signature.replace(residual=False), forward, variant)).eval()
    return OpModule(mid.signature, forward, variant).eval()


class ResidualModule(torch.nn.Module):
    """A fused residual kernel (``KernelSignature.residual``) around the plain kernel's
    module (``norm``, the same implementation and variant): every implementation's
    residual form is the same add around its own norm, traced into one kernel.

    Forward: ``h = x + residual`` in the input's dtype (as the model's code rounds it),
    the norm of h as stored -> (y, h, *stats). Backward: the norm's backward of h,
    then ``dh = grad_input + grad_h``, added in float32 and rounded once."""

    def __init__(self, sig: KernelSignature, norm: OpModule):
        super().__init__()
        self.sig = sig
        self.norm = norm

    def forward(self, *args):
        if self.sig.is_forward:
            x, r, *params = args
            h = x + r
            y, *stats = self.norm(h, *params)
            return (y, h, *stats)
        # the add on [rows, width] views: on the tensors' own shape, iree-compile 3.13 gives the
        # fused GPU variant's layer-norm backward a dispatch more and 1.7x its traffic (its
        # column sums split from the row pass); on the row views, grad_h's read alone is added
        dx, *rest = self.norm(*args[:-1])
        gh, c, width = args[-1], self.norm.compute, self.sig.width
        dh = dx.reshape(-1, width).to(c) + gh.reshape(-1, width).to(c)
        return (dh.to(self.norm.dtype).reshape(dx.shape), *rest)


# -- half precision as 32-bit words (the ``words`` variant) -------------------------------
# A target without 16-bit types (the portable ``vulkan`` target: targets.dtype_problem) cannot
# load or store a bfloat16 element, and iree-compile 3.13's emulation of them computes wrong
# results there (docs/building.md). The tensors are bfloat16 at the kernel's interface all the
# same, and a pair of them is one 32-bit word: bitcast at the interface (a view, no copy), the
# kernel reads words, widens each half with integer arithmetic and computes in float32 as the
# half-precision kernels do, and rounds each result once, to nearest even, into words again.
# Only int32 and float32 reach its dispatches. (Shifts are spelled as products and floored
# quotients: iree-compile 3.13's torch input does not lower a shift by a scalar.)
_HALF = 65536  # 2**16: one bfloat16 half of a word


def words_in(t: torch.Tensor) -> torch.Tensor:
    """bfloat16 ``[..., 2n]`` -> float32 ``[..., 2n]`` exactly, through ``[..., n]`` int32 words
    (a bfloat16 is the upper half of its float32; element 2i is word i's lower half)."""
    w = t.view(torch.int32)
    lo = (w * _HALF).view(torch.float32)
    hi = torch.bitwise_and(w, -_HALF).view(torch.float32)
    return torch.stack((lo, hi), -1).flatten(-2)


def words_out(y: torch.Tensor) -> torch.Tensor:
    """float32 ``[..., 2n]`` -> bfloat16 ``[..., 2n]``, rounded to nearest even (as
    ``Tensor.to(torch.bfloat16)``; a NaN stays a NaN), built as int32 words."""
    b = y.view(torch.int32)
    odd = torch.bitwise_and(torch.div(b, _HALF, rounding_mode="floor"), 1)
    r = torch.where(torch.isnan(y), torch.full_like(b, 0x7FC00000), b + 0x7FFF + odd)
    h = torch.div(r, _HALF, rounding_mode="floor").unflatten(-1, (-1, 2))
    return torch.bitwise_or(torch.bitwise_and(h[..., 0], _HALF - 1), h[..., 1] * _HALF).view(torch.bfloat16)


class WordsModule(torch.nn.Module):
    """A bfloat16 kernel (``sig``) computed by ``inner``, its float32 form (the same
    implementation and export variant, plain where ``sig`` is fused with a residual add),
    its bfloat16 arguments and results passed as 32-bit words (``words_in``, ``words_out``).
    A fused forward rounds ``h = x + residual`` to bfloat16 before the norm reads it, as the
    model's code does; a fused backward adds grad_h in float32 and rounds once."""

    def __init__(self, sig: KernelSignature, inner: torch.nn.Module):
        super().__init__()
        self.sig = sig
        self.inner = inner

    def forward(self, *args):
        half = torch_dtype(self.sig.dtype)
        f = [words_in(a) if a.dtype == half else a for a in args]
        if self.sig.residual and self.sig.is_forward:
            x, r, *params = f
            h = words_out(x + r)
            y, *stats = self.inner(words_in(h), *params)
            out = (y, h, *stats)
        elif self.sig.residual:
            dx, *rest = self.inner(*f[:-1])
            out = (dx + f[-1], *rest)
        else:
            out = tuple(self.inner(*f))
        return tuple(words_out(o) if dt == self.sig.dtype and o.dtype == torch.float32 else o
                     for o, (_, _, dt) in zip(out, self.sig.outputs()))


def _planted(forward):
    """``forward`` with its output (the first result) 1% off (``PLANT_ERROR_ENV``)."""
    def wrong(m, *args):
        y, *rest = forward(m, *args)
        return ((y.to(m.compute) * 1.01).to(m.dtype), *rest)
    return wrong


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
    weight = (1 + 0.1 * torch.randn(sig.param_shape, generator=g, dtype=torch.float64)).to(dt)
    bias = (0.1 * torch.randn(sig.param_shape, generator=g, dtype=torch.float64)).to(dt)
    if sig.is_forward and sig.residual:
        # the offset stays on h = x + residual: the residual is drawn around 0
        r = torch.randn(sig.input_shape, generator=g, dtype=torch.float64).to(dt)
        return (x, r) + ((weight,) if sig.affine else ()) + ((bias,) if sig.bias else ())
    if sig.is_forward:
        return (x,) + ((weight,) if sig.affine else ()) + ((bias,) if sig.bias else ())
    gy = torch.randn(sig.input_shape, generator=g, dtype=torch.float64).to(dt)
    from .reference import statistics

    assert sig.stats_dtype is not None  # KernelSignature fills in the default
    stats = tuple(s.to(torch_dtype(sig.stats_dtype)) for s in statistics(sig, x))
    grad_h = (torch.randn(sig.input_shape, generator=g, dtype=torch.float64).to(dt),) if sig.residual else ()
    return (gy, x) + stats + ((weight,) if sig.takes_weight else ()) + grad_h
