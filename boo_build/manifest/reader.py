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
        op = "layer_norm"          # a registered op: or rms_norm     (required)
        input_shape = [8, 128, 768]  # or input_shapes = [[...], ...]  (required)
        normalized_shape = [768]   # int or list; default: the last dim (group_norm: none)
        groups = 32                # group_norm only: channel groups, dividing C (input_shape[1])
        dtype = ["float32", "bf16"]  # string or list; default float32
        stats_dtype = "float32"    # default: ATen's (float32)
        eps = 1e-5                 # default 1e-5
        weight_offset = 1.0        # rms_norm only: scales by weight_offset + weight (Gemma); default 0
        affine = true              # default true
        bias = true                # default: affine, if the op has a bias (not rms_norm)
        masks = [1, 14]            # default: every mask valid for op/affine/bias
        impls = ["aten"]           # default: the op's implementations
        bench_shapes = [[8, 128, 768]]  # dynamic shapes only: sizes to benchmark at
        residual = true            # layer_norm, rms_norm: the fused x + residual form; default false

    A dimension of ``input_shape`` written as a name (``["batch", "seq", 768]``)
    is dynamic: any size from 1 to its upper bound at call time (see
    ``boo_build.signature``: the largest size that keeps the tensor within
    ``max_elements`` with the static dims as given). The same name twice in
    one shape is the same size; normalized dims are integers. ``bench_shapes``
    defaults to the manifest's static shapes the kernel covers, then 1, 64 and
    4096 rows (``Manifest.bench_shapes``).

    ``residual = true`` builds the fused residual form (``boo_build.signature``):
    the forward takes x and the residual and returns h = x + residual too; each
    backward mask with the input gradient is built twice, fused (taking grad_h,
    the gradient h gets from its other users) and plain (the backward of h, for
    a sum whose only user is the norm); a weight-only mask plain only
    (``entries.residual_forms``).

    ``input_shapes``, ``dtype`` and ``masks`` lists expand as a cartesian
    product.  An optional top-level ``commands = ["layernorm -X ...", ...]``
    array holds MIOpen driver command lines (below).

``.txt`` / ``.tsv``
    One MIOpen / iree-turbine BOO driver command per line; ``#`` starts a
    comment.  A ``.tsv`` line's arguments are separated by tabs, as
    iree-turbine's driver reads such a file.  The bundle is named after the
    file's stem, version ``0.0.0`` and targets ``("cpu",)`` unless
    ``load_manifest`` is told otherwise.

MIOpen commands (``layernorm``, ``rmsnormbfp16``, ...: each op's
``commands``), their flags and iree-turbine's (``--use-aten``: one
implementation) are described in ``boo_build.manifest.miopen``.

Every error in a file is reported at once in one ``ManifestError``, each line
prefixed with the file and the entry (``kernels[2]``, ``commands[0]``) or line
number (``cmds.txt:4``); every problem of one entry is reported, not only the first.

Shapes are bounded before anything is exported (an unbounded one would make
export allocate the tensor or overflow): at most ``MAX_RANK`` dims, each at
most ``MAX_DIM``, and at most ``max_elements`` elements per tensor
(``DEFAULT_MAX_ELEMENTS`` unless the ``[bundle]`` table raises it).
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .. import ops
from ..bundle_names import name_problem, version_problem
from ..errors import ManifestError, SignatureError, UnknownTarget
from ..shapes import DEFAULT_MAX_ELEMENTS, max_elements_problem
from ..signature import KernelSignature, ModuleId
from ..targets import Target, resolve
from . import miopen
from .entries import KernelRequest, entry_requests, merge_requests

__all__ = ["BundleSpec", "DEFAULT_TARGETS", "Manifest", "load_manifest", "parse_command", "parse_commands", "parse_toml"]

DEFAULT_TARGETS = ("cpu",)
DEFAULT_TXT_VERSION = "0.0.0"
COMMAND_SUFFIXES = (".txt", ".tsv")  # command files; .tsv lines split at tabs (iree-turbine's)

# Shape bounds (MAX_RANK, MAX_DIM, DEFAULT_MAX_ELEMENTS, defined in signature):
# torch allows 64 dims and export allocates real tensors, so an unbounded shape
# fails late (or overflows); these fail it in the manifest. [bundle]
# max_elements raises DEFAULT_MAX_ELEMENTS; dynamic dims take their bounds from it.

TOP_LEVEL_KEYS = ("bundle", "kernels", "commands")
BUNDLE_KEYS = ("name", "version", "targets", "max_elements")



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


# The most elements of a default benchmark size of a dynamic kernel (its 64- and
# 4096-row sizes: 4096 rows of a 4096-wide RMS norm stay in)
BENCH_ELEMENTS = 2**25


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
        # static signatures: their dims are ints, which the field's type cannot say
        return [s.input_shape for s in self.signatures  # type: ignore[misc]
                if not s.is_dynamic and s.op == sig.op and _same_form(s, sig)]

    def bench_shapes(self, sig: KernelSignature) -> tuple[tuple[int, ...], ...]:
        """Input shapes a dynamic signature is benchmarked at (() for a static
        one): its entry's ``bench_shapes``, else the manifest's static shapes it
        covers (compared with their static kernels), then 1, 64 and 4096 rows (those
        of at most ``BENCH_ELEMENTS``)."""
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
        for rows in (1, 64, 4096):
            try:
                sized = sig.with_rows(rows)
            except SignatureError:  # above the bounds
                continue
            # a wide row (group norm's: a whole sample) is not timed at thousands of rows
            if rows == 1 or sized.rows * sized.width <= BENCH_ELEMENTS:
                shapes.append(sized.input_shape)  # type: ignore[arg-type]  # static: ints
        return tuple(dict.fromkeys(shapes))

    def largest_rows(self, sig: KernelSignature) -> int:
        """Most rows of any shape this manifest names with ``sig``'s op and
        normalized shape (static entries, bench shapes); 0 if none."""
        n = len(sig.normalized_shape)
        shapes = self._static_shapes(sig) + [s for r in self.kernels for s in r.bench_shapes
                                             if _same_form(r.signature, sig)]
        return max((math.prod(s[: len(s) - n]) for s in shapes), default=0)


def _same_form(a: KernelSignature, b: KernelSignature) -> bool:
    """Same shape parameters: normalized shape, groups, and weight shape (group norm's channels)."""
    return (a.normalized_shape, a.groups, a.param_shape) == (b.normalized_shape, b.groups, b.param_shape)


# -- MIOpen driver commands (``boo_build.manifest.miopen``) ------------------------


def parse_command(text: str, max_elements: int | None = DEFAULT_MAX_ELEMENTS, *,
                  tsv: bool = False) -> KernelRequest | None:
    """One MIOpen driver command (a ``.tsv`` line with ``tsv``) -> a request for
    every implementation of its op, or the one ``--use-aten`` names; None for
    a blank / comment-only line.  Raises ``SignatureError`` (any problem,
    message without location)."""
    cmd = miopen.parse_line(text, max_elements, tsv)
    if cmd is None:
        return None
    return KernelRequest(cmd.signature, cmd.impls or ops.get(cmd.signature.op).impls)


def _commands(items: Iterable[tuple[str, Any]], errors: list[str],
              max_elements: int | None = DEFAULT_MAX_ELEMENTS, tsv: bool = False) -> list[KernelRequest]:
    out = []
    for where, text in items:
        if not isinstance(text, str):
            errors.append(f"{where}: a command must be a string, got {text!r}")
            continue
        try:
            req = parse_command(text, max_elements, tsv=tsv)
        except SignatureError as e:
            errors.append(f"{where}: {e}")
            continue
        if req is not None:
            out.append(req)
    return out


def parse_commands(lines: str | Iterable[str], path: str | os.PathLike = "<commands>", *,
                   tsv: bool = False) -> list[KernelRequest]:
    """MIOpen driver commands, one per line (``#`` comments, blank lines
    skipped; with ``tsv``, arguments separated by tabs) -> requests, unmerged,
    in line order.  Raises ``ManifestError`` listing every bad line as
    ``path:LINE: message``."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    errors: list[str] = []
    reqs = _commands(((f"{path}:{n}", line) for n, line in enumerate(lines, 1)), errors, tsv=tsv)
    if errors:
        raise ManifestError(errors)
    return reqs


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
    bad_max = max_elements_problem(max_elements)
    if bad_max:
        problems.append(bad_max)
        max_elements = None
    errors += [f"{where}: {p}" for p in problems]
    override = _override_problems(path, targets, version, catalogue=catalogue)
    errors += override
    if problems or override:
        return None, max_elements
    assert name is not None  # a missing name is one of the problems
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
        reqs, problems = entry_requests(entry, max_elements)
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
        requests = parse_commands(text, path, tsv=Path(path).suffix.lower() == ".tsv")
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
    """Read a ``.toml``, ``.txt`` or ``.tsv`` manifest; raises ``ManifestError``.
    ``targets``, ``version`` and ``catalogue`` as in ``parse_toml``."""
    spath = str(path)
    suffix = Path(spath).suffix.lower()
    if suffix not in (".toml", *COMMAND_SUFFIXES):
        raise ManifestError([f"{spath}: unknown manifest type {suffix or '(no suffix)'!r}: "
                             "use .toml, or .txt / .tsv for driver command lines"])
    try:
        text = Path(spath).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError([f"{spath}: cannot read: {e}"]) from None
    if suffix == ".toml":
        return parse_toml(text, spath, targets=targets, version=version, catalogue=catalogue)
    return _parse_txt(text, spath, targets, version, catalogue)
