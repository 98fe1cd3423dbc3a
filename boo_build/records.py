"""Stage records on disk: one atomic writer, one canonical JSON, status values.

Every file the build writes goes through ``write_atomic`` (temporary file in
the same folder, fsync, rename): a reader, or a build killed half-way, never
sees a half-written file. Records are JSON in one canonical form
(``record_bytes``: sorted keys, indent 1, trailing newline), so an unchanged
result rewrites the same bytes. A record's ``run_id`` and ``seconds`` say which
build wrote it and how long it took; ``stable_record`` drops them, leaving what
the result is (what the up-to-date checks and the build report compare).

Status values are ``str`` enums: they compare equal to, and are written to
JSON as, the plain strings the records have always held. Pure Python (stdlib
and ``signature``): the graph imports it at load time.
"""

from __future__ import annotations

import json
import os
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Any

from .signature import dumps  # the canonical JSON text of every record (sorted keys, indent 1)

__all__ = ["BenchStatus", "CompileStatus", "ExportStatus", "VOLATILE_FIELDS", "ValidationStatus", "dumps",
           "read_json", "record_bytes", "stable_record", "write_atomic", "write_json"]


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


class BenchStatus(StrEnum):
    OK = "ok"
    NOT_RUN = "not run"
    ERROR = "error"
    SKIPPED = "skipped"  # not validated, so not timed


VOLATILE_FIELDS = ("run_id", "seconds")  # differ between runs that produced the same result


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder,
    flushed to disk before it is renamed over ``path`` (mode 0644)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide artifacts from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_bytes(data: Any) -> bytes:
    """A record's file content: canonical JSON and a newline."""
    return (dumps(data) + "\n").encode()


def write_json(path: Path, data: Any) -> None:
    write_atomic(Path(path), record_bytes(data))


def read_json(path: Path) -> dict[str, Any] | None:
    """A record, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def compared_seconds(rec: Any) -> float | None:
    """What the selection compares of a timing record (a ``BenchResult`` JSON, a
    size of one, a candidate's): its ``mean_s`` (``benchmark.Stats.mean``; on the
    CPU each sample a round's mean per call, ``benchmark.CPU_ROUND_S``), else its
    median (records written before means were), else its best sample."""
    for field in ("mean_s", "median_s", "min_s"):
        v = rec.get(field)
        if v is not None:
            return v
    return None


def stable_record(rec: dict | None) -> dict | None:
    """A stage record without its volatile fields: what the result is."""
    if rec is None:
        return None
    return {k: v for k, v in rec.items() if k not in VOLATILE_FIELDS}
