"""Kernel signatures: the shared vocabulary of every stage.

Pure Python on purpose (no torch, no numpy): the loader imports it too.

Key format (``KernelSignature.key``), fields joined by ``-``::

    {op}-{dtype}-{input shape}-n{normalized shape}-{affine}[-s{stats}][-eps{eps}][-max{elements}]-m{mask}

* op: ``layer_norm`` | ``rms_norm``
* dtype / stats: ``f32`` | ``f16`` | ``bf16``; the stats field (dtype of the saved
  mean/rstd) appears only when it differs from ATen's default for that dtype.
* shapes: dims joined by ``x``. A dynamic dimension (a name, see below) is
  written in capitals: ``["batch", "seq", 768]`` -> ``BATCHxSEQx768``. Names are
  lower case, so the ``x`` separator never occurs in one, and a key of only
  ``[A-Za-z0-9_.x-]`` is safe in file names on any file system (no two keys
  differ only in case).
* affine: ``wb`` weight and bias, ``w`` weight only, ``nw`` neither.
* eps: only when it differs from ``DEFAULT_EPS``; ``repr(float)`` with ``e-``
  written ``em`` (``1e-06`` -> ``eps1em06``) so the key splits cleanly on ``-``.
* max: for a dynamic signature whose ``max_elements`` differs from
  ``DEFAULT_MAX_ELEMENTS`` only (static signatures have none).
* mask: MIOpen-style bit set, see ``Mask``.

Dynamic dimensions: an ``input_shape`` entry that is a name (``[a-z][a-z0-9_]*``,
at most ``MAX_NAME`` characters) stands for any size from 1 up to its upper
bound; the same name twice in one shape means the same size. Normalized
dimensions are always integers. The upper bound comes from the shape limits:
every tensor has at most ``max_elements`` elements (the manifest's), so a
name's bound is the largest size that keeps the input within ``max_elements``
with the static dims as given and every other name at 1, and at most
``MAX_DIM``; a call must also keep the whole input within ``max_elements``
(``KernelSignature.dim_bounds``, ``bind``). ``bind`` turns a dynamic
signature into the static one it runs as for a given input shape.

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
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

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

# Shape limits (the manifest enforces them; dynamic dims take their bounds from them).
MAX_RANK = 8
MAX_DIM = 2**31 - 1
DEFAULT_MAX_ELEMENTS = 2**31  # per tensor; a manifest's [bundle] max_elements changes it
MAX_NAME = 16  # characters of a dynamic dimension's name: keys stay short enough for file names
DIM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_KEY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# Sizes a dynamic signature is exported with (torch.export specializes 0 and 1):
# distinct, so no two names look equal to the tracer.
_EXAMPLE_SIZES = (3, 5, 7, 11, 13, 17, 19, 23)


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


def shape_text(shape: Iterable[int | str]) -> str:
    """A shape as in keys: dims joined by ``x``, dynamic dims in capitals."""
    return "x".join(d.upper() if isinstance(d, str) else str(d) for d in shape)


_shape_text = shape_text


def _parse_shape_text(text: str) -> tuple[int | str, ...]:
    dims: list[int | str] = []
    for d in text.split("x"):
        if d.isdigit():
            dims.append(int(d))
        elif _KEY_NAME.match(d):
            dims.append(d.lower())
        else:
            raise SignatureError(f"bad shape {text!r}: expected dims joined by 'x' (numbers, or dynamic "
                                 "names in capitals), e.g. 8x128x768 or BATCHxSEQx768")
    return tuple(dims)


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
    # Elements per tensor, for the bounds of dynamic dims; None (and ignored) when
    # the shape is static, DEFAULT_MAX_ELEMENTS when dynamic and not given.
    max_elements: int | None = None

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        if self.op not in OPS:
            raise SignatureError(f"unknown op {self.op!r}: use one of {', '.join(OPS)}")
        set_("input_shape", _as_dims("input_shape", self.input_shape, names=True))
        set_("normalized_shape", _as_dims("normalized_shape", self.normalized_shape))
        if any(isinstance(d, str) for d in self.input_shape):
            limit = DEFAULT_MAX_ELEMENTS if self.max_elements is None else self.max_elements
            problem = max_elements_problem(limit) or dynamic_problem(self.input_shape, self.normalized_shape, limit)
            if problem:
                raise SignatureError(problem)
            set_("max_elements", limit)
        else:
            set_("max_elements", None)
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
        """Rows of a static signature (the product of the leading dims)."""
        if self.is_dynamic:
            raise SignatureError(f"{self.key} is dynamic: its rows are known only at call time (bind)")
        return math.prod(self.input_shape[: len(self.input_shape) - len(self.normalized_shape)])

    # -- dynamic dimensions ---------------------------------------------------
    @property
    def is_dynamic(self) -> bool:
        return self.max_elements is not None

    @property
    def dim_names(self) -> tuple[str, ...]:
        """Names of the dynamic dims, in order of first appearance."""
        return tuple(dict.fromkeys(d for d in self.input_shape if isinstance(d, str)))

    @property
    def static_dims(self) -> int:
        """How many dims of the input are fixed (the loader prefers more)."""
        return sum(isinstance(d, int) for d in self.input_shape)

    def dim_bounds(self) -> dict[str, int]:
        """Upper bound of each dynamic dim: the largest size that keeps the input
        within ``max_elements`` with the static dims as given and every other
        name at 1, at most ``MAX_DIM`` ({} for a static signature)."""
        if not self.is_dynamic:
            return {}
        return _bounds(self.input_shape, self.max_elements)

    def bind(self, shape: Sequence[int]) -> "KernelSignature":
        """The static signature this one runs as for an input of ``shape``
        (itself when static and equal). Same rank: each name takes its size.
        Another rank, when every leading dim is dynamic with distinct names:
        the rows (leading dims multiplied) go to the last leading dim, 1 to the
        others (the norm reduces only over the normalized dims). Raises
        ``SignatureError`` saying why ``shape`` does not fit."""
        shape = tuple(int(d) for d in shape)
        n = len(self.normalized_shape)
        if len(shape) < n or shape[len(shape) - n:] != self.normalized_shape:
            raise SignatureError(f"input shape {list(shape)} does not end in the normalized shape "
                                 f"{list(self.normalized_shape)} of {self.key}")
        if not self.is_dynamic:
            if shape != self.input_shape:
                raise SignatureError(f"{self.key} takes only input shape {list(self.input_shape)}")
            return self
        lead = self.input_shape[: len(self.input_shape) - n]
        flattened = ""
        if len(shape) != len(self.input_shape):
            if not (all(isinstance(d, str) for d in lead) and len(set(lead)) == len(lead)):
                raise SignatureError(
                    f"{self.key} takes {len(self.input_shape)}-d inputs (its leading dims are not all dynamic "
                    f"with distinct names, so other ranks cannot be flattened into it), got {list(shape)}")
            rows = math.prod(shape[: len(shape) - n])
            flattened = f" (the {rows} rows of input {list(shape)}, flattened)"
            shape = (1,) * (len(lead) - 1) + (rows,) + self.normalized_shape
        sizes: dict[str, int] = {}
        for i, (want, got) in enumerate(zip(self.input_shape, shape)):
            if isinstance(want, int):
                if want != got:
                    raise SignatureError(f"{self.key} has dimension {i} fixed at {want}, got {got}")
            elif sizes.setdefault(want, got) != got:
                raise SignatureError(f"{self.key} has dimension {want!r} twice: sizes {sizes[want]} and {got} "
                                     "differ")
        bounds = self.dim_bounds()
        for name, size in sizes.items():
            if size < 1:
                raise SignatureError(f"dimension {name!r} of {self.key} is {size}: at least 1")
            if size > bounds[name]:
                raise SignatureError(
                    f"dimension {name!r} = {size}{flattened if name == lead[-1] else ''} is above its upper "
                    f"bound {bounds[name]} in {self.key} (max_elements {self.max_elements} per tensor)")
        total = math.prod(shape)
        if total > self.max_elements:
            raise SignatureError(f"input {list(shape)} has {total} elements, above max_elements "
                                 f"{self.max_elements} of {self.key}")
        return self.replace(input_shape=shape, max_elements=None)

    def sized(self, sizes: dict[str, int]) -> "KernelSignature":
        """The static signature with each name set to ``sizes[name]``, bounds checked (``bind``)."""
        return self.bind(tuple(sizes[d] if isinstance(d, str) else d for d in self.input_shape))

    def with_rows(self, rows: int) -> "KernelSignature":
        """The static signature with ``rows`` rows: every dynamic leading dim 1
        except the last name, which takes what the static dims leave (rounded up)."""
        names = self.dim_names
        static = math.prod(d for d in self.input_shape[: len(self.input_shape) - len(self.normalized_shape)]
                           if isinstance(d, int))
        sizes = {name: 1 for name in names}
        if names:
            sizes[names[-1]] = max(1, -(-rows // static))
        return self.sized(sizes)

    def example(self) -> "KernelSignature":
        """The static signature a dynamic one is exported with (distinct sizes of
        at least 2, within bounds); itself when static."""
        if not self.is_dynamic:
            return self
        bounds = self.dim_bounds()
        return self.sized({n: min(s, bounds[n]) for n, s in zip(self.dim_names, _EXAMPLE_SIZES)})

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
        if self.is_dynamic and self.max_elements != DEFAULT_MAX_ELEMENTS:
            parts.append(f"max{self.max_elements}")
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
            elif part.startswith("max") and part[3:].isdigit():
                fields["max_elements"] = int(part[3:])
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
        if d["max_elements"] is None:  # static: as before dynamic dims existed
            del d["max_elements"]
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


def dim_name_problem(where: str, name: Any) -> str | None:
    """A dynamic dimension's name: ``[a-z][a-z0-9_]*``, at most ``MAX_NAME`` characters."""
    if isinstance(name, str) and DIM_NAME.match(name) and len(name) <= MAX_NAME:
        return None
    return (f"{where} {name!r} is not a dynamic dimension name: a name is a lower-case letter followed by "
            f"lower-case letters, digits or '_' (at most {MAX_NAME} characters), e.g. \"batch\"")


def max_elements_problem(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return None
    return (f"max_elements must be a positive integer (elements per tensor, default "
            f"{DEFAULT_MAX_ELEMENTS}), got {value!r}")


def dynamic_problem(input_shape: tuple, normalized_shape: tuple[int, ...], max_elements: int) -> str | None:
    """Dynamic dims only before the normalized ones, and room for each to be at least 2."""
    n = len(normalized_shape)
    for i, d in enumerate(input_shape[max(len(input_shape) - n, 0):], max(len(input_shape) - n, 0)):
        if isinstance(d, str):
            return (f"input_shape dimension {i} ({d!r}) is normalized: normalized dimensions must be integers "
                    "(dynamic names are allowed only in the leading dimensions)")
    static = math.prod(d for d in input_shape if isinstance(d, int))
    if static > max_elements:
        return (f"input_shape {list(input_shape)} has {static} elements with every dynamic dimension at 1, "
                f"more than max_elements = {max_elements}")
    tight = [name for name, b in _bounds(input_shape, max_elements).items() if b < 2]
    if tight:
        return (f"dynamic dimension {tight[0]!r} of input_shape {list(input_shape)} can only be 1 under "
                f"max_elements = {max_elements}: write 1, or raise max_elements")
    return None


def _bounds(input_shape: tuple, max_elements: int) -> dict[str, int]:
    static = math.prod(d for d in input_shape if isinstance(d, int))
    room = max_elements // static
    out = {}
    for name in dict.fromkeys(d for d in input_shape if isinstance(d, str)):
        k = input_shape.count(name)  # a repeated name: size**k elements
        b = int(round(room ** (1.0 / k)))
        while b ** k > room:
            b -= 1
        while (b + 1) ** k <= room:
            b += 1
        out[name] = min(b, MAX_DIM)
    return out


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


def _as_dims(name: str, value: Any, names: bool = False) -> tuple[int | str, ...]:
    """Positive ints, and with ``names`` dynamic dimension names too."""
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise SignatureError(f"{name} must be a list of positive integers, got {value!r}") from None
    for i, d in enumerate(dims):
        if isinstance(d, str) and names:
            problem = dim_name_problem(f"{name} dimension {i}", d)
            if problem:
                raise SignatureError(problem)
        elif not (isinstance(d, int) and not isinstance(d, bool) and d > 0):
            what = "positive integers or dynamic dimension names" if names else "positive integers"
            raise SignatureError(f"{name} must be a non-empty list of {what}, got {list(dims)}")
    if not dims:
        raise SignatureError(f"{name} must be a non-empty list of positive integers, got []")
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
