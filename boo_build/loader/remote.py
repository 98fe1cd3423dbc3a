"""Bundles from a lock file, a URL or a store: downloaded once into a local
cache keyed by sha256, and never used unverified.

``open_bundle`` imports this module only for a source that is not a plain
bundle file (``resolve``); ``boo-build fetch`` and ``boo-build cache`` use it
too. Standard library only; ``urllib.request`` (and with it ``http.client``)
is imported by the first ``http(s)://`` download, never for a local path, a
``file://`` URL or a cache hit.

The cache, ``$BOO_BUILD_CACHE_DIR`` (default ``$XDG_CACHE_HOME/boo-build``, else
``~/.cache/boo-build``)::

    sha256/<digest>/<file name>   verified bundles, one folder per sha256
    tmp/                          downloads in progress
    locks/<digest>.lock           one lock per digest: a bundle downloads once

A download streams into ``tmp/``, hashing as it goes, bounded by the pinned
size (``max_size`` where none is pinned); only a file of the pinned size and
sha256 is renamed into ``sha256/``. A hit is hashed again on every use: an
entry changed on disk is refused, removed and fetched again (a warning says
so). Several processes (or threads) after the same digest take its lock
(``flock``) in turn: the first downloads, the others find it in the cache.

Environment: ``BOO_BUILD_CACHE_DIR``; ``BOO_OFFLINE=1`` (a miss fails, nothing is
fetched); ``BOO_FETCH_TIMEOUT`` (seconds a connection or a read may wait,
default 30); ``BOO_STORE_AUTH`` (an ``Authorization`` header value sent to
http(s) stores, not on redirects); ``BOO_STORE_URL`` (``lockfile.py``: a
mirror replaces the lock's store URL).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Mapping
from urllib.parse import unquote, urlsplit

from .archive import DEFAULT_MAX_SIZE, BundleTooLarge
from .errors import BundleFetchError, BundleFormatError, BundleIntegrityError
from .lockfile import SHA256, LockedBundle, LockFile, is_lock_file, read_lock

CACHE_ENV = "BOO_BUILD_CACHE_DIR"
OFFLINE_ENV = "BOO_OFFLINE"
TIMEOUT_ENV = "BOO_FETCH_TIMEOUT"
AUTH_ENV = "BOO_STORE_AUTH"
DEFAULT_TIMEOUT = 30.0
_CHUNK = 1 << 20
_SCHEMES = ("http", "https", "file")


class CorruptCacheEntry(UserWarning):
    """A cache entry whose bytes no longer match its sha256: removed, fetched again."""


# ------------------------------------------------------------- settings
def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "boo-build"


def offline(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def fetch_timeout(environ: Mapping[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


def check_sha256(sha256: Any) -> str:
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256.lower()):
        raise ValueError(f"sha256 must be 64 hex digits, got {sha256!r}")
    return sha256.lower()


# ------------------------------------------------------------- the cache
@dataclass(frozen=True)
class CacheEntry:
    sha256: str
    path: Path
    size: int
    mtime: float


def entry_dir(cache: Path, sha256: str) -> Path:
    return cache / "sha256" / sha256


def cache_entries(cache: Path | None = None) -> list[CacheEntry]:
    """The cached bundles, as found on disk (not verified: ``open_bundle`` does that on use)."""
    root = (cache or cache_dir()) / "sha256"
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        for f in sorted(d.iterdir()) if d.is_dir() else []:
            if f.is_file() and not f.name.startswith("."):
                st = f.stat()
                out.append(CacheEntry(d.name, f, st.st_size, st.st_mtime))
    return out


def clean_cache(cache: Path | None = None) -> tuple[int, int]:
    """Remove every cached bundle, download in progress and lock file: (files, bytes) removed."""
    cache = cache or cache_dir()
    files = size = 0
    for sub in ("sha256", "tmp", "locks"):
        root = cache / sub
        if not root.is_dir():
            continue
        for dirpath, _, names in os.walk(root):
            for n in names:
                p = os.path.join(dirpath, n)
                try:
                    size += os.lstat(p).st_size
                    files += 1
                except OSError:
                    pass
        shutil.rmtree(root, ignore_errors=True)
    return files, size


def _cached_file(cache: Path, sha256: str) -> Path | None:
    d = entry_dir(cache, sha256)
    try:
        names = sorted(n for n in os.listdir(d) if not n.startswith("."))
    except OSError:
        return None
    return d / names[0] if names else None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _verified_hit(cache: Path, sha256: str, size: int | None, url: str) -> Path | None:
    """The cached file of ``sha256`` if it is intact; a damaged one is removed
    (``CorruptCacheEntry`` warns) or, offline, refused."""
    path = _cached_file(cache, sha256)
    if path is None:
        return None
    try:
        have_size = path.stat().st_size
        actual = file_sha256(path) if size is None or have_size == size else f"(not computed: {have_size} bytes)"
    except FileNotFoundError:  # removed by another process meanwhile
        return None
    if actual == sha256:
        return path
    problem = f"cache entry {path} was changed after it was verified (sha256 {actual}, expected {sha256})"
    if offline():
        raise BundleIntegrityError.of_file(str(path), sha256, actual, "the cache entry was changed on disk",
                                           f"{OFFLINE_ENV} is set, so it cannot be fetched again from {url}: "
                                           "unset it, or run `boo-build fetch` where the store is reachable")
    warnings.warn(f"{problem}: removed, fetching {url} again", CorruptCacheEntry, stacklevel=4)
    shutil.rmtree(path.parent, ignore_errors=True)
    return None


@contextmanager
def _digest_lock(cache: Path, sha256: str) -> Iterator[None]:
    locks = cache / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{sha256}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks while another process downloads this digest
        yield
    finally:
        os.close(fd)  # releases the lock


# ------------------------------------------------------------- transfers
def _reason(e: BaseException, timeout: float) -> str:
    if isinstance(e, TimeoutError) or "timed out" in str(e):
        return f"timed out: no data for {timeout:g} s ({TIMEOUT_ENV})"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is the store's server running, and is the URL's host and port right?)"
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).strip()


def _open_http(url: str, timeout: float) -> tuple[IO[bytes], int | None]:
    import urllib.error  # only here: the loader imports no HTTP module for local bundles
    import urllib.request

    req = urllib.request.Request(url, headers={"User-Agent": "boo-build-loader"})
    auth = os.environ.get(AUTH_ENV)
    if auth:
        req.add_unredirected_header("Authorization", auth)  # never sent on to a redirect's host
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        e.close()
        hint = {404: "the store has no such file: check the lock's store URL (or $BOO_STORE_URL) and path",
                401: f"the store wants credentials: set {AUTH_ENV} to the Authorization header's value",
                403: f"the store refused the credentials ({AUTH_ENV})"}.get(e.code, "")
        raise BundleFetchError(url, f"HTTP {e.code} {e.reason}" + (f": {hint}" if hint else ""), e.code) from None
    except urllib.error.URLError as e:
        inner = e.reason if isinstance(e.reason, BaseException) else e
        raise BundleFetchError(url, _reason(inner, timeout)) from None
    except OSError as e:  # a timeout waiting for the response's headers
        raise BundleFetchError(url, _reason(e, timeout)) from None
    length = resp.headers.get("Content-Length")
    return resp, int(length) if length and length.isdigit() else None


def _open_file_url(url: str) -> tuple[IO[bytes], int | None]:
    path = local_path(url)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise BundleFetchError(url, f"{e.strerror or e} ({path})") from None
    return f, os.fstat(f.fileno()).st_size


def local_path(file_url: str) -> str:
    parts = urlsplit(file_url)
    if parts.netloc not in ("", "localhost"):
        raise BundleFetchError(file_url, f"a file:// URL names a host ({parts.netloc}): use file:///path")
    return unquote(parts.path)


def open_url(url: str, timeout: float | None = None) -> tuple[IO[bytes], int | None]:
    """A readable stream of ``url`` (http, https or file) and its announced length."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        return _open_file_url(url)
    if scheme in ("http", "https"):
        return _open_http(url, fetch_timeout() if timeout is None else timeout)
    raise BundleFetchError(url, f"unsupported URL scheme {scheme!r}: use http://, https:// or file://")


def read_url(url: str, limit: int, timeout: float | None = None) -> bytes:
    """The whole body of ``url`` (a store's ``index.json``), at most ``limit`` bytes."""
    t = fetch_timeout() if timeout is None else timeout
    stream, length = open_url(url, t)
    with stream:
        try:
            data = stream.read(limit + 1)
        except Exception as e:  # as in _download
            raise BundleFetchError(url, _reason(e, t)) from None
    if len(data) > limit:
        raise BundleFetchError(url, f"more than {limit} bytes")
    if length is not None and len(data) < length:
        raise BundleFetchError(url, f"the body was cut short: {len(data)} of the {length} bytes announced")
    return data


def _download(url: str, out: IO[bytes], sha256: str, size: int | None, limit: int, timeout: float) -> None:
    """Stream ``url`` into ``out`` and check it is the pinned file (size, sha256)."""
    stream, length = open_url(url, timeout)
    hint = "nothing was kept in the cache; the store's file is not the one locked (re-lock, or fix the store)"
    with stream:
        if size is not None and length is not None and length != size:
            raise BundleIntegrityError.of_file(url, sha256, "(not downloaded)",
                                               f"the server announces {length} bytes, the pin says {size}", hint)
        if length is not None and length > limit:
            raise BundleTooLarge(f"{url} is {length} bytes, over the limit of {limit}", limit)
        h, n = hashlib.sha256(), 0
        while True:
            try:
                chunk = stream.read(min(_CHUNK, limit + 1 - n))
            except Exception as e:  # a stalled or reset connection; http.client's IncompleteRead (a cut chunk)
                got = f"{n} of {length} bytes" if length is not None else f"{n} bytes"
                raise BundleFetchError(url, f"{_reason(e, timeout)}, after {got}") from None
            if not chunk:
                break
            n += len(chunk)
            if n > limit:
                if size is not None:
                    raise BundleIntegrityError.of_file(url, sha256, "(not computed)",
                                                       f"the body has more than the pinned {size} bytes", hint)
                raise BundleTooLarge(f"{url} has more than {limit} bytes, over the limit", limit)
            h.update(chunk)
            out.write(chunk)
            if n == length:
                break  # all announced bytes: do not wait on a connection the server keeps open
    if length is not None and n < length:
        raise BundleFetchError(url, f"the body was cut short: {n} of the {length} bytes announced (the "
                                    "connection closed early: try again)")
    actual = h.hexdigest()
    if size is not None and n != size:
        raise BundleIntegrityError.of_file(url, sha256, actual, f"{n} bytes, the pin says {size}", hint)
    if actual != sha256:
        raise BundleIntegrityError.of_file(url, sha256, actual, "other bytes than the pinned ones", hint)


def _file_name(url: str, sha256: str) -> str:
    name = unquote(urlsplit(url).path.rpartition("/")[2])
    if not name or name.startswith(".") or "\\" in name or len(name) > 200:
        return f"{sha256[:16]}.tar.zst"
    return name


def fetch(url: str, sha256: str, size: int | None = None, *, max_size: int = DEFAULT_MAX_SIZE,
          timeout: float | None = None, cache: Path | None = None) -> Path:
    """The cached, verified file of ``url`` pinned to ``sha256`` (and ``size``):
    from the cache, else downloaded (once, whatever the number of processes
    asking). Raises ``BundleFetchError`` (unreachable, HTTP error, timeout, cut
    body, offline miss) or ``BundleIntegrityError`` (other bytes), leaving
    nothing in the cache."""
    sha256 = check_sha256(sha256)
    if urlsplit(url).scheme.lower() not in _SCHEMES:
        raise BundleFetchError(url, "unsupported URL scheme: use http://, https:// or file://")
    cache = cache or cache_dir()
    if size is not None and size > max_size:
        raise BundleTooLarge(f"{url} is pinned at {size} bytes, over the limit of {max_size}", max_size)
    hit = _verified_hit(cache, sha256, size, url)
    if hit is not None:
        return hit
    if offline():
        raise BundleFetchError(url, f"not in the cache ({cache}) and {OFFLINE_ENV} is set: run `boo-build fetch` "
                                    "for its lock file where the store is reachable, or unset it")
    t = fetch_timeout() if timeout is None else timeout
    try:
        with _digest_lock(cache, sha256):
            hit = _verified_hit(cache, sha256, size, url)  # another process may have fetched it meanwhile
            if hit is not None:
                return hit
            tmp_dir = cache / "tmp"
            tmp_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix=f"{sha256}.", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as out:
                    _download(url, out, sha256, size, size if size is not None else max_size, t)
                    out.flush()
                    os.fsync(out.fileno())
                os.chmod(tmp, 0o644)
                dest_dir = entry_dir(cache, sha256)
                dest_dir.mkdir(parents=True, exist_ok=True)
                dest = dest_dir / _file_name(url, sha256)
                os.replace(tmp, dest)  # the entry appears whole, and only verified
                return dest
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except OSError as e:
        if isinstance(e, BundleFetchError):
            raise
        hint = " (the cache must be on a file system with file locks: set BOO_BUILD_CACHE_DIR to a local disk)" \
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS) else ""
        raise BundleFetchError(url, f"cannot write the cache {cache}: {e.strerror or e}{hint}") from None


def fetch_locked(lock: LockFile, bundle: LockedBundle, *, max_size: int = DEFAULT_MAX_SIZE,
                 cache: Path | None = None) -> Path:
    """The verified local file of one bundle of a lock file (``$BOO_STORE_URL`` for a mirror)."""
    return fetch(lock.url_of(bundle), bundle.sha256, bundle.size, max_size=max_size, cache=cache)


def resolve(source: str | os.PathLike[str], *, sha256: str | None = None, name: str | None = None,
            max_size: int = DEFAULT_MAX_SIZE) -> str | os.PathLike[str]:
    """What ``open_bundle`` reads for ``source``: a lock file's bundle (``name``
    picks one) or an ``http(s)://`` URL pinned by ``sha256``, through the cache;
    a ``file://`` URL or a path as it is, after checking ``sha256`` when given."""
    if not isinstance(source, (str, os.PathLike)):
        return source
    text = os.fspath(source)
    if sha256 is not None:
        sha256 = check_sha256(sha256)
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme:
        if name is not None:
            raise ValueError(f"name= picks a bundle of a lock file; {text} is a URL")
        if scheme not in _SCHEMES:
            raise BundleFormatError(f"cannot open {text}: unsupported URL scheme {scheme!r} "
                                    "(http://, https:// and file:// are)")
        if sha256 is not None:
            return str(fetch(text, sha256, max_size=max_size))
        if scheme == "file":
            return local_path(text)
        raise ValueError(f"open_bundle({text!r}) needs sha256=: a downloaded bundle is never used unverified "
                         "(or open a lock file, which pins it)")
    if is_lock_file(text):
        if sha256 is not None:
            raise ValueError(f"sha256= with a lock file ({text}): the lock file pins each bundle's sha256")
        lock = read_lock(text)
        return str(fetch_locked(lock, lock.pick(name, text), max_size=max_size))
    if name is not None:
        raise ValueError(f"name= picks a bundle of a lock file; {text} is not a lock file")
    if sha256 is not None:
        try:
            actual = file_sha256(Path(text))
        except OSError as e:
            raise BundleFormatError(f"cannot read bundle {text}: {e.strerror or e}") from None
        if actual != sha256:
            raise BundleIntegrityError.of_file(text, sha256, actual, "other bytes than the pinned ones",
                                               "open the bundle the sha256 names, or pin this one")
    return source


__all__ = ["AUTH_ENV", "CACHE_ENV", "DEFAULT_TIMEOUT", "OFFLINE_ENV", "TIMEOUT_ENV", "CacheEntry", "CorruptCacheEntry",
           "cache_dir", "cache_entries", "check_sha256", "clean_cache", "entry_dir", "fetch",
           "fetch_locked", "fetch_timeout", "file_sha256", "local_path", "offline", "open_url", "read_url",
           "resolve"]
