"""``boo-build info|verify|diff``: look inside bundles.

Light: imports only the loader's archive reader and typed index (stdlib +
zstandard, ``loader/archive.py``, ``loader/format.py``), never
torch, iree or doit. Exit status: 0 fine, 1 a problem found (``verify``: a
checksum mismatch; ``diff``: the bundles differ, as diff(1)), 2 the bundle
cannot be read.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any, Mapping, TextIO

from .loader.archive import Archive, read_archive, sha256_hex
from .loader.errors import BundleFormatError
from .loader.format import INDEX_NAME, BundleIndex
from .records import compared_seconds

EXIT_OK, EXIT_PROBLEM, EXIT_UNREADABLE = 0, 1, 2


def _open(path, err: TextIO) -> Archive | None:
    try:
        return read_archive(Path(path))
    except BundleFormatError as e:
        print(f"boo-build: {e}", file=err)
        return None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _short(text: str, n: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


# ------------------------------------------------------------------------ info
def cmd_info(path, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    a = _open(path, err)
    if a is None:
        return EXIT_UNREADABLE
    ix = a.bundle_index
    p = out.write
    p(f"{ix.name} {ix.version}  ({a.path})\n")
    p(f"  format {ix.format} v{ix.format_version}, {_size(a.compressed_size)} compressed, "
      f"{_size(a.size)} unpacked, {len(a.members)} members\n")
    versions = _versions(ix.provenance)
    if versions:
        p("  provenance: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "\n")
    counts = ix.counts()
    p("  targets:\n")
    for t, d in sorted(ix.targets.items()):
        c = counts[t]
        p(f"    {t:14s} {d.driver:10s} {d.arch:10s} available {c['available']}, "
          f"unavailable {c['unavailable']}\n")
        p(f"      flags: {' '.join(d.flags)}\n")
    p(f"  kernels ({len(ix.kernels)}):\n")
    eager = None  # bench.csv's torch-eager medians, read when a kernel lists candidates
    for key, k in sorted(ix.kernels.items()):
        p(f"    {key}\n")
        for t, te in sorted(k.targets.items()):
            if te.is_available:
                m = te.selected_impl
                extra = f" (+{len(te.impls) - 1} more)" if len(te.impls) > 1 else ""
                bench = _bench_value(m.benchmark)
                btxt = f", {bench[1]} {bench[0]:.4g}" if bench else ""
                mode = f" @{te.mode}" if te.mode else ""
                p(f"      {t:14s} {te.selected}{mode}{extra}  {_size(m.size)}{btxt}"
                  + (f"  [{_short(te.reason, 50)}]" if te.reason else "") + "\n")
            else:
                p(f"      {t:14s} UNAVAILABLE: {_short(te.reason or '')}\n")
            if te.candidates:
                eager = _eager_medians(a) if eager is None else eager
                for line in candidate_lines(te.candidates, eager.get((key, t))):
                    p(f"        {line}\n")
            if te.prefer_eager:
                p(f"        torch tensors run torch eager: {_short(str(te.prefer_eager.get('reason', '')), 90)}\n")
            elif te.extra.get("eager_rejected"):
                p(f"        torch tensors run the kernel: {_short(str(te.extra['eager_rejected']), 90)}\n")
    if ix.csv:
        p(f"  benchmark table: {ix.csv}\n")
    return EXIT_OK


def _eager_medians(a: Archive) -> dict[tuple[str, str], float]:
    """(kernel key, target) -> torch eager's median in seconds, from the bundle's
    bench.csv (``eager_median_us``; the build's benchmark table), where it has one."""
    name = a.bundle_index.csv
    raw = a.members.get(name) if name else None
    out = {}
    if raw:
        for row in csv.DictReader(io.StringIO(raw.decode("utf-8", "replace"))):
            try:
                out[(row["key"], row["target"])] = float(row["eager_median_us"]) * 1e-6
            except (KeyError, TypeError, ValueError):
                continue
    return out


def candidate_lines(candidates: Mapping[str, Mapping[str, Any]], eager_s: float | None) -> list[str]:
    """``info``'s lines for a target entry's candidates: the winner with its
    speed-up over torch eager (where bench.csv has eager's time), then every
    candidate tried, fastest first, with its time (its mean per call, as the
    selection compares; the median, else the best sample, in records without) and why it lost."""
    def time_of(c, median: bool = False) -> float | None:
        v = c.get("median_s") if median else compared_seconds(c)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None

    def us(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e6:.1f} us"

    won = [(n, c) for n, c in sorted(candidates.items()) if c.get("status") == "selected"]
    lines = []
    if won:
        name, c = won[0]
        t = time_of(c, median=True)  # bench.csv has eager's median
        speed = (f", {eager_s / t:.2f}x torch eager ({us(eager_s)})" if t and eager_s
                 else ", no torch-eager time in bench.csv" if t else "")
        lines.append(f"winner {name}: median {us(t)}{speed}")
    basis = "mean per call" if any(c.get("mean_s") is not None for c in candidates.values()) else "median"
    lines.append(f"candidates ({len(candidates)}), {basis}:")
    order = sorted(candidates.items(), key=lambda p: (time_of(p[1]) is None, time_of(p[1]) or 0.0, p[0]))
    for name, c in order:
        status, why = str(c.get("status", "?")), _short(c.get("reason") or "", 60)
        lines.append(f"  {name:24s} {us(time_of(c)):>11s}  "
                     + (why if why.startswith(status) else f"{status}: {why}" if why else status))
    return lines


def _versions(prov: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The tool versions of a provenance record (older bundles: its string fields)."""
    prov = prov or {}
    v = prov.get("versions")
    return v if isinstance(v, Mapping) else {k: x for k, x in prov.items() if isinstance(x, str)}


# ---------------------------------------------------------------------- verify
def cmd_verify(path, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Check every member's sha256 against the index; non-zero on any mismatch."""
    out, err = out or sys.stdout, err or sys.stderr
    a = _open(path, err)
    if a is None:
        return EXIT_UNREADABLE
    checked, bad = 0, []
    ix = a.bundle_index
    referenced = {INDEX_NAME} | ({ix.csv} if ix.csv else set())
    for *_, m in sorted(ix.impl_records(), key=lambda r: r[:3]):
        referenced.add(m.member)
        checked += 1
        actual = sha256_hex(a.members[m.member])
        if actual != m.sha256:
            bad.append((m.member, m.sha256, actual))
    for member, want, got in bad:
        print(f"MISMATCH {member}: sha256 {got}, index says {want}", file=err)
    extra = sorted(set(a.members) - referenced)
    for m in extra:
        print(f"warning: member {m} is not named by the index", file=err)
    if bad:
        print(f"{a.path}: {len(bad)} of {checked} kernel members FAILED verification", file=out)
        return EXIT_PROBLEM
    print(f"{a.path}: OK, {checked} kernel members verified (sha256)", file=out)
    return EXIT_OK


# ------------------------------------------------------------------------ diff
_BENCH_KEYS = ("median_us", "median_ms", "median_s", "median", "p50_us", "p50", "mean_us", "mean_ms", "mean_s",
               "mean", "min_us", "min")


def _bench_value(b: Any) -> tuple[float, str] | None:
    """(value, field) of a benchmark record's central time, whatever its schema."""
    if not isinstance(b, Mapping):
        return None
    for key in _BENCH_KEYS:
        v = b.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), key
    for key, v in sorted(b.items()):
        if ("median" in key or "mean" in key) and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), key
    return None


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
        a, b = old.targets.get(t), new.targets.get(t)
        if a is None:
            res["meta"].append(f"target {t} added")
        elif b is None:
            res["meta"].append(f"target {t} removed")
        elif a.flags != b.flags:
            res["meta"].append(f"target {t} flags: {' '.join(a.flags)} -> {' '.join(b.flags)}")
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
                res["changed"].append(f"{where}: {a.status.value} -> {b.status.value} ({_short(why, 60)})")
                continue
            if not a.is_available:
                continue
            if (a.selected, a.mode) != (b.selected, b.mode):
                res["changed"].append(f"{where}: selection {a.selected}{'@' + a.mode if a.mode else ''} -> "
                                      f"{b.selected}{'@' + b.mode if b.mode else ''}"
                                      + (f" ({_short(b.reason, 60)})" if b.reason else ""))
            if (a.prefer_eager is None) != (b.prefer_eager is None):
                res["changed"].append(f"{where}: torch tensors now run "
                                      + ("torch eager" if b.prefer_eager else "the kernel"))
            for impl in sorted(set(a.impls) & set(b.impls)):
                ma, mb = a.impls[impl], b.impls[impl]
                if ma.sha256 != mb.sha256:
                    res["changed"].append(f"{where}: {impl} vmfb changed (sha256 {ma.sha256[:12]} -> "
                                          f"{mb.sha256[:12]}, {ma.size} -> {mb.size} bytes)")
            ba, bb = _bench_value(a.selected_impl.benchmark), _bench_value(b.selected_impl.benchmark)
            if ba and bb and ba[1] == bb[1] and ba[0] > 0:
                rel = bb[0] / ba[0] - 1
                if abs(rel) >= bench_threshold:
                    tag = "slower" if rel > 0 else "faster"
                    res["bench"].append(f"{where}: {bb[1]} {ba[0]:.4g} -> {bb[0]:.4g} ({rel:+.1%}, {tag})")
            elif bool(ba) != bool(bb):
                res["bench"].append(f"{where}: benchmark {'added' if bb else 'removed'}")
    return res


def _recorded(index: BundleIndex) -> dict[str, str]:
    """member -> the sha256 the index records for it (the kernel members)."""
    return {m.member: m.sha256 for *_, m in index.impl_records()}


def diff_members(old: Archive, new: Archive, index_differs: bool) -> list[str]:
    """Members added, removed or with other bytes (bench.csv, a vmfb the index
    does not vouch for), less what the index diff already says: a kernel
    member whose recorded sha256 changed, and bundle.json when ``index_differs``."""
    ro, rn = _recorded(old.bundle_index), _recorded(new.bundle_index)
    res = []
    for name in sorted(set(old.members) | set(new.members)):
        a, b = old.members.get(name), new.members.get(name)
        if a is None:
            res.append(f"+ {name} ({_size(len(b))})")
        elif b is None:
            res.append(f"- {name} ({_size(len(a))})")
        elif a != b and not (name == INDEX_NAME and index_differs) \
                and not (name in ro and name in rn and ro[name] != rn[name]):
            ha, hb = sha256_hex(a), sha256_hex(b)
            # bundle.json alone: fields the index diff does not show (a timing under the threshold, a reason)
            res.append(f"  {name} changed (sha256 {ha[:12]} -> {hb[:12]}, {len(a)} -> {len(b)} bytes)")
    return res


def cmd_diff(old, new, *, out: TextIO | None = None, err: TextIO | None = None,
             bench_threshold: float = 0.05) -> int:
    """Kernels added, removed, changed (sha256, status or selection), benchmark
    changes of at least ``bench_threshold``, members added, removed or changed
    (``diff_members``) and, failing all these, whether the archive files differ
    at all; exit 0 same, 1 different, 2 unreadable."""
    out, err = out or sys.stdout, err or sys.stderr
    a, b = _open(old, err), _open(new, err)
    if a is None or b is None:
        return EXIT_UNREADABLE
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


__all__ = ["candidate_lines", "cmd_info", "cmd_verify", "cmd_diff", "diff_indexes", "diff_members", "EXIT_OK",
           "EXIT_PROBLEM", "EXIT_UNREADABLE"]
