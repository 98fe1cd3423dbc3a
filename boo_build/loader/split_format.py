"""Format version 5: a bundle split so that opening it reads what it runs.

Still a tar in zstd (``zstd -dc B.tar.zst | tar t`` lists it), but in zstd
frames of their own, each with its content size and checksum, so that a reader
decompresses a member without the others: the header, the records and each
target's routes a frame each; a target's modules in frames of at most about
1 MiB each (``pack.MODULE_FRAME``), a larger module alone. The members, in this order:

* ``bundle.json``, the first frame: the **header** (below), what ``open_bundle``
  reads first: the bundle's name, version, runtime range and targets, and where
  the other parts lie, with their sha256;
* ``kernels/<target>/<module>.vmfb``: the modules, as in versions 1-4;
* ``bench.csv``, when there is one;
* ``records.json``: the **records**, the whole index as ``bundle.json`` held it
  in versions 1-4 (``format.py``'s ``BundleIndex``, ``format_version`` 5):
  validation, benchmarks, candidates, traffic, provenance; read only by
  ``info``, ``verify``, ``diff``, ``measure``, ``publish``, the report and
  ``Bundle.info()``;
* ``routes/<target>.json``, one per target: the **routes**, what the loader needs
  to find and run a kernel on that target, nothing else (below);
* the tar's end (two zero blocks), a frame of its own.

Header::

    {"format": "boo-bundle", "format_version": 5, "name": str, "version": str,
     "csv": "bench.csv" | null, "iree_runtime": {...},                 # optional
     "targets": {target: {"driver", "arch", "flags"}},
     "records": PART, "routes": {target: PART + {"available": n}},
     "frames": {"bytes": int, "unpacked": int}}
    PART = {"member": str, "frame": FRAME, "sha256": str, "size": int}
    FRAME = [offset, compressed bytes, decompressed bytes, member's start]

A ``FRAME`` counts its offset from the end of the header's own frame (so that
the header can name it), and says where in the frame's decompressed bytes the
member's tar header starts (0 but for a module after others in its frame); ``frames`` is the size of everything after that frame,
compressed (the file ends there) and decompressed (``max_size`` bounds it).

Routes (``routes/<target>.json``), one entry per kernel key of the bundle::

    {"target": str, "kernels": {key: null                              # not built for the target
                                | {"unavailable": reason}
                                | {"impl", "member", "function", "sha256", "size", "frame": FRAME,
                                   "mode": driver?, "eager": true | [[rows, eager faster], ...]?,
                                   "compiled": false | true | [[rows, torch.compile not beaten], ...]
                                               | {"untimed": why}?}}}

``compiled`` is the records' ``vs_compiled`` (the compile backend's verdict against
torch.compile; absent where the records have none: the backend decides on ``eager``).

The routes are a function of the records (``route_json``; the frames aside):
``read_archive`` checks that they are, and that the header agrees with the
records. Pure Python (stdlib and ``format.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

from .errors import BundleFormatError
from .format import (
    FORMAT,
    INDEX_NAME,
    RUNTIME_FIELD,
    SPLIT_FORMAT_VERSION,
    BundleIndex,
    Status,
    TargetSpec,
    check_format,
)

RECORDS_NAME = "records.json"
ROUTES_DIR = "routes/"


def routes_name(target: str) -> str:
    """The member holding ``target``'s routes."""
    return f"{ROUTES_DIR}{target}.json"


class Frame(NamedTuple):
    """Where a member lies: its zstd frame's offset from the end of the header's frame,
    the frame's compressed and decompressed size, and where in the decompressed bytes
    the member's tar header starts (``at``: 0 but for a module that shares a frame)."""

    offset: int
    zsize: int
    usize: int
    at: int = 0

    @classmethod
    def from_json(cls, v: Any, where: str) -> "Frame":
        if (not isinstance(v, list) or len(v) != 4 or not all(type(n) is int and n >= 0 for n in v)
                or v[1] == 0 or v[3] >= v[2]):
            raise BundleFormatError(f"{where}: frame must be [offset, compressed size, size, member's start], "
                                    f"got {v!r}")
        return cls(*v)


@dataclass(frozen=True)
class Part:
    """A member the header names (the records, a target's routes): where it lies, its sha256 and size."""

    member: str
    frame: Frame
    sha256: str
    size: int
    available: int | None = None  # a target's routes: its available kernels

    @classmethod
    def from_json(cls, d: Any, where: str) -> "Part":
        if not isinstance(d, Mapping):
            raise BundleFormatError(f"{where} must be an object, got {d!r}")
        member, sha, size, avail = d.get("member"), d.get("sha256"), d.get("size"), d.get("available")
        if not isinstance(member, str) or not isinstance(sha, str) or type(size) is not int:
            raise BundleFormatError(f"{where} must name a member, its sha256 and size, got {dict(d)!r}")
        if avail is not None and type(avail) is not int:
            raise BundleFormatError(f"{where}: available must be a count, got {avail!r}")
        return cls(member, Frame.from_json(d.get("frame"), where), sha, size, avail)

    def to_json(self) -> dict[str, Any]:
        out = {"member": self.member, "frame": list(self.frame), "sha256": self.sha256, "size": self.size}
        if self.available is not None:
            out["available"] = self.available
        return out


@dataclass(frozen=True)
class BundleHeader:
    """What opening a bundle reads first: a version-5 ``bundle.json``, or the
    same facts of an older bundle's whole index (``of_index``: no parts)."""

    format_version: int
    targets: Mapping[str, TargetSpec]
    available: Mapping[str, int]  # available kernels per target
    name: str | None = None
    version: str | None = None
    csv: str | None = None
    iree_runtime: Mapping[str, Any] | None = None  # checked by versions.check_runtime
    records: Part | None = None
    routes: Mapping[str, Part] = field(default_factory=dict)
    frames_bytes: int = 0
    frames_unpacked: int = 0

    @classmethod
    def of_index(cls, ix: BundleIndex) -> "BundleHeader":
        """An older bundle's header facts, from its whole (typed) index."""
        return cls(ix.format_version, ix.targets, {t: c[Status.AVAILABLE.value] for t, c in ix.counts().items()},
                   ix.name, ix.version, ix.csv, ix.iree_runtime)

    @classmethod
    def from_json(cls, d: Any, path: str) -> "BundleHeader":
        """A version-5 header, checked (``BundleFormatError`` naming the problem)."""
        version = check_format(d, path)
        if version < SPLIT_FORMAT_VERSION:
            raise BundleFormatError(f"{path}: format version {version} has no header")
        where = f"{path}: {INDEX_NAME}"
        try:
            targets = {n: TargetSpec.from_json(t) for n, t in d["targets"].items()}
            routes = {n: Part.from_json(p, f"{where} routes of {n}") for n, p in d["routes"].items()}
            frames = d["frames"]
            nbytes, unpacked = frames["bytes"], frames["unpacked"]
        except (KeyError, TypeError, AttributeError) as e:
            raise BundleFormatError(f"{where}: malformed header: {type(e).__name__}: {e}") from None
        if type(nbytes) is not int or type(unpacked) is not int or nbytes < 0 or unpacked < 0:
            raise BundleFormatError(f"{where}: frames must hold byte counts, got {frames!r}")
        if set(routes) != set(targets):
            raise BundleFormatError(f"{where}: routes for {sorted(routes)}, targets {sorted(targets)}")
        for t, p in routes.items():
            if p.member != routes_name(t) or p.available is None:
                raise BundleFormatError(f"{where}: routes of {t} must be {routes_name(t)} with a count available")
        records = Part.from_json(d.get("records"), f"{where} records")
        if records.member != RECORDS_NAME:
            raise BundleFormatError(f"{where}: records must be {RECORDS_NAME}, got {records.member!r}")
        for k, kind in (("name", str), ("version", str), ("csv", str)):
            if d.get(k) is not None and not isinstance(d[k], kind):
                raise BundleFormatError(f"{where}: {k} must be a string, got {d[k]!r}")
        return cls(version, targets, {t: p.available or 0 for t, p in routes.items()}, d.get("name"),
                   d.get("version"), d.get("csv"), d.get(RUNTIME_FIELD), records, routes, nbytes, unpacked)

    def to_json(self) -> dict[str, Any]:
        assert self.records is not None  # a version-5 header
        out: dict[str, Any] = {"format": FORMAT, "format_version": self.format_version, "name": self.name,
                               "version": self.version, "csv": self.csv,
                               "targets": {n: t.to_json() for n, t in self.targets.items()},
                               "records": self.records.to_json(),
                               "routes": {n: p.to_json() for n, p in self.routes.items()},
                               "frames": {"bytes": self.frames_bytes, "unpacked": self.frames_unpacked}}
        if self.iree_runtime is not None:
            out[RUNTIME_FIELD] = dict(self.iree_runtime)
        return out

    def disagreement(self, ix: BundleIndex) -> str:
        """What of the header the records say otherwise ("" where they agree)."""
        for what, mine, theirs in (("name", self.name, ix.name), ("version", self.version, ix.version),
                                   ("format_version", self.format_version, ix.format_version),
                                   ("csv", self.csv, ix.csv),
                                   (RUNTIME_FIELD, _plain(self.iree_runtime), _plain(ix.iree_runtime)),
                                   ("targets", {n: t.to_json() for n, t in self.targets.items()},
                                    {n: t.to_json() for n, t in ix.targets.items()})):
            if mine != theirs:
                return f"the header's {what} is {mine!r}, the records' {theirs!r}"
        return ""


def _plain(v: Any) -> Any:
    return None if v is None else dict(v)


# ---------------------------------------------------------------------- routes
def route_json(index: BundleIndex, target: str, frames: Mapping[str, Frame] | None = None) -> dict[str, Any]:
    """``target``'s routes, from the records (``frames``: where each member lies; None
    for an older bundle, read whole: no frames)."""
    kernels: dict[str, Any] = {}
    for key, k in index.kernels.items():
        te = k.targets.get(target)
        if te is None:
            kernels[key] = None
        elif not te.is_available:
            kernels[key] = {"unavailable": str(te.reason or "")}
        else:
            m = te.selected_impl
            assert m is not None and te.selected is not None  # available
            e: dict[str, Any] = {"impl": te.selected, "member": m.member, "function": m.function,
                                 "sha256": m.sha256, "size": m.size}
            if frames is not None:
                e["frame"] = list(frames[m.member])
            if te.mode:
                e["mode"] = te.mode
            pref = te.prefer_eager
            if pref is not None:
                e["eager"] = True if pref.by_rows is None else [[r, won] for r, won in pref.by_rows]
            vs = te.vs_compiled
            if vs is not None:
                e["compiled"] = ({"untimed": vs.reason} if not vs.timed else vs.graph if vs.by_rows is None
                                 else [[r, g] for r, g in vs.by_rows])
            kernels[key] = e
    return {"target": target, "kernels": kernels}


_ROUTE_FIELDS = (("impl", str), ("member", str), ("function", str), ("sha256", str), ("size", int))


def check_routes(doc: Any, target: str, where: str, framed: bool = True) -> Mapping[str, Any]:
    """A target's routes, checked: their kernels (key -> entry or None).
    ``framed``: each available entry must say where its module lies."""
    if not isinstance(doc, Mapping) or doc.get("target") != target or not isinstance(doc.get("kernels"), Mapping):
        raise BundleFormatError(f"{where}: not the routes of target {target}")
    kernels = doc["kernels"]
    for key, e in kernels.items():
        if e is None:
            continue
        if not isinstance(e, Mapping):
            raise BundleFormatError(f"{where}: kernel {key}: an entry must be an object or null, got {e!r}")
        if "unavailable" in e:
            if not isinstance(e["unavailable"], str):
                raise BundleFormatError(f"{where}: kernel {key}: unavailable must be a reason, got {e!r}")
            continue
        for f, kind in _ROUTE_FIELDS:
            if type(e.get(f)) is not kind:
                raise BundleFormatError(f"{where}: kernel {key}: {f} must be a {kind.__name__}, got {e.get(f)!r}")
        if framed:
            Frame.from_json(e.get("frame"), f"{where}: kernel {key}")
        mode, eager, compiled = e.get("mode"), e.get("eager"), e.get("compiled")
        if mode is not None and not isinstance(mode, str):
            raise BundleFormatError(f"{where}: kernel {key}: mode must be a driver name, got {mode!r}")
        if eager is not None and eager is not True and not _rows_of_bools(eager):
            raise BundleFormatError(f"{where}: kernel {key}: eager must be true or [[rows, bool], ...], got {eager!r}")
        if compiled is not None and not isinstance(compiled, bool) and not _rows_of_bools(compiled) and not (
                isinstance(compiled, Mapping) and isinstance(compiled.get("untimed"), str)):
            raise BundleFormatError(f"{where}: kernel {key}: compiled must be true, false, [[rows, bool], ...] or "
                                    f"{{\"untimed\": why}}, got {compiled!r}")
    return kernels


def _rows_of_bools(v: Any) -> bool:
    """Whether ``v`` is ``[[rows, bool], ...]`` (a per-size decision)."""
    return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and type(p[0]) is int
                                       and isinstance(p[1], bool) for p in v)


__all__ = ["BundleHeader", "Frame", "Part", "RECORDS_NAME", "ROUTES_DIR", "check_routes", "route_json",
           "routes_name"]
