"""Kernel signatures: the shared vocabulary of every stage.

Pure Python on purpose (no torch, no numpy): the loader imports it too.

Key format (``KernelSignature.key``), fields joined by ``-``::

    {op}-{dtype}-{input shape}-n{normalized shape}-{affine}[-s{stats}][-eps{eps}]-m{mask}

* op: ``layer_norm`` | ``rms_norm``
* dtype / stats: ``f32`` | ``f16`` | ``bf16``; the stats field (dtype of the saved
  mean/rstd) appears only when it differs from ATen's default for that dtype.
* shapes: dims joined by ``x``.
* affine: ``wb`` weight and bias, ``w`` weight only, ``nw`` neither.
* eps: only when it differs from ``DEFAULT_EPS``; ``repr(float)`` with ``e-``
  written ``em`` (``1e-06`` -> ``eps1em06``) so the key splits cleanly on ``-``.
* mask: MIOpen-style bit set, see ``Mask``.

An exported module (``ModuleId``) is a signature plus an implementation:
``{signature key}-{impl}``, e.g. ``layer_norm-bf16-8x128x768-n768-wb-m14-aten``.
Its MLIR function name is the key with ``-`` and ``.`` made identifier-safe.

Calling convention of every kernel (both implementations, all targets):

* layer_norm mask 1:  (x, [weight], [bias]) -> (y, mean, rstd)
* layer_norm backward: (grad_y, x, mean, rstd, [weight if affine and mask & 2])
  -> the requested gradients in the order input, weight, bias
* rms_norm mask 1:    (x, [weight]) -> (y, rstd)
* rms_norm backward:  (grad_y, x, rstd, [weight if affine and mask & 2])
  -> the requested gradients in the order input, weight

mean and rstd have the input's leading dims followed by a 1 per normalized
dim (ATen's layout), in ``stats_dtype``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import numbers
from dataclasses import dataclass
from typing import Any, Iterable

OPS = ("layer_norm", "rms_norm")
IMPLS = ("aten", "manual")
DEFAULT_EPS = 1e-5

# dtype name -> short code used in keys
DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
_DTYPE_ALIASES = {
    "float32": "float32", "f32": "float32", "fp32": "float32", "float": "float32",
    "float16": "float16", "f16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "bfp16": "bfloat16",
}
_SHORT_TO_DTYPE = {v: k for k, v in DTYPES.items()}

FORWARD, INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD = 1, 2, 4, 8
ALL_MASKS = {
    "layer_norm": (1, 2, 4, 6, 8, 10, 12, 14),
    "rms_norm": (1, 2, 4, 6),
}
_BIT_NAMES = {FORWARD: "forward", INPUT_GRAD: "input", WEIGHT_GRAD: "weight", BIAS_GRAD: "bias"}


class SignatureError(ValueError):
    """A signature that cannot exist; the message says which field and why."""


def canonical_dtype(name: str) -> str:
    try:
        return _DTYPE_ALIASES[str(name).lower()]
    except KeyError:
        raise SignatureError(
            f"unknown dtype {name!r}: use one of float32, float16, bfloat16"
        ) from None


def default_stats_dtype(op: str, dtype: str) -> str:
    """ATen's dtype for the saved statistics: its accumulation type, float32
    for all three dtypes (as native_layer_norm on GPUs and _fused_rms_norm
    everywhere; bf16 statistics lose the mean of an offset input)."""
    return "float32"


def mask_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in _BIT_NAMES.items() if mask & bit)


def format_eps(eps: float) -> str:
    return repr(float(eps)).replace("e-", "em").replace("e+", "ep")


def parse_eps(text: str) -> float:
    return float(text.replace("em", "e-").replace("ep", "e+"))


def _shape_text(shape: Iterable[int]) -> str:
    return "x".join(str(d) for d in shape)


def _parse_shape_text(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in text.split("x"))
    except ValueError:
        raise SignatureError(f"bad shape {text!r}: expected dims joined by 'x', e.g. 8x128x768") from None


@dataclass(frozen=True, order=True)
class KernelSignature:
    """What a caller asks for: one norm kernel, forward or a set of gradients."""

    op: str
    input_shape: tuple[int, ...]
    normalized_shape: tuple[int, ...]
    dtype: str
    mask: int
    eps: float = DEFAULT_EPS
    affine: bool = True
    bias: bool = True
    stats_dtype: str | None = None  # None: ATen's default, filled in below

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        if self.op not in OPS:
            raise SignatureError(f"unknown op {self.op!r}: use one of {', '.join(OPS)}")
        set_("input_shape", _as_dims("input_shape", self.input_shape))
        set_("normalized_shape", _as_dims("normalized_shape", self.normalized_shape))
        set_("dtype", canonical_dtype(self.dtype))
        set_("stats_dtype", canonical_dtype(self.stats_dtype) if self.stats_dtype
             else default_stats_dtype(self.op, self.dtype))
        set_("affine", bool(self.affine))
        set_("bias", bool(self.bias))
        problem = (eps_problem(self.eps)
                   or suffix_problem(self.input_shape, self.normalized_shape)
                   or affine_problem(self.op, self.affine, self.bias)
                   or mask_problem(self.op, self.mask, self.affine, self.bias))
        if problem:
            raise SignatureError(problem)
        set_("eps", float(self.eps))

    # -- derived -----------------------------------------------------------
    @property
    def is_forward(self) -> bool:
        return self.mask == FORWARD

    @property
    def stats_shape(self) -> tuple[int, ...]:
        n = len(self.normalized_shape)
        return self.input_shape[: len(self.input_shape) - n] + (1,) * n

    @property
    def rows(self) -> int:
        return math.prod(self.input_shape[: len(self.input_shape) - len(self.normalized_shape)])

    @property
    def width(self) -> int:
        return math.prod(self.normalized_shape)

    @property
    def takes_weight(self) -> bool:
        """Whether the kernel receives the weight tensor."""
        return self.affine and (self.is_forward or bool(self.mask & INPUT_GRAD))

    @property
    def affine_code(self) -> str:
        return "wb" if self.bias else "w" if self.affine else "nw"

    def inputs(self) -> tuple[tuple[str, tuple[int, ...], str], ...]:
        """(name, shape, dtype) of each kernel argument, in order."""
        x = ("input", self.input_shape, self.dtype)
        w = ("weight", self.normalized_shape, self.dtype)
        b = ("bias", self.normalized_shape, self.dtype)
        stats = ("rstd",) if self.op == "rms_norm" else ("mean", "rstd")
        if self.is_forward:
            return (x,) + ((w,) if self.affine else ()) + ((b,) if self.bias else ())
        return (
            (("grad_output", self.input_shape, self.dtype), x)
            + tuple((s, self.stats_shape, self.stats_dtype) for s in stats)
            + ((w,) if self.takes_weight else ())
        )

    def outputs(self) -> tuple[tuple[str, tuple[int, ...], str], ...]:
        """(name, shape, dtype) of each kernel result, in order."""
        if self.is_forward:
            stats = ("rstd",) if self.op == "rms_norm" else ("mean", "rstd")
            return (("output", self.input_shape, self.dtype),) + tuple(
                (s, self.stats_shape, self.stats_dtype) for s in stats
            )
        out = []
        if self.mask & INPUT_GRAD:
            out.append(("grad_input", self.input_shape, self.dtype))
        if self.mask & WEIGHT_GRAD:
            out.append(("grad_weight", self.normalized_shape, self.dtype))
        if self.mask & BIAS_GRAD:
            out.append(("grad_bias", self.normalized_shape, self.dtype))
        return tuple(out)

    # -- text forms ---------------------------------------------------------
    @functools.cached_property  # the build graph asks thousands of times
    def key(self) -> str:
        parts = [
            self.op,
            DTYPES[self.dtype],
            _shape_text(self.input_shape),
            "n" + _shape_text(self.normalized_shape),
            self.affine_code,
        ]
        if self.stats_dtype != default_stats_dtype(self.op, self.dtype):
            parts.append("s" + DTYPES[self.stats_dtype])
        if self.eps != DEFAULT_EPS:
            parts.append("eps" + format_eps(self.eps))
        parts.append(f"m{self.mask}")
        return "-".join(parts)

    @classmethod
    def parse(cls, key: str) -> "KernelSignature":
        parts = key.split("-")
        if len(parts) < 6:
            raise SignatureError(f"bad signature key {key!r}: too few fields")
        op, dt, shape, norm, affine, *rest = parts
        if dt not in _SHORT_TO_DTYPE:
            raise SignatureError(f"bad signature key {key!r}: unknown dtype code {dt!r}")
        if not norm.startswith("n"):
            raise SignatureError(f"bad signature key {key!r}: expected n<normalized shape>, got {norm!r}")
        if affine not in ("wb", "w", "nw"):
            raise SignatureError(f"bad signature key {key!r}: expected wb, w or nw, got {affine!r}")
        fields: dict[str, Any] = {}
        for part in rest:
            if part.startswith("m") and part[1:].isdigit():
                fields["mask"] = int(part[1:])
            elif part.startswith("eps"):
                fields["eps"] = parse_eps(part[3:])
            elif part.startswith("s") and part[1:] in _SHORT_TO_DTYPE:
                fields["stats_dtype"] = _SHORT_TO_DTYPE[part[1:]]
            else:
                raise SignatureError(f"bad signature key {key!r}: unknown field {part!r}")
        if "mask" not in fields:
            raise SignatureError(f"bad signature key {key!r}: no m<mask> field")
        sig = cls(
            op=op,
            dtype=_SHORT_TO_DTYPE[dt],
            input_shape=_parse_shape_text(shape),
            normalized_shape=_parse_shape_text(norm[1:]),
            affine=affine != "nw",
            bias=affine == "wb",
            **fields,
        )
        if sig.key != key:
            raise SignatureError(f"signature key {key!r} is not canonical; canonical form: {sig.key!r}")
        return sig

    @property
    def digest(self) -> str:
        """Short stable hash of the key (12 hex digits of sha256)."""
        return hashlib.sha256(self.key.encode()).hexdigest()[:12]

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["input_shape"] = list(self.input_shape)
        d["normalized_shape"] = list(self.normalized_shape)
        d["key"] = self.key
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "KernelSignature":
        fields = {f.name for f in dataclasses.fields(cls)}
        sig = cls(**{k: v for k, v in data.items() if k in fields})
        if "key" in data and data["key"] != sig.key:
            raise SignatureError(f"signature JSON key {data['key']!r} does not match its fields ({sig.key!r})")
        return sig

    def replace(self, **changes: Any) -> "KernelSignature":
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        return self.key


# Field checks, one problem (or None) each: KernelSignature raises the first;
# the manifest calls them separately to report every problem of an entry.

def eps_problem(eps: Any) -> str | None:
    """eps is a real number (not a bool or a string, which torch refuses too), positive and finite."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        return f"eps must be a number (int or float), got {eps!r}"
    if not (eps > 0 and math.isfinite(eps)):
        return f"eps must be a positive finite number, got {eps!r}"
    return None


def suffix_problem(input_shape: tuple[int, ...], normalized_shape: tuple[int, ...]) -> str | None:
    n = len(normalized_shape)
    if n > len(input_shape) or tuple(input_shape[-n:]) != tuple(normalized_shape):
        return (f"normalized_shape {list(normalized_shape)} is not a suffix of "
                f"input_shape {list(input_shape)}")
    return None


def affine_problem(op: str, affine: bool, bias: bool) -> str | None:
    if op == "rms_norm" and bias:
        return "rms_norm has no bias: set bias = false"
    if bias and not affine:
        return "bias requires affine = true (a bias without a weight is not a norm ATen has)"
    return None


def mask_problem(op: str, mask: Any, affine: bool, bias: bool) -> str | None:
    if not isinstance(mask, int) or isinstance(mask, bool):
        return f"mask must be an integer, got {mask!r}"
    valid = ALL_MASKS[op]
    if mask not in valid:
        why = (
            "0 selects nothing" if mask == 0
            else "forward (1) cannot be combined with gradients" if mask & FORWARD and mask != FORWARD
            else "rms_norm has no bias gradient (8)" if op == "rms_norm" and mask & BIAS_GRAD
            else "only bits 1, 2, 4, 8 exist"
        )
        return f"mask {mask} is invalid for {op}: {why}; valid masks: {', '.join(map(str, valid))}"
    if mask & WEIGHT_GRAD and not affine:
        return f"mask {mask} asks for a weight gradient but affine = false"
    if mask & BIAS_GRAD and not bias:
        return f"mask {mask} asks for a bias gradient but bias = false"
    return None


def _as_dims(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise SignatureError(f"{name} must be a list of positive integers, got {value!r}") from None
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise SignatureError(f"{name} must be a non-empty list of positive integers, got {list(dims)}")
    return dims


@dataclass(frozen=True, order=True)
class ModuleId:
    """One exported module: a signature and the implementation that computes it."""

    signature: KernelSignature
    impl: str

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise SignatureError(f"unknown implementation {self.impl!r}: use one of {', '.join(IMPLS)}")

    @functools.cached_property
    def key(self) -> str:
        return f"{self.signature.key}-{self.impl}"

    @classmethod
    def parse(cls, key: str) -> "ModuleId":
        base, _, impl = key.rpartition("-")
        return cls(KernelSignature.parse(base), impl)

    @property
    def func_name(self) -> str:
        return function_name(self.key)

    def __str__(self) -> str:
        return self.key


def function_name(key: str) -> str:
    return key.replace("-", "_").replace(".", "p")


def dumps(obj: Any) -> str:
    """Canonical JSON (sorted keys) used for every record this project writes."""
    return json.dumps(obj, sort_keys=True, indent=1)
