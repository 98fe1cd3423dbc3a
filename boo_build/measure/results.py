"""``boo-build measure``'s results: per kernel and target what was measured,
and the markdown table and JSON written from them (``measure.py`` measures).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..records import BenchResult, EagerValidation, ValidationResult
from ..stages.selection import Decision, Selection


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class KernelMeasurement:
    """One kernel on one target, as measured here."""

    key: str
    target: str
    validations: Mapping[str, ValidationResult]
    benches: Mapping[str, BenchResult]
    eager: BenchResult
    compiled: BenchResult
    decision: Decision  # what ships and where torch tensors go (selection.decide)
    bytes_moved: int
    eager_validation: EagerValidation | None = None  # torch eager's results as routed (validate.eager_record)

    @property
    def selection(self) -> Selection:
        return self.decision.selection

    @property
    def selected(self) -> BenchResult | None:
        b = self.benches.get(self.selection.impl) if self.selection.impl else None
        return b if b is not None and b.ok else None

    def gbs(self) -> float | None:
        b = self.selected
        return self.bytes_moved / b.median_s / 1e9 if b and b.median_s else None

    def speedup(self, baseline: BenchResult) -> float | None:
        b = self.selected
        base_s = baseline.median_s if baseline.ok else None
        return base_s / b.median_s if b and base_s is not None and b.median_s else None

    @property
    def problem(self) -> bool:
        return any(v.status in ("failed", "error") for v in self.validations.values()) or self.selected is None


@dataclass(frozen=True)
class MeasureReport:
    source: str
    bundle: str  # the new bundle's path
    devices: Mapping[str, dict]  # target -> device record (provenance)
    skipped: Mapping[str, str]  # target -> why not measured here
    kernels: tuple[KernelMeasurement, ...]
    not_measured: tuple[tuple[str, str, str], ...] = ()  # (key, target, why)
    peaks: Mapping[str, float | None] = field(default_factory=dict)  # target -> GB/s

    @property
    def problem(self) -> bool:
        return bool(self.not_measured) or any(k.problem for k in self.kernels)


def _us(b: BenchResult | None) -> str:
    s = b.median_s if b is not None and b.ok else None
    return f"{s * 1e6:.1f}" if s is not None else "-"


def summary_line(m: KernelMeasurement) -> str:
    """One progress line's worth: each implementation's time or status, the baselines, the selection."""
    impls = ", ".join(f"{i} {_us(m.benches.get(i)) + ' us' if m.validations[i].passed else m.validations[i].status}"
                      for i in sorted(m.validations))
    base = "; ".join(f"{what} {_us(b) + ' us' if b.ok else b.status}"
                     for what, b in (("eager", m.eager), ("torch.compile", m.compiled)))
    return f"{impls}; {base}; selected {m.selection.impl or 'none'}"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def _baseline(b: BenchResult) -> str:
    return _us(b) if b.ok else b.status


def markdown(report: MeasureReport) -> str:
    """The results as a markdown table (per kernel: validation, time, GB/s,
    share of peak, speed-ups over torch eager and torch.compile)."""
    lines = [f"# boo-build measure: {Path(report.source).name}", ""]
    for name, rec in sorted(report.devices.items()):
        cc = f", compute capability {rec['compute_capability']}" if "compute_capability" in rec else ""
        peak = report.peaks.get(name)
        ptxt = f"peak {peak:g} GB/s (datasheet)" if peak else "peak bandwidth unknown"
        soft = ("; a software device on the CPU (lavapipe): its times are the CPU's, not a GPU's"
                if rec.get("software") else "")
        lines.append(f"- target `{name}` on {rec['name']} ({rec['uri']}, {rec['arch']}{cc}); {ptxt}{soft}")
    for name, why in sorted(report.skipped.items()):
        lines.append(f"- target `{name}` not measured: {why}")
    lines += ["", "| kernel | target | validation | selected | time (us) | GB/s | % of peak | eager (us) "
              "| torch.compile (us) | vs eager | vs torch.compile |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in report.kernels:
        val = ", ".join(f"{i} {m.validations[i].status}" for i in sorted(m.validations))
        gbs, peak = m.gbs(), report.peaks.get(m.target)
        share = "-" if gbs is None else f"{100 * gbs / peak:.1f}%" if peak else "unknown"
        lines.append(f"| `{m.key}` | {m.target} | {val} | {m.selection.impl or 'none'} | {_us(m.selected)} | "
                     f"{'-' if gbs is None else f'{gbs:.3g}'} | {share} | {_baseline(m.eager)} | "
                     f"{_baseline(m.compiled)} | {_x(m.speedup(m.eager))} | {_x(m.speedup(m.compiled))} |")
    for key, target, why in report.not_measured:
        lines.append(f"| `{key}` | {target} | not measured: {why} | | | | | | | | |")
    problems = []
    for m in report.kernels:
        for impl, v in sorted(m.validations.items()):
            if v.status in ("failed", "error"):
                problems.append(f"- `{m.key}` {m.target} {impl}: {v.summary()}")
        for what, b in (("eager", m.eager), ("torch.compile", m.compiled)):
            if b.status == "error":
                problems.append(f"- `{m.key}` {m.target} {what}: {b.reason}")
    if problems:
        lines += ["", "Problems:", *problems]
    lines += ["", f"New bundle: `{report.bundle}`", ""]
    return "\n".join(lines)


def to_json(report: MeasureReport) -> dict[str, Any]:
    return {
        "source": report.source, "bundle": report.bundle, "devices": dict(report.devices),
        "skipped": dict(report.skipped), "peaks_gbs": dict(report.peaks),
        "not_measured": [list(t) for t in report.not_measured],
        "kernels": [{
            "key": m.key, "target": m.target, "selected": m.selection.impl, "reason": m.selection.reason,
            "bytes": m.bytes_moved, "gbs": m.gbs(),
            "validation": {i: v.to_json() for i, v in sorted(m.validations.items())},
            "benchmark": {i: b.to_json() for i, b in sorted(m.benches.items())},
            "eager": m.eager.to_json(), "torch_compile": m.compiled.to_json(),
            "speedup_vs_eager": m.speedup(m.eager), "speedup_vs_compile": m.speedup(m.compiled),
        } for m in report.kernels],
    }


__all__ = ["KernelMeasurement", "MeasureReport", "markdown", "summary_line", "to_json"]
