"""A bundle store: plain files on a shared file system or behind any static
HTTP server, and the lock files that pin what an application runs from it.

    STORE/index.json                                  every published bundle (``StoreIndex``)
    STORE/<name>/<version>/<name>-<version>.tar.zst   the bundles, never overwritten

``publish`` checks a bundle (its index and every member's sha256), copies it
into place atomically (a temporary file, then a hard link that fails if the
name exists), and rewrites ``index.json`` atomically (``files.write_atomic``)
under a POSIX record lock on ``STORE/.index.lock``, so concurrent publishers
lose nothing. A version is published once: the same bytes again are a no-op,
other bytes are refused, and so is another build of the same precedence
(``1.0.0+a`` after ``1.0.0+b``). ``lock`` resolves requirements
(``NAME`` = the newest release by SemVer precedence, ``NAME==VERSION``)
against a store's index, read from a folder or any URL the loader fetches,
into a ``loader.lockfile.LockFile``.

Standard library, the loader (archive reader, lock-file records, fetch) and
``bundle_names``/``files``; nothing of the compiler.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from .bundle_names import compare_versions, name_problem, newest, precedence_key, version_problem
from .errors import BooBuildError
from .files import write_atomic
from .loader.archive import DEFAULT_MAX_SIZE, read_archive, verify_members
from .loader.errors import BundleFetchError
from .loader.lockfile import SHA256, LockedBundle, LockFile
from .loader.remote import file_sha256, read_url

STORE_FORMAT = "boo-store-index"
STORE_FORMAT_VERSION = 1
INDEX = "index.json"
INDEX_LOCK = ".index.lock"
MAX_INDEX_BYTES = 64 << 20


class StoreError(BooBuildError, ValueError):
    """A store, a requirement or a bundle that cannot be published or locked; the message says what to do."""


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class StoreEntry:
    """One published bundle, as ``index.json`` lists it."""

    name: str
    version: str
    path: str  # relative to the store
    sha256: str
    size: int
    targets: tuple[str, ...]
    format_version: int  # the bundle format's (bundle.json's format_version)
    iree_runtime: Mapping[str, Any] | None = None  # bundle.json's range, if it records one

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "path": self.path, "sha256": self.sha256,
                "size": self.size, "targets": list(self.targets), "format_version": self.format_version,
                "iree_runtime": None if self.iree_runtime is None else dict(self.iree_runtime)}

    @classmethod
    def from_json(cls, d: Any, where: str) -> "StoreEntry":
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} must be an object")
        try:
            e = cls(d["name"], d["version"], d["path"], d["sha256"], d["size"], tuple(d["targets"]),
                    d["format_version"], d.get("iree_runtime"))
        except KeyError as k:
            raise ValueError(f"{where} has no {k.args[0]!r}") from None
        problem = (name_problem(e.name) or version_problem(e.version)
                   or (None if SHA256.fullmatch(str(e.sha256)) else f"sha256 {e.sha256!r} is not 64 hex digits")
                   or (None if isinstance(e.size, int) and e.size > 0 else f"size {e.size!r} is not a byte count")
                   or (None if e.path == entry_path(e.name, e.version) else f"path {e.path!r} is not "
                       f"{entry_path(e.name, e.version)!r}"))
        if problem:
            raise ValueError(f"{where}: {problem}")
        return e

    def locked(self) -> LockedBundle:
        return LockedBundle(self.name, self.version, self.path, self.sha256, self.size)


@dataclass(frozen=True)
class StoreIndex:
    entries: tuple[StoreEntry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.entries, key=lambda e: (e.name, precedence_key(e.version)))
        return {"format": STORE_FORMAT, "format_version": STORE_FORMAT_VERSION,
                "bundles": [e.to_json() for e in ordered]}

    @classmethod
    def from_json(cls, d: Any, source: str) -> "StoreIndex":
        try:
            if not isinstance(d, Mapping) or d.get("format") != STORE_FORMAT:
                raise ValueError(f"format is not {STORE_FORMAT!r}")
            if d.get("format_version") != STORE_FORMAT_VERSION:
                raise ValueError(f"format_version {d.get('format_version')!r} is not {STORE_FORMAT_VERSION} "
                                 "(a newer boo-build wrote it: upgrade)")
            items = d.get("bundles")
            if not isinstance(items, list):
                raise ValueError("bundles must be a list")
            return cls(tuple(StoreEntry.from_json(x, f"bundles[{i}]") for i, x in enumerate(items)))
        except (TypeError, ValueError) as e:
            raise StoreError(f"{source} is not a store index this boo-build reads: {e}") from None

    def versions(self, name: str) -> dict[str, StoreEntry]:
        return {e.version: e for e in self.entries if e.name == name}

    def names(self) -> list[str]:
        return sorted({e.name for e in self.entries})

    def with_entry(self, entry: StoreEntry) -> "StoreIndex":
        return StoreIndex(tuple(e for e in self.entries if (e.name, e.version) != (entry.name, entry.version))
                          + (entry,))


def entry_path(name: str, version: str) -> str:
    return f"{name}/{version}/{name}-{version}.tar.zst"


# ------------------------------------------------------------------ publish
@dataclass(frozen=True)
class Published:
    entry: StoreEntry
    file: Path
    new: bool  # False: the same bytes were already published


def _writable(store: Path, what: str, e: OSError) -> StoreError:
    return StoreError(f"cannot write the store {store} ({what}: {e.strerror or e}): pass a folder you can "
                      "write, or fix its permissions")


@contextmanager
def _index_lock(store: Path) -> Iterator[None]:
    # POSIX record locks (lockf), not flock: NFS carries them between machines (NLM / NFSv4).
    fd = os.open(store / INDEX_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise StoreError(f"the store {store} is on a file system without file locks ({e.strerror}): "
                                 "publish from one machine at a time on a file system that has them "
                                 "(docs/store.md)") from None
            raise
        yield
    finally:
        os.close(fd)


def read_local_index(store: Path) -> StoreIndex:
    p = store / INDEX
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return StoreIndex()
    try:
        d = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"{p} is not valid JSON ({e}): restore it from a backup, or rebuild it by publishing "
                         "the bundles again into an empty store") from None
    return StoreIndex.from_json(d, str(p))


def _copy_verified(src: Path, dest: Path, sha256: str) -> None:
    """Copy ``src`` to ``dest`` through a temporary name; ``dest`` appears whole, and
    only if it did not exist and the copy has ``sha256``."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(src, "rb") as fi, open(tmp, "wb") as fo:
            shutil.copyfileobj(fi, fo, 1 << 20)
            fo.flush()
            os.fsync(fo.fileno())
        os.chmod(tmp, 0o644)
        actual = file_sha256(tmp)
        if actual != sha256:
            raise StoreError(f"{src} changed while it was copied (sha256 {actual}, read as {sha256}): publish again")
        try:
            os.link(tmp, dest)  # fails if the name exists: a published file is never replaced
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: the index lock keeps this check-then-rename safe
            if dest.exists():
                raise FileExistsError(errno.EEXIST, "exists", str(dest)) from None
            os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def publish(bundle: str | os.PathLike[str], store: str | os.PathLike[str], *,
            max_size: int = DEFAULT_MAX_SIZE) -> Published:
    """Check ``bundle`` and add it to the store folder ``store`` (created if need be)."""
    if "://" in os.fspath(store):
        raise StoreError(f"publish writes a store folder, not a URL ({os.fspath(store)}): publish into the folder "
                         "the server serves (or a local folder you then upload, index.json last)")
    src, root = Path(bundle), Path(store)
    if not src.is_file():
        raise StoreError(f"bundle {src} does not exist" + (" (it is a folder)" if src.is_dir() else "")
                         + ": pass the .tar.zst that `boo-build build` wrote")
    archive = read_archive(src, max_size=max_size)  # BundleFormatError: not a bundle
    bad = verify_members(archive)
    if bad:
        raise StoreError(f"bundle {src} is corrupt: {', '.join(m for m, _, _ in bad)} do not match their sha256 in "
                         "the index; rebuild it (`boo-build verify` lists them)")
    ix = archive.bundle_index
    problem = name_problem(ix.name) or version_problem(ix.version)
    if problem or ix.name is None or ix.version is None:
        raise StoreError(f"bundle {src}: {problem or 'no name or version'}; only a named, versioned bundle "
                         "can be published")
    sha, size = file_sha256(src), src.stat().st_size
    entry = StoreEntry(ix.name, ix.version, entry_path(ix.name, ix.version), sha, size, tuple(sorted(ix.targets)),
                       ix.format_version, None if ix.iree_runtime is None else dict(ix.iree_runtime))
    if root.exists() and not root.is_dir():
        raise StoreError(f"the store {root} is a file, not a folder: pass a folder (it is created if need be)")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _writable(root, "creating it", e) from None
    dest = root / entry.path
    try:
        with _index_lock(root):
            index = read_local_index(root)
            for other in index.versions(ix.name).values():
                if other.version == ix.version and other.sha256 == sha:
                    if not dest.is_file() or file_sha256(dest) != sha:
                        raise StoreError(f"the store {root} lists {ix.name} {ix.version} but its file {dest} is "
                                         "missing or changed: restore it from the bundle, or remove the entry")
                    return Published(other, dest, False)
                if other.version == ix.version:
                    raise StoreError(f"{ix.name} {ix.version} is already published in {root} with other bytes "
                                     f"(sha256 {other.sha256}, this bundle {sha}): a published version is never "
                                     "replaced; give the new build a new version")
                if compare_versions(other.version, ix.version) == 0:
                    raise StoreError(f"{ix.name} {other.version} is already published in {root}: {ix.version} "
                                     "differs from it only in build metadata, so it would have the same precedence; "
                                     "give this build a new version")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.exists():
                if file_sha256(dest) != sha:
                    raise StoreError(f"{dest} exists with other bytes than {src} and is not in the index: remove "
                                     "it, or publish under a new version")
            else:
                _copy_verified(src, dest, sha)
            write_atomic(root / INDEX, (json.dumps(index.with_entry(entry).to_json(), indent=1) + "\n").encode())
    except FileExistsError:
        raise StoreError(f"{dest} appeared while publishing (another publisher?): publish again to check it") \
            from None
    except OSError as e:
        raise _writable(root, getattr(e, "filename", None) or "writing", e) from None
    return Published(entry, dest, True)


# ------------------------------------------------------------------ lock
def store_url(store: str) -> str:
    """The URL a lock file records for ``store`` (a folder becomes a ``file://`` URL)."""
    if "://" in store:
        return store if store.endswith("/") else store + "/"
    return Path(store).resolve().as_uri() + "/"


def read_index(store: str) -> StoreIndex:
    """The index of the store at ``store``: a folder, or an http(s):// or file:// URL."""
    url = store_url(store)
    if "://" not in store and not Path(store).is_dir():
        raise StoreError(f"the store {store} is not a folder: pass --store a store folder or its URL")
    try:
        raw = read_url(url + INDEX, MAX_INDEX_BYTES)
    except BundleFetchError as e:
        missing = e.status == 404 or "No such file" in e.reason
        raise StoreError(f"cannot read the store's index {url}{INDEX}: {e.reason}"
                         + ("; is --store the store's root, and has a bundle been published there "
                            "(boo-build publish)?" if missing else "")) from None
    try:
        d = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"{url}{INDEX} is not valid JSON ({e})") from None
    return StoreIndex.from_json(d, url + INDEX)


def parse_requirement(text: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME==VERSION``."""
    name, sep, version = text.partition("==")
    name, version = name.strip(), version.strip()
    problem = name_problem(name) or (version_problem(version) if sep else None)
    if problem:
        raise StoreError(f"requirement {text!r}: {problem}; write NAME or NAME==VERSION")
    return name, (version if sep else None)


def resolve(index: StoreIndex, name: str, version: str | None, where: str) -> StoreEntry:
    versions = index.versions(name)
    if not versions:
        have = ", ".join(index.names()) or "none: nothing was published there"
        raise StoreError(f"the store {where} has no bundle named {name!r} (it has: {have})")
    listed = ", ".join(sorted(versions, key=precedence_key))
    if version is not None:
        if version not in versions:
            raise StoreError(f"the store {where} has no {name} {version} (its versions: {listed})")
        return versions[version]
    best = newest(versions)
    if best is None:
        raise StoreError(f"the store {where} has only pre-releases of {name} ({listed}): pin one with "
                         f"{name}==VERSION")
    return versions[best]


def lock(requirements: list[str], store: str) -> LockFile:
    """The lock file pinning each requirement as the store's index lists it."""
    if not requirements:
        raise StoreError("nothing to lock: name at least one bundle (NAME or NAME==VERSION)")
    index, url = read_index(store), store_url(store)
    picked: dict[str, StoreEntry] = {}
    for text in requirements:
        name, version = parse_requirement(text)
        if name in picked:
            raise StoreError(f"{name} is required twice: a lock file pins one version of each bundle")
        picked[name] = resolve(index, name, version, url)
    return LockFile(url, tuple(e.locked() for e in picked.values()))


def write_lock(lock_file: LockFile, out: str | os.PathLike[str]) -> Path:
    path = Path(out)
    try:
        write_atomic(path, lock_file.dump().encode())
    except OSError as e:
        raise StoreError(f"cannot write the lock file {path}: {e.strerror or e}") from None
    return path


__all__ = ["INDEX", "STORE_FORMAT", "STORE_FORMAT_VERSION", "Published", "StoreEntry", "StoreError", "StoreIndex",
           "entry_path", "lock", "parse_requirement", "publish", "read_index", "read_local_index",
           "resolve", "store_url", "write_lock"]
