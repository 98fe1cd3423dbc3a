"""The time a selection compares, of a record's three (mean, median, minimum per call):
the one rule the build's records (``records``) and the bundle format (``loader.format``)
share. Stdlib only: the build graph imports it at load time, and so does the loader."""

from __future__ import annotations


def first_time(mean_s: float | None, median_s: float | None, min_s: float | None) -> float | None:
    """The first one recorded (a build records the compared figure as ``mean_s``; records of
    older builds may have only the others)."""
    for v in (mean_s, median_s, min_s):
        if v is not None:
            return float(v)
    return None


__all__ = ["first_time"]
