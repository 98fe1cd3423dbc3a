"""Numerical tolerances per dtype: the one place they are written down.

An output passes when every element satisfies
``|out - ref| <= atol * scale + rtol * |ref|`` where ``scale`` is
``max(1, max |ref|)`` of that output: gradients of weights are sums over all
rows, so an absolute tolerance must grow with the output's magnitude.
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
    # bfloat16: 8-bit mantissa, unit roundoff 3.9e-3.
    "bfloat16": Tolerance(atol=3e-2, rtol=3e-2),
}


def tolerance(dtype: str) -> Tolerance:
    return TOLERANCES[dtype]
