"""The report page: one self-contained HTML file with charts, from a build
folder (``OUT/<bundle>/``) or from a bundle file alone.

Both sources become one ``PageData`` (plain records) and one renderer draws
it, so a bundle gives the same page as its build for everything the bundle
records; what it does not record (compile times, the devices of the build
machine) is marked "not recorded". Charts are drawn by matplotlib (imported
only when a page is drawn; Agg canvas, SVG inlined), never fetched: the page
needs no network.

The page embeds a digest of the data it shows (``<meta name="boo-report-inputs">``):
the build's ``page`` task is up to date when the digest of the records now
equals the one in the page, so a no-op rebuild reads a few JSON files and
never imports matplotlib.

This module takes paths and records; it does not import ``report`` (which
imports ``tasks``), and imports ``tasks`` only for its layout helpers, lazily.

Optional benchmark-record fields read here (see docs/ARCHITECTURE.md), which
later stages write when they measure them:

* ``row_timings``: ``[{"rows": int, "median_s": float, ...}]``, a dynamic
  kernel's median time at several row counts (also on a torch-eager record);
* ``bytes_moved`` (int, bytes one call reads plus writes) and
  ``peak_bandwidth_Bps`` (float, the device's peak memory bandwidth), and
  optionally ``device_name``: achieved bandwidth ``bytes_moved / median_s``
  as a share of the peak. In a bundle index, a target entry's ``measured``
  (``{"bytes", "device"}``) and ``provenance.measured.<target>.peak_gbs``
  (what ``boo-build measure`` records) fill them in for its implementations.
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import math
import re
import sys
import threading
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .signature import IMPLS, KernelSignature, ModuleId

PAGE_NAME = "report.html"
DIGEST_META = "boo-report-inputs"
AUTO = "auto"  # from_build(bundle=AUTO): use the bundle file beside the folder if it was packed from it

# Optional benchmark-record fields (docs/ARCHITECTURE.md, "Optional benchmark fields").
ROW_TIMINGS = "row_timings"
BYTES_MOVED = "bytes_moved"
PEAK_BANDWIDTH = "peak_bandwidth_Bps"
DEVICE_NAME = "device_name"

NOT_RUN_PREFIX = "default until measured: "
# How selection words a rejected implementation that failed (selection.py, report.py).
BUILD_FAILURES = ("compile failed", "not compiled", "export unavailable")
VALIDATION_FAILURES = ("failed validation", "validation error")


class ReportError(ValueError):
    """A source the page cannot be drawn from; the message says which and what to do."""


# ----------------------------------------------------------------- records
@dataclass(frozen=True)
class Cell:
    """One kernel on one target, as the bundle index records it."""

    status: str  # available | unavailable
    selected: str | None
    reason: str  # why selected, or why unavailable
    rejected: Mapping[str, str]  # impl -> why it is not shipped
    validation: Mapping[str, Any] | None  # the selected implementation's validation record


@dataclass(frozen=True)
class Kernel:
    key: str
    signature: KernelSignature
    cells: Mapping[str, Cell]  # target -> cell


@dataclass(frozen=True)
class Compile:
    module: str
    target: str
    status: str  # ok | failed | unavailable | missing
    seconds: float | None
    error: str


@dataclass(frozen=True)
class Measurement:
    """A benchmark record holding optional fields (row timings, bandwidth)."""

    kernel: str
    target: str
    subject: str  # implementation, or "eager"
    record: Mapping[str, Any]


@dataclass(frozen=True)
class PageData:
    name: str
    version: str
    source: str  # what the page was drawn from, in words
    targets: Mapping[str, Mapping[str, Any]]  # name -> {driver, arch, flags}
    provenance: Mapping[str, Any]
    kernels: tuple[Kernel, ...]
    table: tuple[Mapping[str, str], ...] | None  # bench.csv rows; None: not recorded
    compiles: tuple[Compile, ...] | None  # None: not recorded (a bundle)
    devices: Mapping[str, str] | None  # target -> device or why none; None: not recorded
    bundle: Mapping[str, Any] | None  # {file, size, unpacked, sha256}; None: no bundle
    bundle_note: str  # why there is no bundle
    measurements: tuple[Measurement, ...]


def _cell(status: str, selected: str | None, reason: str, rejected: Mapping[str, str],
          validation: Mapping[str, Any] | None) -> Cell:
    return Cell(status=status, selected=selected, reason=reason or "", rejected=dict(sorted(rejected.items())),
                validation=None if validation is None else dict(validation))


def _extra(rec: Mapping[str, Any] | None) -> bool:
    return isinstance(rec, Mapping) and (bool(rec.get(ROW_TIMINGS)) or
                                         (rec.get(BYTES_MOVED) is not None and rec.get(PEAK_BANDWIDTH) is not None))


def _measured(bench: Mapping[str, Any] | None, measured: Any, peak_gbs: Any) -> dict[str, Any] | None:
    """A benchmark record with the bandwidth fields filled from what ``boo-build
    measure`` writes beside it (``measured.bytes``/``device``, the target's
    ``provenance.measured.peak_gbs``) where the record lacks them."""
    if not isinstance(bench, Mapping):
        return None
    rec = dict(bench)
    if isinstance(measured, Mapping) and measured.get("bytes"):
        rec.setdefault(BYTES_MOVED, measured["bytes"])
        if measured.get("device"):
            rec.setdefault(DEVICE_NAME, measured["device"])
        if _num(peak_gbs):
            rec.setdefault(PEAK_BANDWIDTH, _num(peak_gbs) * 1e9)
    return rec


def kernels_from_index(index: Mapping[str, Any]) -> tuple[tuple[Kernel, ...], tuple[Measurement, ...]]:
    """Kernels (and benchmark records with optional fields) of a bundle index."""
    kernels, meas = [], []
    measured_prov = (index.get("provenance") or {}).get("measured") or {}
    for key in sorted(index["kernels"]):
        k = index["kernels"][key]
        cells = {}
        for t, te in sorted(k["targets"].items()):
            impls = te.get("impls") or {}
            sel = te.get("selected")
            cells[t] = _cell(te["status"], sel, te.get("reason", ""), te.get("rejected") or {},
                             (impls.get(sel) or {}).get("validation") if sel else None)
            peak = (measured_prov.get(t) or {}).get("peak_gbs") if isinstance(measured_prov, Mapping) else None
            for i, m in sorted(impls.items()):
                rec = _measured(m.get("benchmark"), te.get("measured"), peak)
                if _extra(rec):
                    meas.append(Measurement(key, t, i, rec))
        kernels.append(Kernel(key, KernelSignature.from_json(k["signature"]), cells))
    return tuple(kernels), tuple(meas)


def kernels_from_entries(entries) -> tuple[Kernel, ...]:
    """Kernels of ``pack.KernelEntry`` objects (what the pack task would write)."""
    out = []
    for k in sorted(entries, key=lambda e: e.key):
        cells = {}
        for t, te in sorted(k.targets.items()):
            art = te.impls.get(te.selected) if te.selected else None
            cells[t] = _cell(te.status, te.selected, te.reason, te.rejected, art.validation if art else None)
        out.append(Kernel(k.key, k.signature, cells))
    return tuple(out)


def target_order(name: str) -> tuple:
    """Targets in a reading order (cpu, gfx90a, gfx942, gfx1100...): the bundle keeps them sorted by name."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p)


def _parse_csv(data: bytes) -> tuple[dict[str, str], ...]:
    return tuple(dict(r) for r in csv.DictReader(io.StringIO(data.decode())))


def _bundle_info(path: Path) -> dict[str, Any]:
    import zstandard

    data = Path(path).read_bytes()
    try:
        unpacked = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        unpacked = -1
    return {"file": Path(path).name, "size": len(data), "unpacked": unpacked if unpacked >= 0 else None,
            "sha256": hashlib.sha256(data).hexdigest()}


# ----------------------------------------------------------------- sources
def from_bundle(path: Path | str) -> PageData:
    """Page data of a bundle file alone (``BundleFormatError`` if unreadable)."""
    from .loader.bundle import read_archive

    path = Path(path)
    a = read_archive(path)
    ix = a.index
    kernels, meas = kernels_from_index(ix)
    csv_name = ix.get("csv")
    table = _parse_csv(a.members[csv_name]) if csv_name and csv_name in a.members else None
    return PageData(
        name=ix["name"], version=ix["version"], source=f"bundle file {path.name}",
        targets={n: {"driver": t.get("driver"), "arch": t.get("arch"), "flags": list(t.get("flags") or ())}
                 for n, t in sorted(ix["targets"].items(), key=lambda kv: target_order(kv[0]))},
        provenance=ix.get("provenance") or {}, kernels=kernels, table=table, compiles=None, devices=None,
        bundle=_bundle_info(path), bundle_note="", measurements=meas)


def find_build_root(folder: Path) -> Path:
    """The bundle folder (holding build-report.json) in ``folder`` or just under it."""
    folder = Path(folder)
    if (folder / "build-report.json").is_file():
        return folder
    found = sorted(p.parent for p in folder.glob("*/build-report.json"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise ReportError(f"{folder}: no build-report.json here or in a folder under it; "
                          "give a bundle file or a build's output folder (run boo-build build first)")
    raise ReportError(f"{folder} holds several builds ({', '.join(p.name for p in found)}): "
                      f"name one, e.g. {found[0]}")


def from_build(root: Path | str, bundle: Path | str | None = AUTO, bundle_note: str = "") -> PageData:
    """Page data of a build folder ``OUT/<bundle name>/``.

    ``bundle``: the bundle file this build packed; None: none (``bundle_note``
    says why); ``AUTO``: ``OUT/<name>-<version>.tar.zst`` when it was packed
    from these records (its index holds the same kernels), else none.
    """
    from .pack import bundle_filename, entries_from_report, provenance_from_report
    from .tasks import Layout, read_json

    root = Path(root)
    report = read_json(root / "build-report.json")
    if not report or report.get("format") != "boo-build-report":
        raise ReportError(f"{root / 'build-report.json'} is missing or not a build report; "
                          "run boo-build build (or bench) first")
    lay = Layout(root.parent, root.name)
    targets, entries = entries_from_report(report, root)
    kernels = kernels_from_entries(entries)
    name, version = report["bundle"]["name"], report["bundle"]["version"]

    compiles, meas = [], []
    for k in report["kernels"]:
        sig = KernelSignature.from_json(k["signature"])
        for t, te in sorted(k["targets"].items()):
            for impl in k["impls"]:
                mid = ModuleId(sig, impl)
                rec = read_json(lay.compile_record(t, mid)) or {}
                err = (rec.get("error") or rec.get("reason") or "").strip().splitlines()
                compiles.append(Compile(mid.key, t, rec.get("status", "missing"), rec.get("seconds"),
                                        err[0][:300] if err else ""))
                bench = ((te.get("impls") or {}).get(impl) or {}).get("bench")
                if _extra(bench):
                    meas.append(Measurement(k["key"], t, impl, bench))
            if _extra(te.get("eager")):
                meas.append(Measurement(k["key"], t, "eager", te["eager"]))

    devices = {}
    for t, d in sorted(report["targets"].items()):
        dev = d.get("device")
        devices[t] = (f"{dev.get('name') or dev.get('uri')} ({dev.get('driver')}, {dev.get('arch')})"
                      if dev else d.get("device_status") or "no device")

    info = None
    if bundle == AUTO:
        candidate = root.parent / bundle_filename(name, version)
        bundle, bundle_note = None, bundle_note or "no bundle file: the build has not packed one"
        if candidate.is_file():
            try:
                other = from_bundle(candidate)
            except ValueError as e:  # BundleFormatError
                bundle_note = f"{candidate.name} is not readable: {e}"
            else:
                if other.kernels == kernels:
                    info = other.bundle
                else:
                    bundle_note = f"{candidate.name} was packed from other build results than these"
    elif bundle is not None:
        info = _bundle_info(Path(bundle))
    csv_path = lay.csv
    return PageData(
        name=name, version=version, source=f"build folder {root.resolve().name}/",
        targets={t.name: {"driver": t.driver, "arch": t.arch, "flags": list(t.flags)}
                 for t in sorted(targets, key=lambda t: target_order(t.name))},
        provenance=provenance_from_report(report), kernels=kernels,
        table=_parse_csv(csv_path.read_bytes()) if csv_path.is_file() else None,
        compiles=tuple(compiles), devices=devices, bundle=info, bundle_note="" if info else bundle_note,
        measurements=tuple(meas))


# ------------------------------------------------------------ up to date
def digest(data: PageData) -> str:
    """sha256 of what the page shows and of the code that draws it."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(json.dumps(asdict(data), sort_keys=True, default=str).encode())
    return h.hexdigest()


_META_RE = re.compile(rf'<meta name="{DIGEST_META}" content="([0-9a-f]+)"')


def embedded_digest(page: Path) -> str | None:
    try:
        with open(page, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    m = _META_RE.search(head)
    return m.group(1) if m else None


def write_page(data: PageData, out: Path | str) -> bool:
    """Draw ``data`` into ``out`` unless the page there already shows it; True if written."""
    from .compile import write_atomic

    out = Path(out)
    d = digest(data)
    if embedded_digest(out) == d:
        return False
    write_atomic(out, render(data, d).encode())
    return True


def page_current(root: Path | str, bundle: Path | str | None) -> Callable[..., bool]:
    """doit uptodate check of the page task: the page shows the records as they are now."""

    def check(task, values) -> bool:  # noqa: ARG001 (doit's signature)
        try:
            return embedded_digest(Path(root) / PAGE_NAME) == digest(from_build(root, bundle))
        except (OSError, ValueError, KeyError):
            return False

    check.__name__ = f"page_current({Path(root).name})"
    return check


def page_action(root: str, bundle: str | None) -> bool:
    """The build's page task: the page of this build and the bundle it packed."""
    write_page(from_build(root, bundle), Path(root) / PAGE_NAME)
    return True


def cmd_report(source: Path | str, out: Path | str | None = None) -> int:
    """``boo-build report BUNDLE_OR_OUTPUT_DIR [--out FILE]``; exit 0, or 2 when unreadable."""
    from .loader.bundle import BundleFormatError

    source = Path(source)
    try:
        if source.is_dir():
            root = find_build_root(source)
            data = from_build(root)
            out = Path(out) if out else root / PAGE_NAME
        elif source.is_file():
            data = from_bundle(source)
            out = Path(out) if out else source.with_name(source.name.removesuffix(".tar.zst") + ".report.html")
        else:
            raise ReportError(f"{source}: no such bundle file or build folder")
    except (ReportError, BundleFormatError) as e:
        print(f"boo-build: {e}", file=sys.stderr)
        return 2
    write_page(data, out)
    print(out)
    return 0


# ------------------------------------------------------------ page model
def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) or v == math.inf else None


def worst_ratio(validation: Mapping[str, Any] | None) -> float | None:
    """Worst error as a share of its tolerance over every output and case."""
    ratios = [_num(o.get("ratio")) for o in (validation or {}).get("outputs") or ()]
    ratios = [r for r in ratios if r is not None]
    return max(ratios) if ratios else None


def _failure(reason: str) -> bool:
    return reason.startswith(BUILD_FAILURES + VALIDATION_FAILURES)


def impl_failures(data: PageData, kind: str) -> list[tuple[Kernel, str, str, str]]:
    """(kernel, target, implementation, reason) of each implementation that
    failed to build (``kind="build"``) or failed validation (``"validation"``)."""
    marks = BUILD_FAILURES if kind == "build" else VALIDATION_FAILURES
    return [(k, t, impl, why) for k in data.kernels for t, c in k.cells.items()
            for impl, why in c.rejected.items() if why.startswith(marks)]


@dataclass(frozen=True)
class CellState:
    state: str  # passed | failed | not built | not run | unavailable
    ratio: float | None
    text: str  # short, for the chart
    detail: str  # long, for the lists
    other_failed: tuple[str, ...]  # implementations that failed although the kernel is available


def cell_state(cell: Cell) -> CellState:
    failed = tuple(f"{i}: {r}" for i, r in cell.rejected.items() if _failure(r))
    if cell.status == "available":
        v = cell.validation or {}
        if v.get("status") == "passed":
            r = worst_ratio(v)
            text = "passed" if r is None else f"{r:.2g}"
            return CellState("passed", r, text + ("*" if failed else ""), f"{cell.selected} passed"
                             + ("" if r is None else f", worst error {r:.2g} of the tolerance"), failed)
        if v.get("status") in ("failed", "error"):  # shipped although it failed (never selected so here)
            return CellState("failed", worst_ratio(v), "FAILED", f"{cell.selected}: {v.get('reason', '')}", failed)
        why = v.get("reason") or cell.reason.removeprefix(NOT_RUN_PREFIX) or "not run"
        return CellState("not run", None, "not run" + ("*" if failed else ""), why, failed)
    reasons = cell.rejected or {}
    if any(r.startswith(VALIDATION_FAILURES) for r in reasons.values()):
        return CellState("failed", None, "FAILED", cell.reason, failed)
    if reasons and all(r.startswith(BUILD_FAILURES) for r in reasons.values()):
        return CellState("not built", None, "not built", cell.reason, failed)
    return CellState("unavailable", None, "unavailable", cell.reason, failed)


def _f(s: str | None) -> float | None:
    try:
        return float(s) if s not in (None, "") else None
    except ValueError:
        return None


def speedups(data: PageData, target: str) -> list[tuple[str, dict[str, float], str | None]]:
    """(kernel, {impl: eager median / impl median}, selected impl) for one target, fastest first."""
    if data.table is None:
        return []
    cells = {k.key: k.cells.get(target) for k in data.kernels}
    out = []
    for row in data.table:
        if row.get("target") != target:
            continue
        eager = _f(row.get("eager_median_us"))
        vals = {}
        for impl in IMPLS:
            t = _f(row.get(f"{impl}_median_us"))
            if eager and t:
                vals[impl] = eager / t
        if vals:
            cell = cells.get(row["key"])
            out.append((row["key"], vals, cell.selected if cell else None))
    out.sort(key=lambda r: (-max(r[1].values()), r[0]))
    return out


def _why_not_measured(data: PageData, target: str) -> str:
    if data.table is None:
        return "no benchmark table (bench.csv) recorded"
    if str(data.provenance.get("benchmarks", "")).startswith("skipped"):
        return f"benchmarks {data.provenance['benchmarks']}"
    whys = Counter(cell_state(k.cells[target]).detail for k in data.kernels
                   if target in k.cells and cell_state(k.cells[target]).state == "not run")
    if whys:
        return whys.most_common(1)[0][0]
    return "no kernel validated and benchmarked against torch eager"


# ------------------------------------------------------------------ charts
COLORS = {"aten": "#4c72b0", "manual": "#dd8452", "eager": "#555555"}
STATE_COLORS = {"passed": "#9fd99b", "near": "#fdd49e", "failed": "#ef8a8a", "not run": "#e3e3e3",
                "not built": "#fdae6b", "unavailable": "#cfcfcf"}
RC = {"svg.fonttype": "none", "svg.hashsalt": "boo-build", "font.family": "DejaVu Sans", "font.size": 10,
      "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 10, "legend.fontsize": 8,
      "legend.frameon": False}


def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _svg(fig, prefix: str) -> str:
    """The figure as inline SVG: no XML prologue or metadata, ids made unique
    in the page. It keeps its natural size (so every chart's text is the same
    size) and shrinks with the page (CSS max-width, viewBox kept)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>\s*", "", s, flags=re.S)
    s = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m[1]}"', s)
    s = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m[1]})", s)
    s = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}-{m[1]}"', s)
    s = s.replace("<svg ", '<svg role="img" ', 1)
    return s


def _log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 10:
        ticks += [m * 10 ** e for m in (1, 2, 5) if lo <= m * 10 ** e <= hi]
        e += 1
    return ticks


def chart_speedup(rows: Sequence[tuple[str, dict[str, float], str | None]], prefix: str) -> str:
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullLocator

    impls = [i for i in IMPLS if any(i in r[1] for r in rows)]
    per = max(1, len(impls))
    fig = _figure(10.5, 0.9 + len(rows) * (0.19 * per + 0.12))
    ax = fig.add_subplot()
    vals = [v for _, d, _ in rows for v in d.values()]
    lo, hi = min(min(vals) / 1.8, 0.5), max(max(vals) * 1.8, 2.0)
    h = 0.8 / per
    for y, (key, d, sel) in enumerate(rows):
        for j, impl in enumerate(impls):
            if impl not in d:
                continue
            v = d[impl]
            yy = y - 0.4 + h * (j + 0.5)
            ax.barh(yy, v - 1, left=1, height=h * 0.9, color=COLORS.get(impl, "#888"),
                    edgecolor="black" if impl == sel else "none", linewidth=0.8)
            ax.text(v * (1.04 if v >= 1 else 1 / 1.04), yy, f"{v:.2f}\u00d7", va="center",
                    ha="left" if v >= 1 else "right", fontsize=7.5,
                    fontweight="bold" if impl == sel else "normal")
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = _log_ticks(lo, hi)
    ax.set_xticks(ticks, [f"{t:g}\u00d7" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.axvspan(lo, 1, color="#d62728", alpha=0.06, lw=0)
    ax.axvline(1, color="black", lw=1.2)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8, family="DejaVu Sans Mono")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel("speed-up over torch eager (median time; log scale, 1\u00d7 = as fast as eager)")
    handles = [Patch(color=COLORS.get(i, "#888"), label=i) for i in impls]
    handles.append(Patch(facecolor="white", edgecolor="black", label="shipped (selected)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    ax.text(0.003, 1.005, "\u2190 eager faster", transform=ax.transAxes, fontsize=8, color="#a33", va="bottom")
    ax.text(0.997, 1.005, "kernel faster \u2192", transform=ax.transAxes, fontsize=8, color="#333",
            va="bottom", ha="right")
    return _svg(fig, prefix)


def chart_validation(data: PageData, prefix: str) -> str:
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    targets = list(data.targets)
    kernels = data.kernels
    fig = _figure(max(7.0, 4.4 + 1.1 * len(targets)), 1.3 + 0.28 * len(kernels))
    ax = fig.add_subplot()
    img = [[to_rgb("#ffffff")] * len(targets) for _ in kernels]
    for y, k in enumerate(kernels):
        for x, t in enumerate(targets):
            if t not in k.cells:
                ax.text(x, y, "\u2014", ha="center", va="center", fontsize=7.5, color="#888")
                continue
            s = cell_state(k.cells[t])
            key = "near" if s.state == "passed" and s.ratio is not None and s.ratio > 0.5 else s.state
            img[y][x] = to_rgb(STATE_COLORS[key])
            ax.text(x, y, s.text, ha="center", va="center", fontsize=9,
                    color="#7a0000" if s.state == "failed" else "black",
                    fontweight="bold" if s.state == "failed" else "normal")
    ax.imshow(img, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(targets)), targets)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(kernels)), [k.key for k in kernels], fontsize=8, family="DejaVu Sans Mono")
    ax.set_xticks([x - 0.5 for x in range(1, len(targets))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(kernels))], minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="both", length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    handles = [Patch(color=STATE_COLORS["passed"], label="passed (worst error / tolerance)"),
               Patch(color=STATE_COLORS["near"], label="passed, over half the tolerance"),
               Patch(color=STATE_COLORS["failed"], label="failed"),
               Patch(color=STATE_COLORS["not run"], label="not run"),
               Patch(color=STATE_COLORS["not built"], label="not built")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3)
    return _svg(fig, prefix)


def chart_compiles(data: PageData, prefix: str) -> str:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    targets = list(data.targets)
    fig = _figure(10.5, 1.2 + 0.42 * len(targets))
    left, right = fig.subplots(1, 2, sharey=True, width_ratios=[1, 1.6])
    by_t = {t: [c for c in data.compiles or () if c.target == t and c.seconds is not None] for t in targets}
    totals = [sum(c.seconds for c in by_t[t]) for t in targets]
    left.barh(range(len(targets)), totals, color="#4c72b0")
    for y, (t, tot) in enumerate(zip(targets, totals)):
        left.text(tot, y, f" {tot:.1f} s ({len(by_t[t])})", va="center", fontsize=8)
    left.set_xlim(0, max(totals + [1]) * 1.35)
    left.set_yticks(range(len(targets)), targets)
    left.set_ylim(len(targets) - 0.5, -0.5)
    left.set_xlabel("total compile time per target, s (compiles)")
    for y, t in enumerate(targets):
        ok = [c.seconds for c in by_t[t] if c.status == "ok"]
        bad = [c.seconds for c in by_t[t] if c.status != "ok"]
        jitter = [((i * 0.618) % 1 - 0.5) * 0.5 for i in range(len(ok))]
        right.scatter([max(s, 1e-3) for s in ok], [y + j for j in jitter], s=14, color="#4c72b0", alpha=0.7, lw=0)
        if bad:
            right.scatter([max(s, 1e-3) for s in bad], [y] * len(bad), s=30, marker="x", color="#d62728",
                          label="failed" if y == 0 or not right.get_legend_handles_labels()[0] else None)
    right.set_xscale("log")
    right.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    right.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    right.xaxis.set_minor_formatter(NullFormatter())
    right.set_xlabel("each compile, s (log scale; \u00d7 = failed)")
    right.grid(axis="x", color="#dddddd", lw=0.6)
    right.set_axisbelow(True)
    return _svg(fig, prefix)


def chart_rows(groups: Sequence[tuple[str, str, list[Measurement]]], prefix: str) -> str:
    from matplotlib.ticker import FuncFormatter

    n = len(groups)
    cols = min(3, n)
    nrows = math.ceil(n / cols)
    fig = _figure(3.6 * cols, 0.4 + 2.9 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (kernel, target, ms) in zip(axes.flat, groups):
        for m in ms:
            pts = sorted((p["rows"], p["median_s"]) for p in m.record[ROW_TIMINGS]
                         if _num(p.get("rows")) and _num(p.get("median_s")))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] * 1e6 for p in pts], marker="o", ms=3,
                        color=COLORS.get(m.subject, None), label=m.subject,
                        ls="--" if m.subject == "eager" else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_title(f"{kernel}\non {target}", fontsize=7.5, family="DejaVu Sans Mono")
        ax.set_xlabel("rows")
        ax.set_ylabel("median time, \u00b5s")
        ax.grid(color="#e5e5e5", lw=0.6)
        ax.legend()
    return _svg(fig, prefix)


def _bandwidth_rows(data: PageData) -> list[tuple[str, float, float, float]]:
    """(label, share of peak, achieved B/s, peak B/s) for each measurement with bandwidth fields."""
    out = []
    for m in data.measurements:
        r = m.record
        moved, peak, t = _num(r.get(BYTES_MOVED)), _num(r.get(PEAK_BANDWIDTH)), _num(r.get("median_s"))
        if moved and peak and t:
            dev = f" ({r[DEVICE_NAME]})" if r.get(DEVICE_NAME) else ""
            out.append((f"{m.kernel} {m.subject} on {m.target}{dev}", moved / t / peak, moved / t, peak))
    return sorted(out, key=lambda r: -r[1])


def _rate(bps: float) -> str:
    return f"{bps / 1e12:.2f} TB/s" if bps >= 1e12 else f"{bps / 1e9:.1f} GB/s"


def chart_bandwidth(rows: Sequence[tuple[str, float, float, float]], prefix: str) -> str:
    from matplotlib.ticker import FuncFormatter

    fig = _figure(10.5, 1.0 + 0.3 * len(rows))
    ax = fig.add_subplot()
    ax.barh(range(len(rows)), [r[1] * 100 for r in rows], color="#55a868")
    for y, (_, share, got, peak) in enumerate(rows):
        ax.text(share * 100, y, f" {share:.0%}  ({_rate(got)} of {_rate(peak)})", va="center", fontsize=7.5)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7.5, family="DejaVu Sans Mono")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, max(100.0, max(r[1] for r in rows) * 100 * 1.1) * 1.25)
    ax.axvline(100, color="black", lw=1)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}%"))
    ax.set_xlabel("achieved memory bandwidth, share of the device's peak")
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    return _svg(fig, prefix)


# -------------------------------------------------------------------- html
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _size(n: int | None) -> str:
    if n is None:
        return "not recorded"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _figure_html(fig_id: str, svg: str, caption: str) -> str:
    return (f'<figure class="chart" id="{_e(fig_id)}">{svg}'
            f"<figcaption>{caption}</figcaption></figure>")


def _table(head: Sequence[str] | None, rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    """A table of HTML cells (escaped by the caller); ``head`` None: no header row."""
    th = "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}">{th}<tbody>{body}</tbody></table>'


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", s)


CSS = """
:root{--fg:#1d1d1f;--muted:#666;--line:#ddd;--bad:#a40000;--ok:#1a7f37}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
 margin:0 auto;padding:24px 28px 48px;max-width:1180px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 8px;padding-top:8px;border-top:2px solid #222}
h3{font-size:16px;margin:22px 0 6px}
.sub{color:var(--muted);margin:0 0 14px}
code,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:13px}
nav{margin:12px 0 6px;font-size:14px}nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
.stats{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0 0;padding:0;list-style:none}
.stats li{border:1px solid var(--line);border-radius:6px;padding:6px 12px;background:#fafafa}
.stats b{font-size:18px;margin-right:4px}.stats .bad b{color:var(--bad)}.stats .ok b{color:var(--ok)}
figure.chart{margin:8px 0 18px;break-inside:avoid;page-break-inside:avoid}
figure.chart svg{max-width:100%;height:auto;display:block}
figcaption{color:var(--muted);font-size:13px;margin-top:4px}
.note{color:var(--muted);font-style:italic}
.missing{color:var(--muted);border-left:3px solid var(--line);padding:2px 10px}
table{border-collapse:collapse;margin:6px 0 14px;font-size:13px;width:100%}
table.facts td:first-child{width:13em;white-space:nowrap}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
ul.problems li{margin:3px 0}.bad{color:var(--bad)}
.flags{font-size:12px;color:#444;word-break:break-all}
@media print{body{padding:0;max-width:none;font-size:11px}nav{display:none}
 h2{break-before:auto;break-after:avoid}h3{break-after:avoid}table{font-size:10px}a{color:inherit}}
"""


# matplotlib's rcParams are process-wide: pages drawn by parallel page tasks take turns.
_DRAW_LOCK = threading.Lock()


def render(data: PageData, digest_hex: str) -> str:
    """The page as HTML text (draws the charts: imports matplotlib)."""
    import matplotlib

    with _DRAW_LOCK, matplotlib.rc_context(RC):
        body = _body(data)
    from . import __version__

    title = f"{data.name} {data.version}: kernel report"
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f'<meta name="{DIGEST_META}" content="{digest_hex}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style></head>\n<body>\n{body}\n"
        f'<footer class="note">Drawn by boo-build {_e(__version__)} with matplotlib '
        f"{_e(matplotlib.__version__)} from the {_e(data.source)}.</footer>\n</body></html>\n")


def _body(data: PageData) -> str:
    states = [(k, t, cell_state(c)) for k in data.kernels for t, c in k.cells.items()]
    count = Counter(s.state for _, _, s in states)
    avail = sum(1 for k in data.kernels for c in k.cells.values() if c.status == "available")
    failed_impls = sum(len(s.other_failed) for *_, s in states if s.state in ("passed", "not run"))
    out = [f"<header><h1>{_e(data.name)} {_e(data.version)}</h1>",
           f'<p class="sub">Kernel report, drawn from the {_e(data.source)}.</p>',
           '<ul class="stats">',
           f"<li><b>{len(data.kernels)}</b> kernels</li>",
           f"<li><b>{len(data.targets)}</b> targets: {_e(', '.join(data.targets))}</li>",
           f"<li><b>{avail}</b> of {len(states)} available</li>",
           f'<li class="ok"><b>{count["passed"]}</b> validated</li>',
           f'<li class="{"bad" if count["failed"] else ""}"><b>{count["failed"]}</b> failed validation</li>',
           f'<li class="{"bad" if failed_impls else ""}"><b>{failed_impls}</b> implementation'
           f'{"s" if failed_impls != 1 else ""} failed, kernel kept</li>',
           f"<li><b>{count['not run']}</b> not run</li>",
           f'<li class="{"bad" if count["not built"] + count["unavailable"] else ""}">'
           f'<b>{count["not built"] + count["unavailable"]}</b> not built or unavailable</li></ul>',
           '<nav><a href="#speedup">Speed-up</a><a href="#validation">Validation</a><a href="#build">Build</a>'
           '<a href="#bundle">Bundle</a><a href="#dynamic">Dynamic shapes</a>'
           '<a href="#bandwidth">GPU bandwidth</a></nav></header>']
    out += _section_speedup(data)
    out += _section_validation(data, states)
    out += _section_build(data, states)
    out += _section_bundle(data)
    out += _section_dynamic(data)
    out += _section_bandwidth(data)
    return "\n".join(out)


def _section_speedup(data: PageData) -> list[str]:
    out = ['<section id="speedup"><h2>Speed-up over torch eager</h2>',
           '<p>Per target, every kernel: torch eager\'s median time divided by the kernel\'s, for each '
           'implementation measured (bars start at 1&times;: right of the line the kernel is faster). '
           'Sorted by the best implementation; the outlined bar is the one the bundle ships. '
           'Times are the medians of <code>bench.csv</code>.</p>']
    for t in data.targets:
        rows = speedups(data, t)
        out.append(f"<h3>{_e(t)}</h3>")
        if rows:
            below = sum(1 for _, d, sel in rows if d.get(sel, max(d.values())) < 1)
            out.append(_figure_html(f"chart-speedup-{_slug(t)}", chart_speedup(rows, f"su-{_slug(t)}"),
                                    f"{_e(t)}: {len(rows)} kernels measured; "
                                    f"{below} where the shipped implementation is slower than eager."))
            unmeasured = [k.key for k in data.kernels if t in k.cells and k.key not in {r[0] for r in rows}]
            if unmeasured:
                out.append(f'<p class="note">Not measured on {_e(t)}: '
                           + ", ".join(f"<code>{_e(k)}</code>" for k in unmeasured) + "</p>")
        else:
            out.append(f'<p class="missing">{_e(t)}: not measured &mdash; {_e(_why_not_measured(data, t))}.</p>')
    out.append("</section>")
    return out


def _section_validation(data: PageData, states) -> list[str]:
    out = ['<section id="validation"><h2>Validation</h2>',
           "<p>Each kernel on each target, as shipped: the number is the worst error of the selected "
           "implementation as a share of its tolerance (&le; 1 passes; every output, every case, against a "
           "float64 reference). <b>*</b> marks a kernel whose other implementation failed.</p>"]
    if data.kernels and data.targets:
        out.append(_figure_html("chart-validation", chart_validation(data, "val"),
                                "Validation matrix, kernel &times; target."))
    problems = []
    for k, t, s in states:
        if s.state == "failed":
            problems.append(f'<li><span class="bad">failed</span>: <code>{_e(k.key)}</code> on '
                            f"<b>{_e(t)}</b>, no implementation left: {_e(s.detail)}</li>")
    for k, t, impl, why in impl_failures(data, "validation"):
        if k.cells[t].status == "available":
            problems.append(f'<li><span class="bad">{_e(impl)} failed</span>: <code>{_e(k.key)}</code> on '
                            f"<b>{_e(t)}</b> (still available: {_e(k.cells[t].selected)} ships): {_e(why)}</li>")
    if problems:
        out.append("<h3>Failures</h3><ul class=\"problems\">" + "".join(problems) + "</ul>")
    else:
        out.append('<p class="note">Nothing failed validation.</p>')
    not_run = Counter((t, s.detail) for k, t, s in states if s.state == "not run")
    if not_run:
        out.append("<h3>Not run</h3><ul>" + "".join(
            f"<li><b>{_e(t)}</b>: {n} kernel{'s' if n != 1 else ''} &mdash; {_e(why)}</li>"
            for (t, why), n in sorted(not_run.items())) + "</ul>")
    out.append("</section>")
    return out


def _section_build(data: PageData, states) -> list[str]:
    out = ['<section id="build"><h2>Build</h2>']
    if data.compiles is None:
        out.append('<p class="missing">Compile times: not recorded (the bundle does not record them; '
                   "run <code>boo-build report</code> on the build's output folder).</p>")
    else:
        timed = [c for c in data.compiles if c.seconds is not None]
        total = sum(c.seconds for c in timed)
        out.append(f"<p>{len(data.compiles)} compiles ({len(timed)} timed), {total:.1f} s of compiler time "
                   "in all (times of the run that last compiled each module).</p>")
        if timed:
            out.append(_figure_html("chart-compile", chart_compiles(data, "cc"),
                                    "Compile time per target: the total, and each compile."))
            slow = sorted(timed, key=lambda c: -c.seconds)[:10]
            out.append("<h3>Slowest compiles</h3>" + _table(
                ("seconds", "module", "target", "status"),
                [(f"{c.seconds:.2f}", f"<code>{_e(c.module)}</code>", _e(c.target),
                  _e(c.status) if c.status == "ok" else f'<span class="bad">{_e(c.status)}</span>')
                 for c in slow]))
    failed = impl_failures(data, "build")
    if failed:
        out.append(f'<h3>Failed to build ({len(failed)})</h3><ul class="problems">' + "".join(
            f"<li><code>{_e(ModuleId(k.signature, impl).key)}</code> on <b>{_e(t)}</b>: "
            f'<span class="bad">{_e(why)}</span></li>' for k, t, impl, why in failed) + "</ul>")
    missing = [(k, t, s) for k, t, s in states if k.cells[t].status == "unavailable"]
    if missing:
        out.append(f'<h3>Missing kernels ({len(missing)})</h3><ul class="problems">' + "".join(
            f"<li><code>{_e(k.key)}</code> on <b>{_e(t)}</b>: {_e(s.detail)}</li>" for k, t, s in missing)
                   + "</ul>")
    if not failed and not missing:
        out.append('<p class="note">Everything built; every requested kernel is available on every target.</p>')
    out.append("</section>")
    return out


def _section_bundle(data: PageData) -> list[str]:
    prov = data.provenance or {}
    versions = prov.get("versions") if isinstance(prov.get("versions"), Mapping) else {}
    b = data.bundle
    facts = [("name", _e(data.name)), ("version", _e(data.version))]
    if b:
        facts += [("file", f"<code>{_e(b['file'])}</code>"),
                  ("size", f"{_size(b['size'])} compressed, {_size(b.get('unpacked'))} unpacked"),
                  ("sha256", f"<code>{_e(b['sha256'])}</code>")]
    else:
        facts.append(("file", f'<span class="bad">no bundle</span>: {_e(data.bundle_note)}'))
    facts += [("manifest", _e(prov.get("manifest", "not recorded"))),
              ("benchmarks", _e(prov.get("benchmarks", "not recorded"))),
              ("iree-compile", f"<code>{_e(prov.get('iree_compile', 'not recorded'))}</code>")]
    facts += [(_e(k), _e(v)) for k, v in sorted(versions.items())]
    out = ['<section id="bundle"><h2>Bundle</h2>',
           _table(None, [(f"<b>{k}</b>", v) for k, v in facts], "facts")]
    trows = []
    for t, d in data.targets.items():
        cells = [k.cells[t] for k in data.kernels if t in k.cells]
        dev = "not recorded" if data.devices is None else data.devices.get(t, "not recorded")
        trows.append((f"<b>{_e(t)}</b>", _e(d.get("driver")), _e(d.get("arch")), _e(dev),
                      sum(c.status == "available" for c in cells), sum(c.status != "available" for c in cells),
                      f'<span class="flags">{_e(" ".join(d.get("flags") or ()))}</span>'))
    out.append("<h3>Targets</h3>" + _table(("target", "driver", "arch", "device on the build machine",
                                             "available", "unavailable", "iree-compile flags"), trows))
    targets = list(data.targets)
    krows = []
    for k in data.kernels:
        s = k.signature
        cells = []
        for t in targets:
            c = k.cells.get(t)
            if c is None:
                cells.append("&mdash;")
            elif c.status == "available":
                default = c.reason.startswith(NOT_RUN_PREFIX)  # chosen without measuring
                cells.append(_e(c.selected) + (' <span class="note">(default)</span>' if default else ""))
            else:
                cells.append('<span class="bad">unavailable</span>')
        krows.append((f"<code>{_e(k.key)}</code>", _e(s.op), _e(s.dtype), _e("x".join(map(str, s.input_shape))),
                      _e(s.mask), *cells))
    out.append("<h3>Kernels (implementation shipped per target)</h3>"
               + _table(("kernel", "op", "dtype", "shape", "mask", *targets), krows, "kernels"))
    out.append("</section>")
    return out


def _section_dynamic(data: PageData) -> list[str]:
    out = ['<section id="dynamic"><h2>Dynamic shapes: time against rows</h2>']
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in data.measurements:
        if m.record.get(ROW_TIMINGS):
            groups.setdefault((m.kernel, m.target), []).append(m)
    if groups:
        g = [(k, t, sorted(ms, key=lambda m: m.subject))
             for (k, t), ms in sorted(groups.items(), key=lambda kv: (kv[0][0], target_order(kv[0][1])))]
        out.append(_figure_html("chart-dynamic", chart_rows(g, "dyn"),
                                f"Median time at each row count, {len(g)} dynamic kernel(s) (log-log)."))
    else:
        out.append('<p class="missing">No dynamic-shape timings in these records '
                   f"(benchmark field <code>{ROW_TIMINGS}</code>).</p>")
    out.append("</section>")
    return out


def _section_bandwidth(data: PageData) -> list[str]:
    out = ['<section id="bandwidth"><h2>GPU bandwidth: share of the device\'s peak</h2>']
    rows = _bandwidth_rows(data)
    if rows:
        out.append(_figure_html("chart-bandwidth", chart_bandwidth(rows, "bw"),
                                "Bytes each call reads and writes, divided by its median time, "
                                "as a share of the device's peak memory bandwidth."))
    else:
        out.append('<p class="missing">No GPU bandwidth figures in these records (benchmark fields '
                   f"<code>{BYTES_MOVED}</code> and <code>{PEAK_BANDWIDTH}</code>).</p>")
    out.append("</section>")
    return out
