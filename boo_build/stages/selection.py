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

``decide`` is the one decision the build report, the bundle, ``info`` and
``measure`` use: the selection, why each other candidate lost, the driver,
and where torch tensors go (torch eager where it was clearly faster and its
results passed validation, else the kernel) and why.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..candidates import Candidate
from ..loader.format import CandidateRecord, EagerPreference, ImplRecord, TargetRecord
from ..reasons import LOST_ON_TIME, NOT_RUN, Kind, Reason, with_kind
from ..records import BenchResult, EagerValidation, SizeTiming, ValidationResult, ValidationStatus
from ..signature import IMPLS, KernelSignature
from .traffic import Traffic

# The default implementation where nothing was measured, preferred first:
# ``manual`` is written for IREE. (``signature.IMPLS`` lists the implementations
# in their canonical order, which the records and tables use; this is a choice.)
DEFAULT_PREFERENCE = ("manual", "aten")
MARGIN = 0.03  # the default is kept when within 3 % of the fastest
# torch calls run the kernel only where it beat torch eager by 10 % (compared times): the
# build times the bare kernel, while an application pays the loader's call too
# (docs/validation-and-selection.md has the measurement behind it).
EAGER_MARGIN = 0.10


@dataclass(frozen=True)
class Selection:
    """The candidate selected (None: nothing works), whether by measurement, why
    (``reason``), and why each other one lost (``rejected``): typed reasons."""

    impl: str | None
    measured: bool
    reason: Reason
    rejected: dict[str, Reason] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # reasons given as text (a selection made by hand): their kinds from their words (reasons.with_kind)
        object.__setattr__(self, "reason", with_kind(self.reason, None))
        object.__setattr__(self, "rejected", {i: with_kind(r, None) for i, r in self.rejected.items()})

    def to_json(self) -> dict[str, Any]:
        return {"impl": self.impl, "measured": self.measured, "reason": self.reason.to_json(),
                "rejected": {i: r.to_json() for i, r in sorted(self.rejected.items())}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Selection":
        return cls(impl=d.get("impl"), measured=bool(d.get("measured")),
                   reason=Reason.from_json(d.get("reason"), "selection reason"),
                   rejected={i: Reason.from_json(r, f"rejected {i}") for i, r in (d.get("rejected") or {}).items()})


def default_impl(candidates: Sequence[str]) -> str | None:
    for impl in DEFAULT_PREFERENCE:
        if impl in candidates:
            return impl
    return sorted(candidates)[0] if candidates else None


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def compared_time(b: BenchResult | SizeTiming | None) -> float | None:
    """A benchmark's time for comparisons (``records.compared_seconds``): its
    ``mean_s``, else its median, else its best sample (None when it did not run)."""
    return None if b is None else b.compared_s


def _ordered(impls) -> list[str]:
    known = [i for i in IMPLS if i in impls]
    return known + sorted(i for i in impls if i not in IMPLS)


MODELLED = "least modelled traffic"  # how a selection by the traffic model begins its reason


def _least_traffic(impls: Sequence[str], traffic: Mapping[str, Traffic | None]) -> tuple[str, Traffic] | None:
    """The implementation of ``impls`` with the least modelled bytes per call (fewer
    dispatches, then the default order, breaking ties); None unless every one has a model."""
    models = [(t, i) for i in impls if (t := traffic.get(i)) is not None]
    if not models or len(models) != len(impls):
        return None
    order = {impl: n for n, impl in enumerate(DEFAULT_PREFERENCE)}
    t, i = min(models, key=lambda p: (p[0].modelled_bytes, p[0].dispatches, order.get(p[1], len(order)), p[1]))
    return i, t


def modelled_gate(name: str, traffic: Mapping[str, Traffic | None]) -> str | None:
    """Whether variant ``name`` of a kernel compiles where the traffic model ranks its
    candidates (``traffic``: by candidate name, None where not modelled): None when
    it has the least modelled traffic of them all (``select``'s order: bytes,
    dispatches, then the baselines first), else why not. A baseline always compiles."""
    mine = traffic.get(name)
    if mine is None:
        return "traffic not modelled: not compiled"
    best = _least_traffic([n for n, t in traffic.items() if t is not None], traffic)
    if best is None or best[0] == name:
        return None
    other, model = best
    return f"{MODELLED} is {other}'s ({model.summary()}; this variant {mine.summary()}): not compiled"


def select(sig: KernelSignature, target_name: str, compiled_impls: Sequence[str],
           validations: Mapping[str, ValidationResult | None], benches: Mapping[str, BenchResult | None], *,
           margin: float = MARGIN, traffic: Mapping[str, Traffic | None] | None = None) -> Selection:
    """Pick the implementation for ``sig`` on ``target_name``.

    ``validations[impl]`` / ``benches[impl]``: the records, or None (missing).
    ``traffic[impl]``: a GPU module's traffic model (``stages/traffic.py``): where
    nothing ran on a device, the least modelled traffic is the default (fewer
    dispatches breaking ties), said to be modelled, not measured."""
    compiled = _ordered(set(compiled_impls))
    rejected: dict[str, Reason] = {}
    for impl in _ordered(set(validations) | set(benches)):
        if impl not in compiled:
            rejected[impl] = Reason(Kind.COMPILE_FAILED, "compile failed")

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
            rejected[impl] = Reason(Kind.VALIDATION_FAILED,
                                    f"failed validation: {v.reason}" if v.reason else "failed validation")
        else:  # error
            rejected[impl] = Reason(Kind.VALIDATION_ERROR,
                                    f"validation error: {v.reason}" if v.reason else "validation error")

    if validated:
        for impl, why in not_run:
            rejected[impl] = Reason(Kind.NOT_VALIDATED, f"not validated ({why or 'not run'})")
        for impl in unchecked:
            rejected[impl] = Reason(Kind.NOT_VALIDATED, "not validated (no validation record)")
        timed = [(t, i) for i in validated if (t := compared_time(benches.get(i))) is not None]
        if timed:
            order = {impl: n for n, impl in enumerate(DEFAULT_PREFERENCE)}
            timed.sort(key=lambda p: (p[0], order.get(p[1], len(order))))
            best_t, best = timed[0]
            # the default among the timed baselines; without one, the fastest
            dflt = default_impl([i for _, i in timed if Candidate.parse(i).is_baseline]) or best
            times = {i: t for t, i in timed}
            dflt_t = times[dflt]
            if dflt != best and dflt_t <= best_t * (1 + margin):
                rejected[best] = Reason(Kind.DEFAULT_KEPT, f"within {margin:.0%} of {dflt} ({_us(best_t)} vs "
                                                           f"{_us(dflt_t)}): default {dflt} kept")
                best, best_t = dflt, dflt_t
                reason = Reason(Kind.WITHIN_MARGIN, f"default within {margin:.0%} of the fastest validated "
                                                    f"({_us(best_t)})")
            else:
                others = ", ".join(f"{i} {_us(t)}" for t, i in timed if i != best)
                reason = Reason(Kind.FASTEST, f"fastest validated: {_us(best_t)}" + (f" (vs {others})" if others
                                                                                     else ""))
            for t, impl in timed:
                if impl != best and impl not in rejected:
                    rejected[impl] = Reason(Kind.SLOWER, f"slower: {_us(t)} vs {_us(best_t)} ({best})")
            for impl in validated:
                if impl not in times:
                    b = benches.get(impl)
                    why = f"{b.status}: {b.reason}" if b is not None else "no benchmark record"
                    rejected[impl] = Reason(Kind.NOT_BENCHMARKED, f"not benchmarked ({why.rstrip(': ')})")
            return Selection(best, True, reason, rejected)
        chosen = default_impl([i for i in validated if Candidate.parse(i).is_baseline] or validated)
        assert chosen is not None  # validated is not empty
        b = benches.get(chosen)
        why = f"benchmark {b.status}" + (f": {b.reason}" if b.reason else "") if b is not None else "not benchmarked"
        return Selection(chosen, False, Reason(Kind.DEFAULT, f"default among validated ({why})"), rejected)

    keep = [i for i, _ in not_run] + unchecked
    if keep:
        chosen = default_impl(keep)
        reasons = dict(not_run)
        # a not-run record's reason says why (stages/not_run.py: "not run: ...")
        why = (reasons[chosen] or "not run: no device") if chosen in reasons else "not run: no validation record"
        modelled = _least_traffic(keep, traffic or {})
        if modelled is not None:
            chosen, model = modelled
            others = ", ".join(f"{i} {m.ratio:.2f}x" for i in keep if i != chosen and (m := (traffic or {}).get(i)))
            return Selection(chosen, False, Reason(Kind.MODELLED, f"{MODELLED}, until measured: {model.summary()}"
                                                   + (f" (vs {others})" if others else "") + f"; {why}"), rejected)
        return Selection(chosen, False, Reason(Kind.UNMEASURED, f"default until measured: {why}"), rejected)

    detail = "; ".join(f"{i}: {r}" for i, r in sorted(rejected.items())) or "nothing compiled"
    return Selection(None, False, Reason(Kind.NONE_AVAILABLE, f"no implementation available for {sig.key} on "
                                                              f"{target_name}: {detail}"), rejected)


# --------------------------------------------------------------- candidates
def candidate_status(reason: Reason) -> str:
    """A losing candidate's status from its rejection reason's kind."""
    if reason.kind in LOST_ON_TIME:
        return "slower"
    if reason.kind in NOT_RUN:
        return "not run"
    return "failed"  # export/compile failed, failed validation, validation error


def candidate_records(sel: Selection, names: Sequence[str],
                      benches: Mapping[str, BenchResult | None]) -> dict[str, CandidateRecord]:
    """The bundle index's ``candidates`` field: per candidate name (sorted), its
    times, status and why it lost (reason "" for the selected one)."""
    out = {}
    for name in sorted(names):
        b = benches.get(name)
        ran = b if b is not None and b.ok else None  # its times, where it ran
        if name == sel.impl:
            status, reason = "selected", Reason(Kind.SELECTED, "")
        else:
            reason = sel.rejected.get(name) or Reason(Kind.NOT_SELECTED, "not selected")
            status = candidate_status(reason)
        out[name] = CandidateRecord(status=status, reason=reason, median_s=ran.median_s if ran else None,
                                    min_s=ran.min_s if ran else None, mean_s=ran.mean_s if ran else None)
    return out


def module_rejections(sel: Selection, names: Sequence[str],
                      benches: Mapping[str, BenchResult | None]) -> dict[str, Reason]:
    """``rejected`` per compiled module (``<impl>[+<variant>]``) other than the
    selected one: the reason of its best candidate (its fastest mode, else its
    first). Without explored candidates, ``sel.rejected`` as it is."""
    chosen = Candidate.parse(sel.impl).module if sel.impl else None
    best: dict[str, tuple[float, Reason]] = {}
    for name in names:
        module = Candidate.parse(name).module
        t = compared_time(benches.get(name))
        t = math.inf if t is None else t
        if module != chosen and name in sel.rejected and (module not in best or t < best[module][0]):
            best[module] = (t, sel.rejected[name])
    return {m: r for m, (_, r) in sorted(best.items())}


# ------------------------------------------------------------- torch eager
Timed = BenchResult | SizeTiming


def kernel_beats_eager(kernel: Timed, eager: Timed, margin: float = EAGER_MARGIN) -> bool:
    """Whether a kernel's timing beats torch eager's clearly enough to run torch
    calls: faster by more than ``margin`` in the times the selection compares."""
    kt, et = kernel.compared_s, eager.compared_s
    if kt is None or et is None:
        return True  # nothing to compare: the kernel, as without a baseline
    return kt * (1 + margin) < et


def eager_preference(sig: KernelSignature, sel: Selection, benches: Mapping[str, BenchResult | None],
                     eager: BenchResult, *, margin: float = EAGER_MARGIN) -> EagerPreference | None:
    """The index's ``prefer_eager`` for a measured selection: where the selected
    candidate does not beat torch eager (``eager``, its ``BenchResult`` on the
    same device) clearly (``kernel_beats_eager``); else None. The kernel still ships
    (numpy callers and loaders without torch run it); the loader hands torch
    tensors to torch's op instead, as Inductor's autotuning keeps ATen's
    kernel where its own lose.

    A kernel timed at several sizes (a dynamic one's ``bench_shapes``) gets
    ``by_rows``, ``((rows, eager faster), ...)`` per size timed, whenever eager
    won at one of them: the loader decides per call by the size nearest in rows
    (log scale); ``eager_s``/``kernel_s`` are the first size's."""
    if not sel.measured or sel.impl is None:
        return None
    kb = benches.get(sel.impl)
    kernel_s, eager_s = compared_time(kb), compared_time(eager)
    if kb is None or kernel_s is None or eager_s is None:
        return None
    by_rows = _eager_by_rows(sig, kb, eager, margin)
    faster = [rows for rows, won in by_rows if won]
    if kernel_beats_eager(kb, eager, margin) and not faster:
        return None
    times = (f"{_us(kernel_s)} ({sel.impl}) vs {_us(eager_s)} "
             f"({'means per call' if kb.mean_s is not None and eager.mean_s is not None else 'medians'})")
    if by_rows:
        times += f"; at {', '.join(map(str, faster)) or 'no'} of {len(by_rows)} sizes timed (rows)"
    reason = f"the kernel not {margin:.0%} faster than torch eager on the build machine: {times}"
    return EagerPreference(eager_s=eager_s, kernel_s=kernel_s, reason=reason, by_rows=tuple(by_rows) or None,
                           times=times)


def gate_eager(pref: EagerPreference | None,
               validation: EagerValidation | None) -> tuple[EagerPreference | None, Reason | None]:
    """(``prefer_eager``, why torch calls still run the kernel): ``pref``
    (``eager_preference``'s) where torch eager's results, as the loader would
    route them (``validate.eager_record``), passed the kernels' validation; per
    size for a kernel decided per size (eager kept at the sizes where it
    passed); else (None, why), why repeating the times eager won by
    (``pref.times``). (None, None) where eager was not faster."""
    if pref is None:
        return None, None
    status = validation.status if validation is not None else None
    if status == ValidationStatus.PASSED:
        return pref, None
    passed = validation.passed_rows() if validation is not None else frozenset()
    if pref.by_rows and passed:
        by_rows = tuple((r, bool(won and r in passed)) for r, won in pref.by_rows)
        failed = [str(r) for (r, won), (_, kept) in zip(pref.by_rows, by_rows) if won and not kept]
        if any(kept for _, kept in by_rows):
            return dataclasses.replace(pref, by_rows=by_rows, reason=pref.reason + (
                f"; not at {', '.join(failed)} rows, where torch eager fails validation" if failed else "")), None
    times = pref.times
    if validation is not None and status in (ValidationStatus.FAILED, ValidationStatus.ERROR):
        return None, Reason(Kind.EAGER_FAILED, f"torch eager {status} validation: {validation.reason} "
                                               f"(it was faster: {times})")
    return None, Reason(Kind.EAGER_NOT_VALIDATED, f"{NOT_VALIDATED} (it was faster: {times})")


NOT_VALIDATED = "torch eager not validated"  # gate_eager's why where eager has no verdict


def torch_calls_text(pref: EagerPreference | None, rejected: Reason | None = None) -> str:
    """Where the loader sends torch tensors of a kernel with ``prefer_eager``
    ``pref`` (None: the kernel): "the kernel", "torch eager", "torch eager (all
    3 sizes)", "eager at 1, 64 rows, else the kernel"; ``rejected``
    (``gate_eager``'s why): "the kernel (torch eager fails validation)"."""
    if rejected:
        return ("the kernel (torch eager not validated)" if rejected.kind is Kind.EAGER_NOT_VALIDATED
                else "the kernel (torch eager fails validation)")
    if pref is None:
        return "the kernel"
    rows = pref.by_rows
    if not rows:
        return "torch eager"
    if all(won for _, won in rows):
        return f"torch eager (all {len(rows)} sizes)"
    return "eager at " + ", ".join(str(r) for r, won in rows if won) + " rows, else the kernel"


def _eager_by_rows(sig: KernelSignature, kb: BenchResult, eager: BenchResult, margin: float) -> list[tuple[int, bool]]:
    """``[(rows, eager faster), ...]`` over the sizes both were timed at (two or more), else []."""
    def timed(sizes: Sequence[SizeTiming]) -> dict[tuple[int, ...], SizeTiming]:
        return {x.shape: x for x in sizes if x.compared_s}

    k, e = timed(kb.sizes), timed(eager.sizes)
    shared = [s for s in k if s in e]
    if len(shared) < 2:
        return []
    rows = {s: sig.rows_of(s) for s in shared}
    return [(rows[s], not kernel_beats_eager(k[s], e[s], margin)) for s in sorted(shared, key=lambda s: (rows[s], s))]


# ----------------------------------------------------------------- decision
@dataclass(frozen=True)
class Decision:
    """What ships for one signature on one target, and why (``decide``).

    ``selection``: the shipped candidate (``selection.impl``, None when nothing
    works) and why each other lost (``selection.rejected``, per candidate);
    ``rejected``: the same per compiled module, as the bundle index keeps it;
    ``candidates``: every candidate's timing and status where candidates were
    tried (else None); ``mode``: the driver the shipped candidate runs on where
    it is not the target's; ``prefer_eager``: where torch tensors go to torch
    eager instead; ``eager_rejected``: why they do not although eager was faster.
    Every reason is typed (``reasons.Reason``)."""

    selection: Selection
    rejected: Mapping[str, Reason]
    candidates: Mapping[str, CandidateRecord] | None = None
    mode: str | None = None
    prefer_eager: EagerPreference | None = None
    eager_rejected: Reason | None = None

    def __post_init__(self) -> None:
        # as Selection's: reasons given as text get their kinds from their words
        object.__setattr__(self, "rejected", {i: with_kind(r, None) for i, r in self.rejected.items()})
        if self.eager_rejected is not None:
            object.__setattr__(self, "eager_rejected", with_kind(self.eager_rejected, None))

    @property
    def module(self) -> str | None:
        """The shipped module (``<impl>[+<variant>]``), None when nothing works."""
        return Candidate.parse(self.selection.impl).module if self.selection.impl else None

    @property
    def available(self) -> bool:
        return self.selection.impl is not None

    @property
    def unavailable_reason(self) -> Reason:
        """Why nothing ships (an unavailable entry's reason): each module's rejection, else the selection's."""
        text = "; ".join(f"{i}: {r}" for i, r in sorted(self.rejected.items())) or self.selection.reason.text
        return Reason(Kind.NONE_AVAILABLE, text)

    def to_json(self) -> dict[str, Any]:
        """The select record's form (``SelectRecord``): every field, reasons as ``{"kind", "text"}``."""
        return {"selection": self.selection.to_json(),
                "rejected": {m: r.to_json() for m, r in self.rejected.items()},
                "candidates": None if self.candidates is None else {n: c.to_json() for n, c in self.candidates.items()},
                "mode": self.mode,
                "prefer_eager": None if self.prefer_eager is None else self.prefer_eager.to_json(),
                "eager_rejected": None if self.eager_rejected is None else self.eager_rejected.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Decision":
        cands, pref, why = d.get("candidates"), d.get("prefer_eager"), d.get("eager_rejected")
        return cls(selection=Selection.from_json(d["selection"]),
                   rejected={m: Reason.from_json(r, f"rejected {m}") for m, r in (d.get("rejected") or {}).items()},
                   candidates=None if cands is None else {n: CandidateRecord.from_json(c, f"candidate {n}")
                                                          for n, c in cands.items()},
                   mode=d.get("mode"), prefer_eager=None if pref is None else EagerPreference.from_json(pref),
                   eager_rejected=None if why is None else Reason.from_json(why, "eager_rejected"))

    @classmethod
    def from_target_record(cls, te: TargetRecord) -> "Decision":
        """The decision a bundle's target entry records (what ``info`` shows): the
        shipped candidate is its module on its driver."""
        module, mode = te.selected, te.mode
        impl = f"{module}@{mode}" if module is not None and mode else module
        reason = te.reason if te.reason is not None else Reason(Kind.UNKNOWN, "")
        rejected = dict(te.rejected or {})
        return cls(selection=Selection(impl, True, reason, rejected), rejected=rejected, candidates=te.candidates,
                   mode=mode, prefer_eager=te.prefer_eager, eager_rejected=te.eager_rejected)

    @property
    def torch_calls(self) -> str:
        """Where the loader sends torch tensors, in words (``torch_calls_text``)."""
        return torch_calls_text(self.prefer_eager, self.eager_rejected)


def decide(sig: KernelSignature, target_name: str, names: Sequence[str], compiled: Sequence[str],
           validations: Mapping[str, ValidationResult | None], benches: Mapping[str, BenchResult | None], *,
           not_compiled: Mapping[str, Reason] | None = None, explored: bool = False,
           eager: BenchResult | None = None, eager_validation: EagerValidation | None = None,
           margin: float = MARGIN, traffic: Mapping[str, Traffic | None] | None = None) -> Decision:
    """The decision for ``sig`` on ``target_name`` among candidates ``names``
    (``compiled``: those that compiled; ``validations``/``benches``: their
    records by name). ``not_compiled[name]``: why one did not compile, in place
    of "compile failed". ``explored``: the candidates were tried (their records
    and the module rejections go to the index). ``eager``: torch eager's
    benchmark on the same device, and ``eager_validation`` its results'
    verdict: torch tensors go to torch only where it was clearly faster
    (``eager_preference``) and passed (``gate_eager``). ``traffic``: as ``select``'s."""
    sel = select(sig, target_name, compiled, validations, benches, margin=margin, traffic=traffic)
    why_not = not_compiled or {}
    sel = dataclasses.replace(sel, rejected={i: (why_not.get(i, r) if i not in compiled else r)
                                             for i, r in sel.rejected.items()})
    cands, rejected, mode = None, dict(sel.rejected), None
    if explored:
        cands = candidate_records(sel, names, benches)
        rejected = module_rejections(sel, names, benches)
        if sel.impl is not None:
            mode = Candidate.parse(sel.impl).mode or None
    pref, why = None, None
    if eager is not None:
        pref, why = gate_eager(eager_preference(sig, sel, benches, eager), eager_validation)
    return Decision(selection=sel, rejected=dict(sorted(rejected.items())), candidates=cands, mode=mode,
                    prefer_eager=pref, eager_rejected=why)


def target_entry(decision: Decision, impls: Mapping[str, ImplRecord], rejected: Mapping[str, Reason] | None = None,
                 unavailable: Reason | None = None, **extra: Any) -> TargetRecord:
    """The bundle index's entry for ``decision``: the one way the pack task and
    ``boo-build measure`` write one. Available where the shipped module is among
    ``impls`` (the packed modules' records), with the decision's reason, driver,
    candidates and torch routing; else unavailable, ``unavailable`` (or the
    decision's ``unavailable_reason``) saying why. ``rejected``: the index's
    rejections (default the decision's; a writer adds its own). ``extra``: fields
    of the entry the decision does not make (measure's ``measured``)."""
    rejected = dict(sorted((decision.rejected if rejected is None else rejected).items()))
    cands = dict(sorted(decision.candidates.items())) if decision.candidates else None
    if decision.module is not None and decision.module in impls:
        return TargetRecord.available(decision.module, impls, decision.selection.reason, rejected, mode=decision.mode,
                                      candidates=cands, prefer_eager=decision.prefer_eager,
                                      eager_rejected=decision.eager_rejected, **extra)
    return TargetRecord.unavailable(unavailable or decision.unavailable_reason, rejected, candidates=cands, **extra)
