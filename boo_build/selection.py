"""Selection: which implementation a bundle ships for one signature on one target.

Rules, in order:

1. An implementation that did not compile is rejected ("compile failed").
2. One that failed validation, or raised in the runtime, is rejected with the
   validation's reason (it names the worst element).
3. Among the validated ones with a benchmark, the fastest median wins
   (``measured=True``); each other is rejected as "slower: X us vs Y us". When
   the default implementation is within ``margin`` of the fastest, the
   default is kept (timing noise must not flip a bundle between builds).
4. Validated but not benchmarked (benchmarks skipped): the default
   implementation among them, ``measured=False``; the others stay unrejected.
5. Nothing could run on this machine (validation "not run"): every compiled
   implementation is kept and the default is chosen, ``measured=False``,
   reason "default until measured: <why it did not run>".

The default implementation is ``manual`` when it compiled, else ``aten``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .records import ValidationStatus
from .signature import IMPLS, KernelSignature

DEFAULT_ORDER = ("manual", "aten")  # preferred default first
MARGIN = 0.03  # the default is kept when within 3 % of the fastest


@dataclass(frozen=True)
class Selection:
    impl: str | None
    measured: bool
    reason: str
    rejected: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"impl": self.impl, "measured": self.measured, "reason": self.reason,
                "rejected": dict(sorted(self.rejected.items()))}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Selection":
        return cls(impl=d.get("impl"), measured=bool(d.get("measured")), reason=d.get("reason", ""),
                   rejected=dict(d.get("rejected") or {}))


def default_impl(candidates: Sequence[str]) -> str | None:
    for impl in DEFAULT_ORDER:
        if impl in candidates:
            return impl
    return sorted(candidates)[0] if candidates else None


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def _ordered(impls) -> list[str]:
    known = [i for i in IMPLS if i in impls]
    return known + sorted(i for i in impls if i not in IMPLS)


def select(sig: KernelSignature, target_name: str, compiled_impls: Sequence[str],
           validations: Mapping[str, Any], benches: Mapping[str, Any], *, margin: float = MARGIN) -> Selection:
    """Pick the implementation for ``sig`` on ``target_name``.

    ``validations[impl]`` / ``benches[impl]``: ``validate.ValidationResult`` /
    ``benchmark.BenchResult`` or None (missing)."""
    compiled = _ordered(set(compiled_impls))
    rejected: dict[str, str] = {}
    for impl in _ordered(set(validations) | set(benches)):
        if impl not in compiled:
            rejected[impl] = "compile failed"

    validated, not_run, unchecked = [], [], []
    for impl in compiled:
        v = validations.get(impl)
        if v is None:
            unchecked.append(impl)
        elif v.status == ValidationStatus.PASSED:
            validated.append(impl)
        elif v.status == ValidationStatus.NOT_RUN:
            not_run.append((impl, v.reason))
        elif v.status == ValidationStatus.FAILED:
            rejected[impl] = f"failed validation: {v.reason}" if v.reason else "failed validation"
        else:  # error
            rejected[impl] = f"validation error: {v.reason}" if v.reason else "validation error"

    if validated:
        for impl, why in not_run:
            rejected[impl] = f"not validated ({why or 'not run'})"
        for impl in unchecked:
            rejected[impl] = "not validated (no validation record)"
        timed = [(benches[i].median_s, i) for i in validated
                 if benches.get(i) is not None and benches[i].ok]
        if timed:
            order = {impl: n for n, impl in enumerate(DEFAULT_ORDER)}
            timed.sort(key=lambda p: (p[0], order.get(p[1], len(order))))
            best_t, best = timed[0]
            dflt = default_impl([i for _, i in timed])
            dflt_t = dict((i, t) for t, i in timed)[dflt]
            if dflt != best and dflt_t <= best_t * (1 + margin):
                rejected[best] = (f"within {margin:.0%} of {dflt} ({_us(best_t)} vs {_us(dflt_t)}): "
                                  f"default {dflt} kept")
                best, best_t = dflt, dflt_t
                reason = f"default within {margin:.0%} of the fastest validated ({_us(best_t)})"
            else:
                others = ", ".join(f"{i} {_us(t)}" for t, i in timed if i != best)
                reason = f"fastest validated: {_us(best_t)}" + (f" (vs {others})" if others else "")
            for t, impl in timed:
                if impl != best and impl not in rejected:
                    rejected[impl] = f"slower: {_us(t)} vs {_us(best_t)} ({best})"
            for impl in validated:
                if impl not in dict((i, t) for t, i in timed):
                    b = benches.get(impl)
                    why = f"{b.status}: {b.reason}" if b is not None else "no benchmark record"
                    rejected[impl] = f"not benchmarked ({why.rstrip(': ')})"
            return Selection(best, True, reason, rejected)
        chosen = default_impl(validated)
        b = benches.get(chosen)
        why = f"benchmark {b.status}" + (f": {b.reason}" if b.reason else "") if b is not None else "not benchmarked"
        return Selection(chosen, False, f"default among validated ({why})", rejected)

    keep = [i for i, _ in not_run] + unchecked
    if keep:
        chosen = default_impl(keep)
        reasons = dict(not_run)
        why = (reasons[chosen] or "not run: no device") if chosen in reasons else "not run: no validation record"
        if not why.startswith("not run"):
            why = "not run: " + why
        return Selection(chosen, False, f"default until measured: {why}", rejected)

    detail = "; ".join(f"{i}: {r}" for i, r in sorted(rejected.items())) or "nothing compiled"
    return Selection(None, False, f"no implementation available for {sig.key} on {target_name}: {detail}",
                     rejected)
