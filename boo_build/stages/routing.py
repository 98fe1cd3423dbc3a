"""Where torch calls go: the selected kernel against torch eager (the index's
``prefer_eager`` and ``eager_rejected``), and how a decision's timings were taken
(``Timing``, from paired rounds).

torch eager is the baseline to beat: the loader hands torch tensors to torch's
own op unless the selected kernel beats it clearly (``EAGER_MARGIN``; in paired
rounds beyond their noise too, ``eager_by_rounds``), and only where torch
eager's results, as the loader routes them, pass the kernels' validation
(``gate_eager``). The selection (``selection.decide``) calls these; the report,
the page and ``info`` say where torch calls go in words (``torch_calls_text``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from ..compared import COMPILED_NAME, VsEager
from ..loader.format import CompiledVerdict, EagerPreference
from ..reasons import Kind, Reason
from ..records import BenchResult, EagerValidation, SizeTiming, ValidationStatus
from ..signature import KernelSignature
from . import comparison
from .comparison import COMPILED, COMPILED_CALL, EAGER, RoundsRecord, Verdict


class Selection(Protocol):
    """What routing reads of a selection (``selection.Selection``, which imports this
    module): the implementation that ships, whether timings chose it, why the others lost."""

    @property
    def impl(self) -> str | None: ...

    @property
    def measured(self) -> bool: ...

    @property
    def rejected(self) -> Mapping[str, Reason]: ...

EAGER_MARGIN = comparison.EAGER_MARGIN  # torch calls run the kernel only where it beat torch eager by 10 %


def us(seconds: float) -> str:
    """Seconds as the reasons write them: ``12.3 us``."""
    return f"{seconds * 1e6:.1f} us"


def compared_time(b: BenchResult | SizeTiming | None) -> float | None:
    """A benchmark's time for comparisons (``records.compared_seconds``): its
    ``mean_s``, else its median, else its best sample (None when it did not run)."""
    return None if b is None else b.compared_s


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
    times = (f"{us(kernel_s)} ({sel.impl}) vs {us(eager_s)} "
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


# ------------------------------------------------------------ paired rounds
@dataclass(frozen=True)
class Timing:
    """How a decision's timings were taken, in paired rounds (``comparison``): the
    rounds at the first size, how many candidates tied with the selected one, what
    further passes were for, whether the machine was busy (and the reference
    loop's spread), and the selected kernel against torch eager: its paired ratio
    kernel/eager with its interval, the verdict, and where the ratio was beyond
    ``comparison.FACTOR``, whether a second pass confirmed it."""

    rounds: int
    ties: int
    remeasured: tuple[str, ...]
    busy: bool
    reference_spread: float | None = None
    others: float | None = None  # the CPUs other processes used while it was timed (the most of any size)
    nice: int | None = None  # the benchmark process's nice value
    realtime: bool | None = None  # timed with its threads in the real-time class (bench_process.timing_priority)
    eager: comparison.Pair | None = None
    eager_verdict: Verdict | None = None
    confirmed: bool | None = None
    machine: str | None = None  # where it was timed (benchmark.machine_id): a rebuild there keeps the decision
    waiting: float | None = None  # other processes' threads waiting to run, the median round (the most of any size)
    previous: str | None = None  # the previous build's candidate, first in the preference (comparison.Previous)
    # the selected kernel against torch.compile at the first size (kernel/compiled), as against eager;
    # ``compiled_untimed``: why torch.compile was not timed there (the compile budget, a failed compile)
    compiled: comparison.Pair | None = None
    compiled_verdict: Verdict | None = None
    compiled_confirmed: bool | None = None
    compiled_untimed: str | None = None

    @property
    def vs_eager(self) -> VsEager | None:
        """The selected kernel against torch eager as every view shows it (``compared.VsEager``)."""
        if self.eager is None:
            return None
        return VsEager.from_pair(self.eager.ratio, self.eager.noise, self.eager.n,
                                 "" if self.eager_verdict is None else str(self.eager_verdict))

    @property
    def eager_figure(self) -> float | None:
        """The speed-up over torch eager (eager / kernel) that may be recorded: none
        where a figure beyond ``comparison.FACTOR`` was not confirmed."""
        vs = self.vs_eager
        return None if vs is None or not vs.recorded else vs.speedup

    @property
    def vs_compiled(self) -> VsEager | None:
        """The selected kernel against torch.compile as every view shows it (``compared.VsEager``)."""
        if self.compiled is None:
            return None
        return VsEager.from_pair(self.compiled.ratio, self.compiled.noise, self.compiled.n,
                                 "" if self.compiled_verdict is None else str(self.compiled_verdict), COMPILED_NAME)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rounds": self.rounds, "ties": self.ties, "remeasured": list(self.remeasured),
                               "busy": self.busy, "reference_spread": self.reference_spread, "others": self.others,
                               "nice": self.nice, "realtime": self.realtime, "machine": self.machine,
                               "previous": self.previous, "waiting": self.waiting}
        if self.eager is not None:
            out["eager"] = {**self.eager.to_json(), "verdict": str(self.eager_verdict), "confirmed": self.confirmed}
        if self.compiled is not None:
            out["compiled"] = {**self.compiled.to_json(), "verdict": str(self.compiled_verdict),
                               "confirmed": self.compiled_confirmed}
        elif self.compiled_untimed is not None:
            out["compiled"] = {"untimed": self.compiled_untimed}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Timing":
        e, c = d.get("eager"), d.get("compiled") or {}
        timed = "ratio" in c
        return cls(rounds=int(d["rounds"]), ties=int(d["ties"]), remeasured=tuple(d.get("remeasured") or ()),
                   busy=bool(d["busy"]), reference_spread=d.get("reference_spread"), others=d.get("others"),
                   nice=d.get("nice"), realtime=d.get("realtime"), eager=None if e is None else comparison.Pair.from_json(e),
                   eager_verdict=None if e is None else Verdict(e["verdict"]),
                   confirmed=None if e is None else e.get("confirmed"), machine=d.get("machine"),
                   previous=d.get("previous"), waiting=d.get("waiting"),
                   compiled=comparison.Pair.from_json(c) if timed else None,
                   compiled_verdict=Verdict(c["verdict"]) if timed else None,
                   compiled_confirmed=c.get("confirmed") if timed else None, compiled_untimed=c.get("untimed"))


def _call(sig: KernelSignature, rounds: RoundsRecord, size: comparison.Rounds, kernel: str,
          baseline: str = EAGER) -> comparison.EagerCall:
    """``kernel`` against torch eager (``baseline``: or torch.compile) at one size of ``rounds``,
    kept where the previous build ran those calls of that size on it, and its routing held where
    these rounds ran on a busy machine and it was made on a quiet one (``comparison.Previous.call``)."""
    prev = rounds.previous
    if prev is None:
        return comparison.eager_call(size, kernel, baseline=baseline)
    return prev.call(size, kernel, None if size.shape is None else sig.rows_of(size.shape), baseline)


def timing_of(sig: KernelSignature, sel: Selection, rounds: RoundsRecord) -> Timing | None:
    """The ``Timing`` of a selection made in ``rounds`` (None where it was not)."""
    r0 = rounds.sizes[0] if rounds.sizes else None
    w = sel.impl
    if r0 is None or not sel.measured or w is None or w not in r0.times:
        return None
    ties = sum(1 for r in sel.rejected.values() if r.kind is Kind.TIE)
    call = _call(sig, rounds, r0, w) if EAGER in r0.times else None
    n0 = comparison.less_call(r0)  # torch.compile less its call's fixed cost
    cc = _call(sig, rounds, n0, w, COMPILED) if COMPILED in n0.times and EAGER in r0.times else None
    others = [r.others for r in rounds.sizes if r.others is not None]
    waiting = [r.waiting for r in rounds.sizes if r.waiting is not None]
    return Timing(rounds=r0.n, ties=ties, remeasured=rounds.remeasured, busy=rounds.busy,
                  reference_spread=r0.reference_spread, others=max(others, default=None), nice=r0.nice,
                  realtime=None if any(r.realtime is None for r in rounds.sizes) else all(r.realtime for r in rounds.sizes),
                  eager=None if call is None else call.pair,
                  eager_verdict=None if call is None else call.verdict, confirmed=None if call is None else call.confirmed,
                  machine=rounds.machine, previous=None if rounds.previous is None else rounds.previous.candidate,
                  waiting=max(waiting, default=None), compiled=None if cc is None else cc.pair,
                  compiled_verdict=None if cc is None else cc.verdict,
                  compiled_confirmed=None if cc is None else cc.confirmed,
                  compiled_untimed=n0.untimed.get(COMPILED) if cc is None and EAGER in r0.times else None)


_VERDICT_WORDS = {Verdict.SLOWER: "slower", Verdict.TIE: f"within {EAGER_MARGIN:.0%}",
                  Verdict.NOISE: "inside the noise", Verdict.FASTER: "faster",
                  Verdict.UNCONFIRMED: f"beyond {comparison.FACTOR:g}x and not confirmed by a second pass",
                  Verdict.UNREPLICATED: "faster, but not in every pass",
                  Verdict.KEPT: "torch eager not faster in every pass: the previous build's kernel kept",
                  Verdict.HELD: "timed on a busy machine: the previous build's torch eager kept"}


def eager_by_rounds(sig: KernelSignature, sel: Selection, rounds: RoundsRecord) -> EagerPreference | None:
    """The index's ``prefer_eager`` from paired rounds: torch tensors go to torch eager
    wherever the selected kernel is not faster than eager beyond ``EAGER_MARGIN`` and
    the noise, or where its speed-up was not confirmed (``comparison.eager_call``);
    per size (``by_rows``) for a kernel timed at several; None where it wins everywhere."""
    w = sel.impl
    if not sel.measured or w is None:
        return None
    calls = [(r, _call(sig, rounds, r, w)) for r in rounds.sizes if w in r.times and EAGER in r.times]
    if not calls or all(c.kernel_wins for _, c in calls):
        return None
    r0, c0 = calls[0]
    by_rows = (sorted((sig.rows_of(r.shape), not c.kernel_wins) for r, c in calls if r.shape is not None)
               if len(calls) >= 2 else [])  # by rows, as the loader reads them (the first timed size leads calls)
    times = (f"kernel/eager {c0.pair.text()}: {_VERDICT_WORDS[c0.verdict]} (medians {us(r0.median(w))} ({w}) "
             f"vs {us(r0.median(EAGER))})")
    if by_rows:
        faster = [str(rows) for rows, won in by_rows if won]
        times += f"; at {', '.join(faster) or 'no'} of {len(by_rows)} sizes timed (rows)"
    reason = f"the kernel not {EAGER_MARGIN:.0%} faster than torch eager on the build machine: {times}"
    return EagerPreference(eager_s=r0.median(EAGER), kernel_s=r0.median(w), reason=reason,
                           by_rows=tuple(by_rows) or None, times=times)


def compiled_by_rounds(sig: KernelSignature, sel: Selection, rounds: RoundsRecord) -> CompiledVerdict | None:
    """The index's ``vs_compiled`` from paired rounds: the selected kernel against torch.compile
    of the op (``comparison.COMPILED``) by the rules it meets torch eager with
    (``comparison.eager_call``: beyond ``EAGER_MARGIN`` and the noise, in every pass; a figure
    beyond the factor confirmed), per size (``by_rows``) for a kernel timed at several; untimed,
    with why, where no size timed it (the build's compile budget, a failed compile). None where
    the selection was not made in the rounds (torch.compile(backend="boo") then decides on
    ``prefer_eager``)."""
    w = sel.impl
    if not sel.measured or w is None:
        return None
    raw = {r.shape: r for r in rounds.sizes}
    sizes = [comparison.less_call(r) for r in rounds.sizes if w in r.times and EAGER in r.times]
    if not sizes:
        return None
    calls = [(r, _call(sig, rounds, r, w, COMPILED)) for r in sizes if COMPILED in r.times]
    left = [r for r in sizes if COMPILED not in r.times]
    why_left = left[0].untimed.get(COMPILED, "not timed") if left else ""
    if not calls:
        return CompiledVerdict.untimed(why_left)
    r0, c0 = calls[0]
    by_rows = (sorted((sig.rows_of(r.shape), not c.kernel_wins) for r, c in calls if r.shape is not None)
               if len(calls) >= 2 else [])
    words = _VERDICT_WORDS.get(c0.verdict, str(c0.verdict))
    op, fixed = raw[r0.shape].median(COMPILED), raw[r0.shape].median(COMPILED_CALL)
    reason = (f"kernel/torch.compile {c0.pair.text()}: {words} (medians {us(r0.median(w))} ({w}) vs "
              f"{us(r0.median(COMPILED))}: the op compiled alone {us(op)} less its call's fixed cost {us(fixed)})")
    if by_rows:
        beaten = [str(rows) for rows, graph in by_rows if not graph]
        reason += f"; faster at {', '.join(beaten) or 'no'} of {len(by_rows)} sizes timed (rows)"
    if left:
        reason += f"; {len(left)} size{'s' * (len(left) > 1)} not timed against it ({why_left})"
    return CompiledVerdict(True, reason, graph=not all(c.kernel_wins for _, c in calls),
                           kernel_s=r0.median(w), compiled_s=r0.median(COMPILED), by_rows=tuple(by_rows) or None,
                           op_s=op, call_s=fixed)
