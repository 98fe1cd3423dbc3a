"""The typed records the stages write and read: one frozen dataclass per stage result.

Each record is written by one stage and read by the ones after it, through
``to_json`` / ``from_json`` (JSON files beside the artifacts, the build
report, the bundle index's ``validation`` and ``benchmark`` fields, Dask
results): ``from_json(r.to_json()) == r``, and ``to_json`` writes what the
records have always held, so that an unchanged result keeps its bytes (the
up-to-date checks and a bundle's reproducibility depend on it). Optional
fields that were absent stay absent.

    export   -> ExportRecord        mlir/<module>.export.json
    compile  -> CompileRecord       vmfb/<target>/<module>.compile.json
    fallback -> FallbackRecord      vmfb/<target>/<signature>.fallback.json (a kernel's fallback step)
    validate -> ValidationResult    validate/<target>/<module>.json (its OutputChecks)
    bench    -> BenchResult         bench/<target>/<subject>.json (its SizeTimings; torch
                                    eager's carries an EagerValidation)

A record's ``run_id`` and ``seconds`` say which build wrote it and how long
it took (``VOLATILE_FIELDS``); ``stable_json`` leaves them out: what the
result is, which the up-to-date checks and the build report compare. The
selection's records (``Selection``, ``Decision``) are in ``stages.selection``;
the bundle index's (candidates, the eager preference) in ``loader.format``,
which the loader reads without the build side.

Status values are ``str`` enums: they compare equal to, and are written to
JSON as, the plain strings. Pure Python (stdlib only): the graph imports it at
load time; the compared time is ``compared.first_time``, which the bundle format shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Mapping, TypeVar

from .compared import first_time

__all__ = [
    "BenchResult", "BenchStatus", "COMPILED", "EAGER", "CompileRecord", "CompileStatus", "EagerValidation", "ExportRecord",
    "ExportStatus", "FallbackRecord", "OutputCheck", "SizeTiming", "VOLATILE_FIELDS", "ValidationFloor", "ValidationResult",
    "ValidationStatus", "compared_seconds", "stable_record",
]

Json = dict[str, Any]
S = TypeVar("S", bound=StrEnum)


class ExportStatus(StrEnum):
    OK = "ok"
    UNAVAILABLE = "unavailable"  # the op cannot be exported this way (the record says why)


class CompileStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"  # nothing to compile: the export was unavailable


class ValidationStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_RUN = "not run"
    ERROR = "error"


class ValidationFloor(StrEnum):
    """Which floor of the tolerance rule decided an output's check (``stages.tolerances``)."""

    SCALE = "scale"  # atol * rms(ref)
    CONDITIONING = "conditioning"  # a factor times the float32 formula's own error


class BenchStatus(StrEnum):
    OK = "ok"
    NOT_RUN = "not run"
    ERROR = "error"
    SKIPPED = "skipped"  # not validated, so not timed


EAGER = "eager"  # a benchmark's subject: torch eager for the signature
COMPILED = "torch.compile"  # a benchmark's subject: torch.compile of torch eager

VOLATILE_FIELDS = ("run_id", "seconds")  # differ between runs that produced the same result


def stable_record(rec: Mapping[str, Any] | None) -> Json | None:
    """A stage record's JSON without its volatile fields: what the result is."""
    if rec is None:
        return None
    return {k: v for k, v in rec.items() if k not in VOLATILE_FIELDS}


def compared_seconds(rec: Mapping[str, Any]) -> float | None:
    """What the selection compares of a timing record (a ``BenchResult``'s JSON, a
    ``SizeTiming``'s, a candidate's): its ``mean_s`` (the mean of the samples but
    the slowest, ``benchmark.Stats.mean``), else its median (records written
    before means were), else its best sample; None when it has none.
    docs/validation-and-selection.md says where which statistic is used and why."""
    return first_time(rec.get("mean_s"), rec.get("median_s"), rec.get("min_s"))



def checked_status(kind: type[S], value: Any, what: str) -> S:
    """``value`` as a status of enum ``kind``; a ValueError naming the allowed ones otherwise."""
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"unknown {what} status {value!r}: use one of {', '.join(kind)}") from None


# ---------------------------------------------------------------- export
@dataclass(frozen=True)
class ExportRecord:
    """One module's export: ``ok`` with the sha256 of its MLIR text, or
    ``unavailable`` with why (an empty MLIR file then stands beside it)."""

    module: str  # module key
    status: ExportStatus
    reason: str
    func_name: str
    variant: str = ""  # an export variant (candidates.EXPORT_VARIANTS)
    mlir_sha256: str | None = None
    run_id: str | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", ExportStatus(self.status))

    @property
    def ok(self) -> bool:
        return self.status is ExportStatus.OK

    def to_json(self) -> Json:
        return {"module": self.module, "status": self.status, "reason": self.reason, "func_name": self.func_name,
                "run_id": self.run_id, "seconds": self.seconds,
                **({"variant": self.variant} if self.variant else {}),
                **({"mlir_sha256": self.mlir_sha256} if self.mlir_sha256 is not None else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExportRecord":
        return cls(module=d.get("module", ""), status=d["status"], reason=d.get("reason") or "",
                   func_name=d.get("func_name", ""), variant=d.get("variant", ""), mlir_sha256=d.get("mlir_sha256"),
                   run_id=d.get("run_id"), seconds=d.get("seconds"))


# --------------------------------------------------------------- compile
@dataclass(frozen=True)
class CompileRecord:
    """One module compiled for one target: ``ok`` (the vmfb's size and sha256),
    ``failed`` (the useful part of the compiler's stderr) or ``unavailable``
    (nothing to compile, and why)."""

    module: str
    target: str
    flags: tuple[str, ...]
    status: CompileStatus
    reason: str = ""  # unavailable: why
    command: str | None = None
    error: str | None = None  # failed: the useful part of stderr, or the timeout
    size: int | None = None
    sha256: str | None = None
    variant: str = ""  # a compile variant (candidates)
    run_id: str | None = None
    seconds: float | None = None
    # a tuned variant's (stages/tuning.py): each edited dispatch -> its root's lowering configuration as compiled
    tuning: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", CompileStatus(self.status))
        object.__setattr__(self, "flags", tuple(self.flags))
        if self.tuning is not None:
            object.__setattr__(self, "tuning", MappingProxyType(dict(self.tuning)))

    @property
    def ok(self) -> bool:
        return self.status is CompileStatus.OK

    def why_not(self) -> str:
        """Why nothing of this module can ship (for a rejection), from its record."""
        if self.status is CompileStatus.UNAVAILABLE:
            return self.reason or "unavailable"
        first = (self.error or "").strip().splitlines()[:1]
        return f"compile failed: {first[0] if first else self.status}"

    def to_json(self) -> Json:
        out: Json = {"module": self.module, "target": self.target, "flags": list(self.flags), "status": self.status,
                     "run_id": self.run_id, **({"variant": self.variant} if self.variant else {})}
        if self.status is CompileStatus.UNAVAILABLE:
            out["reason"] = self.reason
        for name in ("command", "error", "seconds", "size", "sha256"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.tuning is not None:
            out["tuning"] = dict(self.tuning)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CompileRecord":
        return cls(module=d.get("module", ""), target=d.get("target", ""), flags=tuple(d.get("flags") or ()),
                   status=d["status"],
                   reason=d.get("reason", ""), command=d.get("command"), error=d.get("error"), size=d.get("size"),
                   sha256=d.get("sha256"), variant=d.get("variant", ""), run_id=d.get("run_id"),
                   seconds=d.get("seconds"), tuning=d.get("tuning"))


@dataclass(frozen=True)
class FallbackRecord:
    """A kernel's fallback step on one target (``candidates.fallbacks``): whether it ran
    (``tried``: the modules it compiled, ``<impl>+<variant>``, none where a candidate
    compiled or none failed in iree-compile), why (``reason``), and the content digest
    of every record it wrote (``digests``, by file name: what the benchmark and select
    tasks' up-to-date checks compare, since the modules tried are known only now)."""

    key: str  # signature key
    target: str
    tried: tuple[str, ...]
    reason: str
    digests: Mapping[str, str | None] = field(default_factory=dict)
    run_id: str | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tried", tuple(self.tried))
        object.__setattr__(self, "digests", dict(sorted(self.digests.items())))

    def to_json(self) -> Json:
        return {"key": self.key, "target": self.target, "status": "tried" if self.tried else "not tried",
                "tried": list(self.tried), "reason": self.reason, "digests": dict(self.digests),
                "run_id": self.run_id, "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FallbackRecord":
        return cls(key=d.get("key", ""), target=d.get("target", ""), tried=tuple(d.get("tried") or ()),
                   reason=d.get("reason", ""), digests=dict(d.get("digests") or {}), run_id=d.get("run_id"),
                   seconds=d.get("seconds"))


# -------------------------------------------------------------- validate
def _num(x: float) -> float | str:
    """JSON has no NaN or infinity: write them as strings."""
    x = float(x)
    return x if math.isfinite(x) else str(x)


def sort_ratio(x: float) -> float:
    """A ratio for ordering: NaN (an output that is NaN where it should not be) sorts last."""
    return math.inf if math.isnan(x) else x


@dataclass(frozen=True)
class OutputCheck:
    """One output of one validation case against the float64 reference, under
    the rule of ``stages.tolerances``: ``bound`` names the floor of the bound
    that decided (``ValidationFloor``; ``"scale"``: atol * rms(ref); ``"conditioning"``: a factor
    times ``formula_error``, the reference formula's own error in float32
    arithmetic, computed only where the scale floor was not met), and
    ``ratio`` is relative to that bound."""

    name: str  # output name from the signature (output, mean, rstd, grad_input, ...)
    case: str  # "seed0", "seed0+offset100" (a dynamic kernel's end in "@<shape>")
    max_abs: float  # max |got - ref|
    max_rel: float  # max |got - ref| / max(|ref|, atol * scale)
    worst_index: tuple[int, ...]  # element with the largest error relative to its bound
    got: float  # kernel value there
    expected: float  # reference value there
    ok: bool
    ratio: float = 0.0  # error / allowed error at the worst element (<= 1 passes)
    dtype: str = ""
    bound: ValidationFloor = ValidationFloor.SCALE  # which floor decided
    formula_error: float | None = None  # the float32 formula's largest error on this output, where computed

    def __post_init__(self) -> None:
        object.__setattr__(self, "bound", checked_status(ValidationFloor, self.bound, "validation floor"))

    def to_json(self) -> Json:
        return {
            "name": self.name, "case": self.case, "max_abs": _num(self.max_abs), "max_rel": _num(self.max_rel),
            "worst_index": list(self.worst_index), "got": _num(self.got), "expected": _num(self.expected),
            "ok": self.ok, "ratio": _num(self.ratio), "dtype": self.dtype, "bound": self.bound,
            **({"formula_error": _num(self.formula_error)} if self.formula_error is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "OutputCheck":
        fe = d.get("formula_error")
        return cls(
            name=d["name"], case=d["case"], max_abs=float(d["max_abs"]), max_rel=float(d["max_rel"]),
            worst_index=tuple(d.get("worst_index", ())), got=float(d["got"]), expected=float(d["expected"]),
            ok=bool(d["ok"]), ratio=float(d.get("ratio", 0.0)), dtype=d.get("dtype", ""),
            bound=d.get("bound", ValidationFloor.SCALE), formula_error=None if fe is None else float(fe),
        )

    def describe(self) -> str:
        idx = ",".join(map(str, self.worst_index))
        why = ""
        if self.formula_error is not None:
            why = f"; {self.bound} floor, float32's own error {self.formula_error:.3g}"
        return (f"{self.name} ({self.case}): max abs error {self.max_abs:.3g}, max rel {self.max_rel:.3g}; "
                f"worst at [{idx}]: got {self.got:.6g}, expected {self.expected:.6g} "
                f"({self.ratio:.3g}x the tolerance{why})")


@dataclass(frozen=True)
class ValidationResult:
    """A kernel (or torch eager, as the loader routes torch calls) on every
    validation case: ``passed`` only when it ran on a device and every output of
    every case was within tolerance; ``not run`` with why there was no device;
    ``error`` with the runtime's message."""

    module: str  # module key (``<signature>-eager`` for torch eager)
    target: str
    status: ValidationStatus
    reason: str = ""
    outputs: tuple[OutputCheck, ...] = ()
    tolerance: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    # where it ran, when that was not a GPU of its target: a software device ("llvmpipe"),
    # which checks the numerics and the host side of every call, not a GPU's behaviour
    software: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", checked_status(ValidationStatus, self.status, "validation"))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "tolerance", dict(self.tolerance))

    @classmethod
    def not_run(cls, module: str, target: str, reason: str,
                tolerance: Mapping[str, Any] | None = None) -> "ValidationResult":
        """The "not run" record (``stages.not_run`` words the reasons)."""
        return cls(module=module, target=target, status=ValidationStatus.NOT_RUN, reason=reason,
                   tolerance=dict(tolerance or {}))

    @property
    def passed(self) -> bool:
        return self.status is ValidationStatus.PASSED

    def worst(self) -> OutputCheck | None:
        """The check furthest past (or closest to) its tolerance."""
        if not self.outputs:
            return None
        return max(self.outputs, key=lambda c: (not c.ok, sort_ratio(c.ratio)))

    def max_error(self) -> float | None:
        """Largest absolute error over every output and case (None if nothing ran)."""
        if not self.outputs:
            return None
        return max((c.max_abs for c in self.outputs), key=sort_ratio)

    def summary(self) -> str:
        if self.status is ValidationStatus.PASSED:
            w = self.worst()
            where = f" on {self.software}, a software device" if self.software else ""
            return f"passed{where} ({w.ratio:.2g}x tolerance at worst)" if w else f"passed{where}"
        return f"{self.status}: {self.reason}" if self.reason else str(self.status)

    def to_json(self) -> Json:
        return {
            "module": self.module, "target": self.target, "status": self.status, "reason": self.reason,
            "outputs": [c.to_json() for c in self.outputs], "tolerance": dict(self.tolerance),
            **({"run_id": self.run_id} if self.run_id is not None else {}),
            **({"software": self.software} if self.software else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ValidationResult":
        return cls(
            module=d["module"], target=d["target"], status=d["status"], reason=d.get("reason", ""),
            outputs=tuple(OutputCheck.from_json(c) for c in d.get("outputs", ())),
            tolerance=dict(d.get("tolerance") or {}), run_id=d.get("run_id"), software=d.get("software", ""),
        )


@dataclass(frozen=True)
class EagerValidation:
    """torch eager's results, as the loader would route torch calls, on a
    kernel's validation cases (``validate.eager_record``): the build sends torch
    calls to torch only where this passed. ``by_rows``: a dynamic kernel's
    verdict per row count, ``((rows, passed), ...)``."""

    status: ValidationStatus
    reason: str = ""
    by_rows: tuple[tuple[int, bool], ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", ValidationStatus(self.status))
        if self.by_rows is not None:
            object.__setattr__(self, "by_rows", tuple((int(r), bool(ok)) for r, ok in self.by_rows))

    @property
    def passed(self) -> bool:
        return self.status is ValidationStatus.PASSED

    def passed_rows(self) -> frozenset[int]:
        return frozenset(r for r, ok in self.by_rows or () if ok)

    def to_json(self) -> Json:
        return {"status": self.status, "reason": self.reason,
                **({"by_rows": [[r, ok] for r, ok in self.by_rows]} if self.by_rows is not None else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EagerValidation":
        rows = d.get("by_rows")
        return cls(status=d["status"], reason=d.get("reason", ""),
                   by_rows=None if rows is None else tuple((r, ok) for r, ok in rows))


# ----------------------------------------------------------------- bench
@dataclass(frozen=True)
class SizeTiming:
    """A dynamic kernel's (or torch eager's) timing at one input shape."""

    shape: tuple[int, ...]
    status: BenchStatus
    reason: str = ""
    min_s: float | None = None
    median_s: float | None = None
    p90_s: float | None = None
    mean_s: float | None = None
    reps: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", BenchStatus(self.status))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def ok(self) -> bool:
        return self.status is BenchStatus.OK and self.median_s is not None

    @property
    def compared_s(self) -> float | None:
        """The time comparisons use (``compared_seconds``)."""
        return first_time(self.mean_s, self.median_s, self.min_s) if self.ok else None

    def to_json(self) -> Json:
        return {"shape": list(self.shape), "status": self.status, "reason": self.reason, "min_s": self.min_s,
                "median_s": self.median_s, "p90_s": self.p90_s, "mean_s": self.mean_s, "reps": self.reps}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SizeTiming":
        return cls(shape=tuple(d["shape"]), status=d["status"], reason=d.get("reason", ""), min_s=d.get("min_s"),
                   median_s=d.get("median_s"), p90_s=d.get("p90_s"), mean_s=d.get("mean_s"),
                   reps=int(d.get("reps") or 0))


@dataclass(frozen=True)
class BenchResult:
    """One benchmark: a kernel module (``subject``: its key) or torch eager
    (``"eager"``) or ``torch.compile`` for a signature on a target."""

    subject: str  # module key, "eager" or "torch.compile"
    signature: str  # signature key
    target: str
    status: BenchStatus
    reason: str = ""
    min_s: float | None = None
    median_s: float | None = None
    p90_s: float | None = None
    reps: int = 0
    threads: int = 0
    # ``Stats.mean``: what the selection compares where recorded (``compared_seconds``)
    mean_s: float | None = None
    # a dynamic signature timed at several input shapes: per shape; the fields
    # above are the first shape's
    sizes: tuple[SizeTiming, ...] = ()
    # a candidate's record says which (``candidates``): both written when either is set
    variant: str = ""
    mode: str = ""
    # torch eager's: whether its results, as the loader routes torch calls, validate
    validation: EagerValidation | None = None
    run_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", checked_status(BenchStatus, self.status, "benchmark"))
        sizes: tuple[SizeTiming | Mapping[str, Any], ...] = self.sizes  # a hand-made record may give JSON
        object.__setattr__(self, "sizes", tuple(s if isinstance(s, SizeTiming) else SizeTiming.from_json(s)
                                                for s in sizes))

    @classmethod
    def not_run(cls, subject: str, signature: str, target: str, reason: str) -> "BenchResult":
        """The "not run" record (``stages.not_run`` words the reasons)."""
        return cls(subject=subject, signature=signature, target=target, status=BenchStatus.NOT_RUN, reason=reason)

    @property
    def ok(self) -> bool:
        return self.status is BenchStatus.OK and self.median_s is not None

    @property
    def median_us(self) -> float | None:
        return None if self.median_s is None else self.median_s * 1e6

    @property
    def compared_s(self) -> float | None:
        """The time the selection compares (``compared_seconds``); None when it did not run."""
        return first_time(self.mean_s, self.median_s, self.min_s) if self.ok else None

    def to_json(self) -> Json:
        return {
            "subject": self.subject, "signature": self.signature, "target": self.target,
            "status": self.status, "reason": self.reason, "min_s": self.min_s, "median_s": self.median_s,
            "p90_s": self.p90_s, "mean_s": self.mean_s, "reps": self.reps, "threads": self.threads,
            **({"sizes": [s.to_json() for s in self.sizes]} if self.sizes else {}),
            **({"variant": self.variant, "mode": self.mode} if self.variant or self.mode else {}),
            **({"validation": self.validation.to_json()} if self.validation is not None else {}),
            **({"run_id": self.run_id} if self.run_id is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BenchResult":
        val = d.get("validation")
        return cls(
            subject=d["subject"], signature=d["signature"], target=d["target"], status=d["status"],
            reason=d.get("reason", ""), min_s=d.get("min_s"), median_s=d.get("median_s"),
            p90_s=d.get("p90_s"), mean_s=d.get("mean_s"), reps=int(d.get("reps") or 0),
            threads=int(d.get("threads") or 0), sizes=tuple(SizeTiming.from_json(s) for s in d.get("sizes") or ()),
            variant=d.get("variant", ""), mode=d.get("mode", ""),
            validation=None if val is None else EagerValidation.from_json(val), run_id=d.get("run_id"),
        )
