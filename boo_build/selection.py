"""Selection: which implementation a bundle ships for one signature on one target.

Rules, in order:

1. An implementation that did not compile is rejected ("compile failed").
2. One that failed validation, or raised in the runtime, is rejected with the
   validation's reason (it names the worst element).
3. Among the validated ones with a benchmark, the fastest wins
   (``measured=True``); each other is rejected as "slower: X us vs Y us". A
   candidate's time is the mean of its samples but the slowest (``mean_s``;
   the median, else the best sample, where a record has none). On the CPU each
   sample is the mean per call over a round of calls made right after torch's
   (``benchmark.CPU_ROUND_S``), as an application pays: a ``local-task``
   kernel's best sample was 2-3x better than that (its hand-offs stall now and
   then), and its median hid the rounds that stalled (p90 1.6-3x the median in
   most ``local-task`` records, 1.0-1.2x on ``local-sync``). When
   the default implementation is within ``margin`` of the fastest, the
   default is kept (timing noise must not flip a bundle between builds).
4. Validated but not benchmarked (benchmarks skipped): the default
   implementation among them, ``measured=False``; the others stay unrejected.
5. Nothing could run on this machine (validation "not run"): every compiled
   implementation is kept and the default is chosen, ``measured=False``,
   reason "default until measured: <why it did not run>".

The default implementation is ``manual`` when it compiled, else ``aten``.

The names selected among are candidates (``candidates.Candidate`` text forms:
``manual``, ``aten+nosd@local-sync``...); a build that explores nothing has
only the baselines, whose names are the implementations'. The margin rule
keeps the default baseline (the default implementation, the target's flags
and driver) only. ``candidate_records`` gives every candidate's timing and
status for the bundle index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .candidates import Candidate
from .records import ValidationStatus, compared_seconds
from .signature import IMPLS, KernelSignature

DEFAULT_ORDER = ("manual", "aten")  # preferred default first
MARGIN = 0.03  # the default is kept when within 3 % of the fastest
# torch calls run the kernel only where it beat torch eager by 10 % (compared times): the
# build times the bare kernel; an application pays the loader's call too. f32
# layer-norm backward n32 mask 10: 169 vs 172 us best in the build, 2-4x slower
# than eager through the loader in benchmarks/cpu_vs_eager.py.
EAGER_MARGIN = 0.10


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


def compared_time(b) -> float | None:
    """A benchmark's time for comparisons (``compared_seconds``): its ``mean_s``,
    else its median, else its best sample (None when it did not run)."""
    return None if b is None or not b.ok else compared_seconds(b.to_json())


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
        timed = [(compared_time(benches[i]), i) for i in validated if compared_time(benches.get(i)) is not None]
        if timed:
            order = {impl: n for n, impl in enumerate(DEFAULT_ORDER)}
            timed.sort(key=lambda p: (p[0], order.get(p[1], len(order))))
            best_t, best = timed[0]
            # the default among the timed baselines; without one, the fastest
            dflt = default_impl([i for _, i in timed if Candidate.parse(i).is_baseline]) or best
            times = {i: t for t, i in timed}
            dflt_t = times[dflt]
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
                if impl not in times:
                    b = benches.get(impl)
                    why = f"{b.status}: {b.reason}" if b is not None else "no benchmark record"
                    rejected[impl] = f"not benchmarked ({why.rstrip(': ')})"
            return Selection(best, True, reason, rejected)
        chosen = default_impl([i for i in validated if Candidate.parse(i).is_baseline] or validated)
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


# --------------------------------------------------------------- candidates
def candidate_status(reason: str) -> str:
    """A losing candidate's status from its rejection reason (``select``'s wording)."""
    if reason.startswith(("slower", "within")):
        return "slower"
    if reason.startswith(("not validated", "not benchmarked", "not run", "not selected", "default until")):
        return "not run"
    return "failed"  # export/compile failed, failed validation, validation error


def candidate_records(sel: Selection, names: Sequence[str], benches: Mapping[str, Any]) -> dict[str, dict]:
    """The bundle index's ``candidates`` field: per candidate name (sorted),
    ``{"median_s", "mean_s", "min_s", "status", "reason"}`` (reason "" for the selected one)."""
    out = {}
    for name in sorted(names):
        b = benches.get(name)
        median = b.median_s if b is not None and b.ok else None
        best = b.min_s if b is not None and b.ok else None
        mean = b.mean_s if b is not None and b.ok else None
        if name == sel.impl:
            status, reason = "selected", ""
        else:
            reason = sel.rejected.get(name, "not selected")
            status = candidate_status(reason)
        out[name] = {"median_s": median, "min_s": best, "status": status, "reason": reason,
                     **({"mean_s": mean} if mean is not None else {})}
    return out


def module_rejections(sel: Selection, names: Sequence[str], benches: Mapping[str, Any]) -> dict[str, str]:
    """``rejected`` per compiled module (``<impl>[+<variant>]``) other than the
    selected one: the reason of its best candidate (its fastest mode, else its
    first). Without explored candidates, ``sel.rejected`` as it is."""
    chosen = Candidate.parse(sel.impl).module if sel.impl else None
    best: dict[str, tuple] = {}
    for name in names:
        module = Candidate.parse(name).module
        b = benches.get(name)
        t = compared_time(b)
        t = float("inf") if t is None else t
        if module != chosen and name in sel.rejected and (module not in best or t < best[module][0]):
            best[module] = (t, sel.rejected[name])
    return {m: r for m, (_, r) in sorted(best.items())}



# ------------------------------------------------------------- torch eager
def kernel_beats_eager(kernel: Mapping | Any, eager: Mapping | Any, margin: float = EAGER_MARGIN) -> bool:
    """Whether a kernel's timing (a ``BenchResult`` or a record with ``mean_s``/
    ``median_s``/``min_s``) beats torch eager's clearly enough to run torch calls: faster
    by more than ``margin`` (``compared_seconds``: means, else medians)."""
    def time_of(r):
        return compared_seconds(r) if isinstance(r, Mapping) else compared_time(r)

    kt, et = time_of(kernel), time_of(eager)
    if kt is None or et is None:
        return True  # nothing to compare: the kernel, as without a baseline
    return kt * (1 + margin) < et


def eager_preference(sig: KernelSignature, sel: Selection, benches: Mapping[str, Any], eager, *,
                     margin: float = EAGER_MARGIN) -> dict | None:
    """The index's ``prefer_eager`` for a measured selection: where the selected
    candidate does not beat torch eager (``eager``, its ``BenchResult`` on the
    same device) clearly (``kernel_beats_eager``), ``{"eager_s", "kernel_s",
    "reason"}`` (``compared_time``, as ``select`` compares); else None. The kernel still ships
    (numpy callers and loaders without torch run it); the loader hands torch
    tensors to torch's op instead, as Inductor's autotuning keeps ATen's
    kernel where its own lose.

    A kernel timed at several sizes (a dynamic one's ``bench_shapes``) gets
    ``by_rows``, ``[[rows, eager faster], ...]`` per size timed, whenever eager
    won at one of them: the loader decides per call by the size nearest in rows
    (log scale); ``eager_s``/``kernel_s`` are the first size's."""
    if not sel.measured or sel.impl is None:
        return None
    kb = benches.get(sel.impl)
    kernel_s, eager_s = compared_time(kb), compared_time(eager)
    if kernel_s is None or eager_s is None:
        return None
    by_rows = _eager_by_rows(sig, kb, eager, margin)
    faster = [rows for rows, won in by_rows if won]
    if kernel_beats_eager(kb, eager, margin) and not faster:
        return None
    out = {"eager_s": eager_s, "kernel_s": kernel_s,
           "reason": f"the kernel not {margin:.0%} faster than torch eager on the build machine: "
                     f"{_us(kernel_s)} ({sel.impl}) vs {_us(eager_s)} "
                     f"({'means per call' if kb.mean_s is not None and eager.mean_s is not None else 'medians'})"}
    if by_rows:
        out["by_rows"] = by_rows
        out["reason"] += f"; at {', '.join(map(str, faster)) or 'no'} of {len(by_rows)} sizes timed (rows)"
    return out


def gate_eager(pref: Mapping | None, validation: Mapping | None) -> tuple[dict | None, str | None]:
    """(``prefer_eager``, why torch calls still run the kernel): ``pref``
    (``eager_preference``'s) where torch eager's results, as the loader would
    route them (``validation``: ``validate.eager_record``'s ``{"status",
    "reason", "by_rows"?}``), passed the kernels' validation; per size for a
    kernel decided per size (eager kept at the sizes where it passed); else
    (None, why). (None, None) where eager was not faster."""
    if not pref:
        return None, None
    status = (validation or {}).get("status")
    if status == ValidationStatus.PASSED:
        return dict(pref), None
    passed = {r for r, ok in (validation or {}).get("by_rows") or () if ok}
    if pref.get("by_rows") and passed:
        by_rows = [[r, bool(won and r in passed)] for r, won in pref["by_rows"]]
        failed = [str(r) for (r, won), (_, kept) in zip(pref["by_rows"], by_rows) if won and not kept]
        if any(kept for _, kept in by_rows):
            return {**pref, "by_rows": by_rows, "reason": pref["reason"] + (
                f"; not at {', '.join(failed)} rows, where torch eager fails validation" if failed else "")}, None
    times = pref["reason"].split(": ", 1)[-1]
    if status in (ValidationStatus.FAILED, ValidationStatus.ERROR):
        return None, f"torch eager {status} validation: {validation.get('reason', '')} (it was faster: {times})"
    return None, f"{NOT_VALIDATED} (it was faster: {times})"


NOT_VALIDATED = "torch eager not validated"  # gate_eager's why where eager has no verdict


def torch_calls_text(pref: Mapping | None, rejected: str | None = None) -> str:
    """Where the loader sends torch tensors of a kernel with ``prefer_eager``
    ``pref`` (None: the kernel): "the kernel", "torch eager", "torch eager (all
    3 sizes)", "eager at 1, 64 rows, else the kernel"; ``rejected``
    (``gate_eager``'s why): "the kernel (torch eager fails validation)"."""
    if rejected:
        return f"the kernel ({NOT_VALIDATED if rejected.startswith(NOT_VALIDATED) else 'torch eager fails validation'})"
    if not pref:
        return "the kernel"
    rows = pref.get("by_rows")
    if not rows:
        return "torch eager"
    if all(won for _, won in rows):
        return f"torch eager (all {len(rows)} sizes)"
    return "eager at " + ", ".join(str(r) for r, won in rows if won) + " rows, else the kernel"


def _eager_by_rows(sig: KernelSignature, kb, eager, margin: float) -> list[list]:
    """``[[rows, eager faster], ...]`` over the sizes both were timed at (two or more), else []."""
    def timed(sizes):
        return {tuple(x["shape"]): x for x in sizes or () if x.get("status") == "ok" and compared_seconds(x)}

    k, e = timed(getattr(kb, "sizes", ())), timed(getattr(eager, "sizes", ()))
    shared = [s for s in k if s in e]
    if len(shared) < 2:
        return []
    lead = len(sig.input_shape) - len(sig.normalized_shape)
    rows = {s: math.prod(s[:lead]) for s in shared}
    return [[rows[s], not kernel_beats_eager(k[s], e[s], margin)] for s in sorted(shared, key=lambda s: (rows[s], s))]
