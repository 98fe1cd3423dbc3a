"""Numerical tolerances per dtype, and the rule they enter: the one place they are written down.

An output passes when every element satisfies

    |out - ref| <= max(atol * scale, FACTOR * max(formula_error, spacing at 0)) + rtol * |ref|

``scale`` is the RMS of ``ref`` over that output (``error_scale``).
``atol * scale`` (the *scale* floor): a correct kernel rounds each element (at
most one unit roundoff ``u`` relative to it: the ``rtol`` term) and
accumulates rounding in reductions and cancellations in proportion to the
typical size of the values it works with, not to 1 nor to the largest
element. This floor is scale-invariant, so a small output (a mean near 0) is
held to the same relative standard as a large one (a weight gradient summed
over all rows). Both terms are kept below half of 5 % for every dtype so that
an output off by 5 % everywhere fails at its largest element wherever this
floor is the larger (``tests/test_tolerances.py``).

``FACTOR * formula_error`` (the *conditioning* floor; at least ``FACTOR``
times the output dtype's spacing at 0, ``SPACING_AT_ZERO``, which no result
in that dtype can beat): where the reference output is itself a small
difference of large terms, float32 cannot meet the scale floor. At width 2 a
layer norm's output is about +-1 whatever the input, so its input gradient is
tiny next to the terms that cancel in it, and a backward kernel given float32
statistics at a mean offset of 100 misses it by far more than ``atol * rms``
(so does torch's own float32 op). ``formula_error`` is the largest error over
the output of the reference formula itself (``reference.formula_errors``)
evaluated ``SAMPLES`` times in Monte Carlo arithmetic: every operation's
result moved by a random amount of up to ``UNIT_ROUNDOFF`` (float32's, for
every dtype: half-precision kernels accumulate in float32) times its
magnitude, or for a sum or difference the magnitude of its terms (``x - mean``
at a mean offset of 100 carries the rounding of 100, as a kernel given a
rounded mean does). It estimates what float32 evaluation of a correct formula
misses by on this very case, without depending on the luck of one rounding
(a single float32 evaluation can hit the answer exactly), and it comes from
the reference formula, not from the kernel or torch eager, so a wrong kernel
cannot widen its own bound. It is computed only for an output that misses the
scale floor; the validation record says which floor decided
(``OutputCheck.bound``) and the error it came from (``formula_error``). A
kernel fails only when it is worse than both floors.

What the rule still catches: on a well-conditioned output ``formula_error`` is
a few ``u`` of the values involved, far below the scale floor, which decides:
an output off by 5 % fails as before. Where float32's own error is of the
order of the output itself, the output carries no information float32 can
check: an RMS norm of width 1 has an input gradient of
``gy * w * rstd * eps / (x**2 + eps)``, below float32's resolution of the
terms that cancel in it, so that gradient passes when 5 % off, or 0; it fails
when it is off by more than ``FACTOR`` times float32's own error, such as a
gradient missing its projection term (``gy * w * rstd``), and the other
outputs (output, statistics, weight gradient) are held to the scale floor
(``tests/test_tolerances.py``).

On the default manifest the worst kernel uses 0.58 of its bound in float32
(offset case), 0.19 in bfloat16.
"""

from __future__ import annotations

from ..dtypes import Tolerance  # the table (the loader's side reads it too)
from ..records import ValidationFloor

__all__ = ["error_scale", "floor"]


# The conditioning floor. FACTOR: where it decides, the width-1 and width-2
# kernels of both ops (aten and manual, every dtype and mask, 300 seeds, both
# cases) use at most 0.48 of it, widths 3 to 8 at most 0.15; 4 leaves room for
# other formulas and shapes. SAMPLES: evaluations whose largest error is
# taken; the random moves come from a generator seeded with SEED, so the floor
# (and the recorded figures) are the same on every run.
FACTOR = 4.0
SAMPLES = 4
SEED = 0
UNIT_ROUNDOFF = 2.0 ** -24  # float32

# The spacing of each dtype at 0 (its smallest subnormal): no result in that
# dtype can be closer to a smaller value than this (a float16 gradient of 2e-8
# comes back as 0), so the conditioning floor is at least FACTOR times it.
SPACING_AT_ZERO = {"float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}

SCALE = ValidationFloor.SCALE  # OutputCheck.bound: atol * rms(ref) decided
CONDITIONING = ValidationFloor.CONDITIONING  # FACTOR * formula_error decided


def error_scale(ref) -> float:
    """``scale`` of the rule: the RMS of ``ref`` (a float64 torch tensor), or
    1 where ``ref`` is all zeros (nothing to be relative to)."""
    rms = float(ref.abs().pow(2).mean().sqrt()) if ref.numel() else 0.0
    return rms if rms > 0 else 1.0


def floor(tol: Tolerance, scale: float, formula_error: float | None, dtype: str) -> tuple[float, ValidationFloor]:
    """The absolute term of the bound for an output of ``dtype`` and which floor
    gave it (``SCALE`` or ``CONDITIONING``): the larger of ``atol * scale`` and
    ``FACTOR * max(formula_error, SPACING_AT_ZERO[dtype])`` (``formula_error``
    None: not computed, the scale floor; a dtype not in the table: no spacing)."""
    by_scale = tol.atol * scale
    if formula_error is None:
        return by_scale, SCALE
    by_conditioning = FACTOR * max(formula_error, SPACING_AT_ZERO.get(dtype, 0.0))
    return (by_conditioning, CONDITIONING) if by_conditioning > by_scale else (by_scale, SCALE)
