"""The report page's data: ``PageData`` (plain, immutable records of what the
page shows) and the page model read from it (validation state per kernel and
target, speed-ups over torch eager, bandwidth rows). Stdlib,
``signature`` and ``selection`` only (zstandard to size a bundle file): no matplotlib, no
build stage.

Where the records come from (a build folder or a bundle file) is
``report.page``; charts are ``page_charts``, the HTML ``page_html``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, TypeGuard

from ..compared import VsEager, first_time
from ..ops.base import IMPLS
from ..reasons import BUILD_FAILURES, FAILURES, VALIDATION_FAILURES, Reason
from ..signature import KernelSignature

if TYPE_CHECKING:
    from ..loader.format import EagerPreference

DIGEST_META = "boo-report-inputs"  # the page's <meta> naming the digest of what it shows

# Optional benchmark-record fields (docs/ARCHITECTURE.md, "Optional benchmark fields").
ROW_TIMINGS = "row_timings"
BYTES_MOVED = "bytes_moved"
PEAK_BANDWIDTH = "peak_bandwidth_Bps"
DEVICE_NAME = "device_name"



# ----------------------------------------------------------------- records
@dataclass(frozen=True)
class Cell:
    """One kernel on one target, as the bundle index records it."""

    status: str  # available | unavailable
    selected: str | None
    reason: Reason  # why selected, or why unavailable (typed: reasons.Reason)
    rejected: Mapping[str, Reason]  # impl -> why it is not shipped
    validation: Mapping[str, Any] | None  # the selected implementation's validation record
    torch_calls: str = ""  # where the build sent torch tensors instead, if it did (routing.torch_calls_text)
    traffic: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # impl -> its modelled traffic (GPU)
    timing: Mapping[str, Any] | None = None  # how it was timed, in paired rounds (routing.Timing's JSON)
    tuning: Mapping[str, str] = field(default_factory=dict)  # a tuned selection's configuration per dispatch


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


def _cell(status: str, selected: str | None, reason: Reason, rejected: Mapping[str, Reason],
          validation: Mapping[str, Any] | None, prefer_eager: EagerPreference | None = None,
          eager_rejected: Reason | None = None, traffic: Mapping[str, Any] | None = None,
          timing: Mapping[str, Any] | None = None, tuning: Mapping[str, str] | None = None) -> Cell:
    from ..stages.routing import torch_calls_text

    return Cell(status=status, selected=selected, reason=reason, rejected=dict(sorted(rejected.items())),
                validation=None if validation is None else dict(validation),
                torch_calls=torch_calls_text(prefer_eager, eager_rejected) if prefer_eager or eager_rejected
                else "", traffic={i: dict(t) for i, t in sorted((traffic or {}).items()) if t},
                timing=None if timing is None else dict(timing), tuning=dict(tuning or {}))


SIZES = "sizes"  # a dynamic kernel's (and torch eager's) timings at each benchmark shape, as builds record them


def has_extra_fields(rec: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(rec, Mapping) and (bool(rec.get(ROW_TIMINGS)) or bool(rec.get(SIZES)) or
                                         (rec.get(BYTES_MOVED) is not None and rec.get(PEAK_BANDWIDTH) is not None))


def row_points(m: Measurement) -> list[tuple[int, float]]:
    """(rows, seconds per call) of a measurement at each size it was timed at, by rows:
    from a build's ``sizes`` (each shape's rows for the kernel's signature; the time the
    selection compares, ``first_time``), else from a record's ``row_timings`` (rows, median)."""
    pts: dict[int, float] = {}
    sizes = m.record.get(SIZES)
    if sizes:
        try:
            sig = KernelSignature.parse(m.kernel)
        except ValueError:  # not a kernel key: no rows to give
            return []
        for s in sizes:
            t = first_time(s.get("mean_s"), s.get("median_s"), s.get("min_s")) if s.get("status") == "ok" else None
            if t is not None and number(t) and s.get("shape"):
                pts[sig.rows_of(tuple(s["shape"]))] = t
    else:
        for p in m.record.get(ROW_TIMINGS) or ():
            if number(p.get("rows")) and number(p.get("median_s")):
                pts[int(p["rows"])] = float(p["median_s"])
    return sorted(pts.items())


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
        peak = number(peak_gbs)
        if peak:
            rec.setdefault(PEAK_BANDWIDTH, peak * 1e9)
    return rec


def kernels_from_index(index: Mapping[str, Any]) -> tuple[tuple[Kernel, ...], tuple[Measurement, ...]]:
    """Kernels (and benchmark records with optional fields) of a bundle index (its
    reasons typed by ``format.TargetRecord``, which gives an older bundle's their kinds)."""
    from ..loader.format import EagerPreference, TargetRecord

    kernels, meas = [], []
    measured_prov = (index.get("provenance") or {}).get("measured") or {}
    for key in sorted(index["kernels"]):
        k = index["kernels"][key]
        cells = {}
        for t, te in sorted(k["targets"].items()):
            impls = te.get("impls") or {}
            sel = te.get("selected")
            reason, rejected, eager_rejected = TargetRecord.reasons_of(te, te["status"], f"kernel {key} target {t}")
            pref = te.get("prefer_eager")
            cells[t] = _cell(te["status"], sel, _reason(reason), rejected or {},
                             (impls.get(sel) or {}).get("validation") if sel else None,
                             None if pref is None else EagerPreference.from_json(pref), eager_rejected,
                             {i: m.get("traffic") for i, m in impls.items()}, te.get("timing"),
                             (impls.get(sel) or {}).get("tuning") if sel else None)
            peak = (measured_prov.get(t) or {}).get("peak_gbs") if isinstance(measured_prov, Mapping) else None
            for i, m in sorted(impls.items()):
                rec = _measured(m.get("benchmark"), te.get("measured"), peak)
                if has_extra_fields(rec):
                    meas.append(Measurement(key, t, i, rec))
        kernels.append(Kernel(key, KernelSignature.from_json(k["signature"]), cells))
    return tuple(kernels), tuple(meas)


def kernels_from_entries(entries) -> tuple[Kernel, ...]:
    """Kernels of ``format.KernelRecord`` objects (``pack.entries_from_report``'s:
    what the pack task would write)."""
    from ..loader.json_fields import plain  # records are read-only (mappingproxy): plain JSON for the page

    out = []
    for k in sorted(entries, key=lambda e: e.key):
        cells = {}
        for t, te in sorted(k.targets.items()):
            impl = (te.impls or {}).get(te.selected) if te.selected else None
            cells[t] = _cell(te.status.value, te.selected, _reason(te.reason), te.rejected or {},
                             plain(impl.validation) if impl else None, te.prefer_eager, te.eager_rejected,
                             {i: plain(r.traffic) for i, r in (te.impls or {}).items() if r.traffic},
                             None if te.timing is None else plain(te.timing),
                             plain(impl.extra.get("tuning")) if impl else None)
        out.append(Kernel(k.key, k.signature, cells))
    return tuple(out)


def _reason(r: Reason | None) -> Reason:
    from ..reasons import Kind

    return r if r is not None else Reason(Kind.UNKNOWN, "")


def target_order(name: str) -> tuple:
    """Targets in a reading order (cpu, gfx90a, gfx942, gfx1100...): the bundle keeps them sorted by name."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p)


def parse_csv(data: bytes) -> tuple[dict[str, str], ...]:
    return tuple(dict(r) for r in csv.DictReader(io.StringIO(data.decode())))


def bundle_info(path: Path) -> dict[str, Any]:
    import zstandard

    data = Path(path).read_bytes()
    try:
        unpacked = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        unpacked = -1
    return {"file": Path(path).name, "size": len(data), "unpacked": unpacked if unpacked >= 0 else None,
            "sha256": hashlib.sha256(data).hexdigest()}


# ------------------------------------------------------------ page model
def number(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) or v == math.inf else None


def worst_ratio(validation: Mapping[str, Any] | None) -> float | None:
    """Worst error as a share of its tolerance over every output and case."""
    ratios = [number(o.get("ratio")) for o in (validation or {}).get("outputs") or ()]
    found = [r for r in ratios if r is not None]
    return max(found) if found else None


def impl_failures(data: PageData, kind: str) -> list[tuple[Kernel, str, str, str]]:
    """(kernel, target, implementation, reason) of each implementation that
    failed to build (``kind="build"``) or failed validation (``"validation"``)."""
    kinds = BUILD_FAILURES if kind == "build" else VALIDATION_FAILURES
    return [(k, t, impl, why) for k in data.kernels for t, c in k.cells.items()
            for impl, why in c.rejected.items() if why.kind in kinds]


@dataclass(frozen=True)
class CellState:
    state: str  # passed | failed | not built | not run | unavailable
    ratio: float | None
    text: str  # short, for the chart
    detail: str  # long, for the lists
    other_failed: tuple[str, ...]  # implementations that failed although the kernel is available


def cell_state(cell: Cell) -> CellState:
    failed = tuple(f"{i}: {r}" for i, r in cell.rejected.items() if r.kind in FAILURES)
    if cell.status == "available":
        v = cell.validation or {}
        if v.get("status") == "passed":
            r = worst_ratio(v)
            text = "passed" if r is None else f"{r:.2g}"
            return CellState("passed", r, text + ("*" if failed else ""), f"{cell.selected} passed"
                             + ("" if r is None else f", worst error {r:.2g} of the tolerance"), failed)
        if v.get("status") in ("failed", "error"):  # shipped although it failed (never selected so here)
            return CellState("failed", worst_ratio(v), "FAILED", f"{cell.selected}: {v.get('reason', '')}", failed)
        why = v.get("reason") or cell.reason or "not run"
        return CellState("not run", None, "not run" + ("*" if failed else ""), why, failed)
    reasons = cell.rejected or {}
    if any(r.kind in VALIDATION_FAILURES for r in reasons.values()):
        return CellState("failed", None, "FAILED", cell.reason, failed)
    if reasons and all(r.kind in BUILD_FAILURES for r in reasons.values()):
        return CellState("not built", None, "not built", cell.reason, failed)
    return CellState("unavailable", None, "unavailable", cell.reason, failed)


def _f(s: str | None) -> float | None:
    try:
        return float(s) if s is not None and s != "" else None
    except ValueError:
        return None


def speedups(data: PageData, target: str) -> list[tuple[str, dict[str, float], str | None]]:
    """(kernel, {impl: speed-up over torch eager}, selected impl) for one target, fastest first.
    A kernel timed in paired rounds: its shipped implementation's figure as the selection
    compared it (``compared.VsEager``, the figure ``info``, ``bench.csv`` and ``diff`` show;
    none where a speed-up was not confirmed); records without rounds: every implementation's
    median over torch eager's, from ``bench.csv`` (``figures_basis`` says which)."""
    cells = {k.key: k.cells.get(target) for k in data.kernels}
    out: list[tuple[str, dict[str, float], str | None]] = []
    paired = set()  # kernels timed in paired rounds: their figure, never bench.csv's medians
    for key, cell in cells.items():
        vs = vs_eager(cell)
        if vs is None or cell is None:
            continue
        paired.add(key)
        if cell.selected and vs.recorded:
            # drawn under its implementation (a candidate's text form: ``impl[+variant][@mode]``)
            impl = cell.selected.split("@")[0].split("+")[0]
            out.append((key, {impl: vs.speedup}, impl))
    for row in data.table or ():
        if row.get("target") != target or row.get("key") in paired:
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


def vs_eager(cell: Cell | None) -> VsEager | None:
    """A cell's speed-up over torch eager as its selection compared it (paired rounds), or None."""
    return None if cell is None else VsEager.from_timing(cell.timing)


def timing_line(data: PageData, target: str) -> str:
    """How the kernels of ``target`` were timed, in words: in paired rounds, with how many
    ties, re-measurements, unconfirmed speed-ups and a busy machine; "" where none was."""
    ts = [c.timing for k in data.kernels if (c := k.cells.get(target)) is not None and c.timing]
    if not ts:
        return ""
    ties = sum(1 for t in ts if t.get("ties"))
    again = sum(1 for t in ts if t.get("remeasured"))
    unconfirmed = sum(1 for t in ts if (t.get("eager") or {}).get("verdict") == "unconfirmed")
    busy = sum(1 for t in ts if t.get("busy"))
    kept = sum(1 for t in ts if t.get("previous"))
    text = (f"{len(ts)} kernels timed in paired rounds (each candidate and torch eager in the same rounds): "
            f"{ties} with a tie (the preferred candidate ships), {again} measured again, "
            f"{unconfirmed} speed-up(s) over eager not confirmed (not drawn)")
    if kept:
        text += f"; {kept} against the previous build's decision, kept unless beaten in every pass"
    return text + (f"; the machine was busy while {busy} were timed" if busy else "; the machine was quiet")


def why_not_measured(data: PageData, target: str) -> str:
    if data.table is None:
        return "no benchmark table (bench.csv) recorded"
    if str(data.provenance.get("benchmarks", "")).startswith("skipped"):
        return f"benchmarks {data.provenance['benchmarks']}"
    whys = Counter(cell_state(k.cells[target]).detail for k in data.kernels
                   if target in k.cells and cell_state(k.cells[target]).state == "not run")
    if whys:
        return whys.most_common(1)[0][0]
    return "no kernel validated and benchmarked against torch eager"


def bandwidth_rows(data: PageData) -> list[tuple[str, float, float, float]]:
    """(label, share of peak, achieved B/s, peak B/s) for each measurement with bandwidth fields."""
    out = []
    for m in data.measurements:
        r = m.record
        moved, peak, t = number(r.get(BYTES_MOVED)), number(r.get(PEAK_BANDWIDTH)), number(r.get("median_s"))
        if moved and peak and t:
            dev = f" ({r[DEVICE_NAME]})" if r.get(DEVICE_NAME) else ""
            out.append((f"{m.kernel} {m.subject} on {m.target}{dev}", moved / t / peak, moved / t, peak))
    return sorted(out, key=lambda r: -r[1])
