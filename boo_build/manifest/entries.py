"""What a manifest asks for: ``KernelRequest`` (a signature and the
implementations to build), and a TOML ``[[kernels]]`` entry -> its requests
and every problem of it (``entry_requests``).

Pure Python (no torch). ``boo_build.manifest`` reads whole files; the
fields of an entry are described in its docstring.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .. import dtypes, ops
from ..errors import SignatureError
from ..ops.base import DEFAULT_EPS, FORWARD, IMPLS, INPUT_GRAD
from ..shapes import DEFAULT_MAX_ELEMENTS, MAX_DIM, MAX_RANK, as_dims, dynamic_problem, eps_problem, limit_problem
from ..signature import KernelSignature, ModuleId, affine_problem, canonical_dtype, mask_problem

ENTRY_KEYS = (
    "op", "input_shape", "input_shapes", "normalized_shape", "groups", "dtype",
    "stats_dtype", "eps", "weight_offset", "affine", "bias", "masks", "impls", "bench_shapes", "residual",
)


def residual_forms(mask: int, residual: bool) -> tuple[bool, ...]:
    """The ``residual`` values a ``residual = true`` entry builds for ``mask``: the fused
    forward; for a backward with the input gradient, the fused one taking grad_h and the
    plain one of h (a sum whose only user is the norm has no grad_h); for a weight-only
    mask the plain one alone (it takes no grad_h)."""
    if not residual:
        return (False,)
    if mask == FORWARD:
        return (True,)
    return (True, False) if mask & INPUT_GRAD else (False,)


def _dedupe(items: Iterable[Any]) -> tuple:
    return tuple(dict.fromkeys(items))


def _impls_problems(impls: Any, allowed: Sequence[str] = IMPLS) -> list[str]:
    if isinstance(impls, str) or not isinstance(impls, (list, tuple)):
        return [f"impls must be a list of implementation names, got {impls!r}"]
    if not impls:
        return [f"impls is empty: use some of {', '.join(allowed)}"]
    return [
        f"unknown implementation {i!r}: use one of {', '.join(allowed)}"
        for i in impls if i not in allowed
    ]


@dataclass(frozen=True)
class KernelRequest:
    """One signature and the implementations to build for it (sorted);
    ``bench_shapes``: static input shapes to benchmark a dynamic signature at."""

    signature: KernelSignature
    impls: tuple[str, ...] = IMPLS
    bench_shapes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.signature, KernelSignature):
            raise TypeError(f"signature must be a KernelSignature, got {self.signature!r}")
        errors = _impls_problems(self.impls)
        if errors:
            raise ValueError("; ".join(errors))
        object.__setattr__(self, "impls", tuple(sorted(set(self.impls))))

    @property
    def module_ids(self) -> tuple[ModuleId, ...]:
        return tuple(ModuleId(self.signature, impl) for impl in self.impls)


def merge_requests(requests: Iterable[KernelRequest]) -> tuple[KernelRequest, ...]:
    """Sort by signature key; requests for the same signature become one with
    the union of their implementations."""
    by_key: dict[str, tuple[KernelSignature, set[str], dict]] = {}
    for req in requests:
        sig, impls, shapes = by_key.setdefault(req.signature.key, (req.signature, set(), {}))
        impls.update(req.impls)
        shapes.update(dict.fromkeys(req.bench_shapes))
    return tuple(
        KernelRequest(sig, tuple(sorted(impls)), tuple(shapes))
        for _, (sig, impls, shapes) in sorted(by_key.items())
    )


# -- a TOML [[kernels]] entry ----------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape(name: str, value: Any, max_elements: int | None = None, names: bool = False) -> tuple[int | str, ...]:
    """A shape from TOML: a list of positive ints (or "8x128x768"), bounded
    (``max_elements`` None: no element bound); with ``names``, a list item may
    be a dynamic dimension's name."""
    dims = as_dims(name, value, names=names, text=True)
    problem = limit_problem(name, dims, max_elements)
    if problem:
        raise SignatureError(problem)
    return dims


def _str_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise SignatureError(f"{name} must be a string or a non-empty list of strings, got {value!r}")


def entry_requests(entry: Any, max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> tuple[list[KernelRequest], list[str]]:
    """One ``[[kernels]]`` table -> its requests and its problems (unprefixed).

    Each field is checked on its own, then every check across fields whose
    values are valid, so all of an entry's problems come back together (a
    bad dtype does not hide a bad mask)."""
    if not isinstance(entry, dict):
        return [], [f"each kernels entry must be a table, got {entry!r}"]
    errors: list[str] = []
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    for k in unknown:
        errors.append(f"unknown key {k!r}: valid keys are {', '.join(ENTRY_KEYS)}")

    def attempt(fn, *args):
        try:
            return fn(*args)
        except SignatureError as e:
            errors.append(str(e))
            return None

    def check(problem: str | None) -> None:
        if problem:
            errors.append(problem)

    # op
    op = entry.get("op")
    if op is None:
        errors.append(f"missing key 'op': use one of {', '.join(ops.names())}")
    elif op not in ops.names():
        errors.append(f"unknown op {op!r}: use one of {', '.join(ops.names())}")
        op = None

    # shapes (None where invalid)
    shapes: list[tuple[int | str, ...] | None] = []
    if "input_shape" in entry and "input_shapes" in entry:
        errors.append("give input_shape or input_shapes, not both")
    elif "input_shape" in entry:
        shapes = [attempt(_shape, "input_shape", entry["input_shape"], max_elements, True)]
    elif "input_shapes" in entry:
        value = entry["input_shapes"]
        if not isinstance(value, list) or not value:
            errors.append(f"input_shapes must be a non-empty list of shapes, got {value!r}")
        else:
            shapes = [attempt(_shape, f"input_shapes[{i}]", v, max_elements, True) for i, v in enumerate(value)]
    else:
        errors.append("missing key 'input_shape' (or 'input_shapes', a list of shapes)")

    normalized = None
    if "normalized_shape" in entry:
        normalized = attempt(_shape, "normalized_shape", entry["normalized_shape"])
    groups = entry.get("groups")
    if groups is not None and not (_is_int(groups) and groups > 0):
        errors.append(f"groups must be a positive integer, got {groups!r}")
        groups = False  # reported: no check across fields

    dtype_list = attempt(_str_list, "dtype", entry.get("dtype", "float32"))
    if dtype_list is not None:
        dtype_list = [attempt(canonical_dtype, d) for d in dtype_list]  # each unknown one reported
    stats_dtype = entry.get("stats_dtype")
    if stats_dtype is not None and not isinstance(stats_dtype, str):
        errors.append(f"stats_dtype must be a string, got {stats_dtype!r}")
    elif stats_dtype is not None:
        try:
            canonical_dtype(stats_dtype)
        except SignatureError:
            errors.append(f"unknown stats_dtype {stats_dtype!r}: use one of {', '.join(dtypes.NAMES)}")

    eps = entry.get("eps", DEFAULT_EPS)
    check(eps_problem(eps))

    affine = entry.get("affine", True)
    if not isinstance(affine, bool):
        errors.append(f"affine must be true or false, got {affine!r}")
        affine = None
    bias = entry.get("bias", op is not None and ops.get(op).default_bias(bool(affine)))
    if not isinstance(bias, bool):
        errors.append(f"bias must be true or false, got {bias!r}")
        bias = None

    masks = entry.get("masks")
    if masks is not None:
        if _is_int(masks):
            masks = [masks]
        if not (isinstance(masks, list) and masks and all(_is_int(m) for m in masks)):
            errors.append(f"masks must be a non-empty list of integers, got {masks!r}")
            masks = None
    elif op is not None and affine is not None and bias is not None:
        masks = ops.get(op).default_masks(affine, bias)

    allowed = ops.get(op).impls if op is not None else IMPLS
    impls = entry.get("impls", list(allowed))
    if isinstance(impls, str):
        impls = [impls]
    errors += _impls_problems(impls, allowed)

    # across fields, where the fields involved are valid
    weight_offset = entry.get("weight_offset", 0.0)
    if op is not None:  # the op's rule, with affine where it is valid (else the number alone)
        check(ops.get(op).offset_problem(weight_offset, True if affine is None else affine))

    residual = entry.get("residual", False)
    if not isinstance(residual, bool):
        errors.append(f"residual must be true or false, got {residual!r}")
        residual = False
    elif op is not None:
        check(ops.get(op).residual_problem(residual, FORWARD))

    if op is not None and affine is not None and bias is not None:
        check(affine_problem(op, affine, bias))
        for m in masks or ():
            check(mask_problem(op, m, affine, bias))
    for shape in shapes:
        if shape is None or op is None or normalized is None and "normalized_shape" in entry or groups is False:
            continue
        spec = ops.get(op)
        norm = normalized if normalized is not None else spec.default_normalized_shape(shape)
        if any(isinstance(d, str) for d in shape):
            check(spec.dynamic_dims_problem(shape, norm, groups))
            # max_elements itself wrong (reported): only where the names are
            check(dynamic_problem(shape, max_elements if max_elements is not None else MAX_DIM ** MAX_RANK))
        check(spec.shape_problem(shape, norm, groups))

    bench = entry.get("bench_shapes")
    if bench is not None:
        if not isinstance(bench, list) or not bench:
            errors.append(f"bench_shapes must be a non-empty list of shapes, got {bench!r}")
            bench = None
        else:
            bench = [attempt(_shape, f"bench_shapes[{i}]", v, max_elements) for i, v in enumerate(bench)]
            if None in bench:
                bench = None
        if bench is not None and shapes and not any(s is not None and any(isinstance(d, str) for d in s)
                                                    for s in shapes):
            errors.append("bench_shapes is for dynamic input shapes (a name in input_shape); "
                          "a static shape is benchmarked at itself")

    if errors:
        return [], list(_dedupe(errors))

    reqs = []
    forms = ((shape, dtype, mask, res) for shape, dtype, mask in itertools.product(shapes, dtype_list, masks)
             for res in residual_forms(mask, residual))
    for shape, dtype, mask, res in forms:
        assert shape is not None  # a bad shape is in errors, returned above
        try:  # every field was checked above; this is a backstop
            sig = KernelSignature(
                op=op, input_shape=shape,
                # a name there was reported above (dynamic_dims_problem) and is refused by KernelSignature
                normalized_shape=(normalized if normalized is not None
                                  else ops.get(op).default_normalized_shape(shape)),
                groups=groups, dtype=dtype, mask=mask, eps=eps, affine=affine, bias=bias,
                stats_dtype=stats_dtype, max_elements=max_elements, weight_offset=weight_offset,
                residual=res,
            )
        except SignatureError as e:
            errors.append(str(e))
            continue
        shapes_here = ()
        if sig.is_dynamic and bench:
            for i, b in enumerate(bench):
                try:
                    sig.bind(b)
                except SignatureError as e:
                    errors.append(f"bench_shapes[{i}] {list(b)} does not fit input_shape {list(shape)}: {e}")
            shapes_here = tuple(bench)
        reqs.append(KernelRequest(sig, tuple(impls), shapes_here))
    return (reqs if not errors else []), list(_dedupe(errors))
