"""``boo-build diff OLD NEW``: kernels, selections, benchmarks and members that differ between two bundles.

Light: imports only the loader's archive reader and typed index (stdlib and
zstandard), never torch, iree or doit. Exit status 0 the same, 1 different (as diff(1)); an unreadable bundle,
or one over ``--max-size``, raises ``BundleFormatError`` (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, TextIO

from ..compared import COMPILED_NAME, VsEager
from ..loader.archive import DEFAULT_MAX_SIZE, Archive, sha256_hex
from ..loader.format import INDEX_NAME, BundleIndex
from ..loader.split_format import RECORDS_NAME
from .text import add_max_size, bench_value, read_bundle, short, size_text

__all__ = ["add_arguments", "cmd_diff", "diff_indexes", "diff_members", "run"]
EXIT_OK, EXIT_PROBLEM = 0, 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", type=Path, metavar="OLD_BUNDLE", help="the bundle compared against")
    p.add_argument("new", type=Path, metavar="NEW_BUNDLE", help="the bundle whose changes are listed")
    add_max_size(p)


def run(ns: argparse.Namespace) -> int:
    return cmd_diff(ns.old, ns.new, max_size=ns.max_size)


def _typed(index: BundleIndex | Mapping[str, Any]) -> BundleIndex:
    return index if isinstance(index, BundleIndex) else BundleIndex.from_json(index)


def _provenance_versions(prov: Mapping[str, Any] | None) -> Mapping[str, Any]:
    prov = prov or {}
    v = prov.get("versions", prov)
    return v if isinstance(v, Mapping) else {}


def diff_indexes(old: BundleIndex | Mapping[str, Any], new: BundleIndex | Mapping[str, Any],
                 bench_threshold: float = 0.05) -> dict[str, list[str]]:
    """Differences between two indexes (typed, or their JSON): added, removed,
    changed kernels; benchmark changes; metadata."""
    old, new = _typed(old), _typed(new)
    res: dict[str, list[str]] = {"meta": [], "added": [], "removed": [], "changed": [], "bench": []}
    for field in ("name", "version", "format_version"):
        if getattr(old, field) != getattr(new, field):
            res["meta"].append(f"{field}: {getattr(old, field)} -> {getattr(new, field)}")
    for t in sorted(set(old.targets) | set(new.targets)):
        sa, sb = old.targets.get(t), new.targets.get(t)
        if sa is None:
            res["meta"].append(f"target {t} added")
        elif sb is None:
            res["meta"].append(f"target {t} removed")
        elif sa.flags != sb.flags:
            res["meta"].append(f"target {t} flags: {' '.join(sa.flags)} -> {' '.join(sb.flags)}")
    vo, vn = _provenance_versions(old.provenance), _provenance_versions(new.provenance)
    for k in sorted(set(vo) | set(vn)):
        if isinstance(vo.get(k), (str, type(None))) and isinstance(vn.get(k), (str, type(None))) \
                and vo.get(k) != vn.get(k):
            res["meta"].append(f"provenance {k}: {vo.get(k)} -> {vn.get(k)}")
    ok, nk = old.kernels, new.kernels
    res["added"] = sorted(set(nk) - set(ok))
    res["removed"] = sorted(set(ok) - set(nk))
    for key in sorted(set(ok) & set(nk)):
        for t in sorted(set(ok[key].targets) | set(nk[key].targets)):
            a, b = ok[key].targets.get(t), nk[key].targets.get(t)
            where = f"{key} on {t}"
            if a is None or b is None:
                res["changed"].append(f"{where}: {'added' if a is None else 'removed'}")
                continue
            if a.status != b.status:
                why = f"selected {b.selected}" if b.is_available else b.reason or ""
                res["changed"].append(f"{where}: {a.status.value} -> {b.status.value} ({short(why, 60)})")
                continue
            if not a.is_available:
                continue
            if (a.selected, a.mode) != (b.selected, b.mode):
                res["changed"].append(f"{where}: selection {a.selected}{'@' + a.mode if a.mode else ''} -> "
                                      f"{b.selected}{'@' + b.mode if b.mode else ''}"
                                      + (f" ({short(b.reason, 60)})" if b.reason else ""))
            if (a.prefer_eager is None) != (b.prefer_eager is None):
                res["changed"].append(f"{where}: torch tensors now run "
                                      + ("torch eager" if b.prefer_eager else "the kernel"))
            assert a.impls is not None and b.impls is not None  # both available
            for impl in sorted(set(a.impls) & set(b.impls)):
                ma, mb = a.impls[impl], b.impls[impl]
                if ma.sha256 != mb.sha256:
                    res["changed"].append(f"{where}: {impl} vmfb changed (sha256 {ma.sha256[:12]} -> "
                                          f"{mb.sha256[:12]}, {ma.size} -> {mb.size} bytes)")
            sel_a, sel_b = a.selected_impl, b.selected_impl
            assert sel_a is not None and sel_b is not None  # both available
            ba, bb = bench_value(sel_a.benchmark), bench_value(sel_b.benchmark)
            if ba and bb and ba[1] == bb[1] and ba[0] > 0:
                rel = bb[0] / ba[0] - 1
                if abs(rel) >= bench_threshold:
                    tag = "slower" if rel > 0 else "faster"
                    res["bench"].append(f"{where}: {bb[1]} {ba[0]:.4g} -> {bb[0]:.4g} ({rel:+.1%}, {tag})")
            elif bool(ba) != bool(bb):
                res["bench"].append(f"{where}: benchmark {'added' if bb else 'removed'}")
            # the compared figure (paired rounds), as info, bench.csv and the page show it
            va, vb = VsEager.from_timing(a.timing), VsEager.from_timing(b.timing)
            if (va is None) != (vb is None) or (va is not None and vb is not None and (
                    va.verdict != vb.verdict or abs(vb.speedup / va.speedup - 1) >= bench_threshold)):
                res["bench"].append(f"{where}: speed-up over torch eager "
                                    f"{va.text() if va is not None else 'not timed in paired rounds'} -> "
                                    f"{vb.text() if vb is not None else 'not timed in paired rounds'}")
            ca, cb = (VsEager.from_timing(x.timing, COMPILED_NAME) for x in (a, b))
            if (ca is None) != (cb is None) or (ca is not None and cb is not None and (
                    ca.verdict != cb.verdict or abs(cb.speedup / ca.speedup - 1) >= bench_threshold)):
                res["bench"].append(f"{where}: speed-up over torch.compile "
                                    f"{ca.text() if ca is not None else VsEager.untimed(a.timing) or 'not timed'} -> "
                                    f"{cb.text() if cb is not None else VsEager.untimed(b.timing) or 'not timed'}")
    return res


def _recorded(index: BundleIndex) -> dict[str, str]:
    """member -> the sha256 the index records for it (the kernel members)."""
    return {m.member: m.sha256 for *_, m in index.impl_records()}


def diff_members(old: Archive, new: Archive, index_differs: bool) -> list[str]:
    """Members added, removed or with other bytes (bench.csv, a vmfb the index
    does not vouch for), less what the index diff already says: a kernel
    member whose recorded sha256 changed, and bundle.json (a format-5 bundle's
    records.json) when ``index_differs``; never a format-5 bundle's header and routes
    (the records and the members' layout: the layout is no difference)."""
    ro, rn = _recorded(old.bundle_index), _recorded(new.bundle_index)
    # a format-5 bundle's index is its records; its header and routes say where the members lie as
    # well: with the same records they differ only in that (read_archive checked them against the records)
    layout = (({INDEX_NAME} | old.parts | new.parts) - {RECORDS_NAME}
              if old.header is not None and new.header is not None else set())
    index_parts = {INDEX_NAME, RECORDS_NAME}
    res = []
    for name in sorted(set(old.members) | set(new.members)):
        a, b = old.members.get(name), new.members.get(name)
        if a is None:
            assert b is not None  # the name is in one of them
            res.append(f"+ {name} ({size_text(len(b))})")
        elif b is None:
            res.append(f"- {name} ({size_text(len(a))})")
        elif a != b and name not in layout and not (name in index_parts and index_differs) \
                and not (name in ro and name in rn and ro[name] != rn[name]):
            ha, hb = sha256_hex(a), sha256_hex(b)
            # bundle.json alone: fields the index diff does not show (a timing under the threshold, a reason)
            res.append(f"  {name} changed (sha256 {ha[:12]} -> {hb[:12]}, {len(a)} -> {len(b)} bytes)")
    return res


def cmd_diff(old, new, *, out: TextIO | None = None,
             bench_threshold: float = 0.05, max_size: int = DEFAULT_MAX_SIZE) -> int:
    """Kernels added, removed, changed (sha256, status or selection), benchmark
    changes of at least ``bench_threshold``, members added, removed or changed
    (``diff_members``) and, failing all these, whether the archive files differ
    at all; exit 0 same, 1 different, 2 unreadable (or over ``max_size``, each)."""
    out = out or sys.stdout
    a, b = read_bundle(old, max_size), read_bundle(new, max_size)  # BundleFormatError: exit 2 (cli.app)
    d = diff_indexes(a.bundle_index, b.bundle_index, bench_threshold)
    p = out.write
    p(f"--- {a.path} ({a.bundle_index.name} {a.bundle_index.version})\n")
    p(f"+++ {b.path} ({b.bundle_index.name} {b.bundle_index.version})\n")
    titles = (("meta", "bundle"), ("added", "kernels added"), ("removed", "kernels removed"),
              ("changed", "kernels changed"), ("bench", f"benchmark changes (>= {bench_threshold:.0%})"))
    for field, title in titles:
        if d[field]:
            p(f"{title} ({len(d[field])}):\n")
            sign = {"added": "+ ", "removed": "- "}.get(field, "  ")
            for line in d[field]:
                p(f"  {sign}{line}\n")
    members = diff_members(a, b, any(d.values()))
    if members:
        p(f"members ({len(members)}):\n")
        for line in members:
            p(f"  {line}\n")
    differs = any(d.values()) or bool(members)
    if not differs and Path(a.path).read_bytes() != Path(b.path).read_bytes():
        # same members, same bytes: the tar headers, member order or compression differ
        p("archives differ in packing only (same members and bytes)\n")
        differs = True
    if not differs:
        p("no differences\n")
    return EXIT_PROBLEM if differs else EXIT_OK
