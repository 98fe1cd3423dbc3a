"""A ``torch.compile`` backend that runs a bundle's norms: ``backend="boo"``.

    model = torch.compile(model, backend="boo", options={"bundle": "norms-1.0.0.tar.zst"})

(registered through the ``torch_dynamo_backends`` entry point: no import needed),
or, as an object that also tells what it did, ``Backend(bundle)``.

Where it rewrites: the graph Dynamo captured, before AOT autograd and Inductor.
There every spelling of the three norms is still one node (``nn.LayerNorm``,
``nn.RMSNorm`` and ``nn.GroupNorm`` are inlined to ``F.layer_norm`` & co.;
``torch.layer_norm``, ``F.rms_norm``'s ``torch.rms_norm`` and ATen's ops are
nodes of their own). Later, AOT autograd has already decomposed RMS norm on the
CPU, and Inductor's decompositions turn layer norm into ``var_mean``/``rsqrt``.
A norm the bundle serves becomes a call of its ``boo::`` custom op
(``custom_ops``): AOT autograd then traces the op's autograd formula, so the
backward graph holds ``boo::<op>_backward`` with the output mask the graph's
``requires_grad`` gives (frozen weights: the input-gradient kernel), and a
graph traced under ``no_grad`` or ``inference_mode`` holds the forward op only.
The graph then goes to the inner backend (Inductor unless ``inner=``), which
compiles the rest and leaves the ops opaque. Nothing is added to the graph
Dynamo traced, so no graph break either. The pass and its records are
``norm_pass.py``; this module is the backend around it (options, bundles, ``explain``).

Which norms (decided once per graph, at compile time, no per-call route):

* the bundle holds every kernel the norm needs on its device (the forward,
  and in a training graph the combined backward of the gradients it needs),
  for its shape, dtype, affine form and eps; with symbolic sizes
  (``dynamic=True``, marked dims), a dynamic kernel: a static one serves one size;
* and, with ``prefer_eager`` (the default), the bundle's records say each of
  those kernels beat what it replaces: torch.compile's code for the norm (the
  index's ``vs_compiled``, at the traced size for kernels timed at several), or,
  for a kernel with no such verdict (a bundle built before it, the build's compile
  budget spent, a compile that failed), torch eager (``prefer_eager`` in the index),
  the decision's detail saying so.

A served norm whose input is an add of two tensors (a residual: ``boo_build.residual_adds``
says which adds fuse) runs, with the add, the fused residual form's kernels where they are held
and (``prefer_eager``) win, in one call (``fuse_adds=False``: never).

Elsewhere the node stays as Dynamo traced it, and the inner backend compiles it.
``prefer_eager=False`` runs the kernels wherever the bundle holds them.
``fallback=None`` raises ``NormNotServed`` at compile time for a norm the
bundle cannot serve, naming it (a norm left for torch eager's speed is not an
error).

At run time a backend cannot add guards: a size outside a dynamic kernel's
bounds reaches the op, and runs torch eager's op (counted as a miss in
``stats()``) with the default ``fallback="eager"`` (the loader's check, then
torch eager, not the graph's fused code), or raises ``KernelNotFound`` with
``fallback=None``. Inside a kernel's bounds the bundle's own per-size decisions
still apply, against torch.compile where the build timed it (the graph's code is
gone by then: torch eager's op runs a size torch.compile's code won), else against
torch eager (``Bundle.with_options(vs_compiled=True)``).

The graph holds the bundle as a token naming its file's sha256, target, device
and these options (``bundle_token``), so Inductor's caches never reuse a graph
compiled for another bundle; the token stays valid while the bundle is open
(a path given here is opened once per process and kept: a documented cache).

Imports torch.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from . import custom_ops, tokens
from .bundle import FALLBACKS, Bundle, open_bundle
from .norm_pass import NormDecision, NormNotServed, Runs, Why, rewrite  # the user-facing records, named here too

log = logging.getLogger(__name__)


# ------------------------------------------------------------- the bundles
_OPENED: dict[tuple, Bundle] = {}  # a cache: bundles opened from a path given here, kept for the process
_VIEWS: "weakref.WeakKeyDictionary[Bundle, dict[tuple, Bundle]]" = weakref.WeakKeyDictionary()  # a cache
_cache_lock = threading.Lock()


def _opened(path: str | os.PathLike, device: Any) -> Bundle:
    """``open_bundle(path, device)``, once per file (its path, size and time) and device."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
        key: tuple = (os.path.realpath(p), st.st_size, st.st_mtime_ns, str(device))
    except OSError:  # a lock file's name, a URL: open_bundle says what is wrong, or resolves it
        key = (p, str(device))
    with _cache_lock:
        b = _OPENED.get(key)
        if b is None:
            b = _OPENED[key] = open_bundle(p, device=device)
        return b


def _view(bundle: Bundle, fallback: str | None, prefer_eager: bool) -> tuple[Bundle, str]:
    """(the bundle as the backend runs it, its token): ``bundle`` with these options
    (kept while ``bundle`` lives), named by its sha256, target, device and options."""
    sha = bundle.sha256  # hashed once, before any view is made: the views copy it
    with _cache_lock:
        views = _VIEWS.setdefault(bundle, {})
        view = views.get((fallback, prefer_eager))
        if view is None:
            view = views[(fallback, prefer_eager)] = bundle.with_options(fallback=fallback, prefer_eager=prefer_eager,
                                                                         vs_compiled=True)
    want = (f"{view.name}-{view.version}@{view.target.name}/{view.device.uri}#sha256:{sha}"
            f"{'' if prefer_eager else '+kernels'}{'' if fallback == 'eager' else '+strict'}")
    # the same file opened again (same device and options) takes the token over: either serves the graphs
    # compiled with it, and the latest bundle's stats() count their calls
    return view, tokens.bundle_token(view, want, rebind=True)


# ------------------------------------------------------------- the backend
_OPTIONS = ("bundle", "prefer_eager", "fallback", "inner", "device", "auto", "fuse_adds")


class Backend:
    """``torch.compile(model, backend=Backend(bundle))``: the ``"boo"`` backend as an
    object that keeps what it did.

    ``bundle``: a ``Bundle``, a bundle path (or lock file, opened once per
    process), or None for the default bundle (``set_default_bundle``,
    ``BOO_BUNDLE``); ``device``: where a path is opened (default: the best).
    ``prefer_eager``: run a norm's kernels only where the bundle's records say
    they beat torch.compile's code (torch eager's where the build did not time
    torch.compile; False: wherever held). ``fallback``: "eager" (a norm
    not served keeps the graph's code; a size outside a dynamic kernel's bounds
    runs torch's op) or None (``NormNotServed`` at compile time, ``KernelNotFound``
    at run time). ``inner``: the backend that compiles the rewritten graph, a
    name (``torch._dynamo.list_backends()``) or a callable. ``auto``: probe the
    modules that may be norms written by hand (a weight and an eps: Llama's, Gemma's,
    T5's... RMS norms) and serve those whose math is a norm's, and the norms
    written inline in a forward (``inline_norms``) (False: only norms spelled as
    one node: torch's modules, functions and ATen ops). ``fuse_adds``: a norm whose input
    is an add of two tensors (a residual) runs the fused residual form's kernels, the add
    and the norm in one call, where the bundle holds them (and they win, with
    ``prefer_eager``); False, or ``BOO_FUSE_ADDS=0`` in the environment where not given:
    the add stays the graph's (``residual_adds`` says which adds fuse).

    ``decisions``: every norm of every graph compiled, and what runs it;
    ``graphs``: graphs compiled; ``stats()``: the serving bundle's calls."""

    def __init__(self, bundle: Bundle | str | os.PathLike | None = None, *, prefer_eager: bool = True,
                 fallback: str | None = "eager", inner: str | Callable = "inductor", device: Any = None,
                 auto: bool = True, fuse_adds: bool | None = None):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if not isinstance(prefer_eager, bool):
            raise TypeError(f"prefer_eager must be True or False, got {prefer_eager!r}")
        if bundle is not None and not isinstance(bundle, (Bundle, str, os.PathLike)):
            raise TypeError(f"bundle must be a Bundle, a bundle path or None (the default bundle), "
                            f"got {type(bundle).__name__}")
        if not isinstance(auto, bool):
            raise TypeError(f"auto must be True or False, got {auto!r}")
        if fuse_adds is None:
            fuse_adds = os.environ.get("BOO_FUSE_ADDS", "1").strip() not in ("0", "false", "no", "off")
        if not isinstance(fuse_adds, bool):
            raise TypeError(f"fuse_adds must be True or False, got {fuse_adds!r}")
        if not (isinstance(inner, str) or callable(inner)):
            raise TypeError(f"inner must be a backend name or a callable, got {inner!r}")
        self._given, self.device = bundle, device
        self.prefer_eager, self.fallback, self.inner, self.auto = prefer_eager, fallback, inner, auto
        self.fuse_adds = fuse_adds
        self._by_graph: dict[str, list[NormDecision]] = {}  # Dynamo's compile id -> its graph's norms
        self._served: tuple[Bundle, str] | None = None
        self._lock = threading.Lock()

    def serving(self) -> tuple[Bundle, str]:
        """(the bundle the compiled graphs run, the token naming it), resolved on first use."""
        with self._lock:
            if self._served is None:
                given = self._given
                base = (custom_ops.default_bundle() if given is None else given if isinstance(given, Bundle)
                        else _opened(given, self.device))
                self._served = _view(base, self.fallback, self.prefer_eager)
            return self._served

    def _inner(self) -> Callable:
        if callable(self.inner):
            return self.inner
        from torch._dynamo import lookup_backend

        return lookup_backend(self.inner)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
        bundle, token = self.serving()
        found = rewrite(gm, bundle, token, self.prefer_eager, self.fallback, self.auto, self.fuse_adds)
        for d in found:
            log.info("boo backend: %s", d)
        from torch._guards import CompileContext

        with self._lock:
            # a restarted analysis compiles the frame again under the same id: its norms replace the first try's
            cid = CompileContext.current_compile_id()
            self._by_graph[str(cid) if cid is not None else f"graph {len(self._by_graph)}"] = found
        return self._inner()(gm, example_inputs)

    @property
    def decisions(self) -> list[NormDecision]:
        """Every norm of every graph compiled, and what runs it."""
        with self._lock:
            return [d for found in self._by_graph.values() for d in found]

    @property
    def graphs(self) -> int:
        """Graphs compiled (a restarted analysis counted once)."""
        with self._lock:
            return len(self._by_graph)

    def stats(self, totals: bool = False):
        """The serving bundle's ``stats()`` (counted in the bundle it was made from too)."""
        return self.serving()[0].stats(totals)

    def __repr__(self) -> str:
        return (f"<boo Backend bundle={self._given!r} prefer_eager={self.prefer_eager} fallback={self.fallback!r} "
                f"inner={self.inner!r}>")


def _check_options(options: Mapping[str, Any], what: str) -> None:
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"{what} has no option {', '.join(map(repr, unknown))}: it takes {', '.join(_OPTIONS)}")


def boo(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Mapping[str, Any] | None = None,
        **kwargs: Any):
    """The ``"boo"`` backend: ``torch.compile(model, backend="boo", options={...})``,
    ``options`` as ``Backend``'s arguments (``bundle``, ``prefer_eager``,
    ``fallback``, ``inner``, ``device``, ``auto``, ``fuse_adds``)."""
    if kwargs:
        raise TypeError(f"backend 'boo' takes options={{...}}, not {', '.join(kwargs)}= (mode= is Inductor's: "
                        "torch.compile(..., backend='boo', options={'inner': ...}))")
    opts = dict(options or {})
    _check_options(opts, "backend 'boo'")
    return Backend(**opts)(gm, example_inputs)


# ------------------------------------------------------------- explain
@dataclass(frozen=True)
class Explanation:
    """What ``backend="boo"`` does with a model (``explain``)."""
    norms: tuple[NormDecision, ...]
    graphs: int

    @property
    def served(self) -> tuple[NormDecision, ...]:
        return tuple(d for d in self.norms if d.runs is Runs.KERNEL)

    @property
    def not_norms(self) -> tuple[NormDecision, ...]:
        """Modules that may be norms written by hand (a weight and an eps) whose probe found none a kernel
        computes, and code written inline that looks like a norm but is not one exactly (look-alikes)."""
        return tuple(d for d in self.norms if d.why is Why.FORM)

    @property
    def fused(self) -> tuple[NormDecision, ...]:
        """The norms fused with the add before them (the fused residual form's kernels)."""
        return tuple(d for d in self.norms if d.fused)

    def __str__(self) -> str:
        n, k = len(self.norms) - len(self.not_norms), len(self.served)
        head = (f"{n} norm{'s' * (n != 1)} in {self.graphs} graph{'s' * (self.graphs != 1)}: {k} run the "
                f"bundle's kernels, {n - k} the graph's code")
        fused, adds = len(self.fused), sum(bool(d.add) for d in self.norms)
        if fused:
            head += f" ({fused} fused with the add before {'them' if fused != 1 else 'it'})"
        if adds:
            head += f"; {adds} add{'s' * (adds != 1)} before a norm not fused"
        looks = sum(d.spelling.startswith("inline ") for d in self.not_norms)
        f = len(self.not_norms) - looks
        if f:
            head += f"; {f} module{'s' * (f != 1)} probed, no norm a kernel computes"
        if looks:
            head += f"; {looks} look-alike{'s' * (looks != 1)} written inline, left as written"
        return "\n".join([head] + [f"  {d}" for d in self.norms])


def explain(model: Callable, *example_inputs: Any, bundle: Bundle | str | os.PathLike | None = None,
            dynamic: bool | None = None, **options: Any) -> Explanation:
    """Every norm ``torch.compile(model, backend="boo", options={"bundle": bundle, **options})``
    finds in ``model(*example_inputs)``, where, and what runs it (the bundle's
    kernels, or the graph's code and why). Runs the model once, compiled without
    Inductor (the decisions do not depend on the inner backend); call it under
    ``torch.no_grad()`` for an inference graph's decisions."""
    _check_options(options, "explain")
    options.pop("inner", None)
    b = Backend(bundle, inner="eager", **options)
    torch.compile(model, backend=b, dynamic=dynamic)(*example_inputs)
    return Explanation(tuple(b.decisions), b.graphs)


__all__ = ["Backend", "Explanation", "NormDecision", "NormNotServed", "Runs", "Why", "boo", "explain"]
