"""Kernel signatures: the shared vocabulary of every stage.

Pure Python on purpose (no torch, no numpy): the loader imports it too.

Key format (``KernelSignature.key``), fields joined by ``-``::

    {op}-{dtype}-{input shape}-{op's part}-{affine}[-s{stats}][-eps{eps}][-off{offset}][-max{elements}][-res]-m{mask}

* op: a registered op's name (``boo_build.ops``: ``layer_norm``, ``rms_norm``, ``group_norm``)
* op's part: the op's shape parameters (``Op.key_part``): ``n{normalized shape}``
  for the norms over trailing dims (``n768``), ``g{groups}`` for group norm (``g32``)
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
* off: RMS norm's weight offset (it scales by ``weight_offset + weight``, Gemma's
  ``1 + weight``), only when not 0: ``off`` and the number as eps is written, a
  negative one after ``n`` (``off1.0``, ``offn0.5``).
* max: for a dynamic signature whose ``max_elements`` differs from
  ``DEFAULT_MAX_ELEMENTS`` only (static signatures have none).
* res: the fused residual form (``residual``), only when set: ``h = x + residual``
  (in the input's dtype), then the norm of ``h``; see the calling convention below.
* mask: MIOpen-style bit set (``boo_build.ops.base``: 1 forward, 2 input, 4 weight, 8 bias gradient).

Dynamic dimensions: an ``input_shape`` entry that is a name stands for any
size from 1 up to its upper bound (``boo_build.shapes``); the same name twice
in one shape means the same size. The op says where names may stand
(``Op.dynamic_dims_problem``): normalized dimensions are always integers.
A call must also keep the whole input within ``max_elements``
(``KernelSignature.dim_bounds``, ``bind``). ``bind`` turns a dynamic
signature into the static one it runs as for a given input shape.

An exported module (``ModuleId``) is a signature plus an implementation:
``{signature key}-{impl}``, e.g. ``layer_norm-bf16-8x128x768-n768-wb-m14-aten``.
Its MLIR function name is the key with ``-`` and ``.`` made identifier-safe.

Calling convention of every kernel (every implementation, all targets), from
the op's data (``boo_build.ops.base``; ``inputs`` / ``outputs``):

* forward (mask 1): (x, [weight], [bias]) -> (y, *stats), e.g. layer_norm
  (y, mean, rstd), rms_norm (y, rstd)
* backward: (grad_y, x, *stats, [weight if affine and mask & 2])
  -> the requested gradients in the op's order (input, weight[, bias])

The fused residual form (``residual``; layer norm and RMS norm, ``Op.residuals``):

* forward: (x, residual, [weight], [bias]) -> (y, h, *stats): ``h = x + residual``
  rounded to the input's dtype, the statistics and y computed from h as stored
* backward (a mask with the input gradient): (grad_y, h, *stats, [weight if
  affine], grad_h) -> (dh, [grad_weight], [grad_bias]): ``dh = norm_backward(grad_y)
  + grad_h``, the gradient of both x and residual, ``grad_h`` the gradient h
  gets from its other users. A sum whose only user is the norm has no grad_h:
  the plain backward of h serves it, as do the weight-only masks.

Statistics such as mean and rstd are in ATen's layout (``Op.stats_shape``: the input's leading
dims followed by a 1 per normalized dim; group norm's ``[N, groups]``), in ``stats_dtype``; the
weight and bias in ``Op.param_shape`` (the normalized shape; group norm's ``[C]``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from . import dtypes, ops
from .errors import SignatureError
from .ops.base import BIAS_GRAD, DEFAULT_EPS, FORWARD, GRAD_NAMES, IMPLS, INPUT_GRAD, WEIGHT_GRAD
from .shapes import (
    DEFAULT_MAX_ELEMENTS,
    as_dims,
    bounds,
    dims_from_text,
    dims_text,
    dynamic_problem,
    eps_problem,
    max_elements_problem,
)

__all__ = ["ALL_MASKS", "KernelSignature", "ModuleId", "affine_problem", "canonical_dtype", "default_stats_dtype", "dumps", "format_eps", "format_offset", "function_name", "mask_problem", "parse_eps", "parse_offset", "residual_key", "shape_text"]

# Sizes a dynamic signature is exported with (torch.export specializes 0 and 1):
# distinct, so no two names look equal to the tracer.
_EXAMPLE_SIZES = (3, 5, 7, 11, 13, 17, 19, 23)


class _Masks(Mapping):
    """op name -> its valid masks, read from the op registry (``boo_build.ops``)."""

    def __getitem__(self, op: str) -> tuple[int, ...]:
        try:
            return ops.get(op).masks
        except ops.UnknownOp:
            raise KeyError(op) from None

    def __iter__(self) -> Iterator[str]:
        return iter(ops.names())

    def __len__(self) -> int:
        return len(ops.names())


ALL_MASKS = _Masks()


def canonical_dtype(name: str) -> str:
    dt = dtypes.canonical(name)
    if dt is None:
        raise SignatureError(f"unknown dtype {name!r}: use one of {', '.join(dtypes.NAMES)}")
    return dt


def default_stats_dtype(op: str, dtype: str) -> str:
    """ATen's dtype for the saved statistics (the op's ``default_stats_dtype``)."""
    return ops.get(op).default_stats_dtype(dtype)


def format_eps(eps: float) -> str:
    return repr(float(eps)).replace("e-", "em").replace("e+", "ep")


def parse_eps(text: str) -> float:
    return float(text.replace("em", "e-").replace("ep", "e+"))


def format_offset(offset: float) -> str:
    """A weight offset in a key: as eps is written, a negative one after ``n`` (no ``-``)."""
    return ("n" if offset < 0 else "") + format_eps(abs(offset))


def parse_offset(text: str) -> float:
    negative = text.startswith("n")
    value = parse_eps(text[1:] if negative else text)
    return -value if negative else value


shape_text = dims_text


@dataclass(frozen=True, order=True)
class KernelSignature:
    """What a caller asks for: one norm kernel, forward or a set of gradients."""

    op: str
    input_shape: tuple[int | str, ...]  # a dynamic dim is a name
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
    groups: int | None = None  # group norm's channel groups; None for the ops that have none
    # RMS norm's weight offset: the weight scales as ``weight_offset + weight`` (Gemma: 1.0)
    weight_offset: float = 0.0
    # the fused residual add (``Op.residuals``): forward x + residual, then the norm; backward with grad_h
    residual: bool = False

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        if self.op not in ops.names():
            raise SignatureError(f"unknown op {self.op!r}: use one of {', '.join(ops.names())}")
        op = ops.get(self.op)
        set_("input_shape", as_dims("input_shape", self.input_shape, names=True))
        # an op without normalized dims (group norm) has normalized_shape ()
        set_("normalized_shape", () if _empty(self.normalized_shape)
             else as_dims("normalized_shape", self.normalized_shape))
        if any(isinstance(d, str) for d in self.input_shape):
            limit = DEFAULT_MAX_ELEMENTS if self.max_elements is None else self.max_elements
            problem = (max_elements_problem(limit)
                       or op.dynamic_dims_problem(self.input_shape, self.normalized_shape, self.groups)
                       or dynamic_problem(self.input_shape, limit))
            if problem:
                raise SignatureError(problem)
            set_("max_elements", limit)
        else:
            set_("max_elements", None)
        set_("dtype", canonical_dtype(self.dtype))
        set_("stats_dtype", canonical_dtype(self.stats_dtype) if self.stats_dtype
             else ops.get(self.op).default_stats_dtype(self.dtype))
        set_("affine", bool(self.affine))
        set_("bias", bool(self.bias))
        problem = (op.shape_problem(self.input_shape, self.normalized_shape, self.groups)
                   or eps_problem(self.eps)
                   or affine_problem(self.op, self.affine, self.bias)
                   or mask_problem(self.op, self.mask, self.affine, self.bias)
                   or op.offset_problem(self.weight_offset, self.affine)
                   or op.residual_problem(self.residual, self.mask))
        if problem:
            raise SignatureError(problem)
        set_("eps", float(self.eps))
        set_("weight_offset", float(self.weight_offset) + 0.0)  # + 0.0: -0.0 is 0.0

    # -- derived -----------------------------------------------------------
    @property
    def is_forward(self) -> bool:
        return self.mask == FORWARD

    @property
    def stats_shape(self) -> tuple[int | str, ...]:
        return ops.get(self.op).stats_shape(self.input_shape, self.normalized_shape, self.groups)

    @property
    def param_shape(self) -> tuple[int, ...]:
        """Shape of the weight and bias (``Op.param_shape``)."""
        return ops.get(self.op).param_shape(self.input_shape, self.normalized_shape, self.groups)

    @property
    def param_view(self) -> tuple[int, ...]:
        """Shape the weight and bias broadcast against the input in (``Op.param_view``)."""
        return ops.get(self.op).param_view(self.input_shape, self.normalized_shape, self.groups)

    @property
    def lead(self) -> int:
        """How many leading dims index rows (``Op.lead_dims``): the rest is one row."""
        return ops.get(self.op).lead_dims(self.input_shape, self.normalized_shape, self.groups)

    def rows_of(self, shape: Sequence[int]) -> int:
        """Rows of an input of ``shape`` (the product of its leading dims)."""
        return math.prod(shape[: len(shape) - (len(self.input_shape) - self.lead)])

    @property
    def rows(self) -> int:
        """Rows of a static signature (the product of the leading dims)."""
        if self.is_dynamic:
            raise SignatureError(f"{self.key} is dynamic: its rows are known only at call time (bind)")
        # static: every dim is an int, which the field's type cannot say
        return math.prod(self.input_shape[: self.lead])  # type: ignore[arg-type]

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
        if self.max_elements is None:  # static
            return {}
        return bounds(self.input_shape, self.max_elements)

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
        if self.max_elements is None:  # static
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
        static = math.prod(d for d in self.input_shape[: self.lead] if isinstance(d, int))
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
        """Elements of one row (static trailing dims: every op's row is)."""
        return math.prod(self.input_shape[self.lead:])  # type: ignore[arg-type]

    @property
    def takes_weight(self) -> bool:
        """Whether the kernel receives the weight tensor."""
        return self.affine and (self.is_forward or bool(self.mask & INPUT_GRAD))

    @property
    def affine_code(self) -> str:
        return "wb" if self.bias else "w" if self.affine else "nw"

    def inputs(self) -> tuple[tuple[str, tuple[int | str, ...], str], ...]:
        """(name, shape, dtype) of each kernel argument, in order."""
        if self.residual:  # the plain kernel's arguments, x as h, and the residual or grad_h
            plain = self.replace(residual=False).inputs()
            if self.is_forward:
                return plain[:1] + (("residual", self.input_shape, self.dtype),) + plain[1:]
            return plain + (("grad_h", self.input_shape, self.dtype),)
        x = ("input", self.input_shape, self.dtype)
        w = ("weight", self.param_shape, self.dtype)
        b = ("bias", self.param_shape, self.dtype)
        stats = ops.get(self.op).stats
        if self.is_forward:
            return (x,) + ((w,) if self.affine else ()) + ((b,) if self.bias else ())
        sd = self.stats_dtype
        assert sd is not None  # __post_init__ fills in the default
        return (
            (("grad_output", self.input_shape, self.dtype), x)
            + tuple((s, self.stats_shape, sd) for s in stats)
            + ((w,) if self.takes_weight else ())
        )

    def outputs(self) -> tuple[tuple[str, tuple[int | str, ...], str], ...]:
        """(name, shape, dtype) of each kernel result, in order."""
        op = ops.get(self.op)
        if self.is_forward:
            sd = self.stats_dtype
            assert sd is not None  # __post_init__ fills in the default
            h = (("h", self.input_shape, self.dtype),) if self.residual else ()
            return (("output", self.input_shape, self.dtype),) + h + tuple(
                (s, self.stats_shape, sd) for s in op.stats
            )
        shapes = {INPUT_GRAD: self.input_shape, WEIGHT_GRAD: self.param_shape, BIAS_GRAD: self.param_shape}
        return tuple((f"grad_{GRAD_NAMES[bit]}", shapes[bit], self.dtype) for bit in op.grads if self.mask & bit)

    # -- text forms ---------------------------------------------------------
    @functools.cached_property  # the build graph asks thousands of times
    def key(self) -> str:
        parts = [
            self.op,
            dtypes.CODES[self.dtype],
            dims_text(self.input_shape),
            ops.get(self.op).key_part(self.normalized_shape, self.groups),
            self.affine_code,
        ]
        if self.stats_dtype != ops.get(self.op).default_stats_dtype(self.dtype):
            assert self.stats_dtype is not None  # __post_init__ fills in the default
            parts.append("s" + dtypes.CODES[self.stats_dtype])
        if self.eps != DEFAULT_EPS:
            parts.append("eps" + format_eps(self.eps))
        if self.weight_offset:
            parts.append("off" + format_offset(self.weight_offset))
        if self.is_dynamic and self.max_elements != DEFAULT_MAX_ELEMENTS:
            parts.append(f"max{self.max_elements}")
        if self.residual:
            parts.append("res")
        parts.append(f"m{self.mask}")
        return "-".join(parts)

    @classmethod
    def parse(cls, key: str) -> "KernelSignature":
        parts = key.split("-")
        if len(parts) < 6:
            raise SignatureError(f"bad signature key {key!r}: too few fields")
        op, dt, shape, norm, affine, *rest = parts
        if dt not in dtypes.BY_CODE:
            raise SignatureError(f"bad signature key {key!r}: unknown dtype code {dt!r}")
        if op not in ops.names():
            raise SignatureError(f"bad signature key {key!r}: unknown op {op!r}: use one of {', '.join(ops.names())}")
        shape_fields = ops.get(op).parse_key_part(norm)
        if shape_fields is None:
            raise SignatureError(f"bad signature key {key!r}: expected {ops.get(op).key_part_form}, got {norm!r}")
        if affine not in ("wb", "w", "nw"):
            raise SignatureError(f"bad signature key {key!r}: expected wb, w or nw, got {affine!r}")
        fields: dict[str, Any] = {}
        for part in rest:
            if part.startswith("m") and part[1:].isdigit():
                fields["mask"] = int(part[1:])
            elif part.startswith("eps"):
                fields["eps"] = parse_eps(part[3:])
            elif part.startswith("off"):
                try:
                    fields["weight_offset"] = parse_offset(part[3:])
                except ValueError:
                    raise SignatureError(f"bad signature key {key!r}: bad weight offset {part!r}") from None
            elif part == "res":
                fields["residual"] = True
            elif part.startswith("max") and part[3:].isdigit():
                fields["max_elements"] = int(part[3:])
            elif part.startswith("s") and part[1:] in dtypes.BY_CODE:
                fields["stats_dtype"] = dtypes.BY_CODE[part[1:]]
            else:
                raise SignatureError(f"bad signature key {key!r}: unknown field {part!r}")
        if "mask" not in fields:
            raise SignatureError(f"bad signature key {key!r}: no m<mask> field")
        sig = cls(
            op=op,
            dtype=dtypes.BY_CODE[dt],
            input_shape=dims_from_text("shape", shape, keys=True, example="8x128x768 or BATCHxSEQx768"),
            normalized_shape=shape_fields.pop("normalized_shape", ()),
            affine=affine != "nw",
            **shape_fields,
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
        if d["groups"] is None:  # ops without groups: as before group norm existed
            del d["groups"]
        if not d["weight_offset"]:  # no offset: as before weight offsets existed
            del d["weight_offset"]
        if not d["residual"]:  # the plain form: as before the residual form existed
            del d["residual"]
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


# Field checks of the op's rules, one problem (or None) each (the others are
# in ``shapes``): KernelSignature raises the first; the manifest calls them
# separately to report every problem of an entry.

def affine_problem(op: str, affine: bool, bias: bool) -> str | None:
    return ops.get(op).affine_problem(affine, bias)


def mask_problem(op: str, mask: Any, affine: bool, bias: bool) -> str | None:
    return ops.get(op).mask_problem(mask, affine, bias)


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


def residual_key(key: str) -> bool:
    """Whether a signature (or module) key is a fused residual kernel's (its ``res`` field)."""
    return "res" in key.split("-")


def _empty(value: Any) -> bool:
    """An empty normalized_shape (a list or tuple of nothing)."""
    return isinstance(value, (tuple, list)) and len(value) == 0


def function_name(key: str) -> str:
    return key.replace("-", "_").replace(".", "p")


def dumps(obj: Any) -> str:
    """Canonical JSON (sorted keys) used for every record this project writes."""
    return json.dumps(obj, sort_keys=True, indent=1)
