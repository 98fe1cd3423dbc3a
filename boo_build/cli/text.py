"""What the bundle commands share: how they write sizes, reasons and times."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["bench_value", "provenance_versions", "short", "size_text"]


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def short(text: Any, n: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


BENCH_KEYS = ("median_us", "median_ms", "median_s", "median", "p50_us", "p50", "mean_us", "mean_ms", "mean_s",
               "mean", "min_us", "min")


def bench_value(b: Any) -> tuple[float, str] | None:
    """(value, field) of a benchmark record's central time, whatever its schema."""
    if not isinstance(b, Mapping):
        return None
    for key in BENCH_KEYS:
        v = b.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), key
    for key, v in sorted(b.items()):
        if ("median" in key or "mean" in key) and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), key
    return None



def provenance_versions(prov: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The tool versions of a provenance record (older bundles: its string fields)."""
    prov = prov or {}
    v = prov.get("versions")
    return v if isinstance(v, Mapping) else {k: x for k, x in prov.items() if isinstance(x, str)}
