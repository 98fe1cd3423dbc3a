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
from ..loader.format import CandidateRecord, CompiledVerdict, EagerPreference, ImplRecord, TargetRecord
from ..ops.base import IMPLS
from ..reasons import LOST_ON_TIME, NOT_RUN, Kind, Reason, with_kind
from ..records import BenchResult, EagerValidation, ValidationResult, ValidationStatus
from ..signature import KernelSignature
from . import comparison
from .comparison import RoundsRecord, Verdict
from .routing import (  # where torch calls go: routing.py (re-exported: the selection's one surface)
    Timing,
    compared_time,
    compiled_by_rounds,
    eager_by_rounds,
    eager_preference,
    gate_eager,
    timing_of,
    torch_calls_text,
    us,
)
from .traffic import Traffic

# The default implementation where nothing was measured, preferred first:
# ``manual`` is written for IREE. (``ops.base.IMPLS`` lists the implementations
# in their canonical order, which the records and tables use; this is a choice.)
DEFAULT_PREFERENCE = ("manual", "aten")
# the margins (comparison.py, where paired rounds decide with them and their noise)
MARGIN = comparison.MARGIN  # the default is kept when within 10 % of the fastest
EAGER_MARGIN = comparison.EAGER_MARGIN  # torch calls run the kernel only where it beat torch eager by 10 %

__all__ = ["DEFAULT_PREFERENCE", "Decision", "EAGER_MARGIN", "MARGIN", "MODELLED", "Selection", "candidate_records", "candidate_status", "decide", "default_impl", "modelled_gate", "module_rejections", "preference_order", "select", "target_entry"]


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


def preference_order(names: Sequence[str], first: str | None = None) -> list[str]:
    """Candidates most preferred first: ``first`` (the previous build's choice, kept
    unless the rounds decide against it: ``comparison.Previous``) where among them, then
    the baselines in ``DEFAULT_PREFERENCE`` order, then each implementation's variants
    and modes, the target's own driver and flags before others, and last the tuned
    configurations (``candidates.tune_params``): one ships only where it is faster beyond
    the noise than every candidate a build without tuning would choose among. A tie of the
    paired rounds goes to the most preferred (``comparison.choose``)."""
    order = {impl: n for n, impl in enumerate(DEFAULT_PREFERENCE)}

    def key(name: str) -> tuple:
        c = Candidate.parse(name)
        return (name != first, not c.is_baseline, c.tuned, order.get(c.impl, len(order)), bool(c.variant),
                bool(c.mode), name)
    return sorted(names, key=key)


def default_impl(candidates: Sequence[str]) -> str | None:
    for impl in DEFAULT_PREFERENCE:
        if impl in candidates:
            return impl
    return sorted(candidates)[0] if candidates else None


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
    dispatches, then the baselines first), else why not. A baseline always compiles.
    A build with ``--all-variants`` gives a variant its own model alone: it compiles
    wherever it is modelled, and ``select`` still ships the least modelled traffic."""
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
           margin: float = MARGIN, traffic: Mapping[str, Traffic | None] | None = None,
           rounds: RoundsRecord | None = None) -> Selection:
    """Pick the implementation for ``sig`` on ``target_name``.

    ``validations[impl]`` / ``benches[impl]``: the records, or None (missing).
    ``traffic[impl]``: a GPU module's traffic model (``stages/traffic.py``): where
    nothing ran on a device, the least modelled traffic is the default (fewer
    dispatches breaking ties), said to be modelled, not measured.
    ``rounds``: the kernel's benchmark in paired rounds (``comparison``): where it
    timed the validated candidates, they are compared there, with their noise
    (``_by_rounds``); else by each record's compared time."""
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
        if rounds is not None and rounds.sizes and any(i in rounds.sizes[0].times for i in validated):
            return _by_rounds(rounds, validated, rejected, benches, margin)
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
                rejected[best] = Reason(Kind.DEFAULT_KEPT, f"within {margin:.0%} of {dflt} ({us(best_t)} vs "
                                                           f"{us(dflt_t)}): default {dflt} kept")
                best, best_t = dflt, dflt_t
                reason = Reason(Kind.WITHIN_MARGIN, f"default within {margin:.0%} of the fastest validated "
                                                    f"({us(best_t)})")
            else:
                others = ", ".join(f"{i} {us(t)}" for t, i in timed if i != best)
                reason = Reason(Kind.FASTEST, f"fastest validated: {us(best_t)}" + (f" (vs {others})" if others
                                                                                     else ""))
            for t, impl in timed:
                if impl != best and impl not in rejected:
                    rejected[impl] = Reason(Kind.SLOWER, f"slower: {us(t)} vs {us(best_t)} ({best})")
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
        # validated but not timed (a software device's timings are not a GPU's): as a GPU without a device
        modelled = _least_traffic(validated, traffic or {})
        if modelled is not None:
            chosen, model = modelled
            others = ", ".join(f"{i} {m.ratio:.2f}x" for i in validated
                               if i != chosen and (m := (traffic or {}).get(i)))
            return Selection(chosen, False, Reason(Kind.MODELLED, f"{MODELLED} among validated, until measured: "
                                                   f"{model.summary()}" + (f" (vs {others})" if others else "")
                                                   + f"; {why}"), rejected)
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
def _by_rounds(rounds: RoundsRecord, validated: Sequence[str], rejected: dict[str, Reason],
              benches: Mapping[str, BenchResult | None], margin: float) -> Selection:
    """``select``'s choice among the validated candidates the paired rounds timed (at
    the first size): the fastest, or the most preferred of those it cannot be told
    from (within the margin, or inside the noise after the re-measurements: a tie,
    ``comparison.choose``); each other one rejected as slower or as a tie, with the
    paired ratio and its interval."""
    r0 = rounds.sizes[0]
    kept = rounds.previous.candidate if rounds.previous is not None else None
    pref = preference_order([i for i in validated if i in r0.times], first=kept)
    choice = comparison.choose(r0, pref, margin, hold=rounds.holds)
    w, f = choice.winner, choice.fastest
    tw = r0.median(w)
    why_w = "kept from the previous build" if w == kept else "preferred"
    held = rounds.holds is not None and w == rounds.holds
    for c in pref:
        if c == w:
            continue
        p = r0.pair(c, w)
        v = Verdict.HELD if held else Verdict.TIE if c == f else choice.verdicts[c]
        if v is Verdict.HELD:
            rejected[c] = Reason(Kind.TIE, f"not decided against {w} ({_tie_words(v, margin)}): {p.text()}; "
                                           f"{w} {why_w}")
        elif v in (Verdict.TIE, Verdict.NOISE, Verdict.UNREPLICATED):
            rejected[c] = Reason(Kind.TIE, f"tie with {w} ({_tie_words(v, margin)}): {p.text()}; {w} {why_w}")
        else:  # decided against the fastest (which a tie may not ship): say so, with that comparison
            by = f"{f}, the fastest" if f != w else w
            rejected[c] = Reason(Kind.SLOWER, f"slower: {us(r0.median(c))} vs {us(r0.median(f))} ({by}); "
                                 f"{r0.pair(c, f).text()}")
    for impl in validated:
        if impl not in r0.times and impl not in rejected:
            b = benches.get(impl)
            why = f"{b.status}: {b.reason}" if b is not None else "not timed in the rounds"
            rejected[impl] = Reason(Kind.NOT_BENCHMARKED, f"not benchmarked ({why.rstrip(': ')})")
    others = ", ".join(f"{c} {us(r0.median(c))}" for c in pref if c != w)
    if choice.tie:
        p = r0.pair(f, w)
        why = _tie_words(Verdict.HELD if held else choice.verdicts.get(w, Verdict.TIE), margin)
        reason = Reason(Kind.TIED, f"tie ({why}) with the fastest, {f} ({p.text()}): {w} {why_w}, {us(tw)}")
    else:
        reason = Reason(Kind.FASTEST, f"fastest validated: {us(tw)}" + (f" (vs {others})" if others else "")
                        + f"; paired rounds: {r0.n}")
    return Selection(w, True, reason, rejected)


def _tie_words(v: Verdict, margin: float) -> str:
    """Why two candidates are a tie, in words."""
    return {Verdict.TIE: f"within {margin:.0%}", Verdict.NOISE: "inside the noise",
            Verdict.UNREPLICATED: "faster, but not in every pass",
            Verdict.HELD: "timed on a busy machine, against a decision made on a quiet one"}.get(v, str(v))


def candidate_status(reason: Reason) -> str:
    """A losing candidate's status from its rejection reason's kind."""
    if reason.kind is Kind.TIE:
        return "tie"
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
    eager instead; ``eager_rejected``: why they do not although eager was faster;
    ``timing``: how the timings were taken, where in paired rounds; ``vs_compiled``:
    the shipped candidate against torch.compile, what ``torch.compile(backend="boo")``
    decides on (``routing.compiled_by_rounds``). Every reason is typed (``reasons.Reason``)."""

    selection: Selection
    rejected: Mapping[str, Reason]
    candidates: Mapping[str, CandidateRecord] | None = None
    mode: str | None = None
    prefer_eager: EagerPreference | None = None
    eager_rejected: Reason | None = None
    timing: Timing | None = None
    vs_compiled: CompiledVerdict | None = None

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
                "eager_rejected": None if self.eager_rejected is None else self.eager_rejected.to_json(),
                "timing": None if self.timing is None else self.timing.to_json(),
                **({} if self.vs_compiled is None else {"vs_compiled": self.vs_compiled.to_json()})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Decision":
        cands, pref, why, timing = d.get("candidates"), d.get("prefer_eager"), d.get("eager_rejected"), d.get("timing")
        vs = d.get("vs_compiled")
        return cls(selection=Selection.from_json(d["selection"]),
                   rejected={m: Reason.from_json(r, f"rejected {m}") for m, r in (d.get("rejected") or {}).items()},
                   candidates=None if cands is None else {n: CandidateRecord.from_json(c, f"candidate {n}")
                                                          for n, c in cands.items()},
                   mode=d.get("mode"), prefer_eager=None if pref is None else EagerPreference.from_json(pref),
                   eager_rejected=None if why is None else Reason.from_json(why, "eager_rejected"),
                   timing=None if timing is None else Timing.from_json(timing),
                   vs_compiled=None if vs is None else CompiledVerdict.from_json(vs))

    @classmethod
    def from_target_record(cls, te: TargetRecord) -> "Decision":
        """The decision a bundle's target entry records (what ``info`` shows): the
        shipped candidate is its module on its driver."""
        module, mode = te.selected, te.mode
        impl = f"{module}@{mode}" if module is not None and mode else module
        reason = te.reason if te.reason is not None else Reason(Kind.UNKNOWN, "")
        rejected = dict(te.rejected or {})
        return cls(selection=Selection(impl, True, reason, rejected), rejected=rejected, candidates=te.candidates,
                   mode=mode, prefer_eager=te.prefer_eager, eager_rejected=te.eager_rejected,
                   vs_compiled=te.vs_compiled)

    @property
    def torch_calls(self) -> str:
        """Where the loader sends torch tensors, in words (``torch_calls_text``)."""
        return torch_calls_text(self.prefer_eager, self.eager_rejected)


def decide(sig: KernelSignature, target_name: str, names: Sequence[str], compiled: Sequence[str],
           validations: Mapping[str, ValidationResult | None], benches: Mapping[str, BenchResult | None], *,
           not_compiled: Mapping[str, Reason] | None = None, explored: bool = False,
           eager: BenchResult | None = None, eager_validation: EagerValidation | None = None,
           margin: float = MARGIN, traffic: Mapping[str, Traffic | None] | None = None,
           rounds: RoundsRecord | None = None) -> Decision:
    """The decision for ``sig`` on ``target_name`` among candidates ``names``
    (``compiled``: those that compiled; ``validations``/``benches``: their
    records by name). ``not_compiled[name]``: why one did not compile, in place
    of "compile failed". ``explored``: the candidates were tried (their records
    and the module rejections go to the index). ``eager``: torch eager's
    benchmark on the same device, and ``eager_validation`` its results'
    verdict: torch tensors go to torch only where it was clearly faster
    (``eager_preference``) and passed (``gate_eager``). ``traffic``: as ``select``'s.
    ``rounds``: the kernel's benchmark in paired rounds (``comparison``): the
    candidates, and the selected one against torch eager where ``eager`` is given,
    are decided there, with their noise (``eager_by_rounds``); ``timing`` says how."""
    sel = select(sig, target_name, compiled, validations, benches, margin=margin, traffic=traffic, rounds=rounds)
    why_not = not_compiled or {}
    sel = dataclasses.replace(sel, rejected={i: (why_not.get(i, r) if i not in compiled else r)
                                             for i, r in sel.rejected.items()})
    cands, rejected, mode = None, dict(sel.rejected), None
    if explored:
        cands = candidate_records(sel, names, benches)
        rejected = module_rejections(sel, names, benches)
        if sel.impl is not None:
            mode = Candidate.parse(sel.impl).mode or None
    pref, why, vs = None, None, None
    timing = timing_of(sig, sel, rounds) if rounds is not None else None
    if eager is not None:
        paired = rounds if timing is not None and timing.eager is not None else None
        faster = (eager_by_rounds(sig, sel, paired) if paired is not None
                  else eager_preference(sig, sel, benches, eager))
        pref, why = gate_eager(faster, eager_validation)
        if paired is not None:
            vs = compiled_by_rounds(sig, sel, paired)
    return Decision(selection=sel, rejected=dict(sorted(rejected.items())), candidates=cands, mode=mode,
                    prefer_eager=pref, eager_rejected=why, timing=timing, vs_compiled=vs)


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
                                      eager_rejected=decision.eager_rejected,
                                      timing=None if decision.timing is None else decision.timing.to_json(),
                                      vs_compiled=decision.vs_compiled, **extra)
    return TargetRecord.unavailable(unavailable or decision.unavailable_reason, rejected, candidates=cands, **extra)
