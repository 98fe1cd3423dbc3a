"""Which iree-base-runtime can load a bundle's modules (the ``iree_runtime`` field).

``open_bundle`` refuses a runtime older than the oldest known to load them
(``RuntimeTooOld``) and warns about one newer than any tested
(``UntestedRuntimeWarning``). The writer (``pack.py``) fills the field;
``iree_release`` parses the versions on both sides. Standard library only.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Mapping

from .errors import BundleError, BundleFormatError
from .format import INDEX_NAME, RUNTIME_FIELD, BundleIndex
from .split_format import BundleHeader

_RELEASE_RE = re.compile(r"\s*(\d+)\.(\d+)\.(\d+)")


def iree_release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an IREE version ("3.13.0", "3.13.0rc20261016":
    a release wheel reports the rc it was built from), None if unparseable."""
    m = _RELEASE_RE.match(version) if isinstance(version, str) else None
    return tuple(int(g) for g in m.groups()) if m else None  # type: ignore[return-value]


class RuntimeTooOld(BundleError, RuntimeError):
    """The iree-base-runtime in this process is older than the oldest known to
    load the bundle's modules (``open_bundle`` raises it before any kernel loads)."""

    def __init__(self, path: str, runtime: str, oldest: str, newest: str, compiler: str):
        self.path, self.runtime, self.oldest, self.newest, self.compiler = path, runtime, oldest, newest, compiler
        rel = iree_release(runtime)
        same = ".".join(map(str, rel)) if rel else runtime
        super().__init__(
            f"bundle {path} needs iree-base-runtime {oldest} or newer (its modules were built by iree-compile "
            f"{compiler}; runtimes {oldest} to {newest} are known to load them), but this process has "
            f"iree-base-runtime {runtime}: install one, e.g. pip install 'iree-base-runtime>={oldest},<={newest}', "
            f"or rebuild the bundle with iree-base-compiler=={same} to match this runtime")


class UntestedRuntimeWarning(RuntimeWarning):
    """The iree-base-runtime in this process is newer than any tested with the bundle's modules."""


def check_runtime(index: BundleHeader | BundleIndex | Mapping[str, Any], path: str,
                  runtime: str | None = None) -> None:
    """Refuse a runtime older than the bundle's modules need (``RuntimeTooOld``),
    warn about one newer than any tested (``UntestedRuntimeWarning``).

    ``index``: the header, the typed index or its JSON. ``runtime``: the iree-base-runtime
    version, by default the one this process loads (``native.runtime_version``,
    without loading it). Bundles without the field, or an unknown runtime
    version, are not checked."""
    req = index.iree_runtime if isinstance(index, (BundleHeader, BundleIndex)) else index.get(RUNTIME_FIELD)
    if req is None:
        return
    oldest = newest = None
    if isinstance(req, Mapping) and all(isinstance(req.get(k), str) for k in ("compiler", "min", "max_tested")):
        oldest, newest = iree_release(req["min"]), iree_release(req["max_tested"])
    if oldest is None or newest is None:
        got = dict(req) if isinstance(req, Mapping) else req  # as JSON has it, not a read-only view
        raise BundleFormatError(f"{path}: malformed {INDEX_NAME}: {RUNTIME_FIELD} must hold version strings "
                                f"'compiler', 'min' and 'max_tested', got {got!r}")
    if runtime is None:
        from .native import runtime_version

        runtime = runtime_version()
    if not runtime:
        return
    have = iree_release(runtime)
    if have is None:
        return
    if have < oldest:
        raise RuntimeTooOld(path, runtime, req["min"], req["max_tested"], req["compiler"])
    if have > newest:
        warnings.warn(
            f"bundle {path}: iree-base-runtime {runtime} is newer than any tested with its modules (built by "
            f"iree-compile {req['compiler']}; tested {req['min']} to {req['max_tested']}); if a kernel fails to "
            f"load, install iree-base-runtime=={req['max_tested']} or rebuild the bundle with "
            f"iree-base-compiler=={'.'.join(map(str, have))}", UntestedRuntimeWarning, stacklevel=3)


__all__ = ["RuntimeTooOld", "UntestedRuntimeWarning", "check_runtime", "iree_release"]
