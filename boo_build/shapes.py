"""Shapes: the one dimension-list parser, dynamic dimensions and shape limits.

Pure Python (the loader imports it through ``signature``). Every problem is
a ``SignatureError`` (raised) or a message (``*_problem``, None when fine):
``KernelSignature`` raises the first, the manifest reports them all.

A dynamic dimension is a name (``[a-z][a-z0-9_]*``, at most ``MAX_NAME``
characters) standing for any size from 1 to its bound: the largest size that
keeps the tensor within ``max_elements`` with the static dims as given and
every other name at 1, and at most ``MAX_DIM`` (``bounds``). In keys a name
is written in capitals (``dims_text``), so the ``x`` separator never occurs in one.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, Iterable, Literal, Sequence, overload

from .errors import SignatureError

# Shape limits (the manifest enforces them; dynamic dims take their bounds
# from them): torch allows 64 dims and export allocates real tensors, so an
# unbounded shape would fail late (or overflow).
MAX_RANK = 8
MAX_DIM = 2**31 - 1
DEFAULT_MAX_ELEMENTS = 2**31  # per tensor; a manifest's [bundle] max_elements changes it
MAX_NAME = 16  # characters of a dynamic dimension's name: keys stay short enough for file names
DIM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_KEY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")



def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@overload
def as_dims(where: str, value: Any, *, names: Literal[False] = ..., text: bool = ...) -> tuple[int, ...]: ...
@overload
def as_dims(where: str, value: Any, *, names: bool, text: bool = ...) -> tuple[int | str, ...]: ...
def as_dims(where: str, value: Any, *, names: bool = False, text: bool = False) -> tuple[int | str, ...]:
    """The one dimension-list parser: positive ints (one int is a 1-d shape),
    with ``names`` dynamic dimension names too, with ``text`` also a string of
    dims joined by ``x`` (``"8x128x768"``, as a manifest may write one)."""
    if text and isinstance(value, str):
        value = dims_from_text(where, value, example="8x128x768" + (
            " (dynamic dimensions: a list, e.g. [\"batch\", \"seq\", 768])" if names else ""))
    if _is_int(value) or (names and isinstance(value, str)):
        value = (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise SignatureError(f"{where} must be a list of positive integers, got {value!r}")
    dims = tuple(value)
    if names:
        for i, d in enumerate(dims):
            if isinstance(d, str):
                problem = dim_name_problem(f"{where} dimension {i}", d)
                if problem:
                    raise SignatureError(problem)
    if not dims or not all((_is_int(d) and d > 0) or (names and isinstance(d, str)) for d in dims):
        hint = ""
        if any(isinstance(d, str) for d in dims):
            hint = ": dynamic dimension names are allowed only in input_shape, before the normalized dimensions"
        raise SignatureError(f"{where} must be a non-empty list of positive integers, got {list(dims)}{hint}")
    return dims


@overload
def dims_from_text(where: str, text: str, *, keys: Literal[False] = ..., example: str = ...) -> tuple[int, ...]: ...
@overload
def dims_from_text(where: str, text: str, *, keys: bool, example: str = ...) -> tuple[int | str, ...]: ...
def dims_from_text(where: str, text: str, *, keys: bool = False, example: str = "8x128x768") -> tuple[int | str, ...]:
    """Dims joined by ``x``: numbers, and with ``keys`` dynamic names in
    capitals (a key's shape field: ``BATCHx768``)."""
    dims: list[int | str] = []
    for d in (text if keys else text.lower()).split("x"):
        if d.isdigit() and d.isascii():
            dims.append(int(d, 10))
        elif keys and _KEY_NAME.match(d):
            dims.append(d.lower())
        else:
            what = "numbers, or dynamic names in capitals" if keys else "positive integers"
            raise SignatureError(f"bad {where} {text!r}: expected dims joined by 'x' ({what}), e.g. {example}")
    return tuple(dims)


def dims_text(shape: Iterable[int | str]) -> str:
    """A shape as in keys: dims joined by ``x``, dynamic dims in capitals."""
    return "x".join(d.upper() if isinstance(d, str) else str(d) for d in shape)


# -- problems: one message (or None) each -------------------------------------------
def log_rows(per_size: Iterable[tuple[int, Any]]) -> tuple[tuple[float, Any], ...]:
    """Per-size decisions ``((rows, decision), ...)``, rows ascending, with the rows on a
    log scale: what ``nearest_in_rows`` reads (computed once, where it is read per call)."""
    return tuple((math.log(max(int(rows), 1)), decision) for rows, decision in per_size)


def nearest_in_rows(logged: Sequence[tuple[float, Any]], rows: int) -> Any:
    """The decision of the size nearest to ``rows`` rows on a log scale (of two as near, the
    smaller): how a dynamic kernel's per-size decisions (``by_rows``) answer any size."""
    at = math.log(max(rows, 1))
    return min(logged, key=lambda p: abs(p[0] - at))[1]


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
    if _is_int(value) and value > 0:
        return None
    return (f"max_elements must be a positive integer (elements per tensor, default "
            f"{DEFAULT_MAX_ELEMENTS}), got {value!r}")


def limit_problem(where: str, dims: Sequence[int | str], max_elements: int | None) -> str | None:
    """Rank, each dim and (unless ``max_elements`` is None) the element count
    of one shape (dynamic dims at 1: their bounds come from what is left);
    positivity is ``as_dims``'s."""
    if len(dims) > MAX_RANK:
        return f"{where} has {len(dims)} dimensions: at most {MAX_RANK} are supported"
    for i, d in enumerate(dims):
        if isinstance(d, int) and d > MAX_DIM:
            return f"{where} dimension {i} is {d}: at most {MAX_DIM} (2^31-1) is supported"
    n = math.prod(d for d in dims if isinstance(d, int))
    if max_elements is not None and n > max_elements:
        return (f"{where} {list(dims)} has {n} elements, more than max_elements = {max_elements} "
                "per tensor: use a smaller shape, or raise max_elements in the [bundle] table "
                "of a TOML manifest")
    return None


def dynamic_problem(input_shape: tuple, max_elements: int) -> str | None:
    """Room for each dynamic dim to be at least 2. (Where an op takes names is the
    op's rule: ``Op.dynamic_dims_problem``.)"""
    static = math.prod(d for d in input_shape if isinstance(d, int))
    if static > max_elements:
        return (f"input_shape {list(input_shape)} has {static} elements with every dynamic dimension at 1, "
                f"more than max_elements = {max_elements}")
    tight = [name for name, b in bounds(input_shape, max_elements).items() if b < 2]
    if tight:
        return (f"dynamic dimension {tight[0]!r} of input_shape {list(input_shape)} can only be 1 under "
                f"max_elements = {max_elements}: write 1, or raise max_elements")
    return None


def bounds(input_shape: tuple, max_elements: int) -> dict[str, int]:
    """Upper bound of each name in ``input_shape`` (see the module docstring)."""
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
