"""Numerical tolerances per dtype: the one place they are written down.

An output passes when every element satisfies
``|out - ref| <= atol * scale + rtol * |ref|`` where ``scale`` is the RMS of
``ref`` over that output (``error_scale``). Why: a correct kernel rounds each
element (at most one unit roundoff ``u`` relative to it: the ``rtol`` term)
and accumulates rounding in reductions and cancellations in proportion to the
typical size of the values it works with, not to 1 nor to the largest
element (the ``atol`` term). The rule is scale-invariant, so a small output
(a mean near 0) is held to the same relative standard as a large one (a weight
gradient summed over all rows). Both terms are kept below half of 5 % for every
dtype so that an output off by 5 % everywhere always fails, at its largest
element (``tests/test_tolerances.py``). On the default manifest the worst
kernel uses 0.58 of its bound in float32 (offset case), 0.19 in bfloat16.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


TOLERANCES = {
    # float32: accumulation error of reductions over a few thousand elements.
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    # float16: 11-bit mantissa, unit roundoff 4.9e-4, a few roundings per output.
    "float16": Tolerance(atol=4e-3, rtol=4e-3),
    # bfloat16: 8-bit mantissa, unit roundoff 3.9e-3: 4 units each (8 would
    # let a uniform 5 % error pass).
    "bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2),
}


def tolerance(dtype: str) -> Tolerance:
    return TOLERANCES[dtype]


def error_scale(ref) -> float:
    """``scale`` of the rule: the RMS of ``ref`` (a float64 torch tensor), or
    1 where ``ref`` is all zeros (nothing to be relative to)."""
    rms = float(ref.abs().pow(2).mean().sqrt()) if ref.numel() else 0.0
    return rms if rms > 0 else 1.0
