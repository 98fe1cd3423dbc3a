"""Lock files: which bundles an application runs, pinned by sha256 and size.

One record class for the writer (``boo-build lock``) and every reader
(``open_bundle``, ``boo-build fetch``). A lock file is JSON, recognised by
its content (``"format": "boo-lock"``), whatever its name::

    {"format": "boo-lock", "format_version": 1,
     "store": "https://host/store/",
     "bundles": [{"name": "boo-norms", "version": "0.1.0",
                  "path": "boo-norms/0.1.0/boo-norms-0.1.0.tar.zst",
                  "sha256": "<64 hex digits>", "size": 123456}]}

``store`` is written once; each bundle's ``path`` is relative to it, so a
mirror needs one change: ``$BOO_STORE_URL`` replaces ``store`` when set.
A reader refuses an unknown ``format_version`` and any malformed field,
naming it (``LockFileError``). Standard library only, and no HTTP module.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

from .errors import LockFileError

LOCK_FORMAT = "boo-lock"
LOCK_FORMAT_VERSION = 1
READABLE_LOCK_VERSIONS = (1,)
STORE_URL_ENV = "BOO_STORE_URL"  # replaces a lock file's store URL (a mirror)
SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # bundle_names.NAME; the loader does not import the build side
_HEAD = 64  # how much of a file is read to tell a lock file from a bundle (leading blanks included)


def _field(d: Mapping[str, Any], key: str, kind: type, where: str, path: str) -> Any:
    if key not in d:
        raise LockFileError(path, where + key, "missing")
    v = d[key]
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise LockFileError(path, where + key, f"must be a {kind.__name__}, got {v!r}")
    return v


@dataclass(frozen=True)
class LockedBundle:
    """One pinned bundle: its ``path`` is relative to the lock file's store URL."""

    name: str
    version: str
    path: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "path": self.path, "sha256": self.sha256,
                "size": self.size}

    @classmethod
    def from_json(cls, d: Any, where: str, source: str = "<lock>") -> "LockedBundle":
        """``where``: the field's place (``bundles[0].``), named by ``LockFileError``."""
        if not isinstance(d, Mapping):
            raise LockFileError(source, where.rstrip("."), f"must be an object, got {type(d).__name__}")
        name = _field(d, "name", str, where, source)
        if not _NAME.fullmatch(name):
            raise LockFileError(source, where + "name", f"{name!r} is not a bundle name")
        version = _field(d, "version", str, where, source)
        path = _field(d, "path", str, where, source)
        if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in path.split("/")):
            raise LockFileError(source, where + "path", f"{path!r} must be a relative path inside the store, "
                                                        "without '..' or empty parts")
        sha = _field(d, "sha256", str, where, source)
        if not SHA256.fullmatch(sha):
            raise LockFileError(source, where + "sha256", f"{sha!r} is not 64 lower-case hex digits")
        size = _field(d, "size", int, where, source)
        if size <= 0:
            raise LockFileError(source, where + "size", f"must be a positive number of bytes, got {size}")
        return cls(name, version, path, sha, size)


@dataclass(frozen=True)
class LockFile:
    """A lock file: the store's URL (ending in ``/``) and its pinned bundles."""

    store: str
    bundles: tuple[LockedBundle, ...]
    format_version: int = LOCK_FORMAT_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", self.store if self.store.endswith("/") else self.store + "/")
        object.__setattr__(self, "bundles", tuple(self.bundles))

    def to_json(self) -> dict[str, Any]:
        return {"format": LOCK_FORMAT, "format_version": self.format_version, "store": self.store,
                "bundles": [b.to_json() for b in self.bundles]}

    def dump(self) -> str:
        """The file's text: the same lock always writes the same bytes."""
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, d: Any, source: str = "<lock>") -> "LockFile":
        if not isinstance(d, Mapping):
            raise LockFileError(source, "format", "not a lock file: the file is not a JSON object")
        fmt = d.get("format")
        if fmt != LOCK_FORMAT:
            raise LockFileError(source, "format", f"expected {LOCK_FORMAT!r}, got {fmt!r}: not a boo-build lock file")
        version = _field(d, "format_version", int, "", source)
        if version not in READABLE_LOCK_VERSIONS:
            raise LockFileError(source, "format_version",
                                f"version {version} is not one this loader reads ({', '.join(map(str, READABLE_LOCK_VERSIONS))}): "
                                "upgrade boo-build, or lock again with this one")
        store = _field(d, "store", str, "", source)
        if "://" not in store:
            raise LockFileError(source, "store", f"{store!r} is not a URL (http://, https:// or file://)")
        items = _field(d, "bundles", list, "", source)
        if not items:
            raise LockFileError(source, "bundles", "empty: a lock file pins at least one bundle")
        bundles = tuple(LockedBundle.from_json(b, f"bundles[{i}].", source) for i, b in enumerate(items))
        seen: set[str] = set()
        for i, b in enumerate(bundles):
            if b.name in seen:
                raise LockFileError(source, f"bundles[{i}].name", f"{b.name!r} is locked twice")
            seen.add(b.name)
        return cls(store, bundles, version)

    @classmethod
    def parse(cls, text: str, source: str = "<lock>") -> "LockFile":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise LockFileError(source, "format", f"not valid JSON ({e})") from None
        return cls.from_json(d, source)

    def store_url(self, environ: Mapping[str, str] | None = None) -> str:
        """The store URL downloads use: ``$BOO_STORE_URL`` where set (a mirror), else the lock's."""
        env = os.environ if environ is None else environ
        url = env.get(STORE_URL_ENV) or self.store
        return url if url.endswith("/") else url + "/"

    def url_of(self, bundle: LockedBundle, environ: Mapping[str, str] | None = None) -> str:
        return self.store_url(environ) + quote(bundle.path)

    def pick(self, name: str | None, source: str = "<lock>") -> LockedBundle:
        """The bundle named ``name``; with None, the only one."""
        if name is None:
            if len(self.bundles) == 1:
                return self.bundles[0]
            raise LockFileError(source, "bundles", f"pins {len(self.bundles)} bundles "
                                f"({', '.join(b.name for b in self.bundles)}): pass name= to choose one")
        for b in self.bundles:
            if b.name == name:
                return b
        raise LockFileError(source, "bundles", f"no bundle named {name!r}; it pins "
                            f"{', '.join(b.name for b in self.bundles)}")


def looks_like_lock(head: bytes) -> bool:
    """Whether a file starting with ``head`` is to be read as a lock file: a JSON
    object (a bundle starts with zstd's magic number, never with ``{``); reading
    it then says whether it is one, naming the field that is not."""
    return head.lstrip()[:1] == b"{"


def is_lock_file(path: str | os.PathLike[str]) -> bool:
    try:
        with open(path, "rb") as f:
            return looks_like_lock(f.read(_HEAD))
    except OSError:
        return False


def read_lock(path: str | os.PathLike[str]) -> LockFile:
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise LockFileError(source, "file", f"cannot read it: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LockFileError(source, "format", "not UTF-8 text: not a lock file") from None
    return LockFile.parse(text, source)


__all__ = ["LOCK_FORMAT", "LOCK_FORMAT_VERSION", "READABLE_LOCK_VERSIONS", "SHA256", "STORE_URL_ENV", "LockFile",
           "LockedBundle", "is_lock_file", "looks_like_lock", "read_lock"]
