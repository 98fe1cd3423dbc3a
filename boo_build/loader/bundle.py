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
first, else a dynamic one that takes the call's shape. A vmfb's sha256 is
checked before it is first loaded; loaded modules are cached (thread-safe).

Around it: ``archive.py`` reads the file, ``format.py`` types its index,
``choice.py`` picks the target and device, ``versions.py`` checks the
runtime, ``lookup.py`` finds the kernel for a call, ``tensors.py`` handles
a call's torch tensors or numpy arrays.
"""

from __future__ import annotations

import math
import os
import threading
import types
from collections import defaultdict
from typing import Any, Iterable

from .. import ops
from ..ops.calls import norm_shape, stats_shape
from ..signature import KernelSignature, SignatureError
from ..targets import Target
# The format, archive, errors, device choice and runtime check live in their
# own modules; their public names are re-exported here (and by the package).
from .archive import DEFAULT_MAX_SIZE, Archive, read_archive, sha256_hex, verify_members
from .choice import select_target as _select_target
from .errors import BundleError, BundleFormatError, BundleIntegrityError, KernelNotFound, NoCompatibleDevice
from .format import (
    DYNAMIC_FORMAT_VERSION, FORMAT, FORMAT_VERSION, INDEX_NAME, READABLE_VERSIONS, RUNTIME_FIELD, check_index,
)
from .lookup import KernelTable, _family_key, _Kernel
from .nearest import nearest_keys
from .tensors import _NumpyArrays, _TorchArrays, _arrays_of
from .versions import RuntimeTooOld, UntestedRuntimeWarning, check_runtime, iree_release

FALLBACKS = (None, "eager")
_MEMO_LIMIT = 4096  # per-call signature memo entries kept per bundle


# -------------------------------------------------------------------- bundle
class Bundle:
    """An opened bundle bound to one target and one device. Use ``open_bundle``."""

    def __init__(self, archive: Archive, target: Target, device: Any, fallback: str | None = None):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        self._archive = archive
        self.index = archive.index  # bundle.json as read; typed: archive.bundle_index
        self.path = archive.path
        self.target = target
        self.device = device  # devices.DeviceInfo
        self.fallback = fallback
        self._device_type = "cpu" if target.is_cpu else "cuda"  # torch's name for HIP/CUDA memory
        self._lock = threading.RLock()
        self._runtime_device = None
        # which kernel serves a call (lookup.py); _kernels: the runnable ones by key
        self._table = KernelTable(archive.bundle_index, target.name)
        self._kernels = self._table.kernels
        self._stats: dict[str, dict[str, int]] = defaultdict(lambda: {"hits": 0, "misses": 0})
        self._stats_lock = threading.Lock()
        # per-call memos (dict get/set are atomic under the GIL; a race only recomputes)
        self._signatures: dict[tuple, KernelSignature] = {}

    # ------------------------------------------------------------ description
    @property
    def name(self) -> str:
        return self._archive.bundle_index.name

    @property
    def version(self) -> str:
        return self._archive.bundle_index.version

    def keys(self) -> list[str]:
        """Signature keys runnable on this bundle's target."""
        return sorted(self._kernels)

    def signatures(self) -> list[KernelSignature]:
        return [self._kernels[k].sig for k in self.keys()]

    def __contains__(self, sig: KernelSignature | str) -> bool:
        return str(sig) in self._kernels

    def info(self) -> dict[str, Any]:
        ix = self._archive.bundle_index
        per_target = ix.counts()
        kernels = {key: {tname: ({"status": te.status.value, "selected": te.selected} if te.is_available
                                 else {"status": te.status.value, "reason": te.reason or ""})
                         for tname, te in sorted(k.targets.items())}
                   for key, k in sorted(ix.kernels.items())}
        return {
            "path": self.path,
            "name": self.name,
            "version": self.version,
            "format_version": ix.format_version,
            "target": self.target.name,
            "device": {k: getattr(self.device, k, None) for k in ("driver", "uri", "arch", "name")},
            "fallback": self.fallback,
            "provenance": self.index.get("provenance", {}),
            "targets": {n: {**t.to_json(), **per_target[n]} for n, t in sorted(ix.targets.items())},
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
            raise self._table.not_found(str(key))
        return self._runner(k)

    def _lookup(self, key: str) -> _Kernel | None:
        return self._kernels.get(key)

    def _count(self, key: str, hit: bool) -> None:
        with self._stats_lock:
            self._stats[key]["hits" if hit else "misses"] += 1

    # ----------------------------------------------------------------- running
    def check_array(self, name: str, t, dtype: str | None, shape: tuple[int, ...] | None,
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
        (the ops' ATen-style entry points, ``boo_build.ops``, are differentiable). A dynamic kernel's
        sizes are those of the first argument (same rank as the kernel)."""
        key = str(sig)
        k = self._lookup(key)
        if k is None:
            raise self._table.not_found(key)
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
        args = tuple(self.check_array(n, a, d, s, arrays=arrays, first=first) for (n, s, d), a in zip(specs, args))
        return self._invoke(k, args)

    def _invoke(self, k: _Kernel, args):
        out = self._runner(k)(*args)  # KernelRunner is thread-safe (a pool of VM contexts)
        self._count(k.key, True)
        return tuple(out)

    def dispatch(self, sig: KernelSignature, arrays, make_args, eager, eager_args):
        """Run ``sig``'s kernel on ``make_args(kernel signature)``, or torch's
        ``eager(*eager_args())`` (the fallback; numpy arrays shared with torch).
        A dynamic kernel gets the arguments viewed in the shapes it runs as
        (leading dims flattened where it takes another rank), and gives its
        results back in the call's shapes."""
        found = self._table.resolve(sig)
        if found is not None:
            k, ks = found
            if ks is k.sig:
                return self._invoke(k, make_args(ks))
            return _reshaped(self._invoke(k, _reshaped(make_args(ks), ks.inputs())), sig.outputs())
        if self.fallback == "eager":
            self._count(sig.key, False)
            return arrays.eager(eager, eager_args(), f"no kernel {sig.key} for target {self.target.name}")
        raise self._table.not_found(sig.key)

    def prepare(self, op, input, normalized_shape, weight, bias, eps, mask):
        """(array kind, signature, normalized shape, x, weight, bias) of an ATen-style
        call, the arrays checked and contiguous. The signature is None for an
        input with no elements: no kernel has a zero dim (the caller returns
        torch's results without one), but the rest of the call is checked alike."""
        ns = (normalized_shape,) if type(normalized_shape) is int else norm_shape(normalized_shape)
        arrays = _arrays_of("input", input)
        x = self.check_array("input", input, None, None, arrays=arrays)
        dt = arrays.dtype_name(x)
        shape = tuple(x.shape)
        if len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
            raise ValueError(f"normalized_shape {list(ns)} is not a suffix of the input's shape {list(shape)}")
        w = None if weight is None else self.check_array("weight", weight, dt, ns, arrays=arrays)
        b = None if bias is None else self.check_array("bias", bias, dt, ns, arrays=arrays)
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

    def check_stats(self, name: str, t, arrays, x, ns: tuple[int, ...]):
        t = self.check_array(name, t, None, None, allowed=["float32", arrays.dtype_name(x)], arrays=arrays)
        want = stats_shape(tuple(x.shape), ns)
        if math.prod(t.shape) != math.prod(want):
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(want)}")
        return t

    # -- the ops' ATen-style entry points (``boo_build.ops``): bundle.native_layer_norm(...) & co.
    def __getattr__(self, name: str):
        fn = None if name.startswith("_") else ops.entry_point(name)
        if fn is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return types.MethodType(fn, self)  # as a method: its name and docstring show

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(ops.entry_points()))


def _reshaped(arrays, specs) -> tuple:
    """Each array viewed in its spec's shape (``KernelSignature.inputs()``/``outputs()``):
    the same elements, contiguous, so a view (torch or numpy)."""
    return tuple(a if tuple(a.shape) == tuple(shape) else a.reshape(shape) for a, (_, shape, _) in zip(arrays, specs))


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
    check_runtime(archive.bundle_index, archive.path)
    target, dev = _select_target(archive.bundle_index, device, archive.path)
    return Bundle(archive, target, dev, fallback)


__all__ = [
    "DEFAULT_MAX_SIZE", "DYNAMIC_FORMAT_VERSION", "FALLBACKS", "FORMAT", "FORMAT_VERSION", "INDEX_NAME",
    "READABLE_VERSIONS", "RUNTIME_FIELD", "Archive", "Bundle", "BundleError", "BundleFormatError",
    "BundleIntegrityError", "KernelNotFound", "NoCompatibleDevice", "RuntimeTooOld", "UntestedRuntimeWarning",
    "check_index", "check_runtime", "iree_release", "nearest_keys", "open_bundle", "read_archive", "sha256_hex",
    "verify_members",
    "_family_key",  # loader/nn.py's import (lookup.py has it)
]
