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
import secrets
from pathlib import Path
from typing import Any

from .signature import dumps  # the canonical JSON text of every record (sorted keys, indent 1)

__all__ = ["read_json", "record_bytes", "write_atomic", "write_json"]


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder,
    flushed to disk before it is renamed over ``path`` (mode 0644). Whatever
    stops it (an error, a KeyboardInterrupt) removes the temporary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The name is chosen before the file exists (not mkstemp, which names it
    # only once created): a KeyboardInterrupt raised on this thread just after
    # the file was created, before a name was returned, still finds it. The
    # random part makes a clash practically impossible; O_EXCL refuses one.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    ours = True
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another writer's file by that name: not ours to remove
            ours = False
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # not the umask's: artifacts are readable by other users
        os.replace(tmp, path)
    except BaseException:
        if ours:
            tmp.unlink(missing_ok=True)
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
