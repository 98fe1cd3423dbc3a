"""Recorded calls -> the TOML manifest that builds their kernels.

Pure Python (no torch): it speaks the manifest's own vocabulary
(``KernelSignature``, its keys, ``shapes.dims_text``) and checks its text
with the manifest reader, so what it writes is what ``boo-build build`` takes.

Entries: the recorded calls are grouped by kernel family (op, normalized
shape, or group norm's groups with its channels and spatial dims, dtype,
affine form, eps, mask). With ``dynamic="auto"`` a family recorded at two or
more input shapes gets one dynamic entry, its leading dims named (``["batch",
"seq", 768]``: every size hits, other ranks too, the names being distinct;
group norm's ``["batch", 320, 64, 64]``: its batch only), plus static entries for its ``static`` most-called shapes
(static kernels are faster, the backward ones about 2x: docs/manifest.md);
a family recorded at one shape stays static. ``"always"`` treats every family
as a multi-shape one, ``"never"`` writes every recorded shape as a static
entry. Families that share an entry's other fields share the entry: their
masks become its ``masks`` list. A norm recorded fused with the add before it (the fused
residual form, ``KernelSignature.residual``) has an entry of its own, ``residual = true``
(it builds the fused kernels and the plain backward of the sum), and its plain forward
is written too, recorded at no call: what ``replace_norms`` and the compile backend with
``fuse_adds=False`` call.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .. import ops
from ..bundle_names import name_problem, version_problem
from ..errors import SignatureError, UsageError
from ..files import write_atomic
from ..manifest.reader import parse_toml
from ..shapes import dims_text
from ..signature import KernelSignature
from ..targets import catalogue

__all__ = ["DEFAULT_TARGETS", "DYNAMIC_MODES", "MAX_STATIC", "Entry", "manifest", "plan", "table", "write"]

DYNAMIC_MODES = ("auto", "always", "never")
MAX_STATIC = 4  # static entries beside a dynamic one, at most (the most-called shapes)
# The default manifest's targets (manifests/default.toml; a test keeps them equal):
# a traced manifest builds for the same devices unless told otherwise.
DEFAULT_TARGETS = ("cpu", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")
_LEAD_NAMES = ("batch", "seq")


def lead_names(rank: int) -> tuple[str, ...]:
    """Names of ``rank`` leading dims: ``batch``, ``seq``, then ``dim2``, ``dim3``..."""
    return (_LEAD_NAMES + tuple(f"dim{i}" for i in range(2, rank)))[:rank]


@dataclass(frozen=True)
class Entry:
    """One ``[[kernels]]`` table: the signatures of ``masks`` at ``input_shape``."""

    op: str
    input_shape: tuple[int | str, ...]
    normalized_shape: tuple[int, ...]
    dtype: str
    eps: float
    affine: bool
    bias: bool
    stats_dtype: str
    masks: tuple[int, ...]
    calls: tuple[tuple[int, int], ...]  # (mask, recorded calls at this shape); 0 for a dynamic entry
    recorded: tuple[tuple[tuple[int, ...], int], ...] = ()  # a dynamic entry's recorded shapes and calls
    groups: int | None = None  # group norm's channel groups (its normalized_shape is ())
    weight_offset: float = 0.0  # RMS norm's (Gemma's: 1.0)
    residual: bool = False  # the fused residual form (x + residual, then the norm)

    @property
    def is_dynamic(self) -> bool:
        return any(isinstance(d, str) for d in self.input_shape)

    def signatures(self) -> tuple[KernelSignature, ...]:
        return tuple(KernelSignature(self.op, self.input_shape, self.normalized_shape, self.dtype, m, eps=self.eps,
                                     affine=self.affine, bias=self.bias, stats_dtype=self.stats_dtype,
                                     groups=self.groups, weight_offset=self.weight_offset, residual=self.residual)
                     for m in self.masks)

    def toml(self) -> str:
        lines = ["[[kernels]]"]
        if self.is_dynamic:
            seen = ", ".join(f"{list(s)} x{n}" for s, n in self.recorded[:6])
            more = f" and {len(self.recorded) - 6} more" if len(self.recorded) > 6 else ""
            size = "any batch size" if self.groups is not None else "any input size"  # group norm: the batch only
            lines.append(f"# {size}; recorded at {len(self.recorded)} shapes: {seen}{more}")
        else:
            total = sum(n for _, n in self.calls)
            lines.append(f"# {total} recorded call{'s' if total != 1 else ''}: " + ", ".join(f"mask {m} x{n}" for m, n in self.calls))
        lines += [f"op = {_value(self.op)}", f"input_shape = {_value(list(self.input_shape))}"]
        if self.normalized_shape:  # group norm has none: its groups instead
            lines.append(f"normalized_shape = {_value(list(self.normalized_shape))}")
        if self.groups is not None:
            lines.append(f"groups = {_value(self.groups)}")
        lines.append(f"dtype = {_value(self.dtype)}")
        if self.stats_dtype != ops.get(self.op).default_stats_dtype(self.dtype):
            lines.append(f"stats_dtype = {_value(self.stats_dtype)}")
        lines.append(f"eps = {_value(self.eps)}")
        if self.weight_offset:
            lines.append(f"weight_offset = {_value(self.weight_offset)}")
        lines.append(f"affine = {_value(self.affine)}")
        if ops.get(self.op).has_bias:
            lines.append(f"bias = {_value(self.bias)}")
        if self.residual:
            lines.append("residual = true")
        lines.append(f"masks = {_value(list(self.masks))}")
        return "\n".join(lines) + "\n"


def _value(v: Any) -> str:
    """A TOML value: strings are JSON's (ASCII names here), floats Python's repr (exact, valid TOML)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))


def _tail(op: str, input_shape: tuple, normalized_shape: tuple[int, ...], groups: int | None) -> tuple:
    """The dims after the leading ones (``Op.lead_dims``): the normalized shape,
    or group norm's channels and spatial dims. A dynamic entry names only the
    leading dims, so the tail is part of a kernel family."""
    return tuple(input_shape[ops.get(op).lead_dims(input_shape, normalized_shape, groups):])


def _family(sig: KernelSignature) -> tuple:
    return (sig.op, sig.normalized_shape, sig.groups, _tail(sig.op, sig.input_shape, sig.normalized_shape, sig.groups),
            sig.dtype, sig.eps, sig.weight_offset, sig.affine, sig.bias, sig.stats_dtype, sig.residual, sig.mask)


def _dynamic_shape(shapes: Sequence[tuple[int, ...]], tail: tuple[int, ...]) -> tuple[int | str, ...] | None:
    rank = max(len(s) - len(tail) for s in shapes)
    return lead_names(rank) + tail if rank >= 1 else None


def plan(calls: Iterable[Any], dynamic: str = "auto", static: int = MAX_STATIC) -> tuple[Entry, ...]:
    """The entries of the recorded ``calls`` (``RecordedCall``s: a static
    ``signature`` and its ``calls``), sorted."""
    if dynamic not in DYNAMIC_MODES:
        raise UsageError(f"dynamic must be one of {', '.join(DYNAMIC_MODES)}, got {dynamic!r}")
    if isinstance(static, bool) or not isinstance(static, int) or static < 0:
        raise UsageError(f"static must be a count of static entries (0 or more), got {static!r}")
    families: dict[tuple, dict[tuple[int, ...], int]] = defaultdict(dict)
    for c in calls:
        sig = c.signature
        if sig.is_dynamic:
            raise UsageError(f"{sig.key}: recorded calls have static input shapes, this one is dynamic")
        shape = tuple(int(d) for d in sig.input_shape)
        shapes = families[_family(sig)]
        shapes[shape] = shapes.get(shape, 0) + c.calls
        if sig.residual and sig.is_forward:  # its plain forward: the unfused calls' kernel
            families[_family(sig.replace(residual=False))].setdefault(shape, 0)
    # (op, shape, ns, groups, dtype, eps, offset, affine, bias, stats, residual) -> {mask: calls}, and a dynamic
    # entry's recorded shapes
    grouped: dict[tuple, dict[int, int]] = defaultdict(dict)
    recorded: dict[tuple, dict[tuple[int, ...], int]] = defaultdict(dict)
    for fam, shapes in families.items():
        op, ns, groups, tail, dtype, eps, off, affine, bias, stats, res, mask = fam
        ranked = sorted(shapes.items(), key=lambda kv: (-kv[1], kv[0]))
        many = dynamic == "always" or (dynamic == "auto" and len(ranked) >= 2)
        dyn = _dynamic_shape([s for s, _ in ranked], tail) if many else None
        if dyn is not None:
            try:
                KernelSignature(op, dyn, ns, dtype, mask, eps=eps, affine=affine, bias=bias, stats_dtype=stats,
                                groups=groups, weight_offset=off, residual=res)
            except SignatureError:  # above the dynamic bounds: static entries only
                dyn = None
        keep = ranked[:static] if dyn is not None else ranked
        if dyn is not None:
            key = (op, dyn, ns, groups, dtype, eps, off, affine, bias, stats, res)
            grouped[key][mask] = 0
            for s, n in ranked:
                recorded[key][s] = recorded[key].get(s, 0) + n
        for s, n in keep:
            grouped[(op, s, ns, groups, dtype, eps, off, affine, bias, stats, res)][mask] = n
    entries = []
    for key, by_mask in grouped.items():
        op, input_shape, ns, groups, dtype, eps, off, affine, bias, stats, res = key
        rec = sorted(recorded.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        entries.append(Entry(op, input_shape, ns, dtype, eps, affine, bias, stats, tuple(sorted(by_mask)),
                             tuple(sorted(by_mask.items())), tuple(rec), groups, off, res))
    return tuple(sorted(entries, key=_order))


def _order(e: Entry) -> tuple:
    tail = _tail(e.op, e.input_shape, e.normalized_shape, e.groups)  # ints only: they sort
    return (e.op, e.normalized_shape, e.groups or 0, len(tail), tail, e.dtype, e.eps, e.weight_offset, e.affine, e.bias,
            e.residual, not e.is_dynamic, dims_text(e.input_shape))


# ---------------------------------------------------------------- merging
def _any_size_key(sig: KernelSignature) -> str | None:
    """For a dynamic signature whose leading dims are distinct names (it serves
    every leading shape, whatever the names), one key for all such ones (group
    norm: its one leading dim, the batch, named; the rest as they are)."""
    lead = sig.input_shape[:sig.lead]
    if not sig.is_dynamic or not lead or not all(isinstance(d, str) for d in lead) or len(set(lead)) != len(lead):
        return None
    return sig.replace(input_shape=("rows",) + sig.input_shape[sig.lead:], max_elements=None).key


def _covered(have: set[str], dynamic: Sequence[KernelSignature], sig: KernelSignature) -> bool:
    """Whether the old manifest serves ``sig``'s calls: the same signature, a
    dynamic one taking any leading shape, or (for a static one) a dynamic one it binds to."""
    if sig.key in have:
        return True
    any_size = _any_size_key(sig)
    if any_size is not None:
        return any_size in have
    if sig.is_dynamic:  # plan's dynamic entries name every leading dim: not reached; no shape to bind
        return False
    for d in dynamic:
        try:
            if d.bind(sig.input_shape).key == sig.key:  # type: ignore[arg-type]  # static: ints
                return True
        except SignatureError:
            continue
    return False


def _merge(old_path: Path, entries: Sequence[Entry], source: str) -> tuple[str, int]:
    """The old manifest's text (comments and all) with the entries it lacks
    appended: a signature it already serves (a TOML entry, a dtype or mask
    list, a MIOpen command line, a dynamic entry that takes the shape) is not
    written again. Returns (text, signatures added)."""
    if old_path.suffix.lower() != ".toml":
        raise UsageError(f"--merge {old_path}: only a TOML manifest can be merged into")
    try:
        old = old_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--merge {old_path}: cannot read it: {e}") from None
    m = parse_toml(old, old_path)
    have = {s.key for s in m.signatures} | {k for s in m.signatures if (k := _any_size_key(s))}
    dynamic = [s for s in m.signatures if s.is_dynamic]
    added: list[Entry] = []
    for entry in entries:
        masks = tuple(sig.mask for sig in entry.signatures() if not _covered(have, dynamic, sig))
        if masks:
            added.append(dataclasses.replace(entry, masks=masks, calls=tuple(c for c in entry.calls if c[0] in masks)))
    if not added:
        return old, 0
    note = f"# Added by boo-build trace from {_one_line(source)}" if source else "# Added by boo-build trace"
    body = "\n".join(e.toml() for e in added)
    return old.rstrip("\n") + f"\n\n{note}: what the manifest above did not cover.\n\n{body}", \
        sum(len(e.masks) for e in added)


# ---------------------------------------------------------------- the text
def _one_line(text: str) -> str:
    """Text for a comment line: a script's arguments may hold line breaks, which would end the comment."""
    return " ".join(text.split())


def _header(entries: Sequence[Entry], n_calls: int, n_sigs: int, dynamic: str, static: int, source: str) -> str:
    kernels = sum(len(e.masks) for e in entries)
    source = _one_line(source)
    statics = (f" and static entries for its {static} most-called shape{'s' if static != 1 else ''}" if static
               else "")
    rule = {"auto": f"a kernel family recorded at two or more input shapes has a dynamic entry\n# (any size){statics};"
                    " one recorded at one shape stays static.",
            "always": f"every kernel family has a dynamic entry (any size){statics}.",
            "never": "every recorded input shape is a static entry: another size has no kernel."}[dynamic]
    lines = [f"# Recorded by boo-build trace (boo_build.trace){' from ' + source if source else ''}:",
             f"# {n_calls} norm calls of {n_sigs} kernel signatures -> {len(entries)} entries, {kernels} kernels.",
             f'# dynamic = "{dynamic}": {rule}',
             "# Each entry's comment says how many recorded calls it serves. Build: boo-build build THIS.toml"]
    return "\n".join(lines) + "\n"


def manifest(calls: Sequence[Any], *, name: str = "traced-norms", version: str = "0.1.0",
             targets: Iterable[str] | None = None, dynamic: str = "auto", static: int = MAX_STATIC,
             merge: str | os.PathLike | None = None, source: str = "") -> str:
    """The TOML manifest of recorded ``calls``, checked with the manifest
    reader and the target catalogue (``ManifestError`` otherwise). ``targets``
    default to the default manifest's (``DEFAULT_TARGETS``). ``merge``: an
    existing TOML manifest to add to, keeping its text, comments and
    ``[bundle]`` table (``name``, ``version`` and ``targets`` are then its)."""
    calls = tuple(calls)
    if not calls:
        raise UsageError("no norm calls recorded: no manifest to write")
    entries = plan(calls, dynamic, static)
    if merge is not None:
        text, _ = _merge(Path(merge), entries, source)
        parse_toml(text, merge, catalogue=catalogue())
        return text
    targets = tuple(DEFAULT_TARGETS if targets is None else targets)
    problems = [p for p in (name_problem(name), version_problem(version)) if p]
    if problems:
        raise UsageError("; ".join(problems))
    n_calls = sum(c.calls for c in calls)
    text = (_header(entries, n_calls, len(calls), dynamic, static, source)
            + f"\n[bundle]\nname = {_value(name)}\nversion = {_value(version)}\ntargets = {_value(list(targets))}\n\n"
            + "\n".join(e.toml() for e in entries))
    parse_toml(text, f"<manifest of {name}>", catalogue=catalogue())  # ManifestError: a bad target name
    return text


def write(path: str | Path, text: str) -> str:
    """``text`` to ``path`` atomically (a temporary file renamed over it): a
    failed write leaves no partial file. ``UsageError`` saying why it cannot."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"cannot write the manifest to {p}: it is a folder")
    try:
        write_atomic(p, text.encode())
    except OSError as e:
        raise UsageError(f"cannot write the manifest to {p}: {e.strerror or e}") from None
    return text


def table(calls: Sequence[Any], unrecorded: Sequence[Any] = (), function_calls: Sequence[Any] = ()) -> str:
    """The recorded signatures with their call counts and where they came from; then
    what was not recorded, and the calls made through functions (``replace_norms``
    cannot swap them: how to serve them)."""
    rows = [(str(c.calls), c.signature.key, ", ".join(c.sources)) for c in calls]
    width = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(("calls", "kernel signature"))]
    lines = [f"{'calls':>{width[0]}}  {'kernel signature':<{width[1]}}  from"]
    lines += [f"{a:>{width[0]}}  {b:<{width[1]}}  {c}" for a, b, c in rows]
    for u in unrecorded:
        lines.append(f"not recorded ({u.calls} calls) {u.source}: {u.reason}")
    lines.append(f"{sum(c.calls for c in calls)} calls of {len(calls)} kernel signatures")
    lines += [f"not swappable {f}" for f in function_calls]
    return "\n".join(lines)
