"""Bundle writer: kernels, their checksums and build records -> one ``.tar.zst``.

Light on purpose (stdlib, zstandard, ``boo_build.signature``/``targets``): the
CLI's ``info``/``verify``/``diff`` and the tests import it without the build
stack.

Layout of ``<name>-<version>.tar.zst`` (format 5, ``loader/split_format.py``:
a tar archive whose every member is a zstd frame of its own, recording its
content size and a checksum):

* ``bundle.json``, always the first member: the header (where the rest lies);
* ``kernels/<target>/<module key>[+<variant>].vmfb``, one per packed module
  (an implementation, or a compile variant of one: ``candidates``);
* ``bench.csv``, when given;
* ``records.json``, the index (schema below); ``routes/<target>.json``, what
  the loader reads to run a target's kernels.

The file is reproducible: the same inputs give the same bytes (members sorted,
mtime 0, uid/gid 0, empty user/group names, mode 0644, a fixed zstd level, no
timestamps in the JSON, canonical JSON with sorted keys).

The index is ``loader/format.py``'s ``BundleIndex`` (its docstring has the
schema and the rule for changing it); this module fills it in.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any, Mapping

import zstandard

from ..bundle_names import name_problem, version_problem
from ..candidates import Candidate, module_file
from ..errors import PackError
from ..files import write_atomic
from ..loader.archive import read_archive, sha256_hex
from ..loader.format import (  # one definition of the format, shared with the loader
    CSV_NAME,
    INDEX_NAME,
    SPLIT_FORMAT_VERSION,
    BundleIndex,
    ImplRecord,
    KernelRecord,
    Status,
    TargetRecord,
    TargetSpec,
    format_version_for,
)
from ..loader.split_format import RECORDS_NAME, BundleHeader, Frame, Part, route_json, routes_name
from ..loader.versions import iree_release
from ..ops.base import IMPLS
from ..signature import KernelSignature, ModuleId
from ..targets import Target

ZSTD_LEVEL = 12
SUFFIX = ".tar.zst"

# iree-base-runtime releases known to load the modules of an iree-compile
# release: (major, minor) -> (oldest, newest tested). The one place this is
# written down; the bundle carries it and open_bundle checks it. How each
# release was tested and what the others do: docs/supported-versions.md
# (tests/test_runtime_versions.py keeps the oldest and the one below it
# checked). A compiler not listed: its own release only.
RUNTIME_RANGE = {(3, 13): ("3.12.0", "3.13.0")}
_COMPILER_VERSION = re.compile(r"IREE compiler version (\S+)")



# --------------------------------------------------------------------- records
def member_path(target: str, module_key: str) -> str:
    """``module_key``: a module key, ``+<variant>`` for a compile variant's module."""
    return f"kernels/{target}/{module_key}.vmfb"


def _module(sig: KernelSignature, name: str) -> tuple[ModuleId, str]:
    """A module name (``<impl>[+<variant>]``) -> (its ModuleId, its file stem)."""
    c = Candidate.parse(name)
    if c.mode:
        raise ValueError(f"{name!r} names a mode: a module name is <impl>[+<variant>]")
    mid = ModuleId(sig, c.impl)
    return mid, module_file(mid.key, c.variant)


def _known_module(sig: KernelSignature, name: str, where: str) -> tuple[ModuleId, str]:
    """``_module``, with a PackError saying ``where`` for a name that is not a module."""
    try:
        return _module(sig, name)
    except ValueError:
        raise PackError(f"{where}: unknown implementation {name!r} (one of {', '.join(IMPLS)}, "
                        "+<variant> allowed)") from None


def bundle_filename(name: str | None, version: str | None) -> str:
    return f"{name}-{version}{SUFFIX}"


def runtime_requirements(compiler: str | None) -> dict[str, str] | None:
    """The index's ``iree_runtime`` field for modules built by ``compiler``:
    ``iree-compile --version`` text (``Toolchain.detect``'s, as the build
    report records it) or a bare version. None when there is no version in it
    (the field is then left out, and open_bundle checks nothing)."""
    m = _COMPILER_VERSION.search(compiler or "")
    version = m.group(1) if m else (compiler or "").strip()
    rel = iree_release(version)
    if rel is None:
        return None
    oldest, newest = RUNTIME_RANGE.get(rel[:2], (".".join(map(str, rel)),) * 2)
    return {"compiler": version, "min": oldest, "max_tested": newest}


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, fixed separators, trailing newline.
    The index's encoding since format version 1 (UTF-8, not ASCII escapes; no
    NaN): changing it changes every bundle's bytes."""
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()


# ---------------------------------------------------------------------- writer
def packed_impl(vmfbs: dict[str, bytes], target: str, sig: KernelSignature, module: str, vmfb: bytes | Path, *,
                validation: Mapping[str, Any] | None = None,
                benchmark: Mapping[str, Any] | None = None,
                traffic: Mapping[str, Any] | None = None, tuning: Mapping[str, str] | None = None) -> ImplRecord:
    """The index record of module ``module`` (``<impl>[+<variant>]``) of ``sig``
    packed for ``target``, its vmfb (bytes, or a file to read) added to
    ``vmfbs`` (member path -> bytes) under its member path. ``tuning``: a tuned
    variant's configuration per edited dispatch (its compile record's), kept as the
    entry's ``tuning`` field (absent for any other module: their bytes as before)."""
    where = f"kernel {sig.key} target {target} impl {module}"
    mid, stem = _known_module(sig, module, where)
    if isinstance(vmfb, (str, Path)):
        try:
            data, what = Path(vmfb).read_bytes(), f"vmfb {vmfb}"
        except OSError as e:
            raise PackError(f"{where}: cannot read vmfb: {e}") from None
    else:
        data, what = bytes(vmfb), "the vmfb"
    if not data:
        raise PackError(f"{where}: {what} is empty")
    member = member_path(target, stem)
    vmfbs[member] = data
    return ImplRecord(member=member, function=mid.func_name, sha256=sha256_hex(data), size=len(data),
                      validation=validation, benchmark=benchmark, traffic=traffic,
                      extra={"tuning": dict(tuning)} if tuning else {})


def kernel_record(sig: KernelSignature, targets: Mapping[str, TargetRecord]) -> KernelRecord:
    """A kernel's index record: its entry per target, and the MLIR function of
    every module named in them (packed or rejected)."""
    functions: dict[str, str] = {}
    for tname, te in targets.items():
        for module in list(te.impls or ()) + list(te.rejected or ()):
            functions[module] = _known_module(sig, module, f"kernel {sig.key} target {tname}")[0].func_name
    return KernelRecord(sig, {t: targets[t] for t in sorted(targets)}, dict(sorted(functions.items())))


def _check_kernel(k: KernelRecord, target_names: set[str], vmfbs: Mapping[str, bytes]) -> None:
    for tname, te in k.targets.items():
        where = f"kernel {k.key} target {tname}"
        if tname not in target_names:
            raise PackError(f"{where}: target not in the bundle's targets ({', '.join(sorted(target_names))})")
        for impl in list(te.impls or ()) + list(te.rejected or ()):
            _known_module(k.signature, impl, where)
        if te.is_available:
            if te.selected not in (te.impls or {}):
                raise PackError(f"{where}: selected implementation {te.selected!r} is not among its impls "
                                f"({', '.join(sorted(te.impls or ())) or 'none'})")
        elif te.impls:
            raise PackError(f"{where}: unavailable but has impls; set selected or drop them")
        elif not te.reason:
            raise PackError(f"{where}: unavailable without a reason")
        for impl, m in (te.impls or {}).items():
            data = vmfbs.get(m.member)
            if data is None or sha256_hex(data) != m.sha256 or len(data) != m.size:
                raise PackError(f"{where} impl {impl}: member {m.member} is "
                                + ("not given" if data is None else "not the vmfb its record describes")
                                + " (make the record with pack.packed_impl)")


def build_index(*, name: str, version: str, targets: list[Target], kernels: list[KernelRecord],
                vmfbs: Mapping[str, bytes], provenance: Mapping[str, Any], csv_bytes: bytes | None,
                compiler: str | None = None) -> tuple[BundleIndex, dict[str, bytes]]:
    """The index and the vmfb members it refers to (member path -> bytes; of
    ``vmfbs``, those the kernels' records name). ``compiler`` (``iree-compile
    --version`` text) adds the ``iree_runtime`` field."""
    # the manifest's rules (bundle_names), checked again for callers that skip it
    problem = name_problem(name) or version_problem(version)
    if problem:
        raise PackError(problem)
    tmap: dict[str, Target] = {}
    for t in targets:
        if t.name in tmap and tmap[t.name] != t:
            raise PackError(f"target {t.name!r} given twice with different definitions")
        tmap[t.name] = t
    seen: dict[str, KernelRecord] = {}
    for k in kernels:
        if k.key in seen and seen[k.key] != k:
            raise PackError(f"kernel {k.key} given twice with different entries")
        _check_kernel(k, set(tmap), vmfbs)
        seen[k.key] = k
    members = {m.member: vmfbs[m.member] for k in seen.values() for te in k.targets.values()
               for m in (te.impls or {}).values()}
    index = BundleIndex(
        format_version=format_version_for(k.signature for k in kernels),
        targets={n: TargetSpec(t.driver, t.arch, t.flags) for n, t in sorted(tmap.items())},
        kernels={key: seen[key] for key in sorted(seen)}, name=name, version=version, provenance=dict(provenance),
        csv=CSV_NAME if csv_bytes is not None else None, iree_runtime=runtime_requirements(compiler))
    return index, members


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """A deterministic tar of ``members`` in the given order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tf:
        for name, data in members:
            tf.addfile(_tarinfo(name, len(data)), io.BytesIO(data))
    return buf.getvalue()


def compress(data: bytes, level: int = ZSTD_LEVEL) -> bytes:
    return zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True,
                                    threads=0).compress(data)


def pack_bundle(out_path: Path, *, name: str, version: str, targets: list[Target], kernels: list[KernelRecord],
                vmfbs: Mapping[str, bytes], provenance: Mapping[str, Any], csv_bytes: bytes | None = None,
                level: int = ZSTD_LEVEL, compiler: str | None = None) -> Path:
    """Write the bundle and return its path.

    ``out_path`` is a folder (the file is ``<name>-<version>.tar.zst`` in it)
    or a path ending in ``.tar.zst``. Written atomically (temporary name in
    the same folder, then renamed). ``kernels``: the index's kernel records,
    their implementations made with ``packed_impl``, which added each vmfb to
    ``vmfbs``. ``compiler``: the ``iree-compile --version`` text of the
    compiler that built the vmfbs (``build_index``).
    """
    index, members = build_index(name=name, version=version, targets=targets, kernels=kernels, vmfbs=vmfbs,
                                 provenance=provenance, csv_bytes=csv_bytes, compiler=compiler)
    return write_bundle(out_path, index, members, csv_bytes, level)


def write_bundle(out_path: Path, index: BundleIndex, vmfbs: Mapping[str, bytes],
                 csv_bytes: bytes | None = None, level: int = ZSTD_LEVEL) -> Path:
    """Write an index and its vmfb members (member path -> bytes) as a bundle,
    atomically, to ``out_path`` (a folder or a ``.tar.zst`` path, as in
    ``pack_bundle``); return its path. ``index``: a ``BundleIndex`` (or its JSON),
    written as format 5 whatever it was read as."""
    if not isinstance(index, BundleIndex):
        index = BundleIndex.from_json(index)
    if index.format_version < SPLIT_FORMAT_VERSION:
        index = dataclasses.replace(index, format_version=SPLIT_FORMAT_VERSION)
    blob = split_bytes(index, vmfbs, csv_bytes, level)
    out_path = Path(out_path)
    path = out_path if out_path.name.endswith(SUFFIX) else out_path / bundle_filename(index.name, index.version)
    write_atomic(path, blob)
    return path


def tar_member(name: str, data: bytes) -> bytes:
    """One member's tar bytes (its headers, its data, padded to a block), as ``tar_bytes`` writes it."""
    return (_tarinfo(name, len(data)).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape") + data
            + bytes(-len(data) % tarfile.BLOCKSIZE))


# A target's modules share zstd frames of at most this many bytes (decompressed): a module's
# first load decompresses its frame (about a millisecond), and the file keeps most of what
# compressing similar modules together saves (the default manifest's: 3.0 MB, against 2.3 MB
# in one frame and 5.1 MB in a frame per module)
MODULE_FRAME = 1 << 20


def _target_of(member: str) -> str:
    return member.split("/")[1]  # kernels/<target>/<module>.vmfb


class FrameWriter:
    """A format-5 bundle's frames (``loader/split_format.py``), a member at a time:
    ``member`` adds one; ``finish`` adds the records, each target's routes (which
    say where the modules lie, ``at``) and the tar's end, and puts the header first."""

    def __init__(self, level: int = ZSTD_LEVEL):
        self._zc = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True, threads=0)
        self._frames: list[bytes] = []
        self.at: dict[str, Frame] = {}  # where each member's frame lies
        self._pos = self._unpacked = 0

    def add(self, name: str, chunk: bytes) -> None:
        """A frame of tar bytes ``chunk`` (member ``name``'s)."""
        self.frame([(name, chunk)])

    def frame(self, chunks: list[tuple[str, bytes]]) -> None:
        """One frame of members' tar bytes, each (name, its tar bytes), in order."""
        data = b"".join(c for _, c in chunks)
        z = self._zc.compress(data)
        at = 0
        for name, c in chunks:
            self.at[name] = Frame(self._pos, len(z), len(data), at)
            at += len(c)
        self._frames.append(z)
        self._pos, self._unpacked = self._pos + len(z), self._unpacked + len(data)

    def member(self, name: str, data: bytes) -> None:
        self.add(name, tar_member(name, data))

    def modules(self, vmfbs: Mapping[str, bytes]) -> None:
        """The modules, sorted, a target's in frames of at most ``MODULE_FRAME`` bytes (a
        larger module alone)."""
        group: list[tuple[str, bytes]] = []
        for name, data in sorted(vmfbs.items()):
            chunk = tar_member(name, data)
            if group and (_target_of(group[0][0]) != _target_of(name)
                          or sum(len(c) for _, c in group) + len(chunk) > MODULE_FRAME):
                self.frame(group)
                group = []
            group.append((name, chunk))
        if group:
            self.frame(group)

    def finish(self, index: BundleIndex, records: bytes) -> bytes:
        """The bundle's bytes: ``records`` (``index``'s JSON) and the routes added, the header first."""
        self.member(RECORDS_NAME, records)
        routes = {}
        available = {t: c[Status.AVAILABLE.value] for t, c in index.counts().items()}
        for t in sorted(index.targets):
            data = canonical_json(route_json(index, t, self.at))
            self.member(routes_name(t), data)
            routes[t] = Part(routes_name(t), self.at[routes_name(t)], sha256_hex(data), len(data), available[t])
        self.add("", bytes(2 * tarfile.BLOCKSIZE))  # the tar's end
        header = BundleHeader(index.format_version, index.targets, available, index.name, index.version, index.csv,
                              index.iree_runtime,
                              Part(RECORDS_NAME, self.at[RECORDS_NAME], sha256_hex(records), len(records)),
                              routes, self._pos, self._unpacked)
        return self._zc.compress(tar_member(INDEX_NAME, canonical_json(header.to_json()))) + b"".join(self._frames)


def split_bytes(index: BundleIndex, vmfbs: Mapping[str, bytes], csv_bytes: bytes | None = None,
                level: int = ZSTD_LEVEL) -> bytes:
    """A format-5 bundle's bytes (``loader/split_format.py``): the header first, then
    the modules (``FrameWriter.modules``), ``bench.csv``, the records, each target's
    routes, each a zstd frame, and the tar's end."""
    w = FrameWriter(level)
    w.modules(vmfbs)
    if csv_bytes is not None:
        w.member(CSV_NAME, bytes(csv_bytes))
    return w.finish(index, canonical_json(index.to_json()))


# ------------------------------------------------------- from a build report
def provenance_from_report(report: Mapping[str, Any]) -> dict[str, Any]:
    """Versions (boo-build, iree-base-compiler, iree-turbine, torch, ...) and
    each target's flags, from a build report."""
    tool = dict(report.get("toolchain", {}))
    compiler = tool.pop("compiler", None)
    return {
        "versions": tool,
        "iree_compile": compiler,
        "manifest": Path(str(report.get("manifest", ""))).name,
        "benchmarks": report.get("benchmarks"),
        "targets": {n: {"driver": t.get("driver"), "flags": list(t.get("flags", ()))}
                    for n, t in sorted(report.get("targets", {}).items())},
    }


def entries_from_report(report: Mapping[str, Any], root: Path
                        ) -> tuple[list[Target], list[KernelRecord], dict[str, bytes]]:
    """Targets, kernel records and vmfb members of a build report
    (``report.build_report``) and the decisions of its build folder ``root``
    (each kernel's select record, ``stages/select.py``); vmfbs are read from
    ``root/vmfb/<target>/<module key>.vmfb``. Where the selection was measured
    only the selected implementation is packed; where not (no device), every
    compiled one is. The rest are listed in ``rejected`` with why
    (``selection.target_entry`` writes the entry)."""
    from ..layout import Layout
    from ..reasons import Kind, Reason
    from ..targets import catalogue
    from .select import SelectRecord
    from .selection import target_entry

    cat = catalogue()
    root = Path(root)
    lay = Layout(root.parent, root.name)
    targets = []
    for name, t in sorted(report["targets"].items()):
        base = cat.get(name)
        targets.append(Target(name=name, driver=t.get("driver") or (base.driver if base else "local-task"),
                              flags=tuple(t.get("flags") or (base.flags if base else ())),
                              arch=base.arch if base else name))
    kernels: list[KernelRecord] = []
    vmfbs: dict[str, bytes] = {}
    for k in report["kernels"]:
        sig = KernelSignature.from_json(k["signature"])
        tentries: dict[str, TargetRecord] = {}
        for tname, te in k["targets"].items():
            rec = SelectRecord.read(lay.select(tname, sig.key))
            if rec is None:
                raise PackError(f"kernel {sig.key} target {tname}: no select record at {lay.select(tname, sig.key)} "
                                "(rebuild: boo-build build)")
            decision = rec.decision
            rejected = dict(decision.rejected)
            impls = {}
            if decision.module is not None:
                sel, why = decision.module, decision.selection.reason
                recs = te.get("impls") or {}
                # Unmeasured (no device here): ship every implementation that
                # compiled, so a later `boo-build bench` on that device can choose.
                keep = [sel] if decision.selection.measured else [
                    i for i, r in recs.items()
                    if i == sel or (i not in rejected and ((r or {}).get("compile") or {}).get("status") == "ok")]
                impls = {i: packed_impl(vmfbs, tname, sig, i, root / "vmfb" / tname / f"{_module(sig, i)[1]}.vmfb",
                                        validation=(recs.get(i) or {}).get("validation"),
                                        benchmark=(recs.get(i) or {}).get("bench"),
                                        traffic=((recs.get(i) or {}).get("traffic") or {}).get("traffic"),
                                        tuning=((recs.get(i) or {}).get("compile") or {}).get("tuning"))
                         for i in sorted(keep)}
                for impl in recs:
                    if impl not in keep and impl not in rejected:
                        rejected[impl] = Reason(Kind.NOT_SELECTED, f"not selected: {why}" if why else "not selected")
            tentries[tname] = target_entry(decision, impls, rejected)
        kernels.append(kernel_record(sig, tentries))
    return targets, kernels, vmfbs


def pack_from_report(report_path: Path, root: Path, bundle_path: Path, *, csv_path: Path | None = None,
                     level: int = ZSTD_LEVEL) -> Path:
    """Pack the bundle a build report describes (the graph's pack task)."""
    report = json.loads(Path(report_path).read_text())
    targets, kernels, vmfbs = entries_from_report(report, Path(root))
    csv = Path(csv_path).read_bytes() if csv_path is not None and Path(csv_path).exists() else None
    b = report["bundle"]
    return pack_bundle(Path(bundle_path), name=b["name"], version=b["version"], targets=targets,
                       kernels=kernels, vmfbs=vmfbs, provenance=provenance_from_report(report), csv_bytes=csv, level=level,
                       compiler=(report.get("toolchain") or {}).get("compiler"))


# ---------------------------------------------------------------------- reader
def read_index(path: Path | str, **kw: Any) -> dict[str, Any]:
    """The checked ``bundle.json`` of a bundle (``read_archive`` raises
    ``BundleFormatError`` for anything it cannot read)."""
    return read_archive(path, **kw).index


__all__ = ["RUNTIME_RANGE", "ZSTD_LEVEL", "build_index", "bundle_filename", "canonical_json", "compress", "entries_from_report",
           "kernel_record", "member_path", "pack_bundle", "pack_from_report", "packed_impl", "provenance_from_report", "read_index",
           "runtime_requirements", "split_bytes", "tar_bytes", "tar_member", "write_bundle", "FrameWriter", "MODULE_FRAME"]
