"""Files the build writes: one atomic writer and one canonical JSON form.

Every file the build writes goes through ``write_atomic`` (temporary file in
the same folder, fsync, rename): a reader, or a build killed half-way, never
sees a half-written file. Records are JSON in one canonical form
(``record_bytes``: sorted keys, indent 1, trailing newline), so an unchanged
result rewrites the same bytes. Pure Python (stdlib and ``signature``): the
graph imports it at load time.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .signature import dumps  # the canonical JSON text of every record (sorted keys, indent 1)

__all__ = ["read_json", "record_bytes", "write_atomic", "write_json"]


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
        data: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data
