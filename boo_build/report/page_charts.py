"""The report page's charts: matplotlib figures as inline SVG (Agg canvas, no
network, stable ids). matplotlib is imported inside the functions, so only
drawing a page imports it (``page_html.render``).
"""

from __future__ import annotations

import io
import math
import re
from typing import TYPE_CHECKING, Any, Sequence

from ..ops.base import IMPLS
from .page_data import Measurement, PageData, cell_state, row_points

if TYPE_CHECKING:  # only drawing a page imports matplotlib
    from matplotlib.typing import RcKeyType

# ------------------------------------------------------------------ charts
COLORS = {"aten": "#4c72b0", "manual": "#dd8452", "eager": "#555555"}
STATE_COLORS = {"passed": "#9fd99b", "near": "#fdd49e", "failed": "#ef8a8a", "not run": "#e3e3e3",
                "not built": "#fdae6b", "unavailable": "#cfcfcf"}
RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none", "svg.hashsalt": "boo-build", "font.family": "DejaVu Sans", "font.size": 10,
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
    ax.set_xlabel("speed-up over torch eager (paired rounds' median ratio; log scale, 1\u00d7 = as fast as eager)")
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
    # (seconds, status) of each timed compile per target
    by_t = {t: [(c.seconds, c.status) for c in data.compiles or () if c.target == t and c.seconds is not None]
            for t in targets}
    totals = [sum(s for s, _ in by_t[t]) for t in targets]
    left.barh(range(len(targets)), totals, color="#4c72b0")
    for y, (t, tot) in enumerate(zip(targets, totals)):
        left.text(tot, y, f" {tot:.1f} s ({len(by_t[t])})", va="center", fontsize=8)
    left.set_xlim(0, max(totals + [1]) * 1.35)
    left.set_yticks(range(len(targets)), targets)
    left.set_ylim(len(targets) - 0.5, -0.5)
    left.set_xlabel("total compile time per target, s (compiles)")
    for y, t in enumerate(targets):
        ok = [s for s, status in by_t[t] if status == "ok"]
        bad = [s for s, status in by_t[t] if status != "ok"]
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
            pts = row_points(m)
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
