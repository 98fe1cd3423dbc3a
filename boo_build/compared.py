"""What a selection compares, read one way by every view: the time of a record's three
(mean, median, minimum per call: ``first_time``), the one rule the build's records
(``records``) and the bundle format (``loader.format``) share; and a kernel's speed-up
over torch eager (``VsEager``): the paired rounds' figure the routing decided on, as
``info``, ``bench.csv``, the report page and ``diff`` all show it. Stdlib only: the build
graph imports it at load time, and so does the loader."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


def first_time(mean_s: float | None, median_s: float | None, min_s: float | None) -> float | None:
    """The first one recorded (a build records the compared figure as ``mean_s``; records of
    older builds may have only the others)."""
    for v in (mean_s, median_s, min_s):
        if v is not None:
            return float(v)
    return None


# what each verdict of a kernel against torch eager or torch.compile (``stages.comparison.Verdict``)
# says, in words ({b}: the baseline's name)
_VERDICTS = {"faster": "faster than {b}", "slower": "slower than {b}",
             "tie": "a tie with {b} (within the margin)", "inside the noise": "inside the noise (a tie)",
             "not in every pass": "faster, but not in every pass (a tie)",
             "unconfirmed": "beyond the confirmation factor, not confirmed by a second pass (not recorded)",
             "kept": "the kernel kept from the previous build (torch eager not faster in every pass)",
             "held": "the previous build's torch eager kept (timed on a busy machine)"}
EAGER_NAME, COMPILED_NAME = "torch eager", "torch.compile"
_TIMING_KEYS = {EAGER_NAME: "eager", COMPILED_NAME: "compiled"}  # each baseline's pair in a ``timing``


@dataclass(frozen=True)
class VsEager:
    """A kernel's speed-up over torch eager as the selection compared it: torch eager's
    time over the kernel's, the median of the per-round ratios of their paired rounds,
    its ~95 % interval (``low``-``high``), the rounds, and the verdict
    (``stages.comparison.Verdict``'s value). Read from a target entry's ``timing``."""

    speedup: float
    low: float
    high: float
    rounds: int
    verdict: str
    baseline: str = EAGER_NAME  # or ``COMPILED_NAME``: the same figure over torch.compile

    @classmethod
    def from_timing(cls, timing: Mapping[str, Any] | None, baseline: str = EAGER_NAME) -> "VsEager | None":
        """From a target entry's or decision's ``timing`` (its ``eager`` pair: kernel/eager; its
        ``compiled`` pair for ``baseline`` torch.compile); None where the kernel was not timed
        against that baseline in paired rounds."""
        e = (timing or {}).get(_TIMING_KEYS[baseline])
        if not e or "ratio" not in e:
            return None
        try:
            return cls.from_pair(float(e["ratio"]), float(e["noise"]), int(e["n"]), str(e.get("verdict") or ""),
                                 baseline)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None

    @staticmethod
    def untimed(timing: Mapping[str, Any] | None) -> str | None:
        """Why the kernel was not timed against torch.compile (a ``timing``'s), None where it was or nothing says."""
        c = (timing or {}).get("compiled") or {}
        return c.get("untimed")

    @classmethod
    def from_pair(cls, ratio: float, noise: float, rounds: int, verdict: str,
                  baseline: str = EAGER_NAME) -> "VsEager":
        """From the paired rounds' kernel/baseline median ratio and its noise (half width in log ratio)."""
        return cls(1.0 / ratio, math.exp(-noise) / ratio, math.exp(noise) / ratio, rounds, verdict, baseline)

    @property
    def recorded(self) -> bool:
        """Whether the figure stands (a speed-up beyond the factor a second pass did not confirm does not)."""
        return self.verdict != "unconfirmed"

    def figure(self) -> str:
        """``0.92x (0.78-1.08, 24 rounds)``: the figure every view shows."""
        return f"{self.speedup:.2f}x ({self.low:.2f}-{self.high:.2f}, {self.rounds} rounds)"

    def text(self) -> str:
        """The figure and the verdict: ``0.92x (0.78-1.08, 24 rounds): a tie with torch eager (within the margin)``."""
        words = _VERDICTS.get(self.verdict, self.verdict or "no verdict").format(b=self.baseline)
        return f"{self.figure()}: {words}"


__all__ = ["COMPILED_NAME", "EAGER_NAME", "VsEager", "first_time"]
