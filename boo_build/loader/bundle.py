"""Open a boo bundle and run its kernels with ATen-like calls.

Importing this module imports only the standard library, zstandard and
``boo_build.signature``/``targets``. torch is imported by the first call that
takes or returns tensors, iree.runtime (through ``invoke``/``devices``) by the
first device discovery or kernel load.

    bundle = open_bundle("norms-1.0.0.tar.zst")            # best device present
    y, mean, rstd = bundle.native_layer_norm(x, (768,), w, b, 1e-5)

Kernels are chosen from argument shapes, dtypes, the gradient mask and eps
(a ``KernelSignature`` and its key), running the implementation the build
selected for the bundle's target on this device. A vmfb's sha256 is checked
before it is first loaded; loaded modules are cached (thread-safe).
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import math
import os
import tarfile
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import zstandard

from ..signature import (
    BIAS_GRAD, DEFAULT_EPS, FORWARD, INPUT_GRAD, WEIGHT_GRAD, KernelSignature, SignatureError,
)
from ..targets import Target

FORMAT = "boo-bundle"
FORMAT_VERSION = 1
READABLE_VERSIONS = (1,)
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


# --------------------------------------------------------------------- archive
@dataclass
class Archive:
    """A bundle read into memory: the checked index and every member's bytes."""

    path: str
    index: dict[str, Any]
    members: dict[str, bytes]
    compressed_size: int
    size: int  # decompressed tar size


def _decompress(blob: bytes, max_size: int, path: str) -> bytes:
    if len(blob) < 4 or blob[:4] != _ZSTD_MAGIC:
        raise BundleFormatError(f"{path} is not a boo bundle: not a zstd file")
    try:
        size = zstandard.frame_content_size(blob)
    except zstandard.ZstdError as e:
        raise BundleFormatError(f"{path} is truncated or corrupt: unreadable zstd frame header ({e})") from None
    if size > max_size:
        raise BundleFormatError(f"{path} decompresses to {size} bytes, over the limit of {max_size} "
                                f"(open_bundle(..., max_size=...) raises it)")
    try:
        if size >= 0:
            return zstandard.ZstdDecompressor().decompress(blob)
        # Content size not recorded (not written by pack.py): stream with a bound.
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True)
        out, total = [], 0
        while chunk := reader.read(1 << 20):
            total += len(chunk)
            if total > max_size:
                raise BundleFormatError(f"{path} decompresses to more than the limit of {max_size} bytes")
            out.append(chunk)
        return b"".join(out)
    except zstandard.ZstdError as e:
        raise BundleFormatError(f"{path} is truncated or corrupt: {e}") from None


def _check_member_name(name: str, path: str) -> None:
    bad = ""
    if not name or name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        bad = "an absolute or non-POSIX path"
    elif any(part in ("..", ".", "") for part in name.split("/")):
        bad = "a path with '..', '.' or an empty component"
    if bad:
        raise BundleFormatError(f"{path}: member {name!r} has {bad}; refusing the bundle")


def read_archive(path: str | os.PathLike, max_size: int = DEFAULT_MAX_SIZE) -> Archive:
    """Read, decompress and check a bundle (format, member names and types, index)."""
    path_s = str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > max_size:
                raise BundleFormatError(f"{path_s} is {st.st_size} bytes, over the limit of {max_size}")
            blob = f.read()
    except OSError as e:
        raise BundleFormatError(f"cannot read bundle {path_s}: {e.strerror or e}") from None
    raw = _decompress(blob, max_size, path_s)
    members: dict[str, bytes] = {}
    first: str | None = None
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
            for ti in tf:
                _check_member_name(ti.name, path_s)
                if ti.isdir():
                    continue
                if ti.issym() or ti.islnk():
                    raise BundleFormatError(f"{path_s}: member {ti.name!r} is a link (to {ti.linkname!r}); "
                                            "refusing the bundle")
                if not ti.isreg():
                    raise BundleFormatError(f"{path_s}: member {ti.name!r} is a device or special file; "
                                            "refusing the bundle")
                if ti.name in members:
                    raise BundleFormatError(f"{path_s}: member {ti.name!r} appears twice")
                f = tf.extractfile(ti)
                data = f.read() if f is not None else b""
                if len(data) != ti.size:
                    raise BundleFormatError(f"{path_s} is truncated: member {ti.name!r} has "
                                            f"{len(data)} of {ti.size} bytes")
                members[ti.name] = data
                first = first or ti.name
    except tarfile.TarError as e:
        raise BundleFormatError(f"{path_s} is truncated or corrupt: bad tar data ({e})") from None
    if first is None:
        raise BundleFormatError(f"{path_s} is empty: no members")
    if first != INDEX_NAME:
        raise BundleFormatError(f"{path_s}: first member is {first!r}, expected {INDEX_NAME}")
    try:
        index = json.loads(members[INDEX_NAME])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleFormatError(f"{path_s}: {INDEX_NAME} is not valid JSON ({e})") from None
    check_index(index, members, path_s)
    return Archive(path_s, index, members, len(blob), len(raw))


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
    """Preference order: GPUs first, then CPUs from the highest level down."""
    return (1 if t.is_cpu else 0, -_CPU_LEVELS.get(t.arch, 0), t.name)


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


def _distance(a: KernelSignature, b: KernelSignature) -> float:
    d = 0.0
    d += 100 * (a.op != b.op)
    d += 10 * (a.dtype != b.dtype)
    d += 8 * (a.normalized_shape != b.normalized_shape)
    if a.input_shape != b.input_shape:
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
        # Second-chance lookups for what ATen's arguments cannot pin down (see _relaxed_key).
        self._relaxed: dict[str, list[str]] = defaultdict(list)
        for key in sorted(self._kernels):
            self._relaxed[_relaxed_key(self._kernels[key].sig)].append(key)
        self._stats: dict[str, dict[str, int]] = defaultdict(lambda: {"hits": 0, "misses": 0})
        self._stats_lock = threading.Lock()
        # per-call memos (dict get/set are atomic under the GIL; a race only recomputes)
        self._signatures: dict[tuple, KernelSignature] = {}
        self._resolved: dict[KernelSignature, _Kernel | None] = {}

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

    def stats(self) -> dict[str, dict[str, int]]:
        """Calls per signature key: {"hits": ran a bundle kernel, "misses": fell back to eager}."""
        with self._stats_lock:
            return {k: dict(v) for k, v in sorted(self._stats.items())}

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._stats.clear()

    # A bundle is a shared, read-only resource: copies of modules share it.
    def __copy__(self) -> "Bundle":
        return self

    def __deepcopy__(self, memo) -> "Bundle":
        return self

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

    def _resolve(self, sig: KernelSignature) -> _Kernel | None:
        """The exact key, else a kernel that differs only where it does not
        matter (``_relaxed_key``), preferring the default stats dtype."""
        try:
            return self._resolved[sig]
        except KeyError:
            pass
        k = self._resolve_uncached(sig)
        if len(self._resolved) > _MEMO_LIMIT:
            self._resolved.clear()
        self._resolved[sig] = k
        return k

    def _resolve_uncached(self, sig: KernelSignature) -> _Kernel | None:
        k = self._kernels.get(sig.key)
        if k is not None:
            return k
        cands = self._relaxed.get(_relaxed_key(sig), ())

        def rank(c: str):
            ks = self._kernels[c].sig
            return (ks.stats_dtype != "float32", ks.bias != sig.bias, ks.eps != sig.eps, c)

        best = min(cands, key=rank, default=None)
        return None if best is None else self._kernels[best]

    def _not_found(self, key: str) -> KernelNotFound:
        reason = self._unavailable.get(key, "")
        if not reason:
            try:
                relaxed = _relaxed_key(KernelSignature.parse(key))
            except SignatureError:
                relaxed = None
            for other, why in sorted(self._unavailable.items()):
                if relaxed and _relaxed_key(KernelSignature.parse(other)) == relaxed:
                    reason = f"{why} (as {other})"
                    break
        return KernelNotFound(key, self.target.name, nearest_keys(key, self._kernels), reason)

    def _count(self, key: str, hit: bool) -> None:
        with self._stats_lock:
            self._stats[key]["hits" if hit else "misses"] += 1

    # ----------------------------------------------------------------- running
    def _check_tensor(self, name: str, t, dtype: str | None, shape: tuple[int, ...] | None,
                      allowed: Iterable[str] = ()):
        """``t`` contiguous, after checking type, device, dtype (``dtype`` or one of
        ``allowed``; any kernel dtype when both are empty) and shape."""
        torch = _torch()
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        want = self._device_type
        if t.device.type != want:
            raise ValueError(f"{name} is on device {t.device}, but this bundle runs on {self.device.uri} "
                             f"(target {self.target.name}): move it to a {want} tensor")
        got = _dtype_name(t)
        if got is None or (dtype is not None and got != dtype) or (allowed and dtype is None and got not in allowed):
            ok = [dtype] if dtype is not None else list(allowed)
            if ok:
                raise TypeError(f"{name} has dtype {t.dtype}, expected {' or '.join('torch.' + d for d in ok)}")
            raise TypeError(f"{name} has dtype {t.dtype}: kernels take float32, float16 or bfloat16")
        if shape is not None and t.shape != shape:
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
        return t if t.is_contiguous() else t.contiguous()

    def run(self, sig: KernelSignature | str, *args):
        """Run a kernel in its calling convention (``boo_build.signature``): checks
        every argument's shape, dtype and device, returns a tuple of tensors."""
        key = str(sig)
        k = self._lookup(key)
        if k is None:
            raise self._not_found(key)
        specs = k.sig.inputs()
        if len(args) != len(specs):
            raise TypeError(f"kernel {key} takes {len(specs)} arguments "
                            f"({', '.join(s[0] for s in specs)}), got {len(args)}")
        args = tuple(self._check_tensor(n, a, d, s) for (n, s, d), a in zip(specs, args))
        return self._invoke(k, args)

    def _invoke(self, k: _Kernel, args):
        out = self._runner(k)(*args)  # KernelRunner is thread-safe (a pool of VM contexts)
        self._count(k.key, True)
        return tuple(out)

    def _dispatch(self, sig: KernelSignature, make_args, eager):
        """Run ``sig``'s kernel on ``make_args(kernel signature)``, or ``eager()``."""
        k = self._resolve(sig)
        if k is not None:
            return self._invoke(k, make_args(k.sig))
        if self.fallback == "eager":
            self._count(sig.key, False)
            return eager()
        raise self._not_found(sig.key)

    def _common(self, op, input, normalized_shape, weight, bias, eps, mask):
        """Checked (contiguous) tensors and the signature of an ATen-style call."""
        ns = (normalized_shape,) if type(normalized_shape) is int else _norm_shape(normalized_shape)
        x = self._check_tensor("input", input, None, None)
        dt = _dtype_name(x)
        shape = tuple(x.shape)
        if len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
            raise ValueError(f"normalized_shape {list(ns)} is not a suffix of the input's shape {list(shape)}")
        w = None if weight is None else self._check_tensor("weight", weight, dt, ns)
        b = None if bias is None else self._check_tensor("bias", bias, dt, ns)
        if b is not None and w is None:
            # ATen allows a bias without a weight; a weight of ones is the same norm.
            w = _torch().ones(ns, dtype=x.dtype, device=x.device)
        memo = (op, shape, ns, dt, mask, eps, w is not None, b is not None)
        sig = self._signatures.get(memo)
        if sig is None:
            try:
                sig = KernelSignature(op=op, input_shape=memo[1], normalized_shape=ns, dtype=dt, mask=mask,
                                      eps=eps, affine=w is not None, bias=b is not None)
            except SignatureError as e:
                raise ValueError(str(e)) from None
            if len(self._signatures) > _MEMO_LIMIT:
                self._signatures.clear()
            self._signatures[memo] = sig
        return sig, x, w, b

    def _check_stats(self, name: str, t, sig: KernelSignature):
        t = self._check_tensor(name, t, None, None, allowed=["float32", sig.dtype])
        if t.numel() != sig.rows:
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(sig.stats_shape)}")
        return t

    # -- layer norm
    def native_layer_norm(self, input, normalized_shape, weight=None, bias=None, eps: float = DEFAULT_EPS):
        """ATen's native_layer_norm -> (out, mean, rstd); mean/rstd in the stats dtype (float32)."""
        sig, x, w, b = self._common("layer_norm", input, normalized_shape, weight, bias, eps, FORWARD)
        args = (x,) + ((w,) if w is not None else ()) + ((b,) if b is not None else ())
        return self._dispatch(sig, lambda _: args, lambda: _eager_layer_norm(sig, x, w, b))

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
        sig, x, w, b = self._common("layer_norm", input, normalized_shape, weight, bias,
                                    DEFAULT_EPS if eps is None else eps, mask)
        gy = self._check_tensor("grad_out", grad_out, sig.dtype, sig.input_shape)
        mean = self._check_stats("mean", mean, sig)
        rstd = self._check_stats("rstd", rstd, sig)

        def args(ks: KernelSignature):
            mu, rs = (_as_stats(t, ks) for t in (mean, rstd))
            return (gy, x, mu, rs) + ((w,) if ks.takes_weight else ())

        outs = self._dispatch(sig, args, lambda: _eager_layer_norm_backward(
            sig, gy, x, _as_stats(mean, sig), _as_stats(rstd, sig), w, b))
        return _spread(sig.mask, outs, (INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD))

    # -- RMS norm
    def fused_rms_norm(self, input, normalized_shape, weight=None, eps: float | None = None):
        """ATen's _fused_rms_norm -> (out, rstd); eps None is float32's epsilon, as in torch."""
        eps = rms_default_eps() if eps is None else eps
        sig, x, w, _ = self._common("rms_norm", input, normalized_shape, weight, None, eps, FORWARD)
        args = (x,) + ((w,) if w is not None else ())
        return self._dispatch(sig, lambda _: args, lambda: _eager_rms_norm(sig, x, w))

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
        sig, x, w, _ = self._common("rms_norm", input, normalized_shape, weight, None,
                                    DEFAULT_EPS if eps is None else eps, mask)
        gy = self._check_tensor("grad_out", grad_out, sig.dtype, sig.input_shape)
        rstd = self._check_stats("rstd", rstd, sig)

        def args(ks: KernelSignature):
            return (gy, x, _as_stats(rstd, ks)) + ((w,) if ks.takes_weight else ())

        outs = self._dispatch(sig, args, lambda: _eager_rms_norm_backward(sig, gy, x, _as_stats(rstd, sig), w))
        return _spread(sig.mask, outs, (INPUT_GRAD, WEIGHT_GRAD))


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


def _as_stats(t, sig: KernelSignature):
    """Statistics in the kernel's layout and dtype."""
    return t.reshape(sig.stats_shape).to(_torch_dtype(sig.stats_dtype)).contiguous()


def _spread(mask: int, outs, bits) -> tuple:
    it = iter(outs)
    return tuple(next(it) if mask & bit else None for bit in bits)


# ------------------------------------------------------------- eager fallback
def _eager_layer_norm(sig, x, w, b):
    torch = _torch()
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(sig.normalized_shape), w, b, sig.eps)
    sd = _torch_dtype(sig.stats_dtype)
    return y, mean.to(sd).reshape(sig.stats_shape), rstd.to(sd).reshape(sig.stats_shape)


def _eager_layer_norm_backward(sig, gy, x, mean, rstd, w, b):
    torch = _torch()
    c, dt = torch.float32, x.dtype  # ATen on the CPU wants one dtype: run in float32
    if w is None and sig.affine:
        w = torch.ones(sig.normalized_shape, dtype=dt, device=x.device)
    mask = [bool(sig.mask & INPUT_GRAD), bool(sig.mask & WEIGHT_GRAD), bool(sig.mask & BIAS_GRAD)]
    outs = torch.ops.aten.native_layer_norm_backward(
        gy.to(c), x.to(c), list(sig.normalized_shape), mean.to(c), rstd.to(c),
        None if w is None else w.to(c), None if b is None else b.to(c), mask)
    return tuple(o.to(dt) for o, want in zip(outs, mask) if want)


def _eager_rms_norm(sig, x, w):
    torch = _torch()
    y, rstd = torch.ops.aten._fused_rms_norm(x, list(sig.normalized_shape), w, sig.eps)
    return y, rstd.to(_torch_dtype(sig.stats_dtype)).reshape(sig.stats_shape)


def _eager_rms_norm_backward(sig, gy, x, rstd, w):
    torch = _torch()
    dt = x.dtype
    if w is None and sig.affine:
        w = torch.ones(sig.normalized_shape, dtype=dt, device=x.device)
    mask = [bool(sig.mask & INPUT_GRAD), bool(sig.mask & WEIGHT_GRAD)]
    op = torch.ops.aten._fused_rms_norm_backward.default
    args = (gy, x, list(sig.normalized_shape), rstd, w, mask)
    try:
        outs = op(*args)
    except (NotImplementedError, RuntimeError):
        # torch 2.13 has no CPU kernel for it: torch's own decomposition.
        from torch._decomp import decomposition_table

        outs = decomposition_table[op](*args)
    return tuple(o.to(dt) for o, want in zip(outs, mask) if want)


# ------------------------------------------------------------------- opening
def open_bundle(path: str | os.PathLike, device: Any = None, fallback: str | None = None, *,
                max_size: int = DEFAULT_MAX_SIZE) -> Bundle:
    """Open a bundle for the best device present, or for ``device``.

    ``device``: None (a HIP GPU with a gfx arch the bundle holds, else the CPU
    at a level it supports), a device URI ("local-task", "hip://0", ...) or a
    ``devices.DeviceInfo``. ``fallback``: None (a missing kernel raises
    ``KernelNotFound``) or "eager" (run torch's op instead, counted in
    ``stats()`` as a miss). ``max_size`` bounds the decompressed size.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    archive = read_archive(path, max_size=max_size)
    target, dev = _select_target(archive.index, device, archive.path)
    return Bundle(archive, target, dev, fallback)
