"""Comparisons that carry their uncertainty: a kernel's candidates and torch eager timed in the same rounds.

A kernel's benchmark (``benchmark.bench_candidates``) times every candidate of
it, torch eager and a fixed reference loop in *rounds*: a round times each of
them once (a sample: the mean per call over a batch of calls), in an order that
rotates from round to round. Two subjects timed in the same round ran on the
same machine at nearly the same moment, so the ratio of their samples is a
paired comparison: a load that slows the whole machine slows both and leaves
the ratio, and the spread of the ratios over the rounds says how well the
data tell the two apart.

Per pair (a, b) (``pair``): the median of the per-round ratios a/b, and the half width of its ~95 % interval in
log ratio, ``1.58 IQR / sqrt(n)`` over the log ratios (McGill's notch): the noise. A difference is decided
(``verdict``) where it exceeds both the noise and a margin (``MARGIN`` between candidates, ``EAGER_MARGIN``
against torch eager); within the margin it is a tie; beyond the margin but inside the noise it is measured again
(another pass of rounds, pooled), up to ``MAX_PASSES`` passes, and a tie if it stays there. A tie is decided by
the fixed preference order (the default implementation first, ``choose``) and recorded as a tie, with its
spread, never as a winner.

A decision that departs from the preference (a less preferred candidate shipping because the preferred ones were
slower; torch calls going to the kernel rather than to torch eager) must hold in every pass on its own
(``replicated``): each pass's median ratio beyond the margin, on the same side. Such a decision always takes a
second pass, and one that a pass does not repeat is a tie (``Verdict.UNREPLICATED``). Within-pass noise
understates the spread from one pass, process or build to the next (on a 2-vCPU machine a ``local-task`` kernel
of a few milliseconds had medians 1.8-3.5 ms in four passes of one process): a decision made on one pass's noise
alone flipped between builds.

A rebuild keeps what the previous build decided where the data cannot tell otherwise (``Previous``): the
previous build's candidate (from the same folder, on the same machine, ``Previous.machine``) is the most
preferred, so another candidate replaces it only where it is faster beyond the margin and the noise in every
pass; and torch calls that ran the kernel keep running it unless torch eager is faster beyond the noise in every
pass (``eager_call``'s ``kept``: ``Verdict.KEPT``). A comparison on a margin then flips only where its ratio
crosses the whole band, from one side of the margin beyond the other (a candidate) or from 10 % faster than
torch eager to slower than it, rather than with the noise about the margin itself (selection_stability.md).
Rounds timed on a busy machine do not overturn a decision made on a quiet one at all (``RoundsRecord.holds``):
other work slows some candidates more than others (a ``local-task`` kernel's workers wake into a machine whose
cores are taken: 1.25x against ``local-sync`` beside two CPU hogs, at the benchmark's raised priority), so the
previous decision, candidate and torch calls, stands, said to be held.

A speed-up over torch eager beyond ``FACTOR`` (either way) is measured again
too, and the new pass must agree with the first within their noise
(``eager_call``): one that does not is unconfirmed, recorded so, and its
figure is not.

Whether the machine was busy (``Rounds.busy``): other processes' threads were waiting to run, more than one
(``BUSY_WAITING``) in the median round (``Rounds.waiting``: the machine's runnable threads, ``procs_running`` in
``/proc/stat``, less the benchmark process's own, at the start of each round; at the raised priority below,
other work gets little CPU time but still disturbs the timed threads when they wake), or used ``BUSY_CORES`` or
more CPUs on average while the rounds ran (``Rounds.others``: the machine's CPU time, from ``/proc/stat``, less
the benchmark process's own, over the wall time), or a fixed reference loop (``benchmark.reference_work``) timed
in every round spread (IQR / median) from ``BUSY_SPREAD`` on. (The load average is no measure of it: it lags by
a minute and counts the build's own compiles.) The benchmark process runs at a raised priority where the OS
allows it (``bench_process.raise_priority``, recorded as ``Rounds.nice``), and while it times, its threads in
the real-time class, the timed ones above torch's (``bench_process.timing_priority``, ``Rounds.realtime``), so
other work waits.

Pure Python (stdlib and ``shapes``): the benchmark process decides between passes with it, the
select stage decides on the recorded rounds (``RoundsRecord``), and the tests
on recorded or made-up samples.
"""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..shapes import log_rows, nearest_in_rows

EAGER = "eager"  # the subject of torch eager's samples
# the subject of torch.compile's samples (Inductor's code for the op's eager call: ``benchmark.compiled_fn``),
# the baseline of ``torch.compile(backend="boo")``'s decisions (``records.COMPILED``, the same name)
COMPILED = "torch.compile"
# samples of a trivial function compiled on the op's inputs (``benchmark.compiled_call_fn``: the same tensor
# guards, Dynamo's frame, AOT autograd's and Inductor's wrappers, one tiny kernel, one output), timed in the same
# rounds: the fixed per-call cost a model's graph pays once, not once per norm. The decisions compare the kernel
# with torch.compile's sample less this one, round by round (``less_call``), at least ``CALL_FLOOR`` of it
COMPILED_CALL = "torch.compile call"
CALL_FLOOR = 0.10
# sizes at which a build may time the baseline (two Inductor compiles each, the op's and its call's: 2-5 s on
# a 2-core machine; ``boo-build build --compile-budget``): the default manifest's 42 kernels' first sizes, and 6 more
COMPILE_BUDGET = 48
NOT_ASKED = "not timed: no torch.compile budget given"  # why torch.compile is not in rounds where nothing says
REFERENCE = "reference"  # the subject of the reference loop's samples
MARGIN = 0.10  # candidates: a difference within 10 % is a tie (the preferred one is kept; selection_stability.md)
# torch calls run the kernel only where it beat torch eager by 10 % (compared times): the
# build times the bare kernel, while an application pays the loader's call too
# (docs/validation-and-selection.md has the measurement behind it)
EAGER_MARGIN = 0.10
FACTOR = 5.0  # a speed-up over torch eager beyond this, either way, is measured again before it is recorded
MAX_PASSES = 3  # passes of rounds at most: the first and two more
ROUNDS = 12  # rounds per pass
NOTCH = 1.58  # the median's ~95 % interval: NOTCH * IQR / sqrt(n) (McGill, Tukey and Larsen)
AGREE_FLOOR = math.log(1.05)  # two passes agree within their noise, or within 5 % at least
BUSY_SPREAD = 1.0  # the reference loop's spread (IQR / median) from which the machine was busy
BUSY_CORES = 0.5  # other processes' CPU use (cores, on average over the rounds) from which the machine was busy
# other processes' threads waiting to run (the median round) from which the machine was busy: two CPU hogs
# read 2, a quiet machine 0-1 (a kernel thread, the build's own process waking now and then)
BUSY_WAITING = 1.5


class Verdict(enum.StrEnum):
    """What a pair's rounds say of a against b."""

    FASTER = "faster"  # a faster, beyond the margin and the noise
    SLOWER = "slower"  # a slower, beyond the margin and the noise
    TIE = "tie"  # within the margin
    NOISE = "inside the noise"  # beyond the margin, but the data cannot tell (measure again; then a tie)
    UNREPLICATED = "not in every pass"  # beyond the margin and the noise, but a pass on its own said otherwise (a tie)
    UNCONFIRMED = "unconfirmed"  # a speed-up beyond FACTOR a second pass did not confirm
    KEPT = "kept"  # the kernel ran torch calls in the previous build, and eager is not faster in every pass
    HELD = "held"  # timed on a busy machine: the previous build's decision, made on a quiet one, stands


def _quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    if len(s) == 1:
        return s[0], s[0], s[0]
    q = statistics.quantiles(s, n=4, method="inclusive")
    return q[0], q[1], q[2]


@dataclass(frozen=True)
class Pair:
    """Subjects ``a`` and ``b`` over ``n`` shared rounds: the median per-round ratio a/b
    (below 1: a faster), its quartiles, and ``noise``, the half width of the median's
    interval in log ratio."""

    a: str
    b: str
    ratio: float
    q1: float
    q3: float
    n: int
    noise: float

    @property
    def low(self) -> float:
        """The ratio's interval: ``ratio / e^noise`` to ``ratio * e^noise``."""
        return self.ratio * math.exp(-self.noise)

    @property
    def high(self) -> float:
        return self.ratio * math.exp(self.noise)

    def text(self) -> str:
        """``0.82x (0.78-0.86, 24 rounds)``: the ratio and its interval, in words."""
        return f"{self.ratio:.2f}x ({self.low:.2f}-{self.high:.2f}, {self.n} rounds)"

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "ratio": self.ratio, "q1": self.q1, "q3": self.q3, "n": self.n,
                "noise": self.noise}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Pair":
        return cls(a=d["a"], b=d["b"], ratio=float(d["ratio"]), q1=float(d["q1"]), q3=float(d["q3"]), n=int(d["n"]),
                   noise=float(d["noise"]))


@dataclass(frozen=True)
class Rounds:
    """One input shape's rounds: per subject, its sample in each round (seconds
    per call; every subject has one per round), ``passes``: how many rounds each
    pass of measuring added, in order; ``others``: the CPUs other processes used
    on average while a pass ran, the most of any pass (None: not known), ``cpus``,
    the machine's, ``nice``, the benchmark process's nice value (None: not known), and
    ``realtime``, whether every pass was timed with the timed threads in the real-time
    class (``bench_process.timing_priority``; None: not known), and ``waiting``, other
    processes' threads waiting to run in the median round of a pass, the most of any
    pass (None: not known); ``untimed``: a subject left out of these rounds and why
    (torch.compile's, where the build's compile budget or its compile left it out)."""

    times: Mapping[str, Sequence[float]]
    passes: tuple[int, ...]
    shape: tuple[int, ...] | None = None
    others: float | None = None
    cpus: int = 0
    nice: int | None = None
    realtime: bool | None = None
    waiting: float | None = None
    untimed: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "times", {k: tuple(float(t) for t in v) for k, v in self.times.items()})
        object.__setattr__(self, "passes", tuple(int(p) for p in self.passes))
        lengths = {len(v) for v in self.times.values()}
        if len(lengths) > 1 or (lengths and sum(self.passes) != lengths.pop()):
            raise ValueError(f"rounds of unequal length, or passes {self.passes} that do not add up to them")

    @property
    def n(self) -> int:
        return sum(self.passes)

    def each_pass(self) -> list["Rounds"]:
        """Each pass's rounds on their own, in order."""
        out, at = [], 0
        for k in self.passes:
            out.append(Rounds({s: t[at:at + k] for s, t in self.times.items()}, (k,), self.shape, cpus=self.cpus,
                              nice=self.nice, realtime=self.realtime, waiting=self.waiting, untimed=self.untimed))
            at += k
        return out

    def pair(self, a: str, b: str) -> Pair:
        """``a`` against ``b`` over every round."""
        logs = [math.log(x / y) for x, y in zip(self.times[a], self.times[b]) if x > 0 and y > 0]
        if not logs:
            raise ValueError(f"no rounds with positive times of both {a} and {b}")
        q1, med, q3 = _quartiles(logs)
        noise = NOTCH * (q3 - q1) / math.sqrt(len(logs))
        return Pair(a, b, math.exp(med), math.exp(q1), math.exp(q3), len(logs), noise)

    def median(self, subject: str) -> float:
        return statistics.median(self.times[subject])

    @property
    def reference_spread(self) -> float | None:
        """The reference loop's spread over the rounds (IQR / median), None without it."""
        ref = self.times.get(REFERENCE)
        if not ref:
            return None
        q1, med, q3 = _quartiles(ref)
        return (q3 - q1) / med if med > 0 else None

    @property
    def busy(self) -> bool:
        """Whether the machine was busy while these rounds ran: other processes' threads
        waiting to run (``BUSY_WAITING``), or using ``BUSY_CORES`` or more, or the
        reference loop spread from ``BUSY_SPREAD`` on."""
        spread = self.reference_spread
        return ((self.waiting is not None and self.waiting >= BUSY_WAITING)
                or (self.others is not None and self.others >= BUSY_CORES)
                or (spread is not None and spread >= BUSY_SPREAD))

    def with_pass(self, times: Mapping[str, Sequence[float]], others: float | None = None,
                  realtime: bool | None = None, waiting: float | None = None) -> "Rounds":
        """These rounds and one more pass of ``times`` (every subject's), while other
        processes used ``others`` CPUs and had ``waiting`` threads waiting to run, timed in
        the real-time class or not (``realtime``)."""
        k = {len(v) for v in times.values()}
        if len(k) != 1:
            raise ValueError("a pass of rounds of unequal length")
        merged = {s: tuple(self.times.get(s, ())) + tuple(times[s]) for s in times}
        most = max((o for o in (self.others, others) if o is not None), default=None)
        wait = max((w for w in (self.waiting, waiting) if w is not None), default=None)
        rt = None if self.realtime is None or realtime is None else self.realtime and realtime
        return Rounds(merged, self.passes + (k.pop(),), self.shape, most, self.cpus, self.nice, rt, wait, self.untimed)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": None if self.shape is None else list(self.shape), "passes": list(self.passes),
               "times": {s: list(t) for s, t in sorted(self.times.items())},
               "others": self.others, "cpus": self.cpus, "nice": self.nice, "realtime": self.realtime,
               "waiting": self.waiting}
        if self.untimed:
            out["untimed"] = dict(sorted(self.untimed.items()))
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Rounds":
        others, nice = d.get("others"), d.get("nice")
        return cls(times={s: tuple(t) for s, t in d["times"].items()}, passes=tuple(d["passes"]),
                   shape=None if d.get("shape") is None else tuple(d["shape"]),
                   others=None if others is None else float(others), cpus=int(d.get("cpus") or 0),
                   nice=None if nice is None else int(nice), realtime=d.get("realtime"),
                   waiting=None if d.get("waiting") is None else float(d["waiting"]),
                   untimed={str(k): str(v) for k, v in (d.get("untimed") or {}).items()})


def less_call(r: Rounds) -> Rounds:
    """``r`` as torch.compile's decisions read it: its samples less its call's (``COMPILED_CALL``) in
    the same round, at least ``CALL_FLOOR`` of its own (noise can make the difference nil or
    negative); the recorded rounds keep both. Rounds timed without the call (an earlier build) leave
    torch.compile out, saying why (their figure pays the call per norm: a rebuild times it)."""
    c, t = r.times.get(COMPILED), r.times.get(COMPILED_CALL)
    if c is None:
        return r
    if t is None:
        return replace(r, times={k: v for k, v in r.times.items() if k != COMPILED},
                       untimed={**r.untimed, COMPILED: "not timed: no torch.compile call cost in these rounds "
                                "(an earlier build's): build again to time it"})
    return replace(r, times={**r.times, COMPILED: [max(a - b, CALL_FLOOR * a) for a, b in zip(c, t)]})


def verdict(p: Pair, margin: float) -> Verdict:
    """``p.a`` against ``p.b``: decided where the median ratio is beyond both the margin
    and the noise; within the margin a tie; beyond it, inside the noise: ``NOISE``."""
    m = math.log(p.ratio)
    if abs(m) <= math.log1p(margin):
        return Verdict.TIE
    if abs(m) <= p.noise:
        return Verdict.NOISE
    return Verdict.FASTER if m < 0 else Verdict.SLOWER


def replicated(rounds: Rounds, a: str, b: str, margin: float) -> bool | None:
    """Whether ``a`` against ``b`` is beyond ``margin`` on the same side in every pass of
    ``rounds`` on its own (None with one pass: not known yet)."""
    if len(rounds.passes) < 2:
        return None
    m = math.log1p(margin)
    logs = [math.log(p.pair(a, b).ratio) for p in rounds.each_pass()]
    return all(x < -m for x in logs) or all(x > m for x in logs)


def departure(rounds: Rounds, a: str, b: str, margin: float, v: Verdict) -> Verdict:
    """``v``, a's verdict against ``b``, where deciding it departs from the preference:
    kept where every pass repeats it (``replicated``), ``NOISE`` (measure again) after
    one pass, else ``UNREPLICATED``."""
    if v not in (Verdict.FASTER, Verdict.SLOWER):
        return v
    rep = replicated(rounds, a, b, margin)
    return v if rep else Verdict.NOISE if rep is None and len(rounds.passes) < MAX_PASSES else Verdict.UNREPLICATED


_TIED = (Verdict.TIE, Verdict.NOISE, Verdict.UNREPLICATED)


@dataclass(frozen=True)
class Choice:
    """The candidate the rounds choose (``choose``): ``winner``; ``fastest`` by median;
    each other candidate against the fastest (``versus``, ``verdicts``); ``tie``: the
    winner is a preferred candidate the data could not tell from the fastest."""

    winner: str
    fastest: str
    versus: Mapping[str, Pair] = field(default_factory=dict)
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)

    @property
    def tie(self) -> bool:
        return self.winner != self.fastest

    @property
    def undecided(self) -> tuple[str, ...]:
        """Candidates whose difference from the fastest another pass may decide: beyond the
        margin but inside the noise, or a departure from the preference seen in one pass."""
        return tuple(c for c, v in self.verdicts.items() if v is Verdict.NOISE)


def choose(rounds: Rounds, preference: Sequence[str], margin: float = MARGIN, hold: str | None = None) -> Choice:
    """Of ``preference`` (candidate names, most preferred first, each timed in ``rounds``):
    the fastest by its median ratio to torch eager's samples in the same rounds (to
    its own times where eager was not timed), and the winner, the most preferred of
    the fastest and those it cannot be told from (``verdict``: a tie, inside the noise,
    or, for a candidate preferred to the winner, slower but not in every pass: ``departure``).
    ``hold``: a candidate that wins whatever the rounds say (``RoundsRecord.holds``), the
    others' verdicts ``HELD``."""
    base = EAGER if EAGER in rounds.times else None

    def key(c: str) -> float:
        return rounds.pair(c, base).ratio if base else rounds.median(c)

    fastest = min(preference, key=lambda c: (key(c), preference.index(c)))
    versus = {c: rounds.pair(c, fastest) for c in preference if c != fastest}
    verdicts = {c: verdict(p, margin) for c, p in versus.items()}
    if hold is not None and hold in preference:
        return Choice(hold, fastest, versus, {c: Verdict.HELD for c in verdicts})
    winner = fastest
    for c in preference:  # the most preferred that the fastest is not faster than in every pass
        if c == fastest:
            break
        verdicts[c] = departure(rounds, c, fastest, margin, verdicts[c])
        if verdicts[c] in _TIED:
            winner = c
            break
    return Choice(winner, fastest, versus, verdicts)


@dataclass(frozen=True)
class EagerCall:
    """A kernel against torch eager (``eager_call``): ``pair`` (kernel / eager over every
    round), the verdict (``FASTER``: the kernel runs torch calls), and where the
    speed-up is beyond ``FACTOR``, whether a second pass confirmed it (``confirmed``:
    None where no confirmation was needed or possible yet)."""

    pair: Pair
    verdict: Verdict
    confirmed: bool | None = None

    @property
    def kernel_wins(self) -> bool:
        return self.verdict in (Verdict.FASTER, Verdict.KEPT)

    @property
    def figure(self) -> float | None:
        """The speed-up over eager (eager / kernel) that may be recorded: None where unconfirmed."""
        return None if self.verdict is Verdict.UNCONFIRMED else 1.0 / self.pair.ratio


def extreme(p: Pair) -> bool:
    """Whether a kernel/eager ratio is beyond ``FACTOR`` either way (it needs confirming)."""
    return abs(math.log(p.ratio)) > math.log(FACTOR)


def eager_call(rounds: Rounds, kernel: str, margin: float = EAGER_MARGIN, kept: bool = False,
               held: bool = False, baseline: str = EAGER) -> EagerCall:
    """``kernel`` against torch eager (``baseline``: or torch.compile, ``COMPILED``, with the
    same rules; ``kept`` and ``held`` are torch eager's) in ``rounds``. A ratio beyond ``FACTOR`` must be
    confirmed by the last pass agreeing with the first within their noise (or
    ``AGREE_FLOOR``); with one pass it is ``NOISE`` (measure again), after which
    disagreement is ``UNCONFIRMED``. ``kept``: the kernel ran torch calls in the previous
    build (``Previous``): it keeps them (``KEPT``) unless torch eager is faster beyond the
    noise in every pass (then ``SLOWER``; one pass saying so: ``NOISE``, measure again).
    ``held``: the previous build's decision stands whatever the rounds say
    (``RoundsRecord.holds``): ``KEPT`` where ``kept``, else ``HELD`` (torch eager), but
    for a ratio beyond ``FACTOR``, which is confirmed or not as ever."""
    p = rounds.pair(kernel, baseline)
    if held and not extreme(p):
        return EagerCall(p, Verdict.KEPT if kept else Verdict.HELD)
    v = verdict(p, margin)
    if kept and not extreme(p):  # leaving the kernel departs from the previous build: every pass must say so
        slower = verdict(p, 0.0)
        if slower is Verdict.SLOWER:
            slower = departure(rounds, kernel, baseline, 0.0, slower)
            if slower in (Verdict.SLOWER, Verdict.NOISE):
                return EagerCall(p, slower)
        return EagerCall(p, Verdict.KEPT)
    if not extreme(p):  # the kernel taking torch calls departs from torch eager: every pass must say so
        return EagerCall(p, departure(rounds, kernel, baseline, margin, v) if v is Verdict.FASTER else v)
    if len(rounds.passes) < 2:
        return EagerCall(p, Verdict.NOISE, None)
    passes = rounds.each_pass()
    first, last = passes[0].pair(kernel, baseline), passes[-1].pair(kernel, baseline)
    agree = abs(math.log(first.ratio) - math.log(last.ratio)) <= max(first.noise + last.noise, AGREE_FLOOR)
    return EagerCall(p, v if agree else Verdict.UNCONFIRMED, agree)


def needs_more(rounds: Rounds, preference: Sequence[str], eager: bool = True, previous: Previous | None = None,
               rows: int | None = None) -> list[str]:
    """What another pass of rounds would decide (empty: nothing; ``MAX_PASSES`` reached:
    nothing more is measured): candidates inside the noise against the fastest,
    and the winner against torch eager where inside the noise or beyond ``FACTOR``
    unconfirmed (``eager_call``, kept where ``previous``, the previous build's decision,
    ran torch calls of these rounds' ``rows`` on it: ``Previous.kept_at``). In words, for
    the record. Where ``previous`` holds (busy rounds against a quiet decision:
    ``Previous.holds``), only a speed-up beyond ``FACTOR`` to confirm."""
    if len(rounds.passes) >= MAX_PASSES or not preference:
        return []
    hold = previous is not None and previous.holds(rounds) and previous.candidate in preference
    out = []
    if hold:
        assert previous is not None
        winner = previous.candidate
    elif len(preference) > 1:
        choice = choose(rounds, preference)
        out += [f"{c} against {choice.fastest}" for c in choice.undecided]
        winner = choice.winner
    else:
        winner = preference[0]
    if eager and EAGER in rounds.times:
        kept = previous is not None and previous.kept_at(rows) == winner
        call = eager_call(rounds, winner, kept=kept, held=hold)
        if call.verdict is Verdict.NOISE:
            out.append(f"{winner} against torch eager" + (" (beyond {:g}x: to confirm)".format(FACTOR)
                                                          if extreme(call.pair) else ""))
    net = less_call(rounds)
    if eager and COMPILED in net.times:  # torch.compile(backend="boo")'s decision, by the same rules
        call = (previous.call(net, winner, rows, COMPILED) if previous is not None and previous.candidate == winner
                else eager_call(net, winner, baseline=COMPILED))
        if call.verdict is Verdict.NOISE:
            out.append(f"{winner} against torch.compile" + (" (beyond {:g}x: to confirm)".format(FACTOR)
                                                            if extreme(call.pair) else ""))
    return out


@dataclass(frozen=True)
class Previous:
    """What the previous build of a kernel on a target decided, where a rebuild keeps it
    unless the data say otherwise (the module's docstring): the ``candidate`` it shipped,
    on ``machine`` (``machine_id``: a decision made elsewhere is not kept), and where
    torch calls ran that kernel: ``kernel`` (at every size, or at none), or per size
    timed, ``by_rows`` ((rows, the kernel ran them), ...) as the index's ``by_rows``
    (the nearest size in rows, on a log scale, decides). ``run_id``: the build it came from;
    ``busy``: whether its rounds ran on a busy machine (busy rounds do not overturn a
    decision made on a quiet one: ``holds``)."""

    candidate: str
    machine: str
    kernel: bool = True
    by_rows: tuple[tuple[int, bool], ...] | None = None
    run_id: str | None = None
    busy: bool = False  # made on rounds timed on a busy machine
    # torch.compile's calls (the compile backend's): whether the kernel took them, as ``kernel``/``by_rows`` do
    # torch eager's; None where the previous build had no verdict against torch.compile
    compiled: bool | None = None
    compiled_rows: tuple[tuple[int, bool], ...] | None = None

    def holds(self, rounds: Rounds) -> bool:
        """Whether this decision stands whatever ``rounds`` (of a candidate it applies to)
        say: they ran on a busy machine and it was made on a quiet one."""
        return rounds.busy and not self.busy

    def applies(self, machine: str, candidates: Sequence[str]) -> bool:
        """Whether a benchmark on ``machine`` of ``candidates`` keeps this decision: made on
        the same machine, of a candidate timed again (else it is decided afresh)."""
        return self.machine == machine and self.candidate in candidates

    def kernel_at(self, rows: int | None) -> bool:
        """Whether the previous build ran torch calls of ``rows`` rows on the kernel
        (None: a static kernel's one size)."""
        if rows is None or not self.by_rows:
            return self.kernel
        return bool(nearest_in_rows(log_rows(self.by_rows), rows))

    def kept_at(self, rows: int | None) -> str | None:
        """The candidate whose torch calls of ``rows`` rows the previous build ran on the
        kernel (``eager_call``'s ``kept``), None where it ran them on torch eager."""
        return self.candidate if self.kernel_at(rows) else None

    def compiled_at(self, rows: int | None) -> bool | None:
        """Whether the previous build gave the kernel torch.compile's calls of ``rows`` rows
        (None: it had no verdict against torch.compile)."""
        if self.compiled is None or rows is None or not self.compiled_rows:
            return self.compiled
        return bool(nearest_in_rows(log_rows(self.compiled_rows), rows))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidate": self.candidate, "machine": self.machine, "kernel": self.kernel,
                               "by_rows": None if self.by_rows is None else [list(p) for p in self.by_rows],
                               "run_id": self.run_id, "busy": self.busy}
        if self.compiled is not None:
            out["compiled"] = self.compiled
            out["compiled_rows"] = None if self.compiled_rows is None else [list(p) for p in self.compiled_rows]
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Previous":
        rows, crows, compiled = d.get("by_rows"), d.get("compiled_rows"), d.get("compiled")
        return cls(candidate=d["candidate"], machine=d["machine"], kernel=bool(d.get("kernel", True)),
                   by_rows=None if rows is None else tuple((int(r), bool(k)) for r, k in rows), run_id=d.get("run_id"),
                   busy=bool(d.get("busy", False)), compiled=None if compiled is None else bool(compiled),
                   compiled_rows=None if crows is None else tuple((int(r), bool(k)) for r, k in crows))

    def call(self, rounds: Rounds, kernel: str, rows: int | None, baseline: str = EAGER) -> "EagerCall":
        """``kernel`` against ``baseline`` in ``rounds`` (of ``rows`` rows) by ``eager_call``, this
        previous decision kept where the rounds cannot tell otherwise, and held where they ran on a
        busy machine and it was made on a quiet one (against torch.compile: where this build had a
        verdict against it; else decided afresh)."""
        held = self.candidate == kernel and self.holds(rounds)
        if baseline == EAGER:
            return eager_call(rounds, kernel, kept=self.kept_at(rows) == kernel, held=held)
        took = self.compiled_at(rows)
        return eager_call(rounds, kernel, kept=self.candidate == kernel and bool(took),
                          held=held and took is not None, baseline=baseline)


@dataclass(frozen=True)
class RoundsRecord:
    """The benchmark record of one kernel on one target: its rounds per input shape
    (a static kernel: one, ``shape`` None; a dynamic one: each benchmark shape),
    the candidates in preference order, and what each further pass was for
    (``remeasured``); ``machine``, where it was timed (``machine_id``), and ``previous``,
    the previous build's decision it kept where the data could not tell (``Previous``;
    the preference's first then). Written by the benchmark
    (``bench/<target>/<signature>.rounds.json``), read by the select stage."""

    signature: str
    target: str
    preference: tuple[str, ...]
    sizes: tuple[Rounds, ...]
    remeasured: tuple[str, ...] = ()
    run_id: str | None = field(default=None, compare=False)
    machine: str | None = None
    previous: Previous | None = None

    def to_json(self) -> dict[str, Any]:
        return {"signature": self.signature, "target": self.target, "status": "ok",
                "preference": list(self.preference), "sizes": [r.to_json() for r in self.sizes],
                "remeasured": list(self.remeasured), "run_id": self.run_id, "machine": self.machine,
                "previous": None if self.previous is None else self.previous.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RoundsRecord":
        prev = d.get("previous")
        return cls(signature=d["signature"], target=d["target"], preference=tuple(d["preference"]),
                   sizes=tuple(Rounds.from_json(r) for r in d["sizes"]), remeasured=tuple(d.get("remeasured") or ()),
                   run_id=d.get("run_id"), machine=d.get("machine"),
                   previous=None if prev is None else Previous.from_json(prev))

    @property
    def holds(self) -> str | None:
        """The previous build's candidate where its decision stands whatever these rounds
        say (``Previous.holds``: the first size's rounds busy, it made on a quiet machine)."""
        p = self.previous
        return p.candidate if p is not None and self.sizes and p.holds(self.sizes[0]) else None

    @property
    def busy(self) -> bool:
        return any(r.busy for r in self.sizes)


__all__ = ["AGREE_FLOOR", "BUSY_CORES", "BUSY_SPREAD", "BUSY_WAITING", "CALL_FLOOR", "COMPILED", "COMPILED_CALL", "Choice", "EAGER", "EAGER_MARGIN", "EagerCall", "FACTOR", "MARGIN",
           "MAX_PASSES", "NOTCH", "Pair", "Previous", "REFERENCE", "ROUNDS", "Rounds", "RoundsRecord", "Verdict", "choose",
           "departure", "eager_call", "extreme", "less_call", "needs_more", "replicated", "verdict"]
