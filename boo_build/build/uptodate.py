"""Up-to-date checks of the build graph (doit ``uptodate`` callables).

A stage depends on the *content* of the previous stage's output: the MLIR
text, and records minus their run id and timings (``records.stable_record``),
so identical results never cascade (docs/ARCHITECTURE.md, "Up-to-date rules").
Stdlib and ``records`` only: the graph imports it at load time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from ..files import read_json
from ..records import stable_record
from ..signature import dumps

__all__ = ["content_digest", "inputs_unchanged", "record_ok"]


def record_ok(path: Path, *fields: str) -> Callable[..., bool]:
    """uptodate check: the stage's record exists and is readable (and has
    ``fields``: a record written before a stage recorded them is redone). A
    failure is up to date too while its inputs are unchanged: the compiler is
    deterministic, and a compile that timed out would only time out again."""

    def check(task, values) -> bool:  # noqa: ARG001 (doit's signature)
        rec = read_json(path)
        if not rec:
            return False
        return all(f in rec for f in ("status", *fields))

    check.__name__ = f"record_ok({Path(path).name})"
    return check


def content_digest(path: Path) -> str | None:
    """sha256 of what a file means to the next stage: a JSON record without
    its volatile fields, any other file byte for byte; None when missing."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if path.suffix == ".json":
        try:
            rec = json.loads(data)
        except ValueError:
            return None
        if isinstance(rec, dict):
            data = dumps(stable_record(rec)).encode()
    return hashlib.sha256(data).hexdigest()


def inputs_unchanged(*paths: str | Path) -> Callable[..., bool]:
    """uptodate check on the content of another task's outputs (doit checks
    it once the producing task has run); the digests are saved on success."""
    names = [str(p) for p in paths]

    def check(task, values) -> bool:
        now = {n: content_digest(Path(n)) for n in names}
        task.value_savers.append(lambda: {"inputs": now})
        return None not in now.values() and values.get("inputs") == now

    check.__name__ = f"inputs_unchanged({', '.join(Path(n).name for n in names)})"
    return check
