"""The bundle format: ``bundle.json`` as typed, immutable records.

One definition shared by the writer (``pack.py``), the loader, ``boo-build
info|verify|diff`` and ``boo-build measure``. Each record reads its JSON with
``from_json`` and writes it back with ``to_json``; ``to_json(from_json(d)) ==
d`` for every index the code writes and for older bundles: fields this code
does not know are kept (``extra``), optional fields that were absent stay
absent. Pure Python (stdlib and ``boo_build.signature``): the loader imports it.

One module: the bundle format is one definition, read by the loader and written
by the build, whose records refer to each other; split, a field's schema, its
reading and its writing would live apart.

The rule for changing it: a new optional field keeps the format version; a
field removed, or one whose meaning changes, bumps ``FORMAT_VERSION``; a bundle
built before each change is kept under ``tests/fixtures/`` and must keep opening.

Index (``format_version`` 1; 2 when a kernel has dynamic dimensions, same
schema, so that loaders reading only 1 refuse it clearly)::

    {"format": "boo-bundle", "format_version": 1,
     "name": str, "version": str (semver), "provenance": {...},
     "iree_runtime": {"compiler", "min", "max_tested"},    # optional
     "targets": {target: {"driver", "arch", "flags": [...]}},
     "csv": "bench.csv" | null,
     "kernels": {key: {
        "signature": KernelSignature.to_json(), "functions": {impl: MLIR function},
        "targets": {target: {"status": "available", "selected": impl, "reason": str,
                             "impls": {impl: {"member", "function", "sha256", "size",
                                              "validation": dict|null, "benchmark": dict|null}},
                             "rejected": {impl: why},
                             "mode": driver,                                   # optional
                             "candidates": {candidate: {"median_s", "mean_s"?, "min_s", "status", "reason"}},  # optional
                             "prefer_eager": {"eager_s", "kernel_s", "reason", "by_rows"?},  # optional
                             "eager_rejected": str,                            # optional
                             "vs_compiled": {"graph", "kernel_s", "compiled_s", "reason", "by_rows"?, "op_s"?, "call_s"?}
                                            | {"untimed": str}}                # optional
                          | {"status": "unavailable", "reason": str, "rejected": {impl: why}}}}}}

``impls`` is keyed by module name, ``<impl>[+<variant>]`` (``boo_build.candidates``).
Optional target-entry fields (format version 1, absent when not used):
``mode``, the runtime driver the selected module runs on when it is not the
bundle target's (``local-sync`` on a ``local-task`` CPU target: the same vmfb
run inline on the calling thread); ``candidates``, every (impl, variant,
mode) the build measured, by text form (``manual+nosd@local-sync``), with its
median, mean (what the selection compares; absent in bundles
built before it was recorded) and best times, ``status`` ("selected", "slower", "failed", "not
run") and why; ``prefer_eager``, where the selected candidate did not beat
torch eager clearly on the build machine (``routing.kernel_beats_eager``;
compared times, seconds; ``by_rows``, per size timed, for a kernel timed at
several): the loader hands torch tensors to torch's op;
numpy arrays, and loaders that do not know the field, run the kernel;
``eager_rejected``, where torch eager was faster but
its results, as the loader would route them, failed the kernels' validation
(``validate.validate_eager``): why torch calls run the kernel there;
``vs_compiled``, the selected candidate against ``torch.compile`` of the op in
the same paired rounds (``CompiledVerdict``): ``torch.compile(backend="boo")``
decides on it, and on ``prefer_eager`` where it is absent or untimed.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from .. import ops
from ..compared import first_time
from ..errors import SignatureError
from ..reasons import Kind, Reason, with_kind
from ..signature import KernelSignature
from .errors import BundleFormatError
from .json_fields import as_mapping, extra_fields, freeze_fields, is_by_rows, is_seconds, plain, typed_value

FORMAT = "boo-bundle"
FORMAT_VERSION = 1
# Version 2 = version 1 whose kernel keys and signatures may name dynamic
# dimensions: a loader that reads only 1 refuses it with "upgrade boo-build"
# instead of failing on a key it cannot parse. Static-only bundles stay 1.
DYNAMIC_FORMAT_VERSION = 2
# Version 3 = version 2 whose kernels may be of ops that older loaders do not
# know and whose keys name their own shape fields (group_norm's g<groups>): a
# loader reading only 1 and 2 refuses it with "upgrade boo-build" instead of
# failing on a key it cannot parse. An op says which version it needs
# (``Op.format_version``); bundles of only older ops keep theirs.
OP_FORMAT_VERSION = 3
# Version 4 = version 3 whose RMS norm kernels may scale by ``weight_offset +
# weight`` (the signature field ``weight_offset``, the key's ``off`` field:
# Gemma's norms): a loader reading only 1-3 refuses it with "upgrade boo-build"
# instead of running such a kernel as a plain RMS norm. Bundles without one keep theirs.
OFFSET_FORMAT_VERSION = 4
# Version 5 = version 4's index split in a container of one zstd frame per member
# (``split_format.py``): ``bundle.json`` becomes a small header, the records move to
# ``records.json``, each target's routing to ``routes/<target>.json``. Every bundle
# written now is version 5: a loader reading only 1-4 reads its first frame (the
# header) and refuses it with "upgrade boo-build".
SPLIT_FORMAT_VERSION = 5
# Version 6 = version 5 whose kernels may be fused residual add + norm kernels (the
# signature field ``residual``, the key's ``res`` field): a loader reading only 1-5
# refuses it with "upgrade boo-build" instead of failing on a key it cannot parse.
# Bundles without one stay 5.
RESIDUAL_FORMAT_VERSION = 6
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
INDEX_NAME = "bundle.json"
CSV_NAME = "bench.csv"
# Optional index field (format version 1; absent in bundles written before it):
# {"compiler": iree-compile version, "min": oldest iree-base-runtime known to
# load the modules, "max_tested": newest one tested}. Written by pack.py,
# checked by ``versions.check_runtime`` when a bundle is opened.
RUNTIME_FIELD = "iree_runtime"


class Status(enum.StrEnum):
    """A kernel's state on one target (a ``str``: the JSON stays the same)."""

    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"


class IndexProblem(ValueError):
    """An index that parses but says something impossible; the message says where."""


def format_version_for(signatures: Iterable[KernelSignature]) -> int:
    """The format version a bundle of these kernel signatures is written as: the
    split container's (5), or newer where one of them needs it (an op's own
    ``Op.format_version``); what each older version first allowed (dynamic dims: 2;
    group norm: 3; a weight offset: 4; a fused residual kernel: 6) is in the table of
    docs/bundle-format.md."""
    version = SPLIT_FORMAT_VERSION  # the container every bundle is written in now (versions 1-4: read only)
    for s in signatures:
        version = max(version, DYNAMIC_FORMAT_VERSION if s.is_dynamic else FORMAT_VERSION,
                      ops.get(s.op).format_version, OFFSET_FORMAT_VERSION if s.weight_offset else FORMAT_VERSION,
                      RESIDUAL_FORMAT_VERSION if s.residual else FORMAT_VERSION)
    return version


# ---------------------------------------------------------------------- records
@dataclass(frozen=True)
class ImplRecord:
    """One packed implementation: its vmfb member and the records of its build."""

    member: str
    function: str
    sha256: str
    size: int
    validation: Mapping[str, Any] | None = None
    benchmark: Mapping[str, Any] | None = None
    # a GPU module's modelled traffic per call (the build's ``stages/traffic.py``:
    # dispatches, modelled_bytes, minimal_bytes, ratio, shape); absent where not modelled
    traffic: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()  # of validation/benchmark: not in the JSON (rather than null)

    _KNOWN = ("member", "function", "sha256", "size", "validation", "benchmark", "traffic")

    def __post_init__(self) -> None:
        freeze_fields(self, "validation", "benchmark", "traffic", "extra")

    @classmethod
    def from_json(cls, d: Any) -> "ImplRecord":
        d = as_mapping(d, "an impl entry")
        return cls(member=typed_value(d["member"], str, "member"), function=typed_value(d["function"], str, "function"),
                   sha256=typed_value(d["sha256"], str, "sha256"), size=typed_value(d["size"], int, "size"),
                   validation=d.get("validation"), benchmark=d.get("benchmark"), traffic=d.get("traffic"),
                   extra=extra_fields(d, cls._KNOWN),
                   absent=frozenset(k for k in ("validation", "benchmark") if k not in d))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"member": self.member, "function": self.function, "sha256": self.sha256,
                               "size": self.size}
        for k in ("validation", "benchmark"):
            if k not in self.absent:
                out[k] = plain(getattr(self, k))
        if self.traffic is not None:
            out["traffic"] = plain(self.traffic)
        out.update(plain(self.extra))
        return out


@dataclass(frozen=True)
class CandidateRecord:
    """What the build measured of one candidate (``impl[+variant][@mode]``):
    its times (seconds; ``mean_s`` is what the selection compares, absent in
    bundles built before it was recorded), its ``status`` ("selected", "slower",
    "failed", "not run") and why it lost ("" for the selected one; ``kind``
    beside it in the JSON, absent in bundles built before kinds: ``reasons``)."""

    status: str
    reason: Reason = Reason(Kind.SELECTED, "")
    median_s: float | None = None
    min_s: float | None = None
    mean_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # of median_s/min_s: not in the JSON read (rather than null), so not written back;
    # mean_s is written only when set
    absent: frozenset[str] = frozenset()
    legacy: bool = field(default=False, compare=False)  # read without a kind: written back without one

    _KNOWN = ("status", "reason", "kind", "median_s", "min_s", "mean_s")

    def __post_init__(self) -> None:
        # a reason given as text (a record made by hand, or read without a kind): its kind from its words
        object.__setattr__(self, "reason", with_kind(self.reason, None, default=None if self.reason else Kind.SELECTED))
        freeze_fields(self, "extra")

    @classmethod
    def from_json(cls, d: Any, where: str = "candidate") -> "CandidateRecord":
        d = as_mapping(d, where)
        for f in ("median_s", "min_s", "mean_s"):
            if d.get(f) is not None and not is_seconds(d[f]):
                raise IndexProblem(f"{where}: {f} is not {is_seconds.__doc__}: {d[f]!r}")
        text = typed_value(d.get("reason") or "", str, f"{where} reason")
        try:
            reason = with_kind(text, d.get("kind"), f"{where} kind", default=None if text else Kind.SELECTED)
        except ValueError as e:
            raise IndexProblem(str(e)) from None
        return cls(status=typed_value(d.get("status", ""), str, f"{where} status"), reason=reason,
                   median_s=d.get("median_s"), min_s=d.get("min_s"), mean_s=d.get("mean_s"),
                   extra=extra_fields(d, cls._KNOWN),
                   absent=frozenset(k for k in ("median_s", "min_s") if k not in d), legacy="kind" not in d and bool(text))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in ("median_s", "min_s") if k not in self.absent}
        out.update(status=self.status, reason=self.reason.text)
        if self.reason and not self.legacy:
            out["kind"] = str(self.reason.kind)
        if self.mean_s is not None:
            out["mean_s"] = self.mean_s
        out.update(plain(self.extra))
        return out

    @property
    def compared_s(self) -> float | None:
        """The time the selection compares (``first_time``: the one rule)."""
        return first_time(self.mean_s, self.median_s, self.min_s)


@dataclass(frozen=True)
class EagerPreference:
    """Where torch tensors go to torch's own op instead of the kernel: the build
    found torch eager faster (``eager_s`` vs ``kernel_s``, the times the
    selection compares) and its results passed validation. ``by_rows``: a
    kernel timed at several sizes decides per size, ``((rows, eager faster), ...)``."""

    eager_s: float
    kernel_s: float
    reason: str
    by_rows: tuple[tuple[int, bool], ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the times compared, in words, as the reason ends with them (the selection's, for the
    # reason it gives where eager's results fail validation); not in the index
    times: str = field(default="", compare=False, repr=False)

    _KNOWN = ("eager_s", "kernel_s", "reason", "by_rows")

    def __post_init__(self) -> None:
        if self.by_rows is not None:
            object.__setattr__(self, "by_rows", tuple((int(r), bool(won)) for r, won in self.by_rows))
        freeze_fields(self, "extra")

    @classmethod
    def from_json(cls, d: Any, where: str = "prefer_eager") -> "EagerPreference":
        d = as_mapping(d, "prefer_eager")
        for f, ok in (("eager_s", is_seconds), ("kernel_s", is_seconds), ("by_rows", is_by_rows)):
            if (f != "by_rows" or f in d) and not ok(d.get(f)):
                raise IndexProblem(f"{where}: prefer_eager.{f} is not {ok.__doc__}: {d.get(f)!r}")
        rows = d.get("by_rows")
        return cls(eager_s=d["eager_s"], kernel_s=d["kernel_s"], reason=str(d.get("reason", "")),
                   by_rows=None if rows is None else tuple((r, won) for r, won in rows),
                   extra=extra_fields(d, cls._KNOWN))

    def to_json(self) -> dict[str, Any]:
        return {"eager_s": self.eager_s, "kernel_s": self.kernel_s, "reason": self.reason,
                **({"by_rows": [[r, won] for r, won in self.by_rows]} if self.by_rows is not None else {}),
                **plain(self.extra)}


@dataclass(frozen=True)
class CompiledVerdict:
    """The selected kernel against ``torch.compile`` of its op (Inductor's code for the op's
    eager call), timed in the same paired rounds as torch eager: what ``torch.compile(backend=
    "boo")`` decides on (``prefer_eager`` stays the loader's entry points' and ``replace_norms``').
    Timed: ``graph``, torch.compile's code not beaten (beyond the margin and the noise, in every
    pass: the backend leaves the graph's code), ``kernel_s``/``compiled_s`` (medians, seconds),
    ``by_rows`` per size timed for a kernel timed at several, ``((rows, torch.compile not
    beaten), ...)``, and ``reason``, the comparison in words. ``compiled_s`` is the op compiled
    alone (``op_s``) less the fixed cost of its compiled call (``call_s``: a trivial function
    compiled on the same inputs, timed in the same rounds), what a model's graph pays for the norm
    (absent in records written before it: then ``compiled_s`` is the op's). Not timed (``timed`` False: the
    build's compile budget spent, the compile failed, no torch device): ``reason`` says why, and
    the backend decides against torch eager's verdict instead, saying so."""

    timed: bool
    reason: str
    graph: bool = False
    kernel_s: float | None = None
    compiled_s: float | None = None
    by_rows: tuple[tuple[int, bool], ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    op_s: float | None = None
    call_s: float | None = None

    _KNOWN = ("untimed", "graph", "kernel_s", "compiled_s", "reason", "by_rows", "op_s", "call_s")

    def __post_init__(self) -> None:
        if self.by_rows is not None:
            object.__setattr__(self, "by_rows", tuple((int(r), bool(g)) for r, g in self.by_rows))
        freeze_fields(self, "extra")

    @classmethod
    def untimed(cls, reason: str) -> "CompiledVerdict":
        return cls(False, reason)

    @classmethod
    def from_json(cls, d: Any, where: str = "vs_compiled") -> "CompiledVerdict":
        d = as_mapping(d, "vs_compiled")
        if "untimed" in d:
            return cls(False, typed_value(d["untimed"], str, f"{where}: vs_compiled.untimed"),
                       extra=extra_fields(d, cls._KNOWN))
        for f, ok in (("kernel_s", is_seconds), ("compiled_s", is_seconds), ("by_rows", is_by_rows),
                      ("op_s", is_seconds), ("call_s", is_seconds)):
            if (f in ("kernel_s", "compiled_s") or f in d) and not ok(d.get(f)):
                raise IndexProblem(f"{where}: vs_compiled.{f} is not {ok.__doc__}: {d.get(f)!r}")
        if not isinstance(d.get("graph"), bool):
            raise IndexProblem(f"{where}: vs_compiled.graph must be true or false, got {d.get('graph')!r}")
        rows = d.get("by_rows")
        return cls(True, str(d.get("reason", "")), d["graph"], d["kernel_s"], d["compiled_s"],
                   None if rows is None else tuple((r, g) for r, g in rows), extra_fields(d, cls._KNOWN),
                   d.get("op_s"), d.get("call_s"))

    def to_json(self) -> dict[str, Any]:
        if not self.timed:
            return {"untimed": self.reason, **plain(self.extra)}
        return {"graph": self.graph, "kernel_s": self.kernel_s, "compiled_s": self.compiled_s, "reason": self.reason,
                **({"by_rows": [[r, g] for r, g in self.by_rows]} if self.by_rows is not None else {}),
                **{f: v for f, v in (("op_s", self.op_s), ("call_s", self.call_s)) if v is not None},
                **plain(self.extra)}


@dataclass(frozen=True)
class TargetRecord:
    """A kernel on one target: available (``selected`` among ``impls``) or
    unavailable (``reason`` says why). ``rejected``: why each implementation
    not packed was dropped. ``mode``: the driver the selected module runs on
    where it is not the target's; ``candidates``: what the build measured, per
    candidate's text form; ``prefer_eager``: where torch tensors go to torch;
    ``eager_rejected``: why they do not although torch eager was faster (its
    results failed validation). ``None`` fields are absent from the JSON.

    Reasons are typed (``reasons.Reason``: text and kind); the JSON keeps each
    text where it always was and its kind beside it (``reason_kind``,
    ``rejected_kinds``, ``eager_rejected_kind``). An entry read without kinds
    (a bundle written before them) gets them from its words once, here
    (``reasons.legacy_kind``; an unavailable entry's reason is
    ``NONE_AVAILABLE``), and is written back without them (``legacy``)."""

    status: Status
    reason: Reason | None = None
    selected: str | None = None
    impls: Mapping[str, ImplRecord] | None = None
    rejected: Mapping[str, Reason] | None = None
    # fields this code does not know (measure's "measured", ...)
    extra: Mapping[str, Any] = field(default_factory=dict)
    mode: str | None = None
    candidates: Mapping[str, CandidateRecord] | None = None
    prefer_eager: EagerPreference | None = None
    eager_rejected: Reason | None = None
    legacy: bool = field(default=False, compare=False)  # read without kinds: written back without them
    # how the build's timings were taken, in paired rounds (the selection's ``Timing``: rounds,
    # ties, re-measurements, a busy machine, the kernel against torch eager); absent before
    timing: Mapping[str, Any] | None = None
    # the kernel against torch.compile (``CompiledVerdict``): torch.compile(backend="boo")'s decision;
    # absent in bundles built before it, and where the kernel was not timed in paired rounds
    vs_compiled: CompiledVerdict | None = None

    _KNOWN = ("status", "reason", "selected", "impls", "rejected", "mode", "candidates", "prefer_eager",
              "eager_rejected", "reason_kind", "rejected_kinds", "eager_rejected_kind", "timing", "vs_compiled")

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        # reasons given as text (an entry made by hand): their kinds from their words
        if self.reason is not None:
            object.__setattr__(self, "reason", with_kind(self.reason, None, default=Kind.NONE_AVAILABLE
                                                         if self.status is Status.UNAVAILABLE else None))
        if self.rejected is not None:
            object.__setattr__(self, "rejected", {i: with_kind(r, None) for i, r in self.rejected.items()})
        if self.eager_rejected is not None:
            object.__setattr__(self, "eager_rejected", with_kind(self.eager_rejected, None))
        # given as JSON (a hand-made entry): the typed records
        if isinstance(self.prefer_eager, Mapping):
            object.__setattr__(self, "prefer_eager", EagerPreference.from_json(self.prefer_eager))
        if isinstance(self.vs_compiled, Mapping):
            object.__setattr__(self, "vs_compiled", CompiledVerdict.from_json(self.vs_compiled))
        if self.candidates is not None:
            object.__setattr__(self, "candidates", {n: CandidateRecord.from_json(c) if isinstance(c, Mapping) else c
                                                    for n, c in self.candidates.items()})
        freeze_fields(self, "impls", "rejected", "extra", "candidates", "timing")

    @classmethod
    def available(cls, selected: str, impls: Mapping[str, ImplRecord], reason: Reason | str = "",
                  rejected: Mapping[str, Reason | str] | None = None, *, mode: str | None = None,
                  candidates: Mapping[str, CandidateRecord] | None = None,
                  prefer_eager: EagerPreference | None = None, eager_rejected: Reason | None = None,
                  timing: Mapping[str, Any] | None = None, vs_compiled: CompiledVerdict | None = None,
                  **extra: Any) -> "TargetRecord":
        """An available entry (``reason``/``rejected`` as text: an entry made by hand, kinds from the words)."""
        return cls(Status.AVAILABLE, reason, selected, impls, dict(rejected or {}),  # type: ignore[arg-type]
                   extra, mode, candidates, prefer_eager, eager_rejected or None, timing=timing,
                   vs_compiled=vs_compiled)

    @classmethod
    def unavailable(cls, reason: Reason | str, rejected: Mapping[str, Reason | str] | None = None, *,
                    candidates: Mapping[str, CandidateRecord] | None = None, eager_rejected: Reason | None = None,
                    **extra: Any) -> "TargetRecord":
        return cls(Status.UNAVAILABLE, reason, None, None, dict(rejected or {}),  # type: ignore[arg-type]
                   extra, candidates=candidates, eager_rejected=eager_rejected or None)

    @property
    def is_available(self) -> bool:
        return self.status is Status.AVAILABLE

    @property
    def selected_impl(self) -> ImplRecord | None:
        """The selected implementation's entry (available targets)."""
        if not self.is_available:
            return None
        assert self.impls is not None and self.selected is not None  # an available entry has both
        return self.impls[self.selected]

    @classmethod
    def from_json(cls, d: Any, where: str = "target entry") -> "TargetRecord":
        d = as_mapping(d, "a target entry")
        try:
            status = Status(d["status"])
        except ValueError:
            raise IndexProblem(f"{where}: unknown status {d['status']!r}") from None
        impls = d.get("impls")
        if impls is not None:
            impls = {i: ImplRecord.from_json(m) for i, m in as_mapping(impls, "impls").items()}
        mode, cands = d.get("mode"), d.get("candidates")
        if mode is not None and not isinstance(mode, str):
            raise IndexProblem(f"{where}: mode must be a driver name, got {mode!r}")
        if cands is not None:
            cands = {c: CandidateRecord.from_json(v, f"{where}: candidate {c}")
                     for c, v in as_mapping(cands, "candidates").items()}
        pref = None if d.get("prefer_eager") is None else EagerPreference.from_json(d["prefer_eager"], where)
        reason, rejected, why = cls.reasons_of(d, status, where)
        legacy = not any(k in d for k in ("reason_kind", "rejected_kinds", "eager_rejected_kind"))
        timing, vs = d.get("timing"), d.get("vs_compiled")
        rec = cls(status=status, reason=reason, selected=d.get("selected"), impls=impls, rejected=rejected,
                  extra=extra_fields(d, cls._KNOWN), mode=mode, candidates=cands, prefer_eager=pref,
                  eager_rejected=why, legacy=legacy,
                  timing=None if timing is None else as_mapping(timing, "timing"),
                  vs_compiled=None if vs is None else CompiledVerdict.from_json(vs, where))
        if status is Status.AVAILABLE and (impls is None or rec.selected not in impls):
            raise IndexProblem(f"{where}: selected impl {d.get('selected')!r} has no entry")
        return rec

    @staticmethod
    def reasons_of(d: Mapping[str, Any], status: Status | str,
                   where: str = "target entry") -> tuple[Reason | None, dict[str, Reason] | None, Reason | None]:
        """(reason, rejected, eager_rejected) of a target entry's JSON, typed: each text with
        its recorded kind, or, without one (a bundle written before kinds), the kind of its
        words (an unavailable entry's reason: ``NONE_AVAILABLE``)."""
        why = d.get("eager_rejected")
        if why is not None and not isinstance(why, str):
            raise IndexProblem(f"{where}: eager_rejected must be a reason (text), got {why!r}")
        kinds = as_mapping(d.get("rejected_kinds") or {}, "rejected_kinds")
        try:
            reason = d.get("reason")
            if reason is not None:
                reason = with_kind(typed_value(reason, str, f"{where} reason"), d.get("reason_kind"),
                                   f"{where}: reason_kind",
                                   default=Kind.NONE_AVAILABLE if status == Status.UNAVAILABLE else None)
            rejected = None if d.get("rejected") is None else {
                i: with_kind(typed_value(r, str, f"{where} rejected {i}"), kinds.get(i), f"{where}: rejected_kinds {i}")
                for i, r in as_mapping(d["rejected"], "rejected").items()}
            if why is not None:
                why = with_kind(why, d.get("eager_rejected_kind"), f"{where}: eager_rejected_kind")
        except ValueError as e:
            raise IndexProblem(str(e)) from None
        return reason, rejected, why

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value}
        kinds = not self.legacy
        if self.reason is not None:
            out["reason"] = self.reason.text
            if kinds:
                out["reason_kind"] = str(self.reason.kind)
        if self.selected is not None:
            out["selected"] = self.selected
        if self.impls is not None:
            out["impls"] = {i: m.to_json() for i, m in self.impls.items()}
        if self.rejected is not None:
            out["rejected"] = {i: r.text for i, r in self.rejected.items()}
            if kinds and self.rejected:
                out["rejected_kinds"] = {i: str(r.kind) for i, r in self.rejected.items()}
        if self.mode is not None:
            out["mode"] = self.mode
        if self.candidates is not None:
            out["candidates"] = {c: r.to_json() for c, r in self.candidates.items()}
        if self.prefer_eager is not None:
            out["prefer_eager"] = self.prefer_eager.to_json()
        if self.eager_rejected is not None:
            out["eager_rejected"] = self.eager_rejected.text
            if kinds:
                out["eager_rejected_kind"] = str(self.eager_rejected.kind)
        if self.timing is not None:
            out["timing"] = plain(self.timing)
        if self.vs_compiled is not None:
            out["vs_compiled"] = self.vs_compiled.to_json()
        out.update(plain(self.extra))
        return out


@dataclass(frozen=True)
class KernelRecord:
    """One kernel signature: its MLIR functions and its state per target."""

    signature: KernelSignature
    targets: Mapping[str, TargetRecord]
    functions: Mapping[str, str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the signature's JSON as read (written back as it was); None: signature.to_json()
    signature_json: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    _KNOWN = ("signature", "functions", "targets")

    def __post_init__(self) -> None:
        freeze_fields(self, "targets", "functions", "extra", "signature_json")

    @property
    def key(self) -> str:
        return self.signature.key

    @classmethod
    def from_json(cls, d: Any, where: str = "kernel") -> "KernelRecord":
        d = as_mapping(d, "a kernel entry")
        sig = KernelSignature.from_json(d["signature"])
        targets = {t: TargetRecord.from_json(te, f"{where} target {t}")
                   for t, te in as_mapping(d["targets"], "targets").items()}
        fns = d.get("functions")
        return cls(signature=sig, targets=targets, functions=None if fns is None else as_mapping(fns, "functions"),
                   extra=extra_fields(d, cls._KNOWN), signature_json=d["signature"])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"signature": (self.signature.to_json() if self.signature_json is None
                                             else plain(self.signature_json))}
        if self.functions is not None:
            out["functions"] = dict(self.functions)
        out["targets"] = {t: te.to_json() for t, te in self.targets.items()}
        out.update(plain(self.extra))
        return out


@dataclass(frozen=True)
class TargetSpec:
    """A bundle target: the IREE driver and arch its modules were compiled for, with which flags."""

    driver: str
    arch: str
    flags: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(self.flags))
        freeze_fields(self, "extra")

    @classmethod
    def from_json(cls, d: Any) -> "TargetSpec":
        d = as_mapping(d, "a target")
        flags = d["flags"]
        if not isinstance(flags, (list, tuple)):
            raise TypeError(f"flags must be a list, got {flags!r}")
        return cls(driver=d["driver"], arch=d["arch"], flags=tuple(flags),
                   extra=extra_fields(d, ("driver", "arch", "flags")))

    def to_json(self) -> dict[str, Any]:
        return {"driver": self.driver, "arch": self.arch, "flags": list(self.flags), **plain(self.extra)}


@dataclass(frozen=True)
class BundleIndex:
    """``bundle.json``. ``None`` fields (and ``csv`` when in ``absent``) are absent from the JSON."""

    format_version: int
    targets: Mapping[str, TargetSpec]
    kernels: Mapping[str, KernelRecord]
    name: str | None = None
    version: str | None = None
    provenance: Mapping[str, Any] | None = None
    csv: str | None = None
    iree_runtime: Mapping[str, Any] | None = None  # RUNTIME_FIELD, checked when opened (versions.py)
    format: str = FORMAT
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()  # {"csv"} when the JSON has no csv field (rather than null)

    _KNOWN = ("format", "format_version", "name", "version", "provenance", "targets", "csv", "kernels",
              RUNTIME_FIELD)

    def __post_init__(self) -> None:
        freeze_fields(self, "targets", "kernels", "provenance", "iree_runtime", "extra")

    @classmethod
    def from_json(cls, d: Any) -> "BundleIndex":
        """The typed index (format and version are ``check_index``'s to check).
        Raises KeyError/TypeError/ValueError (``IndexProblem``)/SignatureError."""
        d = as_mapping(d, INDEX_NAME)
        targets = {n: TargetSpec.from_json(t) for n, t in as_mapping(d["targets"], "targets").items()}
        kernels = {}
        for key, k in as_mapping(d["kernels"], "kernels").items():
            rec = kernels[key] = KernelRecord.from_json(k, f"kernel {key}")
            for tname in rec.targets:
                if tname not in targets:
                    raise IndexProblem(f"kernel {key} names unknown target {tname!r}")
        prov = d.get("provenance")
        return cls(format_version=d["format_version"], targets=targets, kernels=kernels, name=d.get("name"),
                   version=d.get("version"), provenance=None if prov is None else as_mapping(prov, "provenance"),
                   csv=d.get("csv"), iree_runtime=d.get(RUNTIME_FIELD), format=d["format"],
                   extra=extra_fields(d, cls._KNOWN), absent=frozenset({"csv"} - set(d)))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "format_version": self.format_version}
        for k in ("name", "version"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.provenance is not None:
            out["provenance"] = plain(self.provenance)
        out["targets"] = {n: t.to_json() for n, t in self.targets.items()}
        if "csv" not in self.absent:
            out["csv"] = self.csv
        out["kernels"] = {k: rec.to_json() for k, rec in self.kernels.items()}
        if self.iree_runtime is not None:
            out[RUNTIME_FIELD] = plain(self.iree_runtime)
        out.update(plain(self.extra))
        return out

    # -------------------------------------------------------------- queries
    def entries(self) -> Iterator[tuple[str, str, TargetRecord]]:
        """(kernel key, target, entry) of every kernel on every target."""
        for key, k in self.kernels.items():
            for tname, te in k.targets.items():
                yield key, tname, te

    def impl_records(self) -> Iterator[tuple[str, str, str, ImplRecord]]:
        """(kernel key, target, impl, entry) of every packed implementation."""
        for key, tname, te in self.entries():
            for impl, m in (te.impls or {}).items():
                yield key, tname, impl, m

    def counts(self) -> dict[str, dict[str, int]]:
        """{target: {"available": n, "unavailable": n}} over the kernels."""
        out = {t: {s.value: 0 for s in Status} for t in self.targets}
        for _, tname, te in self.entries():
            out[tname][te.status.value] += 1
        return out

    def with_entry(self, key: str, target: str, entry: TargetRecord) -> "BundleIndex":
        """This index with kernel ``key``'s entry on ``target`` replaced."""
        k = self.kernels[key]
        kernel = dataclasses.replace(k, targets={**k.targets, target: entry})
        return dataclasses.replace(self, kernels={**self.kernels, key: kernel})


# ----------------------------------------------------------------------- checks
def check_format(index: Any, path: str = "bundle") -> int:
    """The format name and a version this loader reads (``BundleFormatError``
    otherwise, naming them); the version."""
    if not isinstance(index, Mapping) or index.get("format") != FORMAT:
        fmt = index.get("format") if isinstance(index, Mapping) else None
        raise BundleFormatError(f"{path}: {INDEX_NAME} is not a {FORMAT} index (format {fmt!r})")
    ver = index.get("format_version")
    if ver not in READABLE_VERSIONS or isinstance(ver, bool):
        raise BundleFormatError(
            f"{path}: bundle format version {ver!r} is not supported; this loader reads format "
            f"version{'s' if len(READABLE_VERSIONS) > 1 else ''} {', '.join(map(str, READABLE_VERSIONS))}"
            + (" (upgrade boo-build to read newer bundles)" if isinstance(ver, int) and ver > max(READABLE_VERSIONS)
               else ""))
    return int(ver)


def check_index(index: Any, members: Mapping[str, bytes] | None, path: str = "bundle",
                name: str = INDEX_NAME) -> BundleIndex:
    """Format name and version, the schema, and every referenced member
    present with its size (``members``; None: not read yet, a split bundle's
    records read alone); the typed index. Raises ``BundleFormatError``.
    ``name``: the member the index was read from (a split bundle's ``records.json``)."""
    check_format(index, path)
    try:
        typed = BundleIndex.from_json(index)
    except IndexProblem as e:
        raise BundleFormatError(f"{path}: {e}") from None
    except (KeyError, TypeError, AttributeError, ValueError, SignatureError) as e:
        raise BundleFormatError(f"{path}: malformed {name}: {type(e).__name__}: {e}") from None
    if members is None:
        return typed
    for _, _, _, m in typed.impl_records():
        if m.member not in members:
            raise BundleFormatError(f"{path}: member {m.member} named by the index is missing")
        if len(members[m.member]) != m.size:
            raise BundleFormatError(f"{path}: member {m.member} has {len(members[m.member])} bytes, "
                                    f"the index says {m.size}")
    return typed


__all__ = [
    "BundleIndex", "CSV_NAME", "CompiledVerdict", "DYNAMIC_FORMAT_VERSION", "FORMAT", "FORMAT_VERSION", "INDEX_NAME", "ImplRecord",
    "IndexProblem", "KernelRecord", "OFFSET_FORMAT_VERSION", "OP_FORMAT_VERSION", "READABLE_VERSIONS", "RESIDUAL_FORMAT_VERSION", "RUNTIME_FIELD",
    "SPLIT_FORMAT_VERSION", "Status", "TargetRecord", "TargetSpec", "check_format", "check_index", "format_version_for",
]
