"""Open a boo bundle and run its kernels with ATen-like calls.

Importing this module imports only the standard library, zstandard and
``boo_build.signature``/``targets``. The calls take torch tensors or numpy
arrays and return the same kind; torch is never imported for numpy arrays
(except by the eager fallback). iree.runtime's native module (through
``invoke``/``devices``) is imported by the first device discovery or kernel load.

    bundle = open_bundle("norms-1.0.0.tar.zst")            # best device present
    y, mean, rstd = bundle.native_layer_norm(x, (768,), w, b, 1e-5)

Kernels are chosen from argument shapes, dtypes, the gradient mask and eps
(a ``KernelSignature`` and its key), running the implementation the build
selected for the bundle's target on this device: an exact static kernel
first, else a dynamic one that takes the call's shape (``Bundle._resolve``). A vmfb's sha256 is checked
before it is first loaded; loaded modules are cached (thread-safe).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import io
import json
import math
import os
import re
import sys
import tarfile
import threading
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import zstandard

from ..signature import (
    BIAS_GRAD, DEFAULT_EPS, FORWARD, INPUT_GRAD, WEIGHT_GRAD, KernelSignature, SignatureError,
)
from ..targets import Target, cuda_capability

FORMAT = "boo-bundle"
FORMAT_VERSION = 1
# Version 2 = version 1 whose kernel keys and signatures may name dynamic
# dimensions: a loader that reads only 1 refuses it with "upgrade boo-build"
# instead of failing on a key it cannot parse. Static-only bundles stay 1.
DYNAMIC_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
INDEX_NAME = "bundle.json"
DEFAULT_MAX_SIZE = 4 << 30  # bound on the decompressed archive
FALLBACKS = (None, "eager")

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MEMO_LIMIT = 4096  # per-call signature memo entries kept per bundle


# ---------------------------------------------------------------------- errors
class BundleError(Exception):
    """Base class of the loader's errors."""


class BundleFormatError(BundleError, ValueError):
    """The file is not a bundle this loader can read (corrupt, truncated, unsafe, unknown format)."""


class BundleIntegrityError(BundleError):
    """A member's bytes do not match the checksum in the index."""

    def __init__(self, member: str, expected: str, actual: str, path: str = ""):
        self.member, self.expected, self.actual = member, expected, actual
        where = f" of {path}" if path else ""
        super().__init__(f"member {member}{where} is corrupt: sha256 {actual} does not match "
                         f"the index ({expected}); rebuild or re-download the bundle")


class NoCompatibleDevice(BundleError, RuntimeError):
    """No device present can run any target of the bundle (the message lists why, per target)."""

    def __init__(self, message: str, reasons: dict[str, str] | None = None):
        super().__init__(message)
        self.reasons = dict(reasons or {})


class KernelNotFound(BundleError, LookupError):
    """The bundle has no kernel for a call's signature on the chosen target."""

    def __init__(self, key: str, target: str, nearest: Sequence[str], reason: str = ""):
        self.key, self.target, self.nearest, self.reason = key, target, list(nearest), reason
        msg = f"no kernel {key} for target {target}"
        if reason:
            msg += f": {reason}"
        msg += "; nearest in the bundle: " + (", ".join(self.nearest) if self.nearest else "(none)")
        msg += " (open the bundle with fallback='eager' to run torch instead)"
        super().__init__(msg)

    def __str__(self) -> str:  # LookupError would repr() a single argument
        return self.args[0]


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


# --------------------------------------------------------------------- archive
@dataclass
class Archive:
    """A bundle read into memory: the checked index and every member's bytes."""

    path: str
    index: dict[str, Any]
    members: dict[str, bytes]
    compressed_size: int
    size: int  # decompressed tar size


_READ_CHUNK = 1 << 20  # most decompressed bytes per read: how far past max_size a refusal can come
_RAISE_LIMIT = "open_bundle(..., max_size=...) or read_archive(..., max_size=...) raises it"


class _BoundedStream:
    """A bundle file's decompressed bytes, read forward a chunk at a time,
    counted and refused as soon as they pass ``max_size``: a frame that
    declares no size (or a false one) can expand 30000-fold, and nothing but
    the members read from the stream is kept."""

    def __init__(self, f, max_size: int, path: str):
        head = f.read(18)  # the magic and the longest frame header
        if len(head) < 4 or head[:4] != _ZSTD_MAGIC:
            raise BundleFormatError(f"{path} is not a boo bundle: not a zstd file")
        try:
            declared = zstandard.frame_content_size(head)
        except zstandard.ZstdError as e:
            raise BundleFormatError(f"{path} is truncated or corrupt: unreadable zstd frame header ({e})") from None
        if declared > max_size:
            raise BundleFormatError(f"{path} decompresses to {declared} bytes, over the limit of {max_size} "
                                    f"({_RAISE_LIMIT})")
        f.seek(0)
        self._f, self.path, self.max_size, self.declared = f, path, max_size, declared
        self.size = 0  # decompressed bytes taken from zstd so far
        self.failed = False  # zstd or the bound refused: that is the problem to report
        self._buf, self._pos = b"", 0
        d = zstandard.ZstdDecompressor()
        if declared >= 0:  # pack.py's frames: that frame only, what follows is ignored (as decompress() did)
            self._chunks = d.read_to_iter(f, write_size=_READ_CHUNK)
        else:  # no size recorded: every frame in the file
            self._chunks = iter(functools.partial(d.stream_reader(f, read_across_frames=True, closefd=False).read,
                                                  _READ_CHUNK), b"")

    def _next_chunk(self) -> bytes:
        try:
            chunk = next(self._chunks, b"")
        except zstandard.ZstdError as e:
            self.failed = True
            raise BundleFormatError(f"{self.path} is truncated or corrupt: {e}") from None
        self.size += len(chunk)
        if self.size > self.max_size:
            self.failed = True
            raise BundleFormatError(f"{self.path} decompresses to more than {self.max_size} bytes, over the limit "
                                    f"(a damaged or hostile file, or a larger bundle: {_RAISE_LIMIT})")
        if 0 <= self.declared < self.size:
            self.failed = True
            raise BundleFormatError(f"{self.path} is corrupt: it decompresses to more than the {self.declared} "
                                    "bytes its zstd header declares")
        return chunk

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (the rest of the current chunk for -1); b"" at the end."""
        if self._pos >= len(self._buf):
            self._buf, self._pos = self._next_chunk(), 0
        end = len(self._buf) if n < 0 else self._pos + n
        data = self._buf[self._pos:end]
        self._pos += len(data)
        return data

    def finish(self) -> None:
        """Read to the end (zstd checks the frame's checksum there), then the
        declared size and that the file holds the whole frame (a file cut in
        its checksum decodes in full, and zstd's streaming readers do not say)."""
        self._buf, self._pos = b"", 0
        while self._next_chunk():
            pass
        if self.declared < 0:
            return
        if self.declared != self.size:
            raise BundleFormatError(f"{self.path} is truncated or corrupt: it decompresses to {self.size} of the "
                                    f"{self.declared} bytes its zstd header declares")
        end, have = _frame_end(self._f.fileno(), self.declared), os.fstat(self._f.fileno()).st_size
        if end is not None and end > have:
            raise BundleFormatError(f"{self.path} is truncated: {have} of the {end} bytes of its zstd frame")


def _frame_end(fd: int, declared: int) -> int | None:
    """Where the zstd frame at the start of file ``fd`` ends, from its block
    headers (RFC 8878, 3.1.1); None past a block per 4 KiB declared (no encoder
    writes such blocks: give up rather than walk them in Python)."""
    head = os.pread(fd, 18, 0)
    pos = zstandard.frame_header_size(head)
    for _ in range(declared // 4096 + 64):
        h = os.pread(fd, 3, pos)
        if len(h) < 3:
            return pos + 3
        v = int.from_bytes(h, "little")  # bit 0: last block; bits 1-2: type (1: RLE, one byte); bits 3-23: size
        pos += 3 + (1 if (v >> 1) & 3 == 1 else v >> 3)
        if v & 1:
            return pos + 4 * zstandard.get_frame_parameters(head).has_checksum
    return None


def _check_member_name(name: str, path: str) -> None:
    bad = ""
    if not name or name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        bad = "an absolute or non-POSIX path"
    elif any(part in ("..", ".", "") for part in name.split("/")):
        bad = "a path with '..', '.' or an empty component"
    if bad:
        raise BundleFormatError(f"{path}: member {name!r} has {bad}; refusing the bundle")


def read_archive(path: str | os.PathLike, max_size: int = DEFAULT_MAX_SIZE) -> Archive:
    """Read, decompress and check a bundle (format, member names and types, index).

    One streaming pass: decompressed bytes are counted as they come and refused
    as soon as they pass ``max_size``; only the members are kept, so memory
    peaks at about the decompressed size, whatever the file claims."""
    path_s = str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > max_size:
                raise BundleFormatError(f"{path_s} is {st.st_size} bytes, over the limit of {max_size}")
            src = _BoundedStream(f, max_size, path_s)
            problem = None
            try:
                members, first = _read_members(src, path_s)
            except tarfile.TarError as e:
                problem = BundleFormatError(f"{path_s} is truncated or corrupt: bad tar data ({e})")
            except BundleFormatError as e:
                if src.failed:
                    raise
                problem = e
            # Read the rest even after a tar problem: a corrupt, truncated or
            # oversized stream explains it and is reported first.
            src.finish()
            if problem is not None:
                raise problem from None
    except OSError as e:
        raise BundleFormatError(f"cannot read bundle {path_s}: {e.strerror or e}") from None
    if first is None:
        raise BundleFormatError(f"{path_s} is empty: no members")
    if first != INDEX_NAME:
        raise BundleFormatError(f"{path_s}: first member is {first!r}, expected {INDEX_NAME}")
    try:
        index = json.loads(members[INDEX_NAME])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleFormatError(f"{path_s}: {INDEX_NAME} is not valid JSON ({e})") from None
    check_index(index, members, path_s)
    return Archive(path_s, index, members, st.st_size, src.size)


def _read_members(src: _BoundedStream, path: str) -> tuple[dict[str, bytes], str | None]:
    """Every regular member of the tar in ``src`` (checked names and types) and the first one's name."""
    members: dict[str, bytes] = {}
    first: str | None = None
    # Stream mode: one forward pass, a member at a time, no copy of the whole tar.
    with tarfile.open(fileobj=src, mode="r|") as tf:
        for ti in tf:
            _check_member_name(ti.name, path)
            if ti.isdir():
                continue
            if ti.issym() or ti.islnk():
                raise BundleFormatError(f"{path}: member {ti.name!r} is a link (to {ti.linkname!r}); "
                                        "refusing the bundle")
            if not ti.isreg():
                raise BundleFormatError(f"{path}: member {ti.name!r} is a device or special file; "
                                        "refusing the bundle")
            if ti.name in members:
                raise BundleFormatError(f"{path}: member {ti.name!r} appears twice")
            if ti.offset_data + ti.size > src.max_size:  # refuse before reading it
                raise BundleFormatError(f"{path}: member {ti.name!r} has {ti.size} bytes, past the limit of "
                                        f"{src.max_size} decompressed bytes ({_RAISE_LIMIT})")
            # Chunks into a BytesIO, which grows in place and hands over its
            # buffer: a large member is not held twice.
            f, out, left = tf.extractfile(ti), io.BytesIO(), ti.size
            while left > 0 and (chunk := f.read(min(left, _READ_CHUNK))):
                out.write(chunk)
                left -= len(chunk)
            data = out.getvalue()
            if len(data) != ti.size:
                raise BundleFormatError(f"{path} is truncated: member {ti.name!r} has "
                                        f"{len(data)} of {ti.size} bytes")
            members[ti.name] = data
            first = first or ti.name
    return members, first


def check_index(index: Any, members: dict[str, bytes], path: str = "bundle") -> None:
    """Format name and version, and every referenced member present with its size."""
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        fmt = index.get("format") if isinstance(index, dict) else None
        raise BundleFormatError(f"{path}: {INDEX_NAME} is not a {FORMAT} index (format {fmt!r})")
    ver = index.get("format_version")
    if ver not in READABLE_VERSIONS:
        raise BundleFormatError(
            f"{path}: bundle format version {ver!r} is not supported; this loader reads format "
            f"version{'s' if len(READABLE_VERSIONS) > 1 else ''} {', '.join(map(str, READABLE_VERSIONS))}"
            + (" (upgrade boo-build to read newer bundles)" if isinstance(ver, int) and ver > max(READABLE_VERSIONS)
               else ""))
    try:
        targets = index["targets"]
        for name, t in targets.items():
            str(t["driver"]), str(t["arch"]), list(t["flags"])
        for key, k in index["kernels"].items():
            KernelSignature.from_json(k["signature"])
            for tname, te in k["targets"].items():
                if tname not in targets:
                    raise BundleFormatError(f"{path}: kernel {key} names unknown target {tname!r}")
                if te["status"] == "available":
                    if te["selected"] not in te["impls"]:
                        raise BundleFormatError(f"{path}: kernel {key} target {tname}: selected impl "
                                                f"{te['selected']!r} has no entry")
                    for impl, m in te["impls"].items():
                        mem = m["member"]
                        if mem not in members:
                            raise BundleFormatError(f"{path}: member {mem} named by the index is missing")
                        if len(members[mem]) != m["size"]:
                            raise BundleFormatError(f"{path}: member {mem} has {len(members[mem])} bytes, "
                                                    f"the index says {m['size']}")
                        str(m["sha256"]), str(m["function"])
                elif te["status"] != "unavailable":
                    raise BundleFormatError(f"{path}: kernel {key} target {tname}: unknown status {te['status']!r}")
    except BundleFormatError:
        raise
    except (KeyError, TypeError, AttributeError, SignatureError) as e:
        raise BundleFormatError(f"{path}: malformed {INDEX_NAME}: {type(e).__name__}: {e}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_members(archive: Archive) -> list[tuple[str, str, str]]:
    """(member, expected, actual) of every vmfb whose checksum does not match."""
    bad = []
    for k in archive.index["kernels"].values():
        for te in k["targets"].values():
            for m in te.get("impls", {}).values():
                actual = sha256_hex(archive.members[m["member"]])
                if actual != m["sha256"]:
                    bad.append((m["member"], m["sha256"], actual))
    return sorted(set(bad))


# ---------------------------------------------------------- device selection
_CPU_LEVELS = {"generic": 0, "x86-64": 1, "x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}


def _target_rank(t: Target) -> tuple:
    """Preference order: GPUs first (NVIDIA targets from the newest compute
    capability down), then CPUs from the highest level down."""
    cc = cuda_capability(t.arch) if t.driver == "cuda" else None
    level = cc[0] * 10 + cc[1] if cc else _CPU_LEVELS.get(t.arch, 0)
    return (1 if t.is_cpu else 0, -level, t.name)


def _bundle_targets(index: dict[str, Any]) -> dict[str, Target]:
    return {n: Target(name=n, driver=t["driver"], flags=tuple(t["flags"]), arch=t["arch"])
            for n, t in index["targets"].items()}


def _select_target(index: dict[str, Any], device: Any, path: str):
    from . import devices as devmod

    targets = _bundle_targets(index)
    available = defaultdict(int)
    for k in index["kernels"].values():
        for tname, te in k["targets"].items():
            if te["status"] == "available":
                available[tname] += 1
    present = list(devmod.discover())
    if device is not None:
        wanted = device.uri if hasattr(device, "uri") else str(device)
        cands = [d for d in present if d.uri == wanted]
        if not cands and "://" not in wanted:  # "hip" -> first hip device, "local-task" -> the CPU
            cands = [d for d in present if d.driver == wanted or d.uri.split("://")[0] == wanted][:1]
        if not cands and wanted == "local-sync":  # the CPU, single-threaded
            import dataclasses

            cands = [dataclasses.replace(d, driver="local-sync", uri="local-sync") for d in present if d.is_cpu][:1]
        if not cands:
            raise NoCompatibleDevice(
                f"device {wanted!r} is not present on this machine; devices present: "
                + (", ".join(f"{d.uri} ({d.name}, {d.arch})" for d in present) or "none"),
                {"*": f"unknown device {wanted!r}"})
        present = cands
    reasons: dict[str, str] = {}
    for t in sorted(targets.values(), key=_target_rank):
        if not available.get(t.name):
            reasons[t.name] = "no available kernels for this target in the bundle"
            continue
        dev, why = devmod.match_target(t, present)
        if dev is not None:
            return t, dev
        reasons[t.name] = why or "no matching device"
    what = f"device {present[0].uri}" if device is not None else "any device present"
    lines = "\n".join(f"  {n} ({targets[n].driver}, {targets[n].arch}): {r}" for n, r in sorted(reasons.items()))
    raise NoCompatibleDevice(
        f"bundle {path} has no target that runs on {what}:\n{lines or '  (the bundle has no targets)'}", reasons)


# ------------------------------------------------------------------- helpers
_TORCH_NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


_TORCH = None


def _torch():
    global _TORCH
    if _TORCH is None:
        import torch

        _TORCH = torch
    return _TORCH


_DTYPE_NAMES: dict = {}


def _dtype_name(t) -> str | None:
    if not _DTYPE_NAMES:
        torch = _torch()
        _DTYPE_NAMES.update({torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"})
    return _DTYPE_NAMES.get(t.dtype)


def _torch_dtype(name: str):
    return getattr(_torch(), _TORCH_NAMES[name])


def _norm_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    try:
        return tuple(int(d) for d in normalized_shape)
    except TypeError:
        raise TypeError(f"normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}") from None


def _stats_shape(shape: tuple[int, ...], normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    """ATen's layout of mean/rstd: the leading dims, then a 1 per normalized dim."""
    n = len(normalized_shape)
    return shape[:len(shape) - n] + (1,) * n


# The entry points take torch tensors or numpy arrays (the loader runs without
# torch), and give back what they were given. What they do to their arguments,
# per kind; neither library is imported to tell the kinds apart: an argument
# can only be a torch tensor (a numpy array) when torch (numpy) is imported.
class _TorchArrays:
    name, dtype_prefix = "torch.Tensor", "torch."

    @staticmethod
    def owns(t) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(t, torch.Tensor)

    dtype_name = staticmethod(_dtype_name)

    @staticmethod
    def contiguous(t):
        return t if t.is_contiguous() else t.contiguous()

    @staticmethod
    def full(shape, value, dtype: str, like):
        return _torch().full(shape, value, dtype=_torch_dtype(dtype), device=like.device)

    @staticmethod
    def cast(t, dtype: str):
        return t.to(_torch_dtype(dtype))

    @staticmethod
    def eager(fn, args: tuple, what: str):
        return fn(*args)


class _NumpyArrays:
    name, dtype_prefix = "numpy.ndarray", ""

    @staticmethod
    def owns(t) -> bool:
        np = sys.modules.get("numpy")
        return np is not None and isinstance(t, np.ndarray)

    @staticmethod
    def dtype_name(t) -> str | None:
        name = t.dtype.name  # ml_dtypes.bfloat16's is "bfloat16"
        return name if name in _TORCH_NAMES else None

    @staticmethod
    def contiguous(t):
        return t if t.flags.c_contiguous else sys.modules["numpy"].ascontiguousarray(t)

    @staticmethod
    def full(shape, value, dtype: str, like):
        return sys.modules["numpy"].full(shape, value, dtype=_numpy_dtype(dtype))

    @staticmethod
    def cast(t, dtype: str):
        return t.astype(_numpy_dtype(dtype), copy=False)

    @staticmethod
    def eager(fn, args: tuple, what: str):
        """torch's op on numpy arrays: shared as CPU tensors, results back as arrays."""
        try:
            _torch()
        except ImportError as e:
            raise ImportError(f"{what}; fallback='eager' runs torch's op, but torch cannot be imported ({e}): "
                              "install torch, or build the kernel into the bundle") from None
        from .invoke import numpy_from_torch, torch_from_numpy

        outs = fn(*(torch_from_numpy(a) if _NumpyArrays.owns(a) else a for a in args))
        return tuple(numpy_from_torch(o) for o in outs)


def _numpy_dtype(name: str):
    np = sys.modules["numpy"]
    if name == "bfloat16":
        import ml_dtypes  # ships with iree-base-runtime

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _arrays_of(name: str, t):
    """The kind of a call's first array argument, which the others must share."""
    for kind in (_TorchArrays, _NumpyArrays):
        if kind.owns(t):
            return kind
    raise TypeError(f"{name} must be a torch.Tensor or a numpy.ndarray, got {type(t).__name__}")


def _wants_grad(*tensors) -> bool:
    """Whether autograd records the call: grad mode on and a torch argument that
    requires grad (numpy arrays never do)."""
    torch = sys.modules.get("torch")
    return (torch is not None and torch.is_grad_enabled()
            and any(getattr(t, "requires_grad", False) for t in tensors))


def _ops():
    from . import ops  # torch custom ops and their autograd; imports torch, only asked for with torch tensors

    return ops


def _distance(a: KernelSignature, b: KernelSignature) -> float:
    d = 0.0
    d += 100 * (a.op != b.op)
    d += 10 * (a.dtype != b.dtype)
    d += 8 * (a.normalized_shape != b.normalized_shape)
    if a.is_dynamic or b.is_dynamic:  # a dynamic kernel of the right width is the closest to any shape
        d += 2 + 0.5 * (a.input_shape != b.input_shape) + 0.1 * abs(len(a.input_shape) - len(b.input_shape))
    elif a.input_shape != b.input_shape:
        d += 4 + abs(math.log(max(a.rows, 1) / max(b.rows, 1))) + abs(len(a.input_shape) - len(b.input_shape))
    d += 6 * (a.mask != b.mask)
    d += 5 * ((a.affine, a.bias) != (b.affine, b.bias))
    d += 3 * (a.eps != b.eps)
    d += 3 * (a.stats_dtype != b.stats_dtype)
    return d


def nearest_keys(key: str, keys: Iterable[str], n: int = 3) -> list[str]:
    """Keys of ``keys`` closest to ``key``: by signature field distance, then text similarity."""
    keys = list(keys)
    try:
        sig = KernelSignature.parse(key)
    except SignatureError:
        return difflib.get_close_matches(key, keys, n=n, cutoff=0.0)
    scored = []
    for k in keys:
        try:
            dist = _distance(sig, KernelSignature.parse(k))
        except SignatureError:
            dist = 1000.0
        scored.append((dist, -difflib.SequenceMatcher(None, key, k).ratio(), k))
    return [k for _, _, k in sorted(scored)[:n]]


# -------------------------------------------------------------------- bundle
class _Kernel:
    """One signature's selected implementation on the bundle's target."""

    __slots__ = ("sig", "key", "impl", "member", "function", "sha256", "runner", "verified")

    def __init__(self, sig, impl, member, function, sha256):
        self.sig, self.impl, self.member, self.function, self.sha256 = sig, impl, member, function, sha256
        self.key = sig.key
        self.runner = None
        self.verified = False


class Bundle:
    """An opened bundle bound to one target and one device. Use ``open_bundle``."""

    def __init__(self, archive: Archive, target: Target, device: Any, fallback: str | None = None):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        self._archive = archive
        self.index = archive.index
        self.path = archive.path
        self.target = target
        self.device = device  # devices.DeviceInfo
        self.fallback = fallback
        self._device_type = "cpu" if target.is_cpu else "cuda"  # torch's name for HIP/CUDA memory
        self._lock = threading.RLock()
        self._runtime_device = None
        self._kernels: dict[str, _Kernel] = {}
        self._unavailable: dict[str, str] = {}
        for key, k in self.index["kernels"].items():
            te = k["targets"].get(target.name)
            if te is None:
                self._unavailable[key] = f"not built for target {target.name}"
            elif te["status"] != "available":
                self._unavailable[key] = f"unavailable on target {target.name}: {te.get('reason', '')}"
            else:
                m = te["impls"][te["selected"]]
                self._kernels[key] = _Kernel(KernelSignature.from_json(k["signature"]), te["selected"],
                                             m["member"], m["function"], m["sha256"])
        # Second-chance lookups for what ATen's arguments cannot pin down (see _relaxed_key),
        # and the dynamic kernels, by what a call must match besides its leading dims (_family_key).
        self._relaxed: dict[str, list[str]] = defaultdict(list)
        self._dynamic: dict[str, list[str]] = defaultdict(list)
        for key in sorted(self._kernels):
            ksig = self._kernels[key].sig
            if ksig.is_dynamic:
                self._dynamic[_family_key(ksig)].append(key)
            else:
                self._relaxed[_relaxed_key(ksig)].append(key)
        self._stats: dict[str, dict[str, int]] = defaultdict(lambda: {"hits": 0, "misses": 0})
        self._stats_lock = threading.Lock()
        # per-call memos (dict get/set are atomic under the GIL; a race only recomputes)
        self._signatures: dict[tuple, KernelSignature] = {}
        self._resolved: dict[KernelSignature, tuple[_Kernel, KernelSignature] | None] = {}

    # ------------------------------------------------------------ description
    @property
    def name(self) -> str:
        return self.index["name"]

    @property
    def version(self) -> str:
        return self.index["version"]

    def keys(self) -> list[str]:
        """Signature keys runnable on this bundle's target."""
        return sorted(self._kernels)

    def signatures(self) -> list[KernelSignature]:
        return [self._kernels[k].sig for k in self.keys()]

    def __contains__(self, sig: KernelSignature | str) -> bool:
        return str(sig) in self._kernels

    def info(self) -> dict[str, Any]:
        per_target: dict[str, dict[str, int]] = {t: {"available": 0, "unavailable": 0} for t in self.index["targets"]}
        kernels = {}
        for key, k in sorted(self.index["kernels"].items()):
            row = {}
            for tname, te in sorted(k["targets"].items()):
                per_target[tname][te["status"]] += 1
                row[tname] = ({"status": "available", "selected": te["selected"]} if te["status"] == "available"
                              else {"status": "unavailable", "reason": te.get("reason", "")})
            kernels[key] = row
        return {
            "path": self.path,
            "name": self.name,
            "version": self.version,
            "format_version": self.index["format_version"],
            "target": self.target.name,
            "device": {k: getattr(self.device, k, None) for k in ("driver", "uri", "arch", "name")},
            "fallback": self.fallback,
            "provenance": self.index.get("provenance", {}),
            "targets": {n: dict(t, **per_target[n]) for n, t in sorted(self.index["targets"].items())},
            "kernels": kernels,
        }

    def stats(self, totals: bool = False) -> dict[str, dict[str, int]] | dict[str, int]:
        """Calls per signature key: {"hits": ran a bundle kernel, "misses": fell back to eager}.
        A hit counts under the kernel that ran: a dynamic kernel's key (names in
        capitals) for every call it served. ``totals=True``: {"static_hits",
        "dynamic_hits", "misses"} over all keys."""
        with self._stats_lock:
            per_key = {k: dict(v) for k, v in sorted(self._stats.items())}
        if not totals:
            return per_key
        out = {"static_hits": 0, "dynamic_hits": 0, "misses": 0}
        for key, v in per_key.items():
            k = self._kernels.get(key)
            out["dynamic_hits" if k is not None and k.sig.is_dynamic else "static_hits"] += v["hits"]
            out["misses"] += v["misses"]
        return out

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._stats.clear()

    # A bundle is a shared, read-only resource: copies of modules share it.
    def __copy__(self) -> "Bundle":
        return self

    def __deepcopy__(self, memo) -> "Bundle":
        return self

    def with_fallback(self, fallback: str | None) -> "Bundle":
        """This bundle with another ``fallback`` (as in ``open_bundle``): the same
        kernels, loaded modules, device and ``stats()``; only what a call with no
        kernel does differs."""
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if fallback == self.fallback:
            return self
        self._device_handle()  # one runtime device for both (the runners they share were made on it)
        view = object.__new__(Bundle)
        view.__dict__.update(self.__dict__)
        view.fallback = fallback
        return view

    def __repr__(self) -> str:
        return (f"<Bundle {self.name}-{self.version} target={self.target.name} "
                f"device={getattr(self.device, 'uri', self.device)} kernels={len(self._kernels)}>")

    # ----------------------------------------------------------------- loading
    def _device_handle(self):
        if self._runtime_device is None:
            with self._lock:
                if self._runtime_device is None:
                    from .invoke import open_device

                    self._runtime_device = open_device(self.device.uri)
        return self._runtime_device

    def _runner(self, k: _Kernel):
        if k.runner is not None:
            return k.runner
        with self._lock:
            if k.runner is None:
                data = self._archive.members[k.member]
                if not k.verified:
                    actual = sha256_hex(data)
                    if actual != k.sha256:
                        raise BundleIntegrityError(k.member, k.sha256, actual, self.path)
                    k.verified = True
                from .invoke import KernelRunner

                k.runner = KernelRunner(self._device_handle(), data, k.function)
        return k.runner

    def load(self, key: KernelSignature | str):
        """Load (and checksum) one kernel now rather than on first call."""
        k = self._lookup(str(key))
        if k is None:
            raise self._not_found(str(key))
        return self._runner(k)

    def _lookup(self, key: str) -> _Kernel | None:
        return self._kernels.get(key)

    def _resolve(self, sig: KernelSignature) -> tuple[_Kernel, KernelSignature] | None:
        """(kernel, the static signature it runs as) for a call's static ``sig``:
        the exact key, else a static kernel that differs only where it does not
        matter (``_relaxed_key``), preferring the default stats dtype, else a
        dynamic kernel that takes the call's shape (``_resolve_dynamic``)."""
        try:
            return self._resolved[sig]
        except KeyError:
            pass
        found = self._resolve_uncached(sig)
        if len(self._resolved) > _MEMO_LIMIT:
            self._resolved.clear()
        self._resolved[sig] = found
        return found

    def _resolve_uncached(self, sig: KernelSignature) -> tuple[_Kernel, KernelSignature] | None:
        k = self._kernels.get(sig.key)
        if k is not None:
            return k, k.sig
        cands = self._relaxed.get(_relaxed_key(sig), ())

        def rank(c: str):
            ks = self._kernels[c].sig
            return (ks.stats_dtype != "float32", ks.bias != sig.bias, ks.eps != sig.eps, c)

        best = min(cands, key=rank, default=None)
        if best is not None:
            return self._kernels[best], self._kernels[best].sig
        return self._resolve_dynamic(sig)[0]

    def _resolve_dynamic(self, sig: KernelSignature) -> tuple[tuple[_Kernel, KernelSignature] | None, dict[str, str]]:
        """The dynamic kernel for a static ``sig`` (same op, normalized shape, dtype,
        mask, eps and affine form as ``_relaxed_key`` compares them; its static
        dims equal and the call within its bounds: ``KernelSignature.bind``),
        the one with the most static dims first, and why each other one of the
        family does not take the call."""
        best, why_not = None, {}
        for c in self._dynamic.get(_family_key(sig), ()):
            k = self._kernels[c]
            try:
                bound = k.sig.bind(sig.input_shape)
            except SignatureError as e:
                why_not[c] = str(e)
                continue
            rank = (-k.sig.static_dims, k.sig.stats_dtype != "float32", k.sig.bias != sig.bias,
                    k.sig.eps != sig.eps, len(k.sig.input_shape) != len(sig.input_shape), c)
            if best is None or rank < best[0]:
                best = (rank, k, bound)
        return (None if best is None else (best[1], best[2])), why_not

    def _not_found(self, key: str) -> KernelNotFound:
        reason = self._unavailable.get(key, "")
        try:
            sig = KernelSignature.parse(key)
        except SignatureError:
            sig = None
        if not reason:
            relaxed = _relaxed_key(sig) if sig is not None else None
            for other, why in sorted(self._unavailable.items()):
                if relaxed and _relaxed_key(KernelSignature.parse(other)) == relaxed:
                    reason = f"{why} (as {other})"
                    break
        if not reason and sig is not None and not sig.is_dynamic:  # a dynamic kernel that would take it
            for other, why in sorted(self._unavailable.items()):
                o = KernelSignature.parse(other)
                if o.is_dynamic and _family_key(o) == _family_key(sig):
                    try:
                        o.bind(sig.input_shape)
                    except SignatureError:
                        continue
                    reason = f"{why} (as {other})"
                    break
        near = nearest_keys(key, self._kernels)
        if sig is not None and not sig.is_dynamic:
            # the dynamic kernels that came close: right width and kind, wrong size
            _, why_not = self._resolve_dynamic(sig)
            if why_not:
                reason = "; ".join([reason] * bool(reason) + [
                    "dynamic kernels of this kind do not take the call: " + "; ".join(why_not.values())])
                near = list(why_not) + [k for k in near if k not in why_not]
        return KernelNotFound(key, self.target.name, near, reason)

    def _count(self, key: str, hit: bool) -> None:
        with self._stats_lock:
            self._stats[key]["hits" if hit else "misses"] += 1

    # ----------------------------------------------------------------- running
    def _check_tensor(self, name: str, t, dtype: str | None, shape: tuple[int, ...] | None,
                      allowed: Iterable[str] = (), arrays=_TorchArrays, first: str = "input"):
        """``t`` contiguous, after checking type (``arrays``, the kind of the call's
        ``first`` array), device, dtype (``dtype`` or one of ``allowed``; any
        kernel dtype when both are empty) and shape."""
        if not arrays.owns(t):
            if name == first:
                raise TypeError(f"{name} must be a torch.Tensor or a numpy.ndarray, got {type(t).__name__}")
            other = next((k.name for k in (_TorchArrays, _NumpyArrays) if k.owns(t)), type(t).__name__)
            raise TypeError(f"{name} is a {other} but {first} is a {arrays.name}: "
                            "pass all torch tensors or all numpy arrays")
        if arrays is _TorchArrays and t.device.type != self._device_type:  # numpy: host memory, staged on GPUs
            want = self._device_type
            raise ValueError(f"{name} is on device {t.device}, but this bundle runs on {self.device.uri} "
                             f"(target {self.target.name}): move it to a {want} tensor")
        got = arrays.dtype_name(t)
        if got is None or (dtype is not None and got != dtype) or (allowed and dtype is None and got not in allowed):
            ok = [dtype] if dtype is not None else list(dict.fromkeys(allowed))  # each dtype named once
            if ok:
                raise TypeError(f"{name} has dtype {t.dtype}, "
                                f"expected {' or '.join(arrays.dtype_prefix + d for d in ok)}")
            raise TypeError(f"{name} has dtype {t.dtype}: kernels take float32, float16 or bfloat16")
        if shape is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
        return arrays.contiguous(t)

    def run(self, sig: KernelSignature | str, *args):
        """Run a kernel in its calling convention (``boo_build.signature``): checks
        every argument's shape, dtype and device, returns a tuple of torch tensors
        or numpy arrays, as given. A raw kernel call: autograd does not record it
        (the ATen-style methods below are differentiable). A dynamic kernel's
        sizes are those of the first argument (same rank as the kernel)."""
        key = str(sig)
        k = self._lookup(key)
        if k is None:
            raise self._not_found(key)
        specs = k.sig.inputs()
        if k.sig.is_dynamic and args and hasattr(args[0], "shape"):
            try:
                specs = k.sig.bind(tuple(args[0].shape)).inputs()
            except SignatureError as e:
                raise ValueError(f"{specs[0][0]} has shape {list(args[0].shape)}: {e}") from None
        if len(args) != len(specs):
            raise TypeError(f"kernel {key} takes {len(specs)} arguments "
                            f"({', '.join(s[0] for s in specs)}), got {len(args)}")
        first = specs[0][0]
        arrays = _arrays_of(first, args[0])
        args = tuple(self._check_tensor(n, a, d, s, arrays=arrays, first=first) for (n, s, d), a in zip(specs, args))
        return self._invoke(k, args)

    def _invoke(self, k: _Kernel, args):
        out = self._runner(k)(*args)  # KernelRunner is thread-safe (a pool of VM contexts)
        self._count(k.key, True)
        return tuple(out)

    def _dispatch(self, sig: KernelSignature, arrays, make_args, eager, eager_args):
        """Run ``sig``'s kernel on ``make_args(kernel signature)``, or torch's
        ``eager(*eager_args())`` (the fallback; numpy arrays shared with torch).
        A dynamic kernel gets the arguments viewed in the shapes it runs as
        (leading dims flattened where it takes another rank), and gives its
        results back in the call's shapes."""
        found = self._resolve(sig)
        if found is not None:
            k, ks = found
            if ks is k.sig:
                return self._invoke(k, make_args(ks))
            return _reshaped(self._invoke(k, _reshaped(make_args(ks), ks.inputs())), sig.outputs())
        if self.fallback == "eager":
            self._count(sig.key, False)
            return arrays.eager(eager, eager_args(), f"no kernel {sig.key} for target {self.target.name}")
        raise self._not_found(sig.key)

    def _common(self, op, input, normalized_shape, weight, bias, eps, mask):
        """(array kind, signature, normalized shape, x, weight, bias) of an ATen-style
        call, the arrays checked and contiguous. The signature is None for an
        input with no elements: no kernel has a zero dim (the caller returns
        torch's results without one), but the rest of the call is checked alike."""
        ns = (normalized_shape,) if type(normalized_shape) is int else _norm_shape(normalized_shape)
        arrays = _arrays_of("input", input)
        x = self._check_tensor("input", input, None, None, arrays=arrays)
        dt = arrays.dtype_name(x)
        shape = tuple(x.shape)
        if len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
            raise ValueError(f"normalized_shape {list(ns)} is not a suffix of the input's shape {list(shape)}")
        w = None if weight is None else self._check_tensor("weight", weight, dt, ns, arrays=arrays)
        b = None if bias is None else self._check_tensor("bias", bias, dt, ns, arrays=arrays)
        if b is not None and w is None:
            # ATen allows a bias without a weight; a weight of ones is the same norm.
            w = arrays.full(ns, 1, dt, x)
        memo = (op, shape, ns, dt, mask, eps, w is not None, b is not None)
        sig = self._signatures.get(memo)
        if sig is None:
            empty = 0 in shape
            stand_in = (lambda dims: tuple(d or 1 for d in dims)) if empty else (lambda dims: dims)
            try:
                sig = KernelSignature(op=op, input_shape=stand_in(shape), normalized_shape=stand_in(ns), dtype=dt,
                                      mask=mask, eps=eps, affine=w is not None, bias=b is not None)
            except SignatureError as e:
                raise ValueError(str(e)) from None
            if empty:
                return arrays, None, ns, x, w, b
            if len(self._signatures) > _MEMO_LIMIT:
                self._signatures.clear()
            self._signatures[memo] = sig
        return arrays, sig, ns, x, w, b

    def _check_stats(self, name: str, t, arrays, x, ns: tuple[int, ...]):
        t = self._check_tensor(name, t, None, None, allowed=["float32", arrays.dtype_name(x)], arrays=arrays)
        want = _stats_shape(tuple(x.shape), ns)
        if math.prod(t.shape) != math.prod(want):
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(want)}")
        return t

    # -- layer norm
    def native_layer_norm(self, input, normalized_shape, weight=None, bias=None, eps: float = DEFAULT_EPS):
        """ATen's native_layer_norm -> (out, mean, rstd); mean/rstd in the stats dtype (float32).
        Differentiable in ``out`` (through the ``boo::layer_norm`` op, ``loader/ops.py``)."""
        if _wants_grad(input, weight, bias):
            return _ops().native_layer_norm(self, input, normalized_shape, weight, bias, eps)
        arrays, sig, ns, x, w, b = self._common("layer_norm", input, normalized_shape, weight, bias, eps, FORWARD)
        if sig is None:
            return _zero_size_forward("layer_norm", arrays, x, ns)
        args = (x,) + ((w,) if w is not None else ()) + ((b,) if b is not None else ())
        return self._dispatch(sig, arrays, lambda _: args, _eager_layer_norm, lambda: (sig, x, w, b))

    def native_layer_norm_backward(self, grad_out, input, normalized_shape, mean, rstd, weight=None, bias=None,
                                   output_mask=(True, True, True), *, eps: float | None = None):
        """ATen's native_layer_norm_backward -> (grad_input, grad_weight, grad_bias), None where not asked.

        ``eps`` (not an ATen argument) only picks between kernels built for
        different eps; without it any eps matches (it does not enter the math).
        """
        m = [bool(v) for v in output_mask]
        if len(m) != 3:
            raise ValueError(f"output_mask must have 3 booleans, got {output_mask!r}")
        mask = INPUT_GRAD * m[0] + WEIGHT_GRAD * (m[1] and weight is not None) + BIAS_GRAD * (m[2] and bias is not None)
        if mask == 0:
            return (None, None, None)
        if _wants_grad(grad_out, input, mean, rstd, weight, bias):
            return _ops().native_layer_norm_backward(self, grad_out, input, normalized_shape, mean, rstd, weight,
                                                     bias, output_mask, eps)
        arrays, sig, ns, x, w, b = self._common("layer_norm", input, normalized_shape, weight, bias,
                                                DEFAULT_EPS if eps is None else eps, mask)
        gy = self._check_tensor("grad_out", grad_out, arrays.dtype_name(x), tuple(x.shape), arrays=arrays)
        mean = self._check_stats("mean", mean, arrays, x, ns)
        rstd = self._check_stats("rstd", rstd, arrays, x, ns)
        if sig is None:
            return _zero_size_grads(arrays, x, ns, mask, _LN_BITS)

        def args(ks: KernelSignature):
            mu, rs = (_as_stats(arrays, t, ks) for t in (mean, rstd))
            return (gy, x, mu, rs) + ((w,) if ks.takes_weight else ())

        outs = self._dispatch(sig, arrays, args, _eager_layer_norm_backward, lambda: (
            ns, sig.mask, gy, x, _as_stats(arrays, mean, sig), _as_stats(arrays, rstd, sig), w, b))
        return _spread(sig.mask, outs, _LN_BITS)

    # -- RMS norm
    def fused_rms_norm(self, input, normalized_shape, weight=None, eps: float | None = None):
        """ATen's _fused_rms_norm -> (out, rstd); eps None is float32's epsilon, as in torch.
        Differentiable in ``out`` and ``rstd``, as ATen's."""
        eps = rms_default_eps() if eps is None else eps
        if _wants_grad(input, weight):
            return _ops().fused_rms_norm(self, input, normalized_shape, weight, eps)
        arrays, sig, ns, x, w, _ = self._common("rms_norm", input, normalized_shape, weight, None, eps, FORWARD)
        if sig is None:
            return _zero_size_forward("rms_norm", arrays, x, ns)
        args = (x,) + ((w,) if w is not None else ())
        return self._dispatch(sig, arrays, lambda _: args, _eager_rms_norm, lambda: (sig, x, w))

    def fused_rms_norm_backward(self, grad_out, input, normalized_shape, rstd, weight=None,
                                output_mask=(True, True), *, eps: float | None = None):
        """ATen's _fused_rms_norm_backward -> (grad_input, grad_weight), None where not asked.
        ``eps`` as in ``native_layer_norm_backward``."""
        m = [bool(v) for v in output_mask]
        if len(m) != 2:
            raise ValueError(f"output_mask must have 2 booleans, got {output_mask!r}")
        mask = INPUT_GRAD * m[0] + WEIGHT_GRAD * (m[1] and weight is not None)
        if mask == 0:
            return (None, None)
        if _wants_grad(grad_out, input, rstd, weight):
            return _ops().fused_rms_norm_backward(self, grad_out, input, normalized_shape, rstd, weight,
                                                  output_mask, eps)
        arrays, sig, ns, x, w, _ = self._common("rms_norm", input, normalized_shape, weight, None,
                                                DEFAULT_EPS if eps is None else eps, mask)
        gy = self._check_tensor("grad_out", grad_out, arrays.dtype_name(x), tuple(x.shape), arrays=arrays)
        rstd = self._check_stats("rstd", rstd, arrays, x, ns)
        if sig is None:
            return _zero_size_grads(arrays, x, ns, mask, _RMS_BITS)

        def args(ks: KernelSignature):
            return (gy, x, _as_stats(arrays, rstd, ks)) + ((w,) if ks.takes_weight else ())

        outs = self._dispatch(sig, arrays, args, _eager_rms_norm_backward,
                              lambda: (ns, sig.mask, gy, x, _as_stats(arrays, rstd, sig), w))
        return _spread(sig.mask, outs, _RMS_BITS)


def rms_default_eps() -> float:
    """torch's eps for rms_norm(eps=None): the epsilon of the opmath type, float32."""
    return 1.1920928955078125e-07


def _relaxed_key(sig: KernelSignature) -> str:
    """The key with what a call cannot pin down, or what does not change the
    kernel, normalized: the stats dtype; for backward kernels eps (the saved
    statistics carry it) and whether a layer norm has a bias (a backward
    kernel never takes the bias; only the bias gradient needs it)."""
    changes: dict[str, Any] = {"stats_dtype": "float32"}
    if not sig.is_forward:
        changes["eps"] = DEFAULT_EPS
        if sig.op == "layer_norm":
            changes["bias"] = sig.affine
    return sig.replace(**changes).key


_LN_BITS = (INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD)  # ATen's output_mask order
_RMS_BITS = (INPUT_GRAD, WEIGHT_GRAD)


def _as_stats(arrays, t, sig: KernelSignature):
    """Statistics in the kernel's layout and dtype."""
    return arrays.contiguous(arrays.cast(t.reshape(sig.stats_shape), sig.stats_dtype))


def _family_key(sig: KernelSignature) -> str:
    """``_relaxed_key`` without the leading dims: what a dynamic kernel and a
    call must share (op, dtype, normalized shape, mask, affine form, eps)."""
    return _relaxed_key(sig.replace(input_shape=sig.normalized_shape, max_elements=None))


def _reshaped(arrays, specs) -> tuple:
    """Each array viewed in its spec's shape (``KernelSignature.inputs()``/``outputs()``):
    the same elements, contiguous, so a view (torch or numpy)."""
    return tuple(a if tuple(a.shape) == tuple(shape) else a.reshape(shape) for a, (_, shape, _) in zip(arrays, specs))


def _spread(mask: int, outs, bits) -> tuple:
    it = iter(outs)
    return tuple(next(it) if mask & bit else None for bit in bits)


# ------------------------------------------------------------ zero-size input
# No kernel has a zero dim: an input with no elements gets torch's results
# (ATen's on the CPU) without one: empty outputs; the statistics of rows of
# zero elements (there are rows when a normalized dim is 0) are mean 0 and
# rstd NaN, in the stats dtype non-empty calls return; weight and bias
# gradients, sums over no rows, are zeros of the weight's shape.
def _zero_size_forward(op: str, arrays, x, ns: tuple[int, ...]) -> tuple:
    from ..signature import default_stats_dtype

    shape, dt = tuple(x.shape), arrays.dtype_name(x)
    sd, st = default_stats_dtype(op, dt), _stats_shape(shape, ns)
    y, rstd = arrays.full(shape, 0, dt, x), arrays.full(st, math.nan, sd, x)
    return (y, rstd) if op == "rms_norm" else (y, arrays.full(st, 0, sd, x), rstd)


def _zero_size_grads(arrays, x, ns: tuple[int, ...], mask: int, bits) -> tuple:
    dt = arrays.dtype_name(x)
    return tuple(arrays.full(tuple(x.shape) if bit == INPUT_GRAD else ns, 0, dt, x) if mask & bit else None
                 for bit in bits)


# ------------------------------------------------------------- eager fallback
# torch tensors in and out (numpy arrays are shared with torch by _NumpyArrays.eager).
def _eager_layer_norm(sig, x, w, b):
    torch = _torch()
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(sig.normalized_shape), w, b, sig.eps)
    sd = _torch_dtype(sig.stats_dtype)
    return y, mean.to(sd).reshape(sig.stats_shape), rstd.to(sd).reshape(sig.stats_shape)


def _eager_layer_norm_backward(ns, mask: int, gy, x, mean, rstd, w, b):
    """The gradients ``mask`` asks for, in order (differentiable: ops.py's second derivatives)."""
    torch = _torch()
    c, dt = torch.float32, x.dtype  # ATen on the CPU wants one dtype: run in float32
    want = [bool(mask & bit) for bit in _LN_BITS]
    outs = torch.ops.aten.native_layer_norm_backward(
        gy.to(c), x.to(c), list(ns), mean.to(c), rstd.to(c),
        None if w is None else w.to(c), None if b is None else b.to(c), want)
    return tuple(o.to(dt) for o, wanted in zip(outs, want) if wanted)


def _eager_rms_norm(sig, x, w):
    torch = _torch()
    y, rstd = torch.ops.aten._fused_rms_norm(x, list(sig.normalized_shape), w, sig.eps)
    return y, rstd.to(_torch_dtype(sig.stats_dtype)).reshape(sig.stats_shape)


def _eager_rms_norm_backward(ns, mask: int, gy, x, rstd, w):
    """As ``_eager_layer_norm_backward``."""
    torch = _torch()
    want = [bool(mask & bit) for bit in _RMS_BITS]
    op = torch.ops.aten._fused_rms_norm_backward.default
    args = (gy, x, list(ns), rstd, w, want)
    try:
        outs = op(*args)
    except (NotImplementedError, RuntimeError):
        # torch 2.13 has no CPU kernel for it: torch's own decomposition.
        from torch._decomp import decomposition_table

        outs = decomposition_table[op](*args)
    return tuple(o.to(x.dtype) for o, wanted in zip(outs, want) if wanted)


# ------------------------------------------------------------ runtime version
# Optional index field (format version 1; absent in bundles written before it):
# {"compiler": iree-compile version, "min": oldest iree-base-runtime known to
# load the modules, "max_tested": newest one tested}. Written by pack.py.
RUNTIME_FIELD = "iree_runtime"
_RELEASE_RE = re.compile(r"\s*(\d+)\.(\d+)\.(\d+)")


def iree_release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an IREE version ("3.13.0", "3.13.0rc20261016":
    a release wheel reports the rc it was built from), None if unparseable."""
    m = _RELEASE_RE.match(version) if isinstance(version, str) else None
    return tuple(int(g) for g in m.groups()) if m else None  # type: ignore[return-value]


def check_runtime(index: dict[str, Any], path: str, runtime: str | None = None) -> None:
    """Refuse a runtime older than the bundle's modules need (``RuntimeTooOld``),
    warn about one newer than any tested (``UntestedRuntimeWarning``).

    ``runtime``: the iree-base-runtime version, by default the one this
    process loads (``native.runtime_version``, without loading it). Bundles
    without the field, or an unknown runtime version, are not checked."""
    req = index.get(RUNTIME_FIELD)
    if req is None:
        return
    if (not isinstance(req, dict) or not all(isinstance(req.get(k), str) for k in ("compiler", "min", "max_tested"))
            or iree_release(req["min"]) is None or iree_release(req["max_tested"]) is None):
        raise BundleFormatError(f"{path}: malformed {INDEX_NAME}: {RUNTIME_FIELD} must hold version strings "
                                f"'compiler', 'min' and 'max_tested', got {req!r}")
    if runtime is None:
        from .native import runtime_version

        runtime = runtime_version()
    have = iree_release(runtime) if runtime else None
    if have is None:
        return
    if have < iree_release(req["min"]):
        raise RuntimeTooOld(path, runtime, req["min"], req["max_tested"], req["compiler"])
    if have > iree_release(req["max_tested"]):
        warnings.warn(
            f"bundle {path}: iree-base-runtime {runtime} is newer than any tested with its modules (built by "
            f"iree-compile {req['compiler']}; tested {req['min']} to {req['max_tested']}); if a kernel fails to "
            f"load, install iree-base-runtime=={req['max_tested']} or rebuild the bundle with "
            f"iree-base-compiler=={'.'.join(map(str, have))}", UntestedRuntimeWarning, stacklevel=3)


# ------------------------------------------------------------------- opening
def open_bundle(path: str | os.PathLike, device: Any = None, fallback: str | None = None, *,
                max_size: int = DEFAULT_MAX_SIZE) -> Bundle:
    """Open a bundle for the best device present, or for ``device``.

    ``device``: None (a HIP GPU with a gfx arch the bundle holds, else the CPU
    at a level it supports), a device URI ("local-task", "hip://0", ...) or a
    ``devices.DeviceInfo``. ``fallback``: None (a missing kernel raises
    ``KernelNotFound``) or "eager" (run torch's op instead, counted in
    ``stats()`` as a miss). ``max_size`` bounds the decompressed size.

    Raises ``RuntimeTooOld`` if this process's iree-base-runtime is older
    than the oldest known to load the bundle's modules (``check_runtime``).
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    archive = read_archive(path, max_size=max_size)
    check_runtime(archive.index, archive.path)
    target, dev = _select_target(archive.index, device, archive.path)
    return Bundle(archive, target, dev, fallback)
