"""What an op defines (``Op``), and the mask bits and defaults all ops share.

Pure Python: the loader and the manifest import every op; torch is imported
only inside the methods that build or run torch code (``implementation``,
``forward64``, the eager fallbacks, ``torch_library``).

An op's data (masks, gradient order, statistics, bias rule, MIOpen command
names) lives in its ``Op`` subclass's fields; its code in methods and in the
functions of its module. Kernels follow one calling convention, derived from
the data (``inputs`` / ``outputs`` in ``boo_build.signature``):

* forward (mask 1): (x, [weight], [bias]) -> (y, *stats)
* backward: (grad_y, x, *stats, [weight if affine and mask & 2]) -> the
  requested gradients in ``grads`` order
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ..dtypes import NAMES as KERNEL_DTYPES

# Mask bits (MIOpen's -F): forward, and one per gradient.
FORWARD, INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD = 1, 2, 4, 8
GRAD_NAMES = {INPUT_GRAD: "input", WEIGHT_GRAD: "weight", BIAS_GRAD: "bias"}
DEFAULT_EPS = 1e-5
IMPLS = ("aten", "manual")  # aten: torch's own ops; manual: the math written out
LANES = "lanes"  # the export variant of a manual forward with lane-split row sums (norm_math.row_sum)
LANE_WIDTH = 8  # its lanes: one AVX2 float32 vector
MIN_LANES_WIDTH = 64  # narrower rows gain nothing (and n32's single dispatch fails to compile with lanes)


def lanes_apply(sig) -> bool:
    """Whether a forward of ``sig`` has a ``lanes`` variant: rows of whole vectors, wide enough,
    one normalized dim (over (42, 32) iree-compile 3.13 exceeds its stack limit: 1.7 MB)."""
    return (sig.is_forward and len(sig.normalized_shape) == 1 and sig.width % LANE_WIDTH == 0
            and sig.width >= MIN_LANES_WIDTH)


def stats_as(torch, t, sig):
    """Statistics ``t`` of a torch op in the kernel's dtype and layout; as they
    are where they already match (the loader's eager route runs this per call,
    and a no-op ``to``/``reshape`` still costs)."""
    sd = getattr(torch, sig.stats_dtype)
    if t.dtype != sd:
        t = t.to(sd)
    return t if t.shape == sig.stats_shape else t.reshape(sig.stats_shape)


@dataclass(frozen=True)
class Op:
    """One op. Subclasses give every field a default and override the methods
    that need torch; an instance is registered with ``boo_build.ops.register``."""

    name: str
    masks: tuple[int, ...]  # valid masks: FORWARD, and every combined backward
    grads: tuple[int, ...]  # gradient bits a backward returns, in ATen's output_mask order
    stats: tuple[str, ...]  # statistics the forward saves and a backward takes, in order
    has_bias: bool  # whether the op can have a bias (affine with weight and bias)
    impls: tuple[str, ...] = IMPLS  # implementations a manifest builds by default
    commands: tuple[tuple[str, str], ...] = ()  # MIOpen driver commands: (command, dtype)
    none_eps: float = DEFAULT_EPS  # eps of an ATen call given eps=None
    autocast_aten: str = ""  # the aten op whose autocast kernel decides where the custom op runs in float32

    # -- rules (pure Python) ------------------------------------------------
    def default_stats_dtype(self, dtype: str) -> str:
        """ATen's dtype for the saved statistics: its accumulation type, float32
        for all three kernel dtypes (as native_layer_norm on GPUs and in its meta
        function, and _fused_rms_norm everywhere; bf16 statistics lose the mean of
        an offset input). Another dtype (only torch's op runs it: the eager
        fallback) keeps its own, as ATen's float64 statistics are float64."""
        return "float32" if dtype in KERNEL_DTYPES else dtype

    def affine_problem(self, affine: bool, bias: bool) -> str | None:
        if bias and not self.has_bias:
            return f"{self.name} has no bias: set bias = false"
        if bias and not affine:
            return "bias requires affine = true (a bias without a weight is not a norm ATen has)"
        return None

    def mask_problem(self, mask: Any, affine: bool, bias: bool) -> str | None:
        if not isinstance(mask, int) or isinstance(mask, bool):
            return f"mask must be an integer, got {mask!r}"
        if mask not in self.masks:
            why = (
                "0 selects nothing" if mask == 0
                else "forward (1) cannot be combined with gradients" if mask & FORWARD and mask != FORWARD
                else f"{self.name} has no bias gradient (8)" if not self.has_bias and mask & BIAS_GRAD
                else "only bits 1, 2, 4, 8 exist"
            )
            return f"mask {mask} is invalid for {self.name}: {why}; valid masks: {', '.join(map(str, self.masks))}"
        if mask & WEIGHT_GRAD and not affine:
            return f"mask {mask} asks for a weight gradient but affine = false"
        if mask & BIAS_GRAD and not bias:
            return f"mask {mask} asks for a bias gradient but bias = false"
        return None

    def default_masks(self, affine: bool, bias: bool) -> list[int]:
        """Every valid mask of this affine form."""
        return [m for m in self.masks if not (m & WEIGHT_GRAD and not affine) and not (m & BIAS_GRAD and not bias)]

    def default_bias(self, affine: bool) -> bool:
        """bias when a manifest or MIOpen's -m 1 does not say: with the weight, if the op has one."""
        return bool(affine) and self.has_bias

    def zero_size_stat(self, name: str) -> float:
        """A statistic of a row of no elements, as torch gives it (rstd: NaN)."""
        return math.nan

    # -- torch (imported inside) ----------------------------------------------
    def implementation(self, impl: str) -> Callable:
        """``forward(m, *args)`` of ``impl``: the body of the torch.nn.Module
        ``stages.torch_modules.make_module`` exports (``m``: that module, with ``sig`` and
        its dtypes), in the calling convention above."""
        raise NotImplementedError(f"{self.name} defines no implementation {impl!r}")

    def forward64(self, sig, x, dims: tuple[int, ...]) -> tuple[Any, tuple]:
        """(y before weight and bias, stats) of a plain float64 forward over
        ``dims``: the reference, which autograd differentiates."""
        raise NotImplementedError(f"{self.name} defines no reference")

    def eager_forward(self, sig, x, w, b) -> tuple:
        """torch's op for a forward kernel: (y, *stats) in the kernel's dtypes and layout.
        ``sig``: the call's ``KernelSignature``, or for a call no signature describes
        (an eps or dtype no kernel takes: the loader's eager fallback) a
        ``loader_calls.EagerCall`` of the same fields, eps and dtype as given."""
        raise NotImplementedError(f"{self.name} has no eager fallback")

    def eager_backward(self, normalized_shape, mask: int, gy, x, *rest) -> tuple:
        """torch's op for a backward kernel (``rest``: the statistics, weight, bias):
        the gradients ``mask`` asks for, in order; differentiable."""
        raise NotImplementedError(f"{self.name} has no eager fallback")

    def eager_route(self, sig, stats: tuple | None = None) -> Callable:
        """What the loader runs for torch calls of ``sig`` where the build found torch
        eager faster (``prefer_eager``), built once per call key (``stats``: a backward
        key's first statistics, whose dtypes and shapes every call of the key has): forward
        ``fn(x, w, b) -> (y, *stats)`` in the kernel's dtypes and layout, backward
        ``fn(grad_out, x, stats, w, b)`` -> the gradients in ``grads`` order, None
        where ``sig.mask`` does not ask. The arguments are as the call gave them
        (of the dtypes and shapes ``sig`` says, any layout). Ops override it to
        leave less Python per call."""
        import torch

        if sig.is_forward:
            return lambda x, w, b: self.eager_forward(sig, x, w, b)
        ns, mask, grads = sig.normalized_shape, sig.mask, self.grads

        def backward(gy, x, stats, w, b):
            it = iter(self.eager_backward(ns, mask, gy, x, *(stats_as(torch, t, sig) for t in stats), w, b))
            return tuple([next(it) if mask & bit else None for bit in grads])
        return backward

    def eager_call(self, sig, x, w, b, grad_out: Callable[[], Any], compiled: bool) -> tuple[Callable, tuple]:
        """(fn, args): torch's eager op for ``sig`` on prepared forward inputs
        (``grad_out()`` draws a gradient), timed as ``fn(*args)``; ``compiled``:
        ``fn`` will be given to ``torch.compile``."""
        raise NotImplementedError(f"{self.name} has no eager benchmark")

    def eager_needs_autograd(self, sig, compiled: bool) -> bool:
        """Whether ``eager_call``'s function runs autograd (no inference mode then)."""
        return False

    def decompositions(self) -> tuple:
        """torch ops export must decompose for this op (the importer does not lower them)."""
        return ()

    # -- the loader ---------------------------------------------------------
    def entry_points(self) -> dict[str, Callable]:
        """ATen-style functions ``f(bundle, *args)`` the ``Bundle`` offers as methods."""
        return {}

    def torch_library(self, by_token: Callable[[str], Any]) -> None:
        """Register this op's torch custom ops (``boo::...``), once; none by default.
        ``by_token``: the loader's lookup of an open bundle by the token the custom
        ops take in its place (``Bundle.by_token``; ``bundle.token()`` gives one):
        the loader hands it over, so that no op module imports the loader."""
        return None
