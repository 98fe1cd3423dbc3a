"""Manifests: which kernels a bundle holds.

Pure Python (stdlib ``tomllib`` only, no torch): the CLI reads manifests
before deciding whether anything heavy needs importing.

Two formats, chosen by the file's suffix:

``.toml``
    A ``[bundle]`` table and ``[[kernels]]`` entries::

        [bundle]
        name = "boo-norms"
        version = "0.1.0"          # MAJOR.MINOR.PATCH[-prerelease]
        targets = ["cpu", "gfx942"]
        max_elements = 2147483648  # optional: the most elements of one tensor (default 2^31)

        [[kernels]]
        op = "layer_norm"          # or rms_norm                      (required)
        input_shape = [8, 128, 768]  # or input_shapes = [[...], ...]  (required)
        normalized_shape = [768]   # int or list; default: the last dim
        dtype = ["float32", "bf16"]  # string or list; default float32
        stats_dtype = "float32"    # default: ATen's (float32)
        eps = 1e-5                 # default 1e-5
        affine = true              # default true
        bias = true                # default: affine for layer_norm, false for rms_norm
        masks = [1, 14]            # default: every mask valid for op/affine/bias
        impls = ["aten"]           # default: all implementations
        bench_shapes = [[8, 128, 768]]  # dynamic shapes only: sizes to benchmark at

    A dimension of ``input_shape`` written as a name (``["batch", "seq", 768]``)
    is dynamic: any size from 1 to its upper bound at call time (see
    ``boo_build.signature``: the largest size that keeps the tensor within
    ``max_elements`` with the static dims as given). The same name twice in
    one shape is the same size; normalized dims are integers. ``bench_shapes``
    defaults to the manifest's static shapes the kernel covers, then 1 row and
    4096 rows (``Manifest.bench_shapes``).

    ``input_shapes``, ``dtype`` and ``masks`` lists expand as a cartesian
    product.  An optional top-level ``commands = ["layernorm -X ...", ...]``
    array holds MIOpen driver command lines (below).

``.txt``
    One MIOpen / iree-turbine BOO driver command per line; ``#`` starts a
    comment.  The bundle is named after the file's stem, version ``0.0.0``
    and targets ``("cpu",)`` unless ``load_manifest`` is told otherwise.

MIOpen commands: ``layernorm`` (float32), ``layernormfp16``,
``layernormbfp16`` and this project's ``rmsnorm``, ``rmsnormfp16``,
``rmsnormbfp16``, with flags

* ``-X/--input NxCxHxW`` (required)
* ``-F/--forw`` mask bit set: 1 forward, 2 input, 4 weight, 8 bias grad (default 1)
* ``-m/--mode``: 0 = MIOPEN_ELEMENTWISE_AFFINE, no weight and no bias tensors;
  1 = MIOPEN_WEIGHT_BIAS, weight and bias (weight only for rmsnorm) (default 0)
* ``-e/--eps`` (default 1e-5)
* ``-o/--normalized_dim``: normalized_shape = input_shape[o:] (default: last dim)
* ignored, each taking a value: ``-t/--time``, ``-i/--iter``, ``-V/--verify``,
  ``-w/--wall``.

Both ``--flag value`` and ``--flag=value`` work.  (iree-turbine 3.9.0's
driver inverts ``-m`` and always adds a bias; this follows MIOpen.)

Every error in a file is reported at once in one ``ManifestError``, each line
prefixed with the file and the entry (``kernels[2]``, ``commands[0]``) or line
number (``cmds.txt:4``); every problem of one entry is reported, not only the first.

Shapes are bounded before anything is exported (an unbounded one would make
export allocate the tensor or overflow): at most ``MAX_RANK`` dims, each at
most ``MAX_DIM``, and at most ``max_elements`` elements per tensor
(``DEFAULT_MAX_ELEMENTS`` unless the ``[bundle]`` table raises it).
"""

from __future__ import annotations

import itertools
import math
import os
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .names import name_problem, version_problem
from .signature import (
    ALL_MASKS,
    BIAS_GRAD,
    DEFAULT_EPS,
    DEFAULT_MAX_ELEMENTS,
    DTYPES,
    IMPLS,
    MAX_DIM,
    MAX_RANK,
    OPS,
    WEIGHT_GRAD,
    KernelSignature,
    ModuleId,
    SignatureError,
    affine_problem,
    canonical_dtype,
    dim_name_problem,
    dynamic_problem,
    eps_problem,
    mask_problem,
    max_elements_problem,
    suffix_problem,
)
from .targets import Target, UnknownTarget, resolve

__all__ = [
    "BundleSpec",
    "KernelRequest",
    "Manifest",
    "ManifestError",
    "load_manifest",
    "parse_toml",
    "parse_commands",
    "parse_command",
    "DEFAULT_TARGETS",
    "DEFAULT_MAX_ELEMENTS",
    "ENTRY_KEYS",
    "MAX_DIM",
    "MAX_RANK",
]

DEFAULT_TARGETS = ("cpu",)
DEFAULT_TXT_VERSION = "0.0.0"

# Shape bounds (MAX_RANK, MAX_DIM, DEFAULT_MAX_ELEMENTS, defined in signature):
# torch allows 64 dims and export allocates real tensors, so an unbounded shape
# fails late (or overflows); these fail it in the manifest. [bundle]
# max_elements raises DEFAULT_MAX_ELEMENTS; dynamic dims take their bounds from it.

TOP_LEVEL_KEYS = ("bundle", "kernels", "commands")
BUNDLE_KEYS = ("name", "version", "targets", "max_elements")
ENTRY_KEYS = (
    "op", "input_shape", "input_shapes", "normalized_shape", "dtype",
    "stats_dtype", "eps", "affine", "bias", "masks", "impls", "bench_shapes",
)


class ManifestError(ValueError):
    """Everything wrong with one manifest; ``str()`` is one error per line."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


# -- data model --------------------------------------------------------------


def _bundle_problems(name: Any, version: Any, targets: Any) -> list[str]:
    return _name_problems(name) + _version_problems(version) + _targets_problems(targets)


def _name_problems(name: Any) -> list[str]:
    problem = name_problem(name)
    return [problem] if problem else []


def _version_problems(version: Any) -> list[str]:
    problem = version_problem(version)
    return [problem] if problem else []


def _targets_problems(targets: Any) -> list[str]:
    if isinstance(targets, str) or not isinstance(targets, (list, tuple)):
        return [f"targets must be a list of target names, got {targets!r}"]
    if not targets:
        return ["targets is empty: name at least one target, e.g. \"cpu\" or \"gfx942\""]
    return [problem for t in targets if (problem := name_problem(t, "target"))]


def _dedupe(items: Iterable[Any]) -> tuple:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class BundleSpec:
    """Name, semver version and compile targets of one bundle."""

    name: str
    version: str
    targets: tuple[str, ...]

    def __post_init__(self) -> None:
        errors = _bundle_problems(self.name, self.version, self.targets)
        if errors:
            raise ValueError("; ".join(errors))
        object.__setattr__(self, "targets", _dedupe(self.targets))


def _impls_problems(impls: Any) -> list[str]:
    if isinstance(impls, str) or not isinstance(impls, (list, tuple)):
        return [f"impls must be a list of implementation names, got {impls!r}"]
    if not impls:
        return [f"impls is empty: use some of {', '.join(IMPLS)}"]
    return [
        f"unknown implementation {i!r}: use one of {', '.join(IMPLS)}"
        for i in impls if i not in IMPLS
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


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest: the bundle and its kernels (sorted, unique)."""

    path: str
    bundle: BundleSpec
    kernels: tuple[KernelRequest, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", str(self.path))
        object.__setattr__(self, "kernels", merge_requests(self.kernels))

    @property
    def signatures(self) -> tuple[KernelSignature, ...]:
        return tuple(k.signature for k in self.kernels)

    @property
    def module_ids(self) -> tuple[ModuleId, ...]:
        ids = [mid for k in self.kernels for mid in k.module_ids]
        return tuple(sorted(ids, key=lambda m: m.key))

    # -- dynamic signatures: the sizes they are checked and timed at ------------
    def _static_shapes(self, sig: KernelSignature) -> list[tuple[int, ...]]:
        """Static input shapes of this manifest with ``sig``'s op and normalized shape."""
        return [s.input_shape for s in self.signatures
                if not s.is_dynamic and s.op == sig.op and s.normalized_shape == sig.normalized_shape]

    def bench_shapes(self, sig: KernelSignature) -> tuple[tuple[int, ...], ...]:
        """Input shapes a dynamic signature is benchmarked at (() for a static
        one): its entry's ``bench_shapes``, else the manifest's static shapes it
        covers (compared with their static kernels), then 1 row and 4096 rows."""
        if not sig.is_dynamic:
            return ()
        named = [s for r in self.kernels if r.signature == sig for s in r.bench_shapes]
        if named:
            return tuple(dict.fromkeys(named))
        shapes = []
        for shape in self._static_shapes(sig):
            try:
                sig.bind(shape)
            except SignatureError:
                continue
            shapes.append(shape)
        for rows in (1, 4096):
            try:
                shapes.append(sig.with_rows(rows).input_shape)
            except SignatureError:  # above the bounds
                pass
        return tuple(dict.fromkeys(shapes))

    def largest_rows(self, sig: KernelSignature) -> int:
        """Most rows of any shape this manifest names with ``sig``'s op and
        normalized shape (static entries, bench shapes); 0 if none."""
        n = len(sig.normalized_shape)
        shapes = self._static_shapes(sig) + [s for r in self.kernels for s in r.bench_shapes
                                             if r.signature.normalized_shape == sig.normalized_shape]
        return max((math.prod(s[: len(s) - n]) for s in shapes), default=0)


# -- shape bounds ---------------------------------------------------------------


def _limit_problem(name: str, dims: Sequence[int | str], max_elements: int | None) -> str | None:
    """Rank, each dim and (unless ``max_elements`` is None) the element count
    of one shape (dynamic dims at 1: their bounds come from what is left);
    positivity is checked elsewhere."""
    if len(dims) > MAX_RANK:
        return f"{name} has {len(dims)} dimensions: at most {MAX_RANK} are supported"
    for i, d in enumerate(dims):
        if isinstance(d, int) and d > MAX_DIM:
            return f"{name} dimension {i} is {d}: at most {MAX_DIM} (2^31-1) is supported"
    n = math.prod(d for d in dims if isinstance(d, int))
    if max_elements is not None and n > max_elements:
        return (f"{name} {list(dims)} has {n} elements, more than max_elements = {max_elements} "
                "per tensor: use a smaller shape, or raise max_elements in the [bundle] table "
                "of a TOML manifest")
    return None


_max_elements_problem = max_elements_problem


# -- MIOpen driver commands ---------------------------------------------------

# command -> (op, dtype)
COMMANDS = {
    "layernorm": ("layer_norm", "float32"),
    "layernormfp16": ("layer_norm", "float16"),
    "layernormbfp16": ("layer_norm", "bfloat16"),
    "rmsnorm": ("rms_norm", "float32"),
    "rmsnormfp16": ("rms_norm", "float16"),
    "rmsnormbfp16": ("rms_norm", "bfloat16"),
}

# flag spelling -> canonical name; every flag takes one value
_FLAGS = {
    "-X": "input", "--input": "input",
    "-F": "forw", "--forw": "forw",
    "-m": "mode", "--mode": "mode",
    "-e": "eps", "--eps": "eps",
    "-o": "normalized_dim", "--normalized_dim": "normalized_dim",
    # timing / verification: accepted and ignored
    "-t": "time", "--time": "time",
    "-i": "iter", "--iter": "iter",
    "-V": "verify", "--verify": "verify",
    "-w": "wall", "--wall": "wall",
}
_IGNORED = {"time", "iter", "verify", "wall"}
_FLAG_LIST = "-X/--input, -F/--forw, -m/--mode, -e/--eps, -o/--normalized_dim, " \
    "-t/--time, -i/--iter, -V/--verify, -w/--wall"


def _parse_int(text: str, what: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise SignatureError(f"{what} must be an integer, got {text!r}") from None


def parse_command(text: str, max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> KernelRequest | None:
    """One MIOpen driver command -> a request for every implementation, or
    None for a blank / comment-only line.  Raises ``SignatureError`` (any
    problem, message without location).  The input shape is bounded as in
    the module docstring (``max_elements`` None: no element bound)."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as e:
        raise SignatureError(f"cannot split command: {e}") from None
    if not tokens:
        return None
    if os.path.basename(tokens[0]) == "MIOpenDriver":  # pasted driver invocations
        tokens = tokens[1:]
        if not tokens:
            raise SignatureError("MIOpenDriver without a command")
    cmd, args = tokens[0], tokens[1:]
    if cmd not in COMMANDS:
        raise SignatureError(f"unknown command {cmd!r}: use one of {', '.join(COMMANDS)}")
    op, dtype = COMMANDS[cmd]

    values: dict[str, tuple[str, str]] = {}  # canonical -> (spelling, value)
    i = 0
    while i < len(args):
        tok = args[i]
        flag, eq, value = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        if flag not in _FLAGS:
            if tok.startswith("-"):
                raise SignatureError(f"unknown flag {flag!r} for {cmd}: use {_FLAG_LIST}")
            raise SignatureError(f"unexpected argument {tok!r}: every value follows a flag")
        if not eq:
            if i + 1 >= len(args):
                raise SignatureError(f"flag {flag} needs a value")
            value = args[i + 1]
            i += 1
        i += 1
        name = _FLAGS[flag]
        if name in _IGNORED:
            continue
        if name in values:
            raise SignatureError(f"flag {flag} given twice (as {values[name][0]} before)")
        values[name] = (flag, value)

    if "input" not in values:
        raise SignatureError(f"{cmd} needs -X/--input, e.g. -X 10x32x42x32")
    text_shape = values["input"][1]
    try:
        shape = tuple(int(d, 10) for d in text_shape.lower().split("x"))
    except ValueError:
        raise SignatureError(
            f"bad -X/--input {text_shape!r}: expected dims joined by 'x', e.g. 10x32x42x32"
        ) from None
    problem = _limit_problem("-X/--input", shape, max_elements)
    if problem:
        raise SignatureError(problem)

    mask = _parse_int(values["forw"][1], "-F/--forw") if "forw" in values else 1
    mode = _parse_int(values["mode"][1], "-m/--mode") if "mode" in values else 0
    if mode not in (0, 1):
        raise SignatureError(
            f"-m/--mode {mode} is invalid: 0 (MIOPEN_ELEMENTWISE_AFFINE, no weight or bias) "
            "or 1 (MIOPEN_WEIGHT_BIAS)"
        )
    affine = mode == 1
    bias = affine and op == "layer_norm"
    eps = DEFAULT_EPS
    if "eps" in values:
        try:
            eps = float(values["eps"][1])
        except ValueError:
            raise SignatureError(f"-e/--eps must be a number, got {values['eps'][1]!r}") from None
    ndim = len(shape)
    norm_dim = _parse_int(values["normalized_dim"][1], "-o/--normalized_dim") \
        if "normalized_dim" in values else ndim - 1
    if not 0 <= norm_dim < ndim:
        raise SignatureError(
            f"-o/--normalized_dim {norm_dim} is out of range for the {ndim}-d input "
            f"{text_shape}: use 0..{ndim - 1}"
        )
    try:
        sig = KernelSignature(
            op=op, input_shape=shape, normalized_shape=shape[norm_dim:], dtype=dtype,
            mask=mask, eps=eps, affine=affine, bias=bias,
        )
    except SignatureError as e:
        hint = ""
        if not affine and mask & (WEIGHT_GRAD | BIAS_GRAD):
            hint = " (-m 0 has no weight or bias; use -m 1 for their gradients)"
        elif op == "rms_norm" and mask & BIAS_GRAD:
            hint = " (rmsnorm -m 1 has a weight but no bias)"
        raise SignatureError(f"{e}{hint}") from None
    return KernelRequest(sig, IMPLS)


def _commands(items: Iterable[tuple[str, Any]], errors: list[str],
              max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> list[KernelRequest]:
    out = []
    for where, text in items:
        if not isinstance(text, str):
            errors.append(f"{where}: a command must be a string, got {text!r}")
            continue
        try:
            req = parse_command(text, max_elements)
        except SignatureError as e:
            errors.append(f"{where}: {e}")
            continue
        if req is not None:
            out.append(req)
    return out


def parse_commands(lines: str | Iterable[str], path: str | os.PathLike = "<commands>") -> list[KernelRequest]:
    """MIOpen driver commands, one per line (``#`` comments, blank lines
    skipped) -> requests, unmerged, in line order.  Raises ``ManifestError``
    listing every bad line as ``path:LINE: message``."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    errors: list[str] = []
    reqs = _commands(((f"{path}:{n}", line) for n, line in enumerate(lines, 1)), errors)
    if errors:
        raise ManifestError(errors)
    return reqs


# -- TOML ---------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape(name: str, value: Any, max_elements: int | None = None, names: bool = False) -> tuple[int | str, ...]:
    """A shape from TOML: a list of positive ints (or "8x128x768"), bounded
    (``max_elements`` None: no element bound); with ``names``, a list item may
    be a dynamic dimension's name."""
    if isinstance(value, str):
        try:
            value = [int(d, 10) for d in value.lower().split("x")]
        except ValueError:
            raise SignatureError(f"{name} {value!r} is not dims joined by 'x', e.g. 8x128x768"
                                 + (" (dynamic dimensions: a list, e.g. [\"batch\", \"seq\", 768])"
                                    if names else "")) from None
    if _is_int(value):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise SignatureError(f"{name} must be a list of positive integers, got {value!r}")
    if names:
        for i, d in enumerate(value):
            if isinstance(d, str):
                problem = dim_name_problem(f"{name} dimension {i}", d)
                if problem:
                    raise SignatureError(problem)
    if not value or not all((_is_int(d) and d > 0) or (names and isinstance(d, str)) for d in value):
        if any(isinstance(d, str) for d in value):
            raise SignatureError(f"{name} must be a non-empty list of positive integers, got {list(value)}: "
                                 "dynamic dimension names are allowed only in input_shape, before the "
                                 "normalized dimensions")
        raise SignatureError(f"{name} must be a non-empty list of positive integers, got {list(value)}")
    problem = _limit_problem(name, value, max_elements)
    if problem:
        raise SignatureError(problem)
    return tuple(value)


def _str_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise SignatureError(f"{name} must be a string or a non-empty list of strings, got {value!r}")


def _entry(entry: Any, max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> tuple[list[KernelRequest], list[str]]:
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
        errors.append(f"missing key 'op': use one of {', '.join(OPS)}")
    elif op not in OPS:
        errors.append(f"unknown op {op!r}: use one of {', '.join(OPS)}")
        op = None

    # shapes (None where invalid)
    shapes: list[tuple[int, ...] | None] = []
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

    dtypes = attempt(_str_list, "dtype", entry.get("dtype", "float32"))
    if dtypes is not None:
        dtypes = [attempt(canonical_dtype, d) for d in dtypes]  # each unknown one reported
    stats_dtype = entry.get("stats_dtype")
    if stats_dtype is not None and not isinstance(stats_dtype, str):
        errors.append(f"stats_dtype must be a string, got {stats_dtype!r}")
    elif stats_dtype is not None:
        try:
            canonical_dtype(stats_dtype)
        except SignatureError:
            errors.append(f"unknown stats_dtype {stats_dtype!r}: use one of {', '.join(DTYPES)}")

    eps = entry.get("eps", DEFAULT_EPS)
    check(eps_problem(eps))

    affine = entry.get("affine", True)
    if not isinstance(affine, bool):
        errors.append(f"affine must be true or false, got {affine!r}")
        affine = None
    bias = entry.get("bias", bool(affine) and op == "layer_norm")
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
        masks = [
            m for m in ALL_MASKS[op]
            if not (m & WEIGHT_GRAD and not affine) and not (m & BIAS_GRAD and not bias)
        ]

    impls = entry.get("impls", list(IMPLS))
    if isinstance(impls, str):
        impls = [impls]
    errors += _impls_problems(impls)

    # across fields, where the fields involved are valid
    if op is not None and affine is not None and bias is not None:
        check(affine_problem(op, affine, bias))
        for m in masks or ():
            check(mask_problem(op, m, affine, bias))
    for shape in shapes:
        if shape is None:
            continue
        norm = normalized if normalized is not None else shape[-1:]
        if any(isinstance(d, str) for d in shape) and norm is not None:
            if max_elements is not None:
                check(dynamic_problem(shape, norm, max_elements))
            else:  # max_elements itself is wrong (reported): only where the names are
                check(dynamic_problem(shape, norm, MAX_DIM ** MAX_RANK))
        if normalized is not None:
            check(suffix_problem(shape, normalized))

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
    for shape, dtype, mask in itertools.product(shapes, dtypes, masks):
        try:  # every field was checked above; this is a backstop
            sig = KernelSignature(
                op=op, input_shape=shape,
                normalized_shape=normalized if normalized is not None else shape[-1:],
                dtype=dtype, mask=mask, eps=eps, affine=affine, bias=bias,
                stats_dtype=stats_dtype, max_elements=max_elements,
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


def _bundle(data: dict, path: str, targets: Sequence[str] | None, version: str | None,
            errors: list[str], catalogue: Mapping[str, Target] | None = None
            ) -> tuple[BundleSpec | None, int | None]:
    """The bundle and its max_elements (None when that is invalid: entries
    are then not checked against a bound the author did not mean)."""
    where = f"{path}: bundle"
    table = data.get("bundle")
    if table is None:
        errors.append(f"{path}: missing [bundle] table (name, version, targets)")
        return None, DEFAULT_MAX_ELEMENTS
    if not isinstance(table, dict):
        errors.append(f"{where}: must be a table: write [bundle]")
        return None, DEFAULT_MAX_ELEMENTS
    problems = [f"unknown key {k!r}: valid keys are {', '.join(BUNDLE_KEYS)}"
                for k in table if k not in BUNDLE_KEYS]
    name = table.get("name")
    if name is None:
        problems.append("missing key 'name'")
    else:
        problems += _name_problems(name)
    if "version" in table:
        problems += _version_problems(table["version"])
    elif version is None:
        problems.append("missing key 'version' (semver, e.g. \"0.1.0\")")
    if "targets" in table:
        target_problems = _targets_problems(table["targets"])
        # checked even when an override replaces them: a manifest naming an
        # unknown target is wrong whatever --targets says
        problems += target_problems or _unknown_targets(table["targets"], catalogue)
    elif targets is None:
        problems.append("missing key 'targets' (e.g. [\"cpu\", \"gfx942\"])")
    max_elements = table.get("max_elements", DEFAULT_MAX_ELEMENTS)
    bad_max = _max_elements_problem(max_elements)
    if bad_max:
        problems.append(bad_max)
        max_elements = None
    errors += [f"{where}: {p}" for p in problems]
    override = _override_problems(path, targets, version, catalogue=catalogue)
    errors += override
    if problems or override:
        return None, max_elements
    spec = BundleSpec(
        name=name,
        version=version if version is not None else table["version"],
        targets=tuple(targets if targets is not None else table["targets"]),
    )
    return spec, max_elements


def _unknown_targets(names: Sequence[str], catalogue: Mapping[str, Target] | None) -> list[str]:
    """The catalogue's refusal of unknown names ([] without a catalogue)."""
    if catalogue is None:
        return []
    try:
        resolve(names, catalogue)
    except UnknownTarget as e:
        return [str(e)]
    return []


def _override_problems(path: str, targets: Sequence[str] | None, version: str | None,
                       label: str = "override: ",
                       catalogue: Mapping[str, Target] | None = None) -> list[str]:
    problems = []
    if version is not None:
        problems += _version_problems(version)
    if targets is not None:
        names = list(targets) if not isinstance(targets, str) else targets
        problems += _targets_problems(names) or _unknown_targets(names, catalogue)
    return [f"{path}: {label}{p}" for p in problems]


def parse_toml(text: str, path: str | os.PathLike = "<manifest>", *,
               targets: Sequence[str] | None = None, version: str | None = None,
               catalogue: Mapping[str, Target] | None = None) -> Manifest:
    """A TOML manifest's text -> ``Manifest``; raises ``ManifestError`` with
    every problem.  ``targets`` / ``version`` replace the file's; with a
    ``catalogue`` (``targets.catalogue()``), every target named in the file
    or the override must be in it."""
    path = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError([f"{path}: invalid TOML: {e}"]) from None
    errors: list[str] = []
    for k in data:
        if k not in TOP_LEVEL_KEYS:
            errors.append(f"{path}: unknown top-level key {k!r}: valid keys are "
                          f"{', '.join(TOP_LEVEL_KEYS)} ([bundle], [[kernels]], commands = [...])")
    bundle, max_elements = _bundle(data, path, targets, version, errors, catalogue)

    requests: list[KernelRequest] = []
    before = len(errors)
    kernels = data.get("kernels", [])
    if not isinstance(kernels, list):
        errors.append(f"{path}: kernels must be an array of tables: write [[kernels]]")
        kernels = []
    for i, entry in enumerate(kernels):
        reqs, problems = _entry(entry, max_elements)
        requests += reqs
        errors += [f"{path}: kernels[{i}]: {p}" for p in problems]

    commands = data.get("commands", [])
    if not isinstance(commands, list):
        errors.append(f"{path}: commands must be an array of strings")
        commands = []
    requests += _commands(((f"{path}: commands[{i}]", c) for i, c in enumerate(commands)), errors,
                          max_elements)

    if not requests and len(errors) == before:  # nothing asked for, nothing wrong with it
        errors.append(f"{path}: no kernels: add [[kernels]] entries or a commands array")
    if errors:
        raise ManifestError(errors)
    assert bundle is not None
    return Manifest(path=path, bundle=bundle, kernels=tuple(requests))


def _parse_txt(text: str, path: str, targets: Sequence[str] | None, version: str | None,
               catalogue: Mapping[str, Target] | None = None) -> Manifest:
    errors: list[str] = []
    name = Path(path).stem
    version = DEFAULT_TXT_VERSION if version is None else version
    targets = DEFAULT_TARGETS if targets is None else targets
    errors += [f"{path}: {p}" for p in _name_problems(name)]
    errors += _override_problems(path, targets, version, label="", catalogue=catalogue)
    try:
        requests = parse_commands(text, path)
    except ManifestError as e:
        errors += e.errors
        requests = []
    if not requests and not errors:
        errors.append(f"{path}: no kernels: the file has no commands")
    if errors:
        raise ManifestError(errors)
    return Manifest(path=path, bundle=BundleSpec(name, version, tuple(targets)), kernels=tuple(requests))


def load_manifest(path: str | os.PathLike, *, targets: Sequence[str] | None = None,
                  version: str | None = None, catalogue: Mapping[str, Target] | None = None) -> Manifest:
    """Read a ``.toml`` or ``.txt`` manifest; raises ``ManifestError``.
    ``targets``, ``version`` and ``catalogue`` as in ``parse_toml``."""
    spath = str(path)
    suffix = Path(spath).suffix.lower()
    if suffix not in (".toml", ".txt"):
        raise ManifestError([f"{spath}: unknown manifest type {suffix or '(no suffix)'!r}: use .toml or .txt"])
    try:
        text = Path(spath).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError([f"{spath}: cannot read: {e}"]) from None
    if suffix == ".toml":
        return parse_toml(text, spath, targets=targets, version=version, catalogue=catalogue)
    return _parse_txt(text, spath, targets, version, catalogue)
