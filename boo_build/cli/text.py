"""What the bundle commands share: how they write sizes, reasons and times,
their ``--max-size`` option (``parse_size``, ``read_bundle``) and how a
bundle's ``iree_runtime`` range fits this process's runtime (``runtime_fit``).

Standard library and the loader's archive reader, format and version check
only: the runtime's version is read from its package's version file
(``loader.native.runtime_version``), the runtime itself is never loaded.
"""

from __future__ import annotations

import argparse
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from ..errors import UsageError
from ..loader.archive import DEFAULT_MAX_SIZE, ZSTD_MAGIC, Archive, BundleTooLarge, read_archive
from ..loader.errors import BundleFormatError
from ..loader.format import BundleIndex
from ..loader.versions import RuntimeTooOld, UntestedRuntimeWarning, check_runtime, iree_release

__all__ = ["MAX_SIZE_OPTION", "RuntimeFit", "add_max_size", "bench_value", "parse_size", "provenance_versions",
           "read_bundle", "runtime_fit", "short", "size_text"]


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def short(text: Any, n: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


BENCH_KEYS = ("median_us", "median_ms", "median_s", "median", "p50_us", "p50", "mean_us", "mean_ms", "mean_s",
               "mean", "min_us", "min")


def bench_value(b: Any) -> tuple[float, str] | None:
    """(value, field) of a benchmark record's central time, whatever its schema."""
    if not isinstance(b, Mapping):
        return None
    for key in BENCH_KEYS:
        v = b.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), key
    for key, v in sorted(b.items()):
        if ("median" in key or "mean" in key) and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), key
    return None



def provenance_versions(prov: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The tool versions of a provenance record (older bundles: its string fields)."""
    prov = prov or {}
    v = prov.get("versions")
    return v if isinstance(v, Mapping) else {k: x for k, x in prov.items() if isinstance(x, str)}


# ------------------------------------------------------------- --max-size
MAX_SIZE_OPTION = "--max-size"
# unit (lower case) -> bytes; IEC binary units, SI decimal ones, B
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int:
    """Bytes of a size written as plain bytes (``4096``) or a number and a unit
    (``512MiB``, ``2GiB``, ``1.5 GB``; units B, KiB, MiB, GiB, TiB, kB, MB, GB,
    TB, any case), rounded down to whole bytes. ``ValueError`` naming the text
    for anything else, or a size under one byte."""
    m = _SIZE_RE.fullmatch(text) if isinstance(text, str) else None
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"invalid size {text!r}: give bytes (4096) or a number with a unit, one of B, KiB, MiB, "
                         "GiB, TiB, kB, MB, GB, TB (512MiB, 2GiB)")
    n = int(Fraction(m.group(1)) * _UNITS[unit])
    if n < 1:
        raise ValueError(f"invalid size {text!r}: the limit must be at least 1 byte")
    return n


def _size_argument(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:  # argparse: "argument --max-size: <this>", exit status 2
        raise argparse.ArgumentTypeError(str(e)) from None


def add_max_size(p: argparse.ArgumentParser) -> None:
    """The bundle commands' ``--max-size``: the bound on a bundle's decompressed size."""
    p.add_argument(MAX_SIZE_OPTION, type=_size_argument, default=DEFAULT_MAX_SIZE, metavar="SIZE",
                   help=f"refuse a bundle that decompresses to more than SIZE (bytes, or with a unit: 512MiB, "
                        f"2GiB; default {size_text(DEFAULT_MAX_SIZE)})")


def read_bundle(path: str | Path, max_size: int = DEFAULT_MAX_SIZE) -> Archive:
    """``read_archive`` for a command: a bundle over ``max_size`` is refused
    with a message naming ``--max-size`` (``BundleTooLarge``, exit status 2)."""
    try:
        return read_archive(Path(path), max_size=max_size)
    except BundleTooLarge as e:
        raise BundleTooLarge(e.problem, e.max_size, f"if it is a bundle larger than that, raise the limit with "
                                                    f"{MAX_SIZE_OPTION} SIZE, now {size_text(e.max_size)}") from None


def bundles_named(path: str | Path, max_size: int = DEFAULT_MAX_SIZE) -> list[tuple[str, Path]]:
    """(what it is, its file) of each bundle a command's BUNDLE argument names: a bundle
    itself; a lock file's pinned bundles, from the verified cache (downloaded where
    missing: ``remote.fetch_locked``). A manifest is refused, saying what to run;
    anything else is left to ``read_bundle``'s message."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(256)
    except OSError:
        return [(str(p), p)]  # read_bundle says what is wrong with it
    if head[:4] == ZSTD_MAGIC:  # a bundle
        return [(str(p), p)]
    from ..loader.lockfile import looks_like_lock, read_lock

    if looks_like_lock(head):
        from ..loader.remote import fetch_locked

        lock = read_lock(p)
        return [(f"{b.name} {b.version}, pinned by {p}", Path(fetch_locked(lock, b, max_size=max_size)))
                for b in lock.bundles]
    if _is_manifest(head):
        raise UsageError(f"{p} is a manifest, not a bundle: build it with `boo-build build {p}`, which prints "
                         "the bundle's path, then run this on that bundle")
    return [(str(p), p)]


def _is_manifest(head: bytes) -> bool:
    """A TOML manifest (a [bundle] table or [[kernels]]), or a command file whose first command is MIOpen's."""
    try:
        text = head.decode()
    except UnicodeDecodeError:
        return False
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        return False
    if lines[0].startswith(("[bundle]", "[[kernels]]", "commands")):
        return True
    from ..manifest.miopen import commands

    return lines[0].split()[0] in commands()


# ------------------------------------------------------------ iree_runtime
@dataclass(frozen=True)
class RuntimeFit:
    """A bundle's ``iree_runtime`` field against this process's iree-base-runtime,
    as ``open_bundle`` judges it (``versions.check_runtime``). ``state``:
    "absent" (a bundle built before the field: not checked), "malformed"
    (``open_bundle`` refuses the bundle), "in range", "too old" (``open_bundle``
    raises ``RuntimeTooOld``), "untested" (newer than any tested:
    ``UntestedRuntimeWarning``) or "unknown" (no runtime here, or one with no
    comparable version: not checked). ``message``: what ``open_bundle`` raises
    or warns, "" where it says nothing."""

    state: str
    field: Any  # as recorded: None when absent, a mapping with string versions unless "malformed"
    runtime: str | None  # this process's iree-base-runtime version, None if none is installed
    message: str = ""

    @property
    def problem(self) -> bool:
        """The loader refuses the bundle, or warns, with this runtime."""
        return self.state in ("too old", "untested")

    def text(self) -> str:
        """What ``info`` and ``verify`` print after ``iree_runtime:``."""
        if self.state == "absent":
            return ("not recorded (a bundle built before the field, or by an iree-compile without a version): "
                    "the loader does not check the runtime")
        if self.state == "malformed":
            return f"MALFORMED ({self.message}); open_bundle and boo-build verify refuse the bundle"
        assert self.field is not None  # well formed
        f, rt = self.field, self.runtime
        head = f"{f['min']} to {f['max_tested']} (modules built by iree-compile {f['compiler']})"
        here = f"this process's iree-base-runtime {rt}"
        if self.state == "in range":
            return f"{head}; {here} is in the range"
        if self.state == "too old":
            return f"{head}; {here} is OUT of the range, older than {f['min']}: open_bundle refuses the bundle"
        if self.state == "untested":
            return (f"{head}; {here} is OUT of the range, newer than any tested: open_bundle warns, and a kernel "
                    "may fail to load")
        if rt is None:
            return f"{head}; no iree-base-runtime installed here, not checked"
        return f"{head}; {here} has no comparable version, not checked"


def runtime_fit(index: BundleIndex, path: str, runtime: str | None = None) -> RuntimeFit:
    """How ``index``'s ``iree_runtime`` range fits ``runtime`` (by default the
    iree-base-runtime this process would load, read without loading it)."""
    req = index.iree_runtime
    if req is None:
        return RuntimeFit("absent", None, runtime)
    if runtime is None:
        from ..loader.native import runtime_version

        runtime = runtime_version()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UntestedRuntimeWarning)
            check_runtime(index, path, runtime or "")  # "": a runtime not installed is not checked
    except RuntimeTooOld as e:
        return RuntimeFit("too old", req, runtime, str(e))
    except BundleFormatError as e:
        prefix = f"{path}: "
        msg = str(e)
        return RuntimeFit("malformed", req, runtime, msg[len(prefix):] if msg.startswith(prefix) else msg)
    untested = [w for w in caught if issubclass(w.category, UntestedRuntimeWarning)]
    if untested:
        return RuntimeFit("untested", req, runtime, str(untested[0].message))
    rel = iree_release(runtime) if runtime else None
    return RuntimeFit("in range" if rel is not None else "unknown", req, runtime)
