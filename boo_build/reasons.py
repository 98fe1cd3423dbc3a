"""Typed reasons: why a candidate lost, why one was selected, where torch calls go.

A ``Reason`` is its text (what a person reads: the report, ``info``, the page,
``bench.csv``) with its ``Kind`` (what code decides on). It is a ``str``, so
that messages, JSON text fields and comparisons with text keep working; every
consumer that derives a status switches on ``reason.kind``, never on words: a
message may be reworded without changing a status anywhere.

The selection (``stages.selection``) makes them; the select records and the
bundle index carry each kind beside its text (``loader/format.py``: the
``*_kind``/``*_kinds`` fields). A bundle written before kinds were recorded
opens as before: each of its reasons is mapped to a kind once, when its index
is read (``legacy_kind``, the one place a reason's words are read).

Pure Python (stdlib): the loader imports it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """What a reason says, as a value code can switch on."""

    # why a candidate does not ship (``rejected``; a candidate record's reason)
    EXPORT_UNAVAILABLE = "export-unavailable"  # the op cannot be exported this way
    COMPILE_FAILED = "compile-failed"  # iree-compile failed, or left no record
    NOT_COMPILED = "not-compiled"  # left out on purpose: the traffic model ranked another first, or nothing to change
    VALIDATION_FAILED = "validation-failed"  # its results missed the float64 reference
    VALIDATION_ERROR = "validation-error"  # it raised in the runtime
    NOT_VALIDATED = "not-validated"  # no verdict: it did not run here, or left no record
    NOT_BENCHMARKED = "not-benchmarked"  # validated, but no timing
    SLOWER = "slower"  # validated and timed, slower than the selected
    DEFAULT_KEPT = "default-kept"  # faster, but within the margin of the default, which was kept
    TIE = "tie"  # the paired rounds could not tell it from the selected one: the preferred one ships
    NOT_SELECTED = "not-selected"  # shipped unmeasured beside the selection (no device to decide)
    SELECTED = "selected"  # a candidate record of the selected candidate (its reason is empty)
    # why the selected candidate ships (a target entry's ``reason``)
    FASTEST = "fastest"  # the fastest validated
    WITHIN_MARGIN = "within-margin"  # the default, within the margin of the fastest
    TIED = "tied"  # the most preferred of candidates the paired rounds could not tell apart
    DEFAULT = "default"  # the default among the validated (nothing timed)
    MODELLED = "modelled"  # the least modelled traffic, until measured (a GPU target without a device)
    UNMEASURED = "unmeasured"  # the default, until measured: nothing ran
    NONE_AVAILABLE = "none-available"  # nothing ships: every candidate failed or none compiled
    # where torch tensors go (``prefer_eager``, ``eager_rejected``)
    EAGER_FASTER = "eager-faster"  # the kernel not clearly faster than torch eager: torch calls run eager
    EAGER_NOT_VALIDATED = "eager-not-validated"  # eager was faster, but its results have no verdict
    EAGER_FAILED = "eager-failed"  # eager was faster, but its results failed validation
    # a reason read from a bundle written before kinds, in words not known here
    UNKNOWN = "unknown"


# The kinds consumers group by
BUILD_FAILURES = frozenset({Kind.EXPORT_UNAVAILABLE, Kind.COMPILE_FAILED})
VALIDATION_FAILURES = frozenset({Kind.VALIDATION_FAILED, Kind.VALIDATION_ERROR})
FAILURES = BUILD_FAILURES | VALIDATION_FAILURES
LOST_ON_TIME = frozenset({Kind.SLOWER, Kind.DEFAULT_KEPT})
NOT_RUN = frozenset({Kind.NOT_COMPILED, Kind.NOT_VALIDATED, Kind.NOT_BENCHMARKED, Kind.NOT_SELECTED,
                     Kind.UNMEASURED})
UNMEASURED_CHOICES = frozenset({Kind.MODELLED, Kind.UNMEASURED, Kind.DEFAULT})  # selected without timing


class Reason(str):
    """A reason's text with its ``kind``: equal to, hashed as, and written to JSON as its text."""

    kind: Kind

    def __new__(cls, kind: Kind | str, text: str) -> "Reason":
        self = super().__new__(cls, text)
        self.kind = Kind(kind)
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Reason({self.kind.name}, {str.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its kind (Dask, copies)
        return (Reason, (self.kind, self.text))

    def to_json(self) -> dict[str, str]:
        """``{"kind", "text"}``: the select records' form (the index keeps text and kind apart)."""
        return {"kind": str(self.kind), "text": self.text}

    @classmethod
    def from_json(cls, d: Any, where: str = "reason") -> "Reason":
        if isinstance(d, Reason):
            return d
        if not isinstance(d, dict) or not isinstance(d.get("text"), str):
            raise ValueError(f"{where}: expected {{\"kind\", \"text\"}}, got {d!r}")
        return cls(checked_kind(d.get("kind"), where), d["text"])


def checked_kind(value: Any, where: str = "reason") -> Kind:
    try:
        return Kind(value)
    except ValueError:
        raise ValueError(f"{where}: unknown reason kind {value!r}: one of {', '.join(Kind)}") from None


def with_kind(text: str, kind: Any, where: str = "reason", default: Kind | None = None) -> Reason:
    """An index's reason: its text and recorded kind, or, in a bundle written before
    kinds were recorded (``kind`` None), ``default`` where given, else ``legacy_kind``
    of its words. A ``Reason`` is returned as it is."""
    if isinstance(text, Reason):
        return text
    if kind is not None:
        return Reason(checked_kind(kind, where), text)
    return Reason(default if default is not None else legacy_kind(text), text)


# How the selection worded each kind before kinds were recorded (boo-build up to 0.1.0's
# bundles): the first prefix a text starts with gives its kind. Read only by ``legacy_kind``.
_LEGACY = (
    ("export unavailable", Kind.EXPORT_UNAVAILABLE),
    ("compile failed", Kind.COMPILE_FAILED),
    ("not compiled", Kind.COMPILE_FAILED),
    ("least modelled traffic is", Kind.NOT_COMPILED),
    ("traffic not modelled", Kind.NOT_COMPILED),
    ("variant ", Kind.NOT_COMPILED),
    ("failed validation", Kind.VALIDATION_FAILED),
    ("validation failed", Kind.VALIDATION_FAILED),
    ("validation error", Kind.VALIDATION_ERROR),
    ("not validated", Kind.NOT_VALIDATED),
    ("not benchmarked", Kind.NOT_BENCHMARKED),
    ("slower", Kind.SLOWER),
    ("within", Kind.DEFAULT_KEPT),
    ("not selected", Kind.NOT_SELECTED),
    ("fastest validated", Kind.FASTEST),
    ("default within", Kind.WITHIN_MARGIN),
    ("default among validated", Kind.DEFAULT),
    ("least modelled traffic", Kind.MODELLED),
    ("default until measured", Kind.UNMEASURED),
    ("no implementation available", Kind.NONE_AVAILABLE),
    ("measured on", Kind.NONE_AVAILABLE),
    ("the kernel not", Kind.EAGER_FASTER),
    ("torch eager not validated", Kind.EAGER_NOT_VALIDATED),
    ("torch eager", Kind.EAGER_FAILED),
)


def legacy_kind(text: str) -> Kind:
    """The kind of a reason recorded without one (a bundle written before kinds), from
    its words as the selection wrote them then; ``Kind.UNKNOWN`` for other words."""
    for prefix, kind in _LEGACY:
        if text.startswith(prefix):
            return kind
    return Kind.UNKNOWN


__all__ = ["BUILD_FAILURES", "FAILURES", "Kind", "LOST_ON_TIME", "NOT_RUN", "Reason", "UNMEASURED_CHOICES",
           "VALIDATION_FAILURES", "checked_kind", "legacy_kind", "with_kind"]
