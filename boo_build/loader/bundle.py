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

A kernel whose index entry names a ``mode`` (another driver of the same
device the build measured faster: ``local-sync`` on a ``local-task`` CPU
target) runs on that driver's device (``device_of``).

Hot path: a repeated call does the least work: a torch call whose key
((type, dtype, shape, device) of each array and the scalars) was checked
once runs its kernel, or torch's op, from the key alone (``call_checks.py``'s
``CallPlan`` and its ``Route``, made by ``Bundle.torch_route``), a hit counted
by a list append, a layer's weight and bias imports kept by the runner.

Around it: ``bundle_file.py`` reads the file, a part at a time (``archive.py``
reads a whole one), ``format.py`` and ``split_format.py`` type its index,
``target_choice.py`` picks the target and device, ``versions.py`` checks the
runtime, ``lookup.py`` finds the kernel for a call, ``call_checks.py`` checks
its arguments, ``tensors.py`` handles a call's torch tensors or numpy arrays.
"""

from __future__ import annotations

import functools
import os
import threading
import types
from collections import Counter, defaultdict
from typing import Any, Callable, NamedTuple

from .. import ops
from ..errors import SignatureError
from ..signature import KernelSignature
from ..targets import CPU_DRIVERS, Target
from . import calls, entries

# The format, archive, errors, device choice and runtime check live in their
# own modules; their public names are re-exported here (and by the package).
from .archive import DEFAULT_MAX_SIZE, sha256_hex
from .bundle_file import BundleFile, open_bundle_file
from .call_checks import CallChecks, Route
from .errors import BundleIntegrityError
from .frames import ZSTD_MAGIC
from .lookup import BundledKernel, KernelTable
from .memo import MEMO_LIMIT, remember
from .target_choice import select_target as _select_target
from .tensors import TorchArrays, arrays_of
from .tokens import bundle_for, bundle_token
from .torch_counts import TorchCounts
from .versions import check_runtime

FALLBACKS = (None, "eager")
_RECURRING = ("weight", "bias")  # kernel inputs whose imports a runner keeps (KernelRunner.cache_inputs)


class KernelRoute(NamedTuple):
    """Where calls of one signature go (``Bundle._route``)."""
    sig: KernelSignature
    found: tuple | None  # (the kernel, the signature it runs as), or None: no kernel
    views: tuple | None  # the views a dynamic kernel of another rank needs (``_views_of``)
    to_eager: bool  # whether torch tensors go to torch's op (the build found it faster)


class _EntryPoint:
    """A built-in op's entry point on ``Bundle``'s class body, its module (``entries``)
    imported when first read (``import boo_build.loader`` imports no op module). The first
    read puts the op's function itself on the class in its place (a cache: later
    calls bind it as any method, at no extra cost)."""

    def __init__(self, op: str):
        self.op = op
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        owner = owner or type(obj)
        fn = entries.of_op(self.op)[self.name]
        setattr(owner, self.name, fn)
        return fn if obj is None else types.MethodType(fn, obj)


# -------------------------------------------------------------------- bundle
class Bundle:
    """An opened bundle bound to one target and one device. Use ``open_bundle``.

    A kernel whose entry names a ``mode`` (the build found it faster run by
    another driver of the same device: ``local-sync``, inline on the calling
    thread, on a ``local-task`` CPU target) runs on that driver's device; the
    others on the bundle's. One process may so hold both CPU devices.

    A kernel whose entry says ``prefer_eager`` (torch eager beat it on the build
    machine) is not run for torch tensors by the ATen-style entry points: torch's
    op runs, counted in ``stats()`` as ``eager``; numpy arrays and ``run`` still
    run the kernel. ``prefer_eager=False`` runs the kernels everywhere (``vs_compiled``: ``with_options``)."""

    def __init__(self, source: BundleFile, target: Target, device: Any, fallback: str | None = None,
                 prefer_eager: bool = True):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        self._source = source  # what is read of the file, and when (bundle_file.py)
        self.path = source.path
        self.target = target
        self.device = device  # devices.DeviceInfo
        self.fallback = fallback
        self.prefer_eager, self.vs_compiled = bool(prefer_eager), False  # vs_compiled: the backend's view
        self._device_type = target.torch_device_type  # torch's: "cpu" (CPU, Vulkan: staged), "cuda" (HIP, CUDA)
        self._lock = threading.RLock()
        self._devices: dict[str, Any] = {}  # opened runtime devices by URI (views share the dict)
        # which kernel serves a call (lookup.py); _kernels: the runnable ones by key
        self._table = KernelTable(source.routes(target.name), target.name)
        self._kernels = self._table.kernels
        self._stats: dict[str, dict[str, int]] = defaultdict(lambda: {"hits": 0, "misses": 0, "eager": 0})
        self._stats_lock = threading.Lock()
        # keys of kernel calls not yet added to _stats: list.append is atomic, so a
        # call counts without taking the lock; folded in under it (_fold_hits)
        self._hits: list[str] = []
        self._eager_hits: list[str] = []  # the same, for calls routed to torch eager
        self._torch_counts = TorchCounts()  # calls a module sent to torch itself (torch_path.py)
        # per-call memos (dict get/set are atomic under the GIL; a race only recomputes)
        self.checks = CallChecks(self._device_type, device.uri, target.name, self.torch_route)
        self._specs: dict[tuple, tuple] = {}  # run(): (key, first argument's shape) -> argument specs
        self._routes: dict[int, KernelRoute] = {}  # dispatch(): id(signature) -> its route

    # ------------------------------------------------------------ description
    @property
    def name(self) -> str | None:
        return self._source.header.name

    @property
    def version(self) -> str | None:
        return self._source.header.version

    @property
    def index(self) -> dict[str, Any]:
        """The whole index as read (a format-5 bundle's records, read when first asked for)."""
        return self._source.records()[0]

    def keys(self) -> list[str]:
        """Signature keys runnable on this bundle's target."""
        return sorted(self._kernels)

    def signatures(self) -> list[KernelSignature]:
        return [self._kernels[k].sig for k in self.keys()]

    def __contains__(self, sig: KernelSignature | str) -> bool:
        return str(sig) in self._kernels

    def info(self) -> dict[str, Any]:
        index, ix = self._source.records()
        per_target = ix.counts()
        kernels = {key: {tname: ({"status": te.status.value, "selected": te.selected,
                                  **({"mode": te.mode} if te.mode else {}),
                                  **({"prefer_eager": True} if te.prefer_eager else {})} if te.is_available
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
            "provenance": index.get("provenance", {}),
            "targets": {n: {**t.to_json(), **per_target[n]} for n, t in sorted(ix.targets.items())},
            "kernels": kernels,
        }

    def stats(self, totals: bool = False) -> dict[str, dict[str, int]] | dict[str, int]:
        """Calls per signature key: {"hits": ran a bundle kernel, "misses": fell back to
        eager (no kernel), "eager": ran torch's op where the build found it faster}.
        A hit counts under the kernel that ran: a dynamic kernel's key (names in
        capitals) for every call it served. A call no signature describes (an eps or
        a dtype no kernel takes, ``unserved``) misses under ``"{op}:{reason}={value}"``:
        ``layer_norm:eps=-0.5``, ``rms_norm:dtype=float64``. ``totals=True``:
        {"static_hits", "dynamic_hits", "misses", "eager"} over all keys."""
        with self._stats_lock:
            self._fold_hits()
            per_key = {k: dict(v) for k, v in self._stats.items()}
            self._torch_counts.add_to(per_key)
            per_key = dict(sorted(per_key.items()))
        if not totals:
            return per_key
        out = {"static_hits": 0, "dynamic_hits": 0, "misses": 0, "eager": 0}
        for key, v in per_key.items():
            k = self._kernels.get(key)
            out["dynamic_hits" if k is not None and k.sig.is_dynamic else "static_hits"] += v["hits"]
            out["misses"] += v["misses"]
            out["eager"] += v["eager"]
        return out

    def reset_stats(self) -> None:
        with self._stats_lock:
            del self._hits[:len(self._hits)]
            del self._eager_hits[:len(self._eager_hits)]
            self._stats.clear()
            self._torch_counts.reset()

    # A bundle is a shared, read-only resource: copies of modules share it.
    def __copy__(self) -> "Bundle":
        return self

    def __deepcopy__(self, memo) -> "Bundle":
        return self

    def with_fallback(self, fallback: str | None) -> "Bundle":
        """This bundle with another ``fallback`` (as in ``open_bundle``): the same
        kernels, loaded modules, device and ``stats()``; only what a call with no
        kernel does differs."""
        return self.with_options(fallback=fallback)

    def with_options(self, *, fallback: Any = ..., prefer_eager: Any = ..., vs_compiled: Any = ...) -> "Bundle":
        """This bundle with another ``fallback``, ``prefer_eager`` or ``vs_compiled`` (routed by the verdict against
        torch.compile: the compile backend's view) (``...``: as this one's), its kernels, modules and ``stats()`` shared."""
        fallback = self.fallback if fallback is ... else fallback
        prefer_eager = self.prefer_eager if prefer_eager is ... else bool(prefer_eager)
        vs_compiled = self.vs_compiled if vs_compiled is ... else bool(vs_compiled)
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if fallback == self.fallback and prefer_eager == self.prefer_eager and vs_compiled == self.vs_compiled:
            return self
        view = object.__new__(Bundle)  # shares the devices, runners, memos and counts, not the bound entry points
        view.__dict__.update({k: v for k, v in self.__dict__.items() if not isinstance(v, types.MethodType)})
        view.fallback = fallback
        if (prefer_eager, vs_compiled) != (self.prefer_eager, self.vs_compiled):  # the routes decide on them
            view.prefer_eager, view.vs_compiled = prefer_eager, vs_compiled
            view._routes = {}
            view.checks = CallChecks(self._device_type, self.device.uri, self.target.name, view.torch_route)
        return view

    @property
    def device_type(self) -> str:
        """torch's device type of the tensors its calls take: "cpu" (CPU targets, and Vulkan ones,
        whose host memory the loader stages), or "cuda" (HIP and CUDA alike)."""
        return self._device_type

    @functools.cached_property
    def sha256(self) -> str:
        """The bundle file's sha256 (hex), hashed when first asked (what ``torch.compile``'s
        backend keys on; ``BundleFormatError`` if the file changed since it was opened)."""
        return self._source.file_sha256()

    def serving(self, sig: KernelSignature) -> BundledKernel | None:
        """The kernel a call of static ``sig`` runs on (``None``: none; ``BundledKernel.eager_for``
        says whether torch tensors go to torch's op instead where ``prefer_eager``)."""
        found = self._table.resolve(sig)
        return None if found is None else found[0]

    def torch_counter(self, sig: KernelSignature) -> Callable[[], Any] | None:
        """Where torch tensors of static ``sig``'s calls go to torch's op (a kernel serves
        it and the build found torch eager faster there, ``prefer_eager``): a function
        counting one such call in ``stats()`` (as ``eager``); else None."""
        _, found, _, to_eager = self._route(sig)
        if found is None or not to_eager:
            return None
        with self._stats_lock:
            return self._torch_counts.counter(found[0].key)

    def always_torch(self, key: str) -> bool:
        """Whether torch tensors of every call kernel ``key`` serves go to torch's op
        (``prefer_eager``, and the build found torch eager faster at every size it timed)."""
        k = self._kernels.get(key)
        return k is not None and self.prefer_eager and k.always_eager

    def __repr__(self) -> str:
        return (f"<Bundle {self.name}-{self.version} target={self.target.name} "
                f"device={getattr(self.device, 'uri', self.device)} kernels={len(self._kernels)}>")

    # ----------------------------------------------------------------- loading
    def _device_handle(self, uri: str | None = None):
        """The runtime device at ``uri`` (default: the bundle's), opened once."""
        uri = uri or self.device.uri
        dev = self._devices.get(uri)
        if dev is None:
            with self._lock:
                dev = self._devices.get(uri)
                if dev is None:
                    from .hal import open_device

                    dev = self._devices[uri] = open_device(uri)
        return dev

    def _uri_for(self, k: BundledKernel) -> str:
        """Where ``k`` runs: its entry's mode, a driver of the same device (a CPU
        driver on a CPU target opened on its own driver); else the bundle's
        device (a bundle opened on ``local-sync`` runs everything there; a mode
        this loader does not know runs on the target's driver, the same vmfb)."""
        if (k.mode and k.mode != self.device.uri and self.target.is_cpu and k.mode in CPU_DRIVERS
                and self.device.uri == self.target.driver):
            return k.mode
        return self.device.uri

    def device_of(self, key: KernelSignature | str) -> str:
        """The device URI kernel ``key`` runs on (``local-task``, ``local-sync``, ``hip://0``...)."""
        k = self._lookup(str(key))
        if k is None:
            raise self._table.not_found(str(key))
        return self._uri_for(k)

    def _runner(self, k: BundledKernel):
        if k.runner is not None:
            return k.runner
        with self._lock:
            if k.runner is None:
                data = self._source.module(k.member, k.frame, k.size)
                if not k.verified:
                    actual = sha256_hex(data)
                    if actual != k.sha256:
                        raise BundleIntegrityError(k.member, k.sha256, actual, self.path)
                    k.verified = True
                from .invoke import KernelRunner

                runner = KernelRunner(self._device_handle(self._uri_for(k)), data, k.function)
                # a layer's parameters come again call after call: keep their imports
                runner.cache_inputs([i for i, (n, _, _) in enumerate(k.sig.inputs()) if n in _RECURRING])
                k.runner = runner
        return k.runner

    def load(self, key: KernelSignature | str):
        """Load (and checksum) one kernel now rather than on first call."""
        k = self._lookup(str(key))
        if k is None:
            raise self._table.not_found(str(key))
        return self._runner(k)

    def _lookup(self, key: str) -> BundledKernel | None:
        return self._kernels.get(key)

    def _count(self, key: str, kind: str) -> None:
        with self._stats_lock:
            self._stats[key][kind] += 1

    def _fold_hits(self) -> None:
        """Add the pending hits to ``_stats`` (under ``_stats_lock``). Other threads
        only append, so deleting the first ``n``, those counted, loses none."""
        for hits, kind in ((self._hits, "hits"), (self._eager_hits, "eager")):
            n = len(hits)
            if n:
                for key, c in Counter(hits[:n]).items():
                    self._stats[key][kind] += c
                del hits[:n]

    # ----------------------------------------------------------------- running
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
        specs = self._specs_of(k, args)
        if len(args) != len(specs):
            raise TypeError(f"kernel {key} takes {len(specs)} arguments "
                            f"({', '.join(s[0] for s in specs)}), got {len(args)}")
        first = specs[0][0]
        arrays = arrays_of(first, args[0])
        check = self.checks.check_array
        args = tuple(check(n, a, d, s, arrays=arrays, first=first) for (n, s, d), a in zip(specs, args))
        return self._invoke(k, args)

    def _specs_of(self, k: BundledKernel, args) -> tuple:
        """``run``'s argument specs for kernel ``k`` (a dynamic one's bound to the
        first argument's shape), memoized."""
        shape = tuple(args[0].shape) if k.sig.is_dynamic and args and hasattr(args[0], "shape") else None
        specs = self._specs.get((k.key, shape))
        if specs is None:
            inputs = k.sig.inputs()
            if shape is not None:
                try:
                    inputs = k.sig.bind(shape).inputs()
                except SignatureError as e:
                    raise ValueError(f"{inputs[0][0]} has shape {list(shape)}: {e}") from None
            specs = tuple(inputs)
            remember(self._specs, (k.key, shape), specs)
        return specs

    def _invoke(self, k: BundledKernel, args):
        out = (k.runner or self._runner(k))(*args)  # KernelRunner is thread-safe (a pool of VM contexts)
        self._pending(self._hits, k.key)
        return tuple(out)

    def _counter(self, hits: list, key: str) -> Callable[[], None]:
        """``_pending(hits, key)`` as one closure, for a route's every call."""
        append, fold = hits.append, self._fold_pending

        def count() -> None:
            append(key)
            if len(hits) > MEMO_LIMIT:
                fold()
        return count

    def _fold_pending(self) -> None:
        with self._stats_lock:
            self._fold_hits()

    def _pending(self, hits: list, key: str) -> None:
        """Count a call under ``key`` in ``hits`` (``_hits`` or ``_eager_hits``), folded
        into ``_stats`` once that many are pending."""
        self._counter(hits, key)()

    def torch_route(self, op, sig: KernelSignature, stats: tuple | None) -> Route | None:
        """How later torch calls of a key the checks passed run: torch's op as
        ``op.eager_route`` decides it, where the build found torch eager faster,
        else a call of the kernel's runner; None where neither (no kernel; a
        forward signature's route asked for a backward call). ``stats``: a
        backward call's checked statistics."""
        _, found, views, to_eager = self._route(sig)
        if found is None:
            return None
        if stats is None and not sig.is_forward:
            return None  # a backward call's own plan (prepare_backward's) carries its route
        k, ks = found
        if to_eager:
            return Route(k.key, _counted(op.eager_route(sig, stats), self._counter(self._eager_hits, k.key),
                                         stats is None), True)
        run, count, key = self._runner(k), self._counter(self._hits, k.key), k.key
        if stats is None:
            return Route(key, calls.kernel_forward(run, count, views), False)
        shape, dtype = self.checks.stats_layout(ks)
        fixes = tuple((None if tuple(t.shape) == shape else shape,
                       None if TorchArrays.dtype_name(t) == dtype else dtype) for t in stats)
        return Route(key, calls.kernel_backward(run, count, views, fixes, TorchArrays.cast, ks.takes_weight,
                                                       sig.mask, op.grads), False)

    def _route(self, sig: KernelSignature) -> KernelRoute:
        """Where ``sig``'s calls go, memoized."""
        route = self._routes.get(id(sig))  # by identity: the signatures prepare() memoizes recur
        if route is None or route.sig is not sig:
            found = self._table.resolve(sig)
            route = KernelRoute(sig, found, None if found is None else _views_of(sig, found[1]),
                                found is not None and self.prefer_eager and found[0].torch_for(sig, self.vs_compiled))
            remember(self._routes, id(sig), route)  # holds sig: its id is not reused while the entry lives
        return route

    def dispatch(self, sig: KernelSignature, arrays, make_args, eager, eager_args):
        """Run ``sig``'s kernel on ``make_args(kernel signature)``, or torch's
        ``eager(*eager_args())`` (the fallback; numpy arrays shared with torch).
        A dynamic kernel gets the arguments viewed in the shapes it runs as
        (leading dims flattened where it takes another rank), and gives its
        results back in the call's shapes."""
        _, found, views, to_eager = self._route(sig)
        if found is not None:
            k, ks = found
            if to_eager and arrays.name == "torch.Tensor":
                self._pending(self._eager_hits, k.key)
                return arrays.eager(eager, eager_args(), f"kernel {k.key}")
            if views is None:
                return self._invoke(k, make_args(ks))
            return calls.view_as(self._invoke(k, calls.view_as(make_args(ks), views[0])), views[1])
        if self.fallback == "eager":
            self._count(sig.key, "misses")
            return arrays.eager(eager, eager_args(), f"no kernel {sig.key} for target {self.target.name}")
        raise self._table.not_found(sig.key)

    def unserved(self, call: calls.Unserved, eager, eager_args):
        """A call no kernel can serve that torch's op may take
        (``calls.Unserved``: an eps the signatures refuse, a dtype no kernel takes). With
        ``fallback="eager"``, torch's ``eager(*eager_args())``, counted in ``stats()`` as a miss under
        ``call.key`` (``"{op}:{reason}={value}"``), unless another check refused the call (``call.refusal``,
        raised) or torch's op refuses it (the loader's error, naming torch's reason too). Without the fallback,
        the loader's error (``call.error``)."""
        if self.fallback != "eager":
            raise call.error from None
        if call.refusal is not None:
            raise call.refusal from None
        try:
            out = call.arrays.eager(eager, eager_args(), str(call.error))
        except (RuntimeError, TypeError, ValueError) as e:
            raise type(call.error)(f"{call.error}; torch's op refuses the call too: {e}") from e
        self._count(call.key, "misses")
        return out

    # -- the ops' ATen-style entry points (``boo_build.ops``), as methods: the built-in ops' here, their op modules
    # imported on first use (``_EntryPoint``; torch by their first torch call); an op registered later is found in
    # the registry (``__getattr__``)
    native_layer_norm = _EntryPoint("layer_norm")
    native_layer_norm_backward = _EntryPoint("layer_norm")
    fused_rms_norm = _EntryPoint("rms_norm")
    fused_rms_norm_backward = _EntryPoint("rms_norm")
    add_layer_norm = _EntryPoint("layer_norm")  # the fused residual forms: x + residual, then the norm
    add_layer_norm_backward = _EntryPoint("layer_norm")
    add_rms_norm = _EntryPoint("rms_norm")
    add_rms_norm_backward = _EntryPoint("rms_norm")
    native_group_norm = _EntryPoint("group_norm")
    native_group_norm_backward = _EntryPoint("group_norm")

    # -- torch custom ops take a bundle as a token (``tokens.py``): the ops' modules
    # reach the registry through these, never by importing the loader
    def token(self) -> str:
        """The token naming this bundle in the ``boo::`` custom ops (``custom_ops.bundle_token``)."""
        return bundle_token(self)

    by_token = staticmethod(bundle_for)  # the open bundle a token names ("": the default bundle)

    def __getattr__(self, name: str):
        fn = None if name.startswith("_") else entries.entry_point(name)
        if fn is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        method = self.__dict__[name] = types.MethodType(fn, self)  # as a method: its name and docstring show;
        return method  # kept, so that the next call finds it without __getattr__

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(entries.all_entry_points()))


def _counted(run: Callable, count: Callable[[], None], forward: bool) -> Callable:
    """``run`` calling ``count()`` after each call that returns (torch's op on a routed
    key); its arguments named, not packed: a forward route's (x, w, b), a backward's
    (grad_out, x, stats, w, b)."""
    if forward:
        def counted_forward(x, w, b):
            out = run(x, w, b)
            count()
            return out
        return counted_forward

    def counted_backward(gy, x, stats, w, b):
        out = run(gy, x, stats, w, b)
        count()
        return out
    return counted_backward


def _views_of(sig: KernelSignature, ks: KernelSignature) -> tuple | None:
    """(argument views, result views) where ``sig``'s call runs as ``ks`` (a dynamic
    kernel of another rank: leading dims flattened): per position the shape to view
    an array in, None where it has it (statistics come in the kernel's layout
    already: ``stats_layout``); None when no array needs one. The arrays are
    contiguous, so these are views."""
    if ks is sig:
        return None
    stats = ops.get(sig.op).stats
    want = [s for _, s, _ in ks.inputs()]
    ins = calls.view_shapes([w if n in stats else s for (n, s, _), w in zip(sig.inputs(), want)], want)
    outs = calls.view_shapes([s for _, s, _ in ks.outputs()], [s for _, s, _ in sig.outputs()])
    return None if ins is None and outs is None else (ins, outs)


# ------------------------------------------------------------------- opening
def open_bundle(path: str | os.PathLike, device: Any = None, fallback: str | None = None, *,
                max_size: int = DEFAULT_MAX_SIZE, prefer_eager: bool = True, sha256: str | None = None,
                name: str | None = None) -> Bundle:
    """Open a bundle for the best device present, or for ``device``.

    ``device``: None (a HIP GPU with a gfx arch the bundle holds, else the CPU
    at a level it supports), a device URI ("local-task", "hip://0", ...) or a
    ``devices.DeviceInfo``. ``fallback``: None (a missing kernel raises
    ``KernelNotFound``; an eps or dtype no kernel takes, the argument error) or
    "eager" (run torch's op instead, counted in ``stats()`` as a miss).
    ``max_size`` bounds the decompressed size.
    ``prefer_eager``: whether torch tensors go to torch's op for kernels the
    build found slower than torch eager (``Bundle``); False runs the kernels.

    ``path`` may also be a lock file (``name`` picks one of its bundles), an
    ``http(s)://`` URL pinned by ``sha256``, or a ``file://`` URL: a locked or
    downloaded bundle comes from the verified cache (``remote.py``, docs/store.md).
    ``sha256`` with a plain path checks the file against it.

    Raises ``RuntimeTooOld`` if this process's iree-base-runtime is older
    than the oldest known to load the bundle's modules (``check_runtime``).
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    # A lock file, a URL or a pin becomes a verified local file first; a plain
    # bundle file (zstd's magic number first) never imports remote.py.
    try:
        with open(path, "rb") as f:
            plain = f.read(4) == ZSTD_MAGIC
    except (OSError, TypeError, ValueError):
        plain = False
    if not plain or sha256 is not None or name is not None:
        from .remote import resolve

        path = resolve(path, sha256=sha256, name=name, max_size=max_size)
    source = open_bundle_file(path, max_size)
    check_runtime(source.header, source.path)
    target, dev = _select_target(source.header, device, source.path)
    return Bundle(source, target, dev, fallback, prefer_eager)


__all__ = ["Bundle", "FALLBACKS", "open_bundle"]
