"""What an op defines (``Op``), and the mask bits and defaults all ops share.

Pure Python: the loader and the manifest import every op; torch is imported
only inside the methods that build or run torch code (``implementation``,
``forward64``, the eager fallbacks).

An op's data (masks, gradient order, statistics, bias rule, MIOpen command
names) lives in its ``Op`` subclass's fields; its code in methods and in the
functions of its module. Kernels follow one calling convention, derived from
the data (``inputs`` / ``outputs`` in ``boo_build.signature``):

* forward (mask 1): (x, [weight], [bias]) -> (y, *stats)
* backward: (grad_y, x, *stats, [weight if affine and mask & 2]) -> the
  requested gradients in ``grads`` order
"""

from __future__ import annotations

import abc
import math
import numbers
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
FUSED = "fused"  # the GPU export variant of a manual backward (norm_math.fused_backward) or dynamic forward
# the export variant of a bfloat16 kernel for a target without 16-bit types: its tensors read and
# written as 32-bit words (stages/torch_modules.WordsModule)
WORDS = "words"


def words_apply(sig) -> bool:
    """Whether a kernel of ``sig`` has a ``words`` variant: bfloat16, and every bfloat16 argument
    and result of an even static last dim (a pair of elements per word)."""
    return sig.dtype == "bfloat16" and all(
        isinstance(shape[-1], int) and shape[-1] % 2 == 0
        for _, shape, dt in sig.inputs() + sig.outputs() if dt == "bfloat16")


def lanes_apply(sig) -> bool:
    """Whether a forward of ``sig`` has a ``lanes`` variant: rows of whole vectors, wide enough,
    one normalized dim (over (42, 32) iree-compile 3.13 exceeds its stack limit: 1.7 MB)."""
    return (sig.is_forward and len(sig.normalized_shape) == 1 and sig.width % LANE_WIDTH == 0
            and sig.width >= MIN_LANES_WIDTH)


def norm_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    try:
        return tuple(int(d) for d in normalized_shape)
    except TypeError:
        raise TypeError(f"normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}") from None


def dense(t):
    """``t`` contiguous (None stays None; a contiguous tensor is returned as it is).
    ATen's CPU norm kernels index some arguments as if they were contiguous
    (torch 2.13: ``native_group_norm_backward`` reads a transposed, sliced or
    channels-last ``grad_out`` or input, a strided weight or statistics, by their
    sizes alone, and so does ``native_layer_norm_backward`` with strided
    statistics; dx/dw/db come out off by 3-25), while torch's autograd always
    hands them contiguous tensors. The loader's routes hand on whatever layout
    the caller gave, so every torch call of an op's eager path goes through this."""
    return t if t is None or t.is_contiguous() else t.contiguous()


def stats_as(torch, t, sig):
    """Statistics ``t`` of a torch op in the kernel's dtype and layout; as they
    are where they already match (the loader's eager route runs this per call,
    and a no-op ``to``/``reshape`` still costs)."""
    sd = getattr(torch, sig.stats_dtype)
    if t.dtype != sd:
        t = t.to(sd)
    return t if t.shape == sig.stats_shape else t.reshape(sig.stats_shape)


@dataclass(frozen=True)
class Op(abc.ABC):
    """One op. Subclasses give every field a default and define the abstract
    methods (the torch code every op has: its implementations, its reference,
    torch's own op for the loader's fallback and the benchmark's baseline);
    the other methods' defaults are a norm over trailing dims. An instance is
    registered with ``boo_build.ops.register``."""

    name: str
    masks: tuple[int, ...]  # valid masks: FORWARD, and every combined backward
    grads: tuple[int, ...]  # gradient bits a backward returns, in ATen's output_mask order
    stats: tuple[str, ...]  # statistics the forward saves and a backward takes, in order
    has_bias: bool  # whether the op can have a bias (affine with weight and bias)
    impls: tuple[str, ...] = IMPLS  # implementations a manifest builds by default
    commands: tuple[tuple[str, str], ...] = ()  # MIOpen driver commands: (command, dtype)
    none_eps: float = DEFAULT_EPS  # eps of an ATen call given eps=None
    autocast_aten: str = ""  # the aten op whose autocast kernel decides where the custom op runs in float32
    format_version: int = 1  # the oldest bundle format whose loaders know this op (loader/format.py)
    command_shape: str = "tensor"  # how its MIOpen command gives the input (manifest/miopen.py): -X, or "ncdhw"
    fused_backward: bool = False  # whether its manual backward has the ``fused`` GPU export variant
    fused_forward: bool = False  # and its manual forward, where no single-dispatch pass applies (dynamic)
    weight_offsets: bool = False  # whether it scales by ``weight_offset + weight`` (Gemma's RMS norm: 1 + weight)
    # whether it has the fused residual form (``KernelSignature.residual``: ``h = x + residual``,
    # then the norm of h), and that form's MIOpen-style commands: (command, dtype)
    residuals: bool = False
    residual_commands: tuple[tuple[str, str], ...] = ()

    # -- layout: how the op reduces, where its parameters lie, its key part -----
    # The defaults are a norm over trailing dims (``normalized_shape``, a suffix of
    # the input): layer norm's and RMS norm's. An op that reduces otherwise (group
    # norm: groups of channels, dim 1) overrides them; the signature, the manifest,
    # the reference and the loader ask these, never an op's name.
    def lead_dims(self, input_shape: tuple, normalized_shape: tuple, groups: int | None) -> int:
        """How many leading dims index independent rows (the rest is one row)."""
        return len(input_shape) - len(normalized_shape)

    def param_shape(self, input_shape: tuple, normalized_shape: tuple, groups: int | None) -> tuple:
        """Shape of the weight and bias (and their gradients)."""
        return tuple(normalized_shape)

    def param_view(self, input_shape: tuple, normalized_shape: tuple, groups: int | None) -> tuple:
        """Shape the weight and bias broadcast against the input in."""
        return tuple(normalized_shape)

    def stats_shape(self, input_shape: tuple, normalized_shape: tuple, groups: int | None) -> tuple:
        """ATen's layout of the statistics: the leading dims, then a 1 per normalized dim."""
        n = len(normalized_shape)
        return tuple(input_shape[:len(input_shape) - n]) + (1,) * n

    def shape_problem(self, input_shape: tuple, normalized_shape: tuple, groups: Any) -> str | None:
        """What is wrong with this input shape and the op's shape parameters, or None."""
        if groups is not None:
            return f"{self.name} takes no groups (a norm over trailing dims: give normalized_shape)"
        n = len(normalized_shape)
        if n == 0:
            return f"normalized_shape must be a non-empty list of positive integers, got {list(normalized_shape)}"
        if n > len(input_shape) or tuple(input_shape[-n:]) != tuple(normalized_shape):
            return (f"normalized_shape {list(normalized_shape)} is not a suffix of "
                    f"input_shape {list(input_shape)}")
        return None

    def dynamic_dims_problem(self, input_shape: tuple, normalized_shape: tuple, groups: int | None) -> str | None:
        """Whether the names in ``input_shape`` are where this op takes dynamic dims."""
        n = len(normalized_shape)
        start = max(len(input_shape) - n, 0)
        for i, d in enumerate(input_shape[start:], start):
            if isinstance(d, str):
                return (f"input_shape dimension {i} ({d!r}) is normalized: normalized dimensions must be integers "
                        "(dynamic names are allowed only in the leading dimensions)")
        return None

    def default_normalized_shape(self, input_shape: tuple) -> tuple:
        """normalized_shape when a manifest entry or command does not give one: the last dim."""
        return tuple(input_shape[-1:])

    def key_part(self, normalized_shape: tuple, groups: int | None) -> str:
        """The key field after the input shape (``n768``; group norm's ``g32``)."""
        return "n" + "x".join(str(d) for d in normalized_shape)

    key_part_form = "n<normalized shape>"  # what ``key_part`` writes, for messages

    def parse_key_part(self, text: str) -> dict[str, Any] | None:
        """``key_part`` back to signature fields; None when ``text`` is not one."""
        if not text.startswith("n"):
            return None
        try:
            return {"normalized_shape": tuple(int(d, 10) for d in text[1:].split("x"))}
        except ValueError:
            return None

    def family_shape(self, input_shape: tuple, normalized_shape: tuple, groups: int | None) -> tuple:
        """An input shape standing for every shape a dynamic kernel of this form
        could serve (the loader's ``family_key``): the normalized shape."""
        return tuple(normalized_shape)

    # -- the loader's view of a call's shape parameter -----------------------------
    def call_param(self, value: Any) -> Any:
        """A call's shape parameter (normalized_shape; group norm's groups), checked and hashable."""
        return norm_shape(value)

    def call_fields(self, shape: tuple[int, ...], param: Any) -> dict[str, Any]:
        """The signature fields of a call's shape parameter for an input of ``shape``;
        ValueError where they do not fit."""
        ns = tuple(param)
        if len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
            raise ValueError(f"normalized_shape {list(ns)} is not a suffix of the input's shape {list(shape)}")
        return {"normalized_shape": ns}

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

    def offset_problem(self, offset: Any, affine: bool) -> str | None:
        """What is wrong with a weight offset (the norm scales by ``offset + weight``), or None."""
        if isinstance(offset, bool) or not isinstance(offset, numbers.Real):
            return f"weight_offset must be a number (int or float), got {offset!r}"
        if not math.isfinite(offset):
            return f"weight_offset must be a finite number, got {offset!r}"
        if offset == 0:
            return None
        if not self.weight_offsets:
            return (f"{self.name} takes no weight_offset (only rms_norm scales by weight_offset + weight, "
                    "Gemma's form): remove it")
        if not affine:
            return f"weight_offset {offset!r} needs a weight (affine = true): without one there is nothing to offset"
        return None

    def residual_problem(self, residual: Any, mask: Any) -> str | None:
        """What is wrong with a fused residual add (``KernelSignature.residual``), or None."""
        if not isinstance(residual, bool):
            return f"residual must be true or false, got {residual!r}"
        if not residual:
            return None
        if not self.residuals:
            return f"{self.name} has no fused residual form (x + residual, then the norm): remove residual"
        if isinstance(mask, int) and mask != FORWARD and not mask & INPUT_GRAD:
            return (f"mask {mask} with residual: a backward without the input gradient takes no grad_h "
                    "(the plain kernel of h serves it: residual = false)")
        return None

    def with_offset(self, param: Any, offset: float) -> Any:
        """``eager_backward``'s first argument for a call whose weight offset is ``offset``
        (``param``: the call's shape parameter): ``param`` itself where the op has none."""
        return param

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
    @abc.abstractmethod
    def implementation(self, impl: str) -> Callable:
        """``forward(m, *args)`` of ``impl``: the body of the torch.nn.Module
        ``stages.torch_modules.make_module`` exports (``m``: that module, with ``sig`` and
        its dtypes), in the calling convention above."""

    @abc.abstractmethod
    def forward64(self, sig, x, dims: tuple[int, ...]) -> tuple[Any, tuple]:
        """(y before weight and bias, stats) of a plain float64 forward over
        ``dims``: the reference, which autograd differentiates."""

    @abc.abstractmethod
    def eager_forward(self, sig, x, w, b) -> tuple:
        """torch's op for a forward kernel: (y, *stats) in the kernel's dtypes and layout.
        ``sig``: the call's ``KernelSignature``, or for a call no signature describes
        (an eps or dtype no kernel takes: the loader's eager fallback) a
        ``loader.calls.EagerCall`` of the same fields, eps and dtype as given."""

    @abc.abstractmethod
    def eager_backward(self, normalized_shape, mask: int, gy, x, *rest) -> tuple:
        """torch's op for a backward kernel (``rest``: the statistics, weight, bias):
        the gradients ``mask`` asks for, in order; differentiable."""

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
        ns, mask, grads = self.eager_param(sig), sig.mask, self.grads

        def backward(gy, x, stats, w, b):
            it = iter(self.eager_backward(ns, mask, gy, x, *(dense(stats_as(torch, t, sig)) for t in stats), w, b))
            return tuple([next(it) if mask & bit else None for bit in grads])
        return backward

    def residual_route(self, sig, stats: tuple | None = None) -> Callable:
        """``eager_route`` of a fused residual signature (``sig.residual``): what torch runs
        without the kernel, the add then the plain route. Forward ``fn(x, residual, w, b)
        -> (y, h, *stats)``; backward ``fn(grad_out, h, stats, w, b, grad_h)`` -> the
        gradients in ``grads`` order, the input's ``dh = norm_backward(grad_out) + grad_h``
        (autograd's accumulation, in the input's dtype)."""
        plain = self.eager_route(sig.replace(residual=False), stats)
        if sig.is_forward:
            def forward(x, r, w, b):
                h = x + r
                y, *st = plain(h, w, b)
                return (y, h, *st)
            return forward

        def backward(gy, h, stats, w, b, gh):
            dh, *rest = plain(gy, h, stats, w, b)
            return (dh + gh, *rest)
        return backward

    def residual_eager_call(self, sig, x, r, w, b, grad_out: Callable[[], Any],
                            compiled: bool) -> tuple[Callable, tuple]:
        """``eager_call`` of a fused residual signature: torch eager's add, then the norm
        (forward), or the norm's backward and the gradient ``h`` gets from its other users
        added to its input gradient (autograd's accumulation), on prepared inputs."""
        plain = sig.replace(residual=False)
        if sig.is_forward:
            fn, args = self.eager_call(plain, x, w, b, grad_out, compiled)

            def forward(x, r, *rest):
                return fn(x + r, *rest)
            return forward, (x, r, *args[1:])
        fn, args = self.eager_call(plain, x + r, w, b, grad_out, compiled)
        gh = grad_out()

        def backward(gh, *args):
            dh, *rest = fn(*args)
            return (dh + gh, *rest)
        return backward, (gh, *args)

    def single_dispatch(self, sig) -> bool:
        """Whether the export asks iree-compile for one dispatch (the attribute
        ``candidates.SINGLE_DISPATCH``): static forward kernels (combined backward
        kernels fail with it on llvm-cpu and gfx targets, dynamic ones everywhere:
        "unhandled dynamic dimensions for created dispatch region", iree-compile 3.13)."""
        return sig.is_forward and not sig.is_dynamic

    def eager_param(self, sig) -> Any:
        """``eager_backward``'s first argument for ``sig``: its shape parameter (the normalized shape)."""
        return sig.normalized_shape

    @abc.abstractmethod
    def eager_call(self, sig, x, w, b, grad_out: Callable[[], Any], compiled: bool) -> tuple[Callable, tuple]:
        """(fn, args): torch's eager op for ``sig`` on prepared forward inputs
        (``grad_out()`` draws a gradient), timed as ``fn(*args)``; ``compiled``:
        ``fn`` will be given to ``torch.compile``."""

    def eager_needs_autograd(self, sig, compiled: bool) -> bool:
        """Whether ``eager_call``'s function runs autograd (no inference mode then)."""
        return False

    def decompositions(self) -> tuple:
        """torch ops export must decompose for this op (the importer does not lower them)."""
        return ()
