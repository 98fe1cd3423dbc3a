"""``record_norms``: the norm calls a model makes, as the kernel calls its
swapped model (``boo_build.loader.nn.replace_norms``) will make.

Imports torch (it runs in the application's process), never the compiler,
iree-turbine, doit or the loader's runtime.

How calls are seen, all undone on exit:

* global module forward hooks see ``torch.nn.LayerNorm`` / ``RMSNorm`` /
  ``GroupNorm`` (exactly those classes: what ``replace_norms`` swaps in place) and
  the norms written by hand (Llama's, Gemma's, T5's... classes: they compute with
  elementwise ops no mode could tell from other math), found by their math as
  ``replace_norms`` finds them (``probe.norm_form``, once per module), recorded as
  the module replacing them calls its kernel; on other threads the hooks return at once;
* a ``TorchFunctionMode`` on the recording thread (torch's modes are
  thread-local: other threads are neither recorded nor slowed) sees the
  functional calls: ``F.layer_norm`` / ``F.rms_norm`` / ``F.group_norm``,
  ``torch.layer_norm`` & co. and the ATen ops called through ``torch.ops.aten`` (not those a
  recorded module makes itself). It calls the function unchanged, so results
  are bit for bit those of an unrecorded run. A torch module whose inference
  fast path is taken only without a mode (``_FAST_PATHS``) runs with the mode
  lifted, as it runs unrecorded and as the swapped model runs it;
* the same mode writes the forward's calls as a graph (``inline.EagerGraph``), matched
  when the outermost module returns by the compile backend's matcher for norms written
  inline (``boo_build.inline_norms``), each recorded as the kernel the backend calls;
* a pre-hook on the autograd node of each recorded output counts the backward
  when autograd runs it: the swapped module's custom op runs one backward
  kernel for the gradients of the inputs that required grad at the forward
  (``ctx.needs_input_grad``), so that is the mask recorded;
* a norm whose input is an add the fused residual form takes, as the compile backend's
  pass decides (``boo_build.residual_adds``, read on the same graph of the forward's calls:
  the mode sees the add where no hook does), is recorded as the fused kernel's call, its
  backward as the fused one where the sum has other users (they give it ``grad_h``), else
  as the plain one of the sum; without that graph (``auto=False``, a broken one) the plain
  kernel is recorded;
* ``torch.compiler.set_stance("force_eager")``: compiled functions run
  eagerly while recording (a compiled graph's norms are Inductor's code, which
  no hook sees); the stance is process-wide, restored on exit.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import ops as op_registry
from ..dtypes import NAMES, name_of
from ..errors import SignatureError
from ..inline_norms import InlineNorm
from ..ops.base import BIAS_GRAD, FORWARD, INPUT_GRAD, WEIGHT_GRAD
from ..probe import NormForm, is_candidate, is_torch_class, norm_form
from ..residual_adds import other_users, residual_add
from ..signature import KernelSignature
from ..torch_classes import FunctionCalls, autocast_devices, class_label, spelling_of
from .inline import EagerGraph

__all__ = ["RecordedCall", "Recording", "UnknownRmsClass", "Unrecorded", "from_misses", "record_norms", "resolve_rms_classes"]

OPS = ("layer_norm", "rms_norm", "group_norm")  # the ops recorded (their fields are what the manifest writer writes)
# Where torch (and so the swapped module's op) runs the norms in float32 under
# autocast: the kernel asked for is float32 whatever the input's dtype.
AUTOCAST_FLOAT32 = autocast_devices(tuple(a for n in op_registry.names() if (a := op_registry.get(n).autocast_aten)))


@dataclass(frozen=True)
class RecordedCall:
    """One kernel call the swapped model will make (a static signature: the
    call's exact input shape), how often, and how the model wrote it."""

    signature: KernelSignature
    calls: int
    sources: tuple[str, ...]  # "torch.nn.LayerNorm", "F.group_norm", "mypkg.LlamaRMSNorm", ...


@dataclass(frozen=True)
class Unrecorded:
    """Norm calls no kernel can serve (a float64 input, a bias without a
    weight, ...): left out of the manifest, with the reason."""

    source: str
    reason: str
    calls: int


class UnknownRmsClass(ValueError):
    """An ``rms_classes`` spelling that names no class."""


# ---------------------------------------------------------------- functions
# function -> (op, argument names, defaults, label): every way to call a norm
# that a TorchFunctionMode sees, with its signature's argument order. The
# second name is the op's shape parameter (normalized_shape; group norm's groups).
_LN_ARGS = ("input", "normalized_shape", "weight", "bias", "eps")
_RMS_ARGS = ("input", "normalized_shape", "weight", "eps")
_GN_ARGS = ("input", "num_groups", "weight", "bias", "eps")
# ATen's native_group_norm: (input, weight, bias, N, C, HxW, group, eps); N, C and
# HxW describe the input (ATen checks them), the kernel is asked for the input's shape
_NATIVE_GN_ARGS = ("input", "weight", "bias", "N", "C", "HxW", "group", "eps")
_LN_DEFAULTS: dict[str, Any] = {"weight": None, "bias": None, "eps": 1e-5}
_RMS_DEFAULTS: dict[str, Any] = {"weight": None, "eps": None}
_GN_DEFAULTS: dict[str, Any] = {"weight": None, "bias": None, "eps": 1e-5}
_SHAPE_PARAM = {_LN_ARGS: "normalized_shape", _RMS_ARGS: "normalized_shape", _GN_ARGS: "num_groups",
                _NATIVE_GN_ARGS: "group"}


def _function_table() -> dict[Any, tuple[str, tuple[str, ...], dict[str, Any], str]]:
    aten = torch.ops.aten
    table: dict[Any, tuple[str, tuple[str, ...], dict[str, Any], str]] = {
        F.layer_norm: ("layer_norm", _LN_ARGS, _LN_DEFAULTS, "F.layer_norm"),
        torch.layer_norm: ("layer_norm", _LN_ARGS, _LN_DEFAULTS, "torch.layer_norm"),
        F.rms_norm: ("rms_norm", _RMS_ARGS, _RMS_DEFAULTS, "F.rms_norm"),
        F.group_norm: ("group_norm", _GN_ARGS, _GN_DEFAULTS, "F.group_norm"),
    }
    for fn, op, names, defaults in (
            (getattr(torch, "native_layer_norm", None), "layer_norm", _LN_ARGS, {}),
            (getattr(torch, "rms_norm", None), "rms_norm", _RMS_ARGS, _RMS_DEFAULTS),
            (getattr(torch, "_fused_rms_norm", None), "rms_norm", _RMS_ARGS, {}),
            (getattr(torch, "group_norm", None), "group_norm", _GN_ARGS, _GN_DEFAULTS),
            (getattr(torch, "native_group_norm", None), "group_norm", _NATIVE_GN_ARGS, {})):
        if fn is not None:
            table[fn] = (op, names, defaults, f"torch.{fn.__name__}")
    for name, op, names, defaults in (("layer_norm", "layer_norm", _LN_ARGS, _LN_DEFAULTS),
                                      ("native_layer_norm", "layer_norm", _LN_ARGS, {}),
                                      ("rms_norm", "rms_norm", _RMS_ARGS, _RMS_DEFAULTS),
                                      ("_fused_rms_norm", "rms_norm", _RMS_ARGS, {}),
                                      ("group_norm", "group_norm", _GN_ARGS, _GN_DEFAULTS),
                                      ("native_group_norm", "group_norm", _NATIVE_GN_ARGS, {})):
        packet = getattr(aten, name, None)
        if packet is not None:
            table[packet] = table[packet.default] = (op, names, defaults, f"aten.{name}")
    return table


# torch's norm modules, recorded by module hooks as the module replace_norms
# swaps them for will call (exact classes: it leaves subclasses, whose
# forward may differ, and so their calls are recorded as functional ones).
_TORCH_NORMS = {torch.nn.LayerNorm: "layer_norm", torch.nn.RMSNorm: "rms_norm", torch.nn.GroupNorm: "group_norm"}
# torch modules whose forward takes a fused inference fast path only when no
# torch function mode is active (``has_torch_function``): the mode is lifted
# inside them, so they run as they would unrecorded (bit for bit), and so does
# the swapped model, which takes the same path; the norm modules they call on
# their other path are recorded by the hooks.
# Their forward functions: a subclass with its own forward may call norms itself.
_FAST_PATHS = frozenset(c.forward for c in (torch.nn.TransformerEncoder, torch.nn.TransformerEncoderLayer,
                                            torch.nn.MultiheadAttention))


def _bind(names: tuple[str, ...], defaults: dict[str, Any], args: tuple, kwargs: dict) -> dict[str, Any] | None:
    bound = dict(zip(names, args))
    for k in names:
        if k not in bound:
            if k in kwargs:
                bound[k] = kwargs[k]
            elif k in defaults:
                bound[k] = defaults[k]
            else:
                return None  # a call torch itself refuses: it raises, nothing to record
    return bound


# ---------------------------------------------------------------- rms classes
def resolve_rms_classes(spellings: Iterable[type | str]) -> tuple[type | str, ...]:
    """``rms_classes`` as ``replace_norms`` takes them: a class, its name, or
    ``module.Class``. A dotted spelling whose module imports is resolved now
    (``UnknownRmsClass`` if that module has no such class or cannot be
    imported); a bare name, or one in ``__main__``, is matched by name at each
    call (a script's classes do not exist before it runs)."""
    out: list[type | str] = []
    for s in spellings:
        if isinstance(s, type):
            out.append(s)
            continue
        if not isinstance(s, str) or not s or not all(p.isidentifier() for p in s.split(".")):
            raise UnknownRmsClass(f"rms class {s!r}: give a class, its name or module.Class")
        module, _, name = s.rpartition(".")
        if not module or module == "__main__":
            out.append(s)
            continue
        try:
            obj: Any = __import__(module, fromlist=["_"])
        except ImportError as e:
            raise UnknownRmsClass(f"rms class {s!r}: cannot import module {module!r}: {e}") from None
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if not isinstance(obj, type):
            raise UnknownRmsClass(f"rms class {s!r}: module {module!r} has no class {name!r}")
        out.append(obj)
    return tuple(out)


# ---------------------------------------------------------------- the record
class Recording:
    """Norm calls, counted per kernel signature (thread-safe). ``record_norms``
    fills one; ``from_misses`` makes one from a bundle's misses. ``calls`` and
    ``unrecorded`` are snapshots; ``manifest``/``write``/``table`` turn it
    into a manifest (``boo_build.trace.manifest_text``)."""

    def __init__(self, source: str = "") -> None:
        self.source = source  # what made the calls, for the manifest's header
        self._lock = threading.Lock()
        self._counts: Counter[KernelSignature] = Counter()
        self._sources: dict[KernelSignature, Counter[str]] = {}  # per signature: calls per source, in order seen
        self._functions: dict[str, str] = {}  # sources that are function calls -> their op
        self._unrecorded: Counter[tuple[str, str]] = Counter()
        self.rms_classes: tuple[type | str, ...] = ()  # what record_norms was given
        self._matched: set[type | str] = set()  # the spellings of those that named a module called

    def note_rms_class(self, spelling: type | str) -> None:
        with self._lock:
            self._matched.add(spelling)

    def unmatched_rms_classes(self) -> tuple[str, ...]:
        """The ``rms_classes`` that named no module the recorded code called (a
        misspelt name records nothing: its norms would be missing)."""
        with self._lock:
            return tuple(c if isinstance(c, str) else class_label(c) for c in self.rms_classes
                         if c not in self._matched)

    def add(self, sig: KernelSignature, source: str, n: int = 1, function: bool = False) -> None:
        """Count ``n`` calls of ``sig`` from ``source``; ``function``: the source is a
        function call (``F.layer_norm``...), not a module ``replace_norms`` swaps."""
        with self._lock:
            self._counts[sig] += n
            self._sources.setdefault(sig, Counter())[source] += n
            if function:
                self._functions[source] = sig.op

    def add_unrecorded(self, source: str, reason: str, n: int = 1) -> None:
        with self._lock:
            self._unrecorded[(source, reason)] += n

    @property
    def calls(self) -> tuple[RecordedCall, ...]:
        with self._lock:
            return tuple(RecordedCall(s, n, tuple(self._sources[s])) for s, n in
                         sorted(self._counts.items(), key=lambda kv: kv[0].key))

    def function_calls(self) -> tuple[FunctionCalls, ...]:
        """The forward calls made through functions, per function (``replace_norms``
        swaps modules only: these keep running torch unless the model's code changes)."""
        with self._lock:
            out = []
            for source, op in sorted(self._functions.items()):
                sigs = {s: c[source] for s, c in self._sources.items() if s.is_forward and source in c}
                out.append(FunctionCalls(source, op, sum(sigs.values()), tuple(sorted(s.key for s in sigs))))
            return tuple(out)

    @property
    def unrecorded(self) -> tuple[Unrecorded, ...]:
        with self._lock:
            return tuple(Unrecorded(src, why, n) for (src, why), n in sorted(self._unrecorded.items()))

    def __len__(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def manifest(self, name: str = "traced-norms", version: str = "0.1.0", targets: Iterable[str] | None = None,
                 dynamic: str = "auto", static: int = 4, merge: str | os.PathLike | None = None) -> str:
        """The manifest's TOML text (checked: ``boo-build build`` takes it as
        it is); see ``manifest_text.manifest``."""
        from .manifest_text import manifest

        return manifest(self.calls, name=name, version=version, targets=targets, dynamic=dynamic, static=static,
                        merge=merge, source=self.source)

    def write(self, path: Any, **kw: Any) -> str:
        """Write ``manifest(**kw)`` to ``path`` atomically; returns the text."""
        from .manifest_text import write

        return write(path, self.manifest(**kw))

    def table(self) -> str:
        from .manifest_text import table

        return table(self.calls, self.unrecorded, self.function_calls())


def from_misses(bundle: Any, source: str | None = None) -> Recording:
    """A ``Recording`` of the calls a bundle opened with ``fallback="eager"``
    could not serve (``bundle.stats()``' misses): ``from_misses(b).write(
    "missing.toml", name=...)`` is the manifest of what it lacked. Misses no
    signature describes (``layer_norm:dtype=float64``) are ``unrecorded``."""
    rec = Recording(source if source is not None else f"the misses of bundle {bundle.name}-{bundle.version}")
    for key, counts in bundle.stats().items():
        n = counts.get("misses", 0)
        if not n:
            continue
        try:
            sig = KernelSignature.parse(key)
        except SignatureError:
            rec.add_unrecorded(key, "no kernel takes this call", n)
            continue
        if sig.op not in OPS:
            rec.add_unrecorded(key, f"{sig.op}: the manifest writer writes {', '.join(OPS)} kernels", n)
            continue
        rec.add(sig, "bundle miss", n)
    return rec


# ---------------------------------------------------------------- recording
def _kernel_dtype(x: torch.Tensor) -> str | None:
    """The dtype the swapped module's kernel runs in: the input's (its
    parameters are cast to it), float32 where autocast runs norms in float32."""
    if x.device.type in AUTOCAST_FLOAT32 and torch.is_autocast_enabled(x.device.type):
        return "float32"
    return name_of(x.dtype)


def _needs_grad(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


class _Recorder:
    """What one ``record_norms`` context runs: the mode, the hooks, the counts."""

    def __init__(self, rec: Recording, rms_classes: tuple[type | str, ...], auto: bool = True,
                 fuse_adds: bool = True) -> None:
        self.rec = rec
        self.fuse_adds = fuse_adds
        self.rms_classes = rms_classes
        self.auto = auto
        self.active = True
        self.thread = threading.get_ident()
        # on the recording thread: .depth, inside a recorded norm module (its own
        # functional call is not recorded again); .lifted, the fast-path modules' popped modes
        self.local = threading.local()
        self.table = _function_table()
        self.kinds: dict[type, str] = {}  # module class -> "norm", "probe", "fast" or ""
        # a module of a "probe" class -> (it, probe.norm_form of it or None where it is no candidate, its
        # rms_classes spelling or None): checked once per recording
        self.forms: dict[int, tuple[torch.nn.Module, NormForm | None, type | str | None]] = {}
        self.mode: _Mode | None = None
        self.eager = EagerGraph() if auto else None  # the forward's calls, for the norms written inline

    def inside_module(self) -> bool:
        """Inside a recorded norm module, or checking one's math (its calls are not the model's)."""
        return getattr(self.local, "depth", 0) > 0 or getattr(self.local, "probing", False)

    def form_of(self, module: torch.nn.Module) -> tuple[NormForm | None, type | str | None]:
        """(``norm_form(module)``, or None where replace_norms would not probe it; the
        ``rms_classes`` spelling naming its class, or None), once per module, its probe unrecorded."""
        hit = self.forms.get(id(module))
        if hit is None or hit[0] is not module:
            named = spelling_of(type(module), self.rms_classes) if self.rms_classes else None
            form = None
            if named is not None or (self.auto and is_candidate(module)):
                self.local.probing = True
                try:
                    form = norm_form(module)
                finally:
                    self.local.probing = False
            hit = (module, form, named)
            self.forms[id(module)] = hit
        return hit[1], hit[2]

    def record(self, op: str, x: Any, param: Any, weight: Any, bias: Any, eps: Any, out: Any, source: str,
               function: bool = False, offset: float = 0.0, x_node: Any = None, norm: Any = ()) -> None:
        """One call of ``op`` on ``x``; ``param``: its shape parameter (normalized_shape;
        group norm's groups), as the loader reads it (``Op.call_param`` / ``call_fields``);
        ``function``: made through a function, not a module ``replace_norms`` swaps; ``x_node``:
        ``x``'s node in the forward's graph (None: the one logged for it, if any), ``norm`` the norm's
        own nodes there: the fused residual form's call where an add that fuses gave ``x``."""
        if not isinstance(x, torch.Tensor):
            return
        shape = tuple(int(d) for d in x.shape)
        try:
            fields = op_registry.get(op).call_fields(shape, op_registry.get(op).call_param(param))
        except TypeError:
            return  # torch raised on it already
        except ValueError as e:  # a shape no kernel takes (a group norm with 4 spatial dims)
            self.rec.add_unrecorded(source, str(e))
            return
        dtype = _kernel_dtype(x)
        if dtype is None:
            self.rec.add_unrecorded(source, f"dtype {str(x.dtype).removeprefix('torch.')}: the kernels take "
                                    f"{', '.join(NAMES)}")
            return
        eps = op_registry.get(op).none_eps if eps is None else float(eps)
        if x_node is None and self.eager is not None:  # (a module called first closed the graph that made x)
            x_node = self.eager.nodes.get(x) or self.eager.earlier.get(x)
        add = residual_add(x_node) if self.fuse_adds and op_registry.get(op).residuals else None
        fused = add is not None and add.fuses
        try:
            sig = KernelSignature(op, shape, dtype=dtype, mask=FORWARD, eps=eps, affine=weight is not None,
                                  bias=bias is not None, weight_offset=offset, residual=fused, **fields)
        except SignatureError as e:
            self.rec.add_unrecorded(source, str(e))
            return
        self.rec.add(sig, source, function=function)
        if not torch.is_grad_enabled():
            return
        mask = ((INPUT_GRAD if _needs_grad(x) else 0) | (WEIGHT_GRAD if _needs_grad(weight) else 0)
                | (BIAS_GRAD if _needs_grad(bias) else 0))
        y = out[0] if isinstance(out, (tuple, list)) else out
        node = getattr(y, "grad_fn", None)
        if not mask or node is None:
            return
        def ran(grad_outputs: Any) -> None:
            if self.active:  # a backward after the context is not recorded
                # the fused backward takes grad_h where the sum's other users give it one (known by now)
                grad_h = fused and bool(mask & INPUT_GRAD) and add is not None and (
                    other_users(add, norm) or add.node.meta.get("used_later", False))
                self.rec.add(sig.replace(mask=mask, residual=grad_h), source, function=function)

        node.register_prehook(ran)

    # -- global module hooks -------------------------------------------------
    def kind(self, cls: type) -> str:
        k = self.kinds.get(cls)
        if k is None:
            k = ("norm" if cls in _TORCH_NORMS else "fast" if getattr(cls, "forward", None) in _FAST_PATHS
                 else "probe" if (self.auto and not is_torch_class(cls)) or spelling_of(cls, self.rms_classes)
                 is not None else "")
            self.kinds[cls] = k
        return k

    def pre_hook(self, module: torch.nn.Module, args: tuple) -> None:
        if threading.get_ident() != self.thread or not self.active or getattr(self.local, "probing", False):
            return
        k = self.kind(type(module))
        stack = self.local.__dict__.setdefault("modules", [])
        if not stack:
            self.close(None)  # calls made outside any module so far
        # inside a module that may be a norm written by hand, its own calls are not matched (as the pass's regions)
        stack.append(k == "probe" and self.form_of(module)[0] is not None)
        if k == "norm" or (k == "probe" and self.swapped(module)):
            self.local.depth = getattr(self.local, "depth", 0) + 1
        elif k == "fast":
            lifted = self.local.__dict__.setdefault("lifted", [])
            n = torch._C._len_torch_function_stack()
            top = torch._C._get_function_stack_at(n - 1) if n else None
            lifted.append(torch._C._pop_torch_function_stack() if top is not None and top is self.mode else None)

    def post_hook(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if threading.get_ident() != self.thread or not self.active or getattr(self.local, "probing", False):
            return
        stack = self.local.__dict__.get("modules")
        if stack:
            stack.pop()
            if not stack:  # the outermost module's forward ended: its calls matched
                self.close(output)
        k = self.kind(type(module))
        if k == "fast":
            lifted = self.local.__dict__.get("lifted")
            mode = lifted.pop() if lifted else None
            if mode is not None:
                torch._C._push_on_torch_function_stack(mode)
            return
        if k not in ("norm", "probe"):
            return
        form, named = self.form_of(module) if k == "probe" else (None, None)
        if k == "probe" and form is None:
            return  # not a norm candidate
        if k == "norm" or form is not None and form.ok:
            self.local.depth = max(0, getattr(self.local, "depth", 0) - 1)
        x = args[0] if args else next(iter(kwargs.values()), None)
        label = class_label(type(module))
        if output is None:
            return  # the forward raised: nothing ran
        if k == "norm":
            op = _TORCH_NORMS[type(module)]
            # the swapped module's kernel: group norm's groups where the others give a normalized shape
            param = module.num_groups if op == "group_norm" else module.normalized_shape
            self.record(op, x, param, module.weight, getattr(module, "bias", None), module.eps, output, label)
            return
        assert form is not None  # kind "probe", a candidate
        if named is not None:
            self.rec.note_rms_class(named)
        if not form.ok:  # replace_norms' own check: what it leaves is not recorded
            self.rec.add_unrecorded(label, ("named in rms_classes, but " if named is not None else "probed: ")
                                    + form.why() + " (replace_norms leaves it)")
            return
        # replace_norms makes it a boo_build.loader.nn.RMSNorm (with its offset) or LayerNorm over its weight's shape
        self.record(form.op or "", x, form.normalized_shape, module.weight, module.bias if form.bias else None,
                    form.eps, output, label, offset=form.weight_offset)

    def quiet(self) -> bool:
        """Inside a module that may be a norm written by hand (its calls are its own, not matched inline)."""
        return any(self.local.__dict__.get("modules", ()))

    def close(self, outputs: Any) -> None:
        """The norms written inline in the calls logged so far, recorded as the compile backend's pass
        serves them (the kernel of the permuted shape for one over other dims than the last); those it
        leaves, unrecorded with the reason."""
        eager = self.eager
        if eager is None or not len(eager):
            return
        self.eager = EagerGraph(eager)
        self.local.probing = True  # the matcher's own calls are not the model's
        try:
            found = eager.close(outputs)
        finally:
            self.local.probing = False
        if eager.broken:
            self.rec.add_unrecorded("norms written inline", f"a forward's calls could not be followed ({eager.broken})")
        for n in found:
            self.record_inline(n)

    def record_inline(self, n: InlineNorm) -> None:
        source = f"{n.spelling.split(' (')[0]} ({n.anchor.meta.get('source') or n.anchor.name})"
        if n.problem or n.input is None or n.output is None:
            self.rec.add_unrecorded(source, f"left as written: {n.problem}")
            return
        x = n.input.meta["example_value"]
        w, b = (p.meta.get("example_value") if p is not None else None for p in (n.weight, n.bias))
        perm = n.permutation
        self.record(n.op, x if perm is None else x.permute(perm), n.normalized_shape, w, b, n.eps,
                    SimpleNamespace(grad_fn=n.output.meta.get("grad_fn")), source, function=True, offset=n.offset,
                    x_node=n.input, norm=n.nodes)

    def swapped(self, module: torch.nn.Module) -> bool:
        """Whether replace_norms swaps this module of a "probe" class (its own calls are then not the model's)."""
        form, _ = self.form_of(module)
        return form is not None and form.ok


class _Mode(TorchFunctionMode):
    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)  # the mode is off inside: torch's own calls are not seen twice
        r = self.recorder
        if r.eager is not None and not r.inside_module() and not r.quiet():
            r.eager.log(func, args, kwargs, out)
        try:
            entry = r.table.get(func)
        except TypeError:  # an unhashable callable: not a norm
            return out
        if entry is None or r.inside_module():
            return out
        op, names, defaults, label = entry
        bound = _bind(names, defaults, args, kwargs)
        if bound is not None:
            call = r.eager.call_of(out) if r.eager is not None else None
            r.record(op, bound["input"], bound[_SHAPE_PARAM[names]], bound["weight"], bound.get("bias"),
                     bound["eps"], out, label, function=True, norm=() if call is None else (call,))
        return out


@contextlib.contextmanager
def record_norms(rms_classes: Iterable[type | str] = (), source: str = "", auto: bool = True,
                 fuse_adds: bool = True) -> Iterator[Recording]:
    """Record every norm call made on this thread inside the ``with`` block
    (and the backwards autograd runs for them inside it):

        with record_norms() as rec:
            train_one_step(model)
        rec.write("model.toml", name="my-model", targets=["cpu"])

    Norms are recorded as ``replace_norms`` swaps them: torch's norm modules, and the
    norms written by hand their math shows to be RMS or layer norms (``probe.norm_form``;
    a candidate that fails is left out with its reasons: ``unrecorded``), and the
    functional calls. ``rms_classes``: classes probed whatever they hold, spelled as
    ``replace_norms`` takes them: a class, its name or ``module.Class``
    (``resolve_rms_classes``; ``UnknownRmsClass`` for a dotted name that names no
    class); ``auto=False``: probe only those. ``fuse_adds=False``: a norm after an add is
    recorded as its plain kernel (as the compile backend with ``fuse_adds=False`` runs it). ``source``: what runs, for the
    manifest's header. Results are those of an unrecorded run, bit for bit;
    on exit nothing stays installed."""
    if not isinstance(auto, bool):
        raise TypeError(f"auto must be True or False, got {auto!r}")
    if not isinstance(fuse_adds, bool):
        raise TypeError(f"fuse_adds must be True or False, got {fuse_adds!r}")
    classes = resolve_rms_classes(rms_classes)
    rec = Recording(source)
    rec.rms_classes = classes
    recorder = _Recorder(rec, classes, auto, fuse_adds)
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    with contextlib.ExitStack() as stack:
        for handle in (register_module_forward_pre_hook(recorder.pre_hook),
                       register_module_forward_hook(recorder.post_hook, with_kwargs=True, always_call=True)):
            stack.callback(handle.remove)
        # torch 2.13's handle leaves its entry in the with_kwargs table, and torch.compile then
        # warns of global hooks on every later compile: nothing of the recording may stay
        from torch.nn.modules import module as _module

        stack.callback(_module._global_forward_hooks_with_kwargs.pop, handle.id, None)
        stack.enter_context(torch.compiler.set_stance("force_eager"))
        recorder.mode = stack.enter_context(_Mode(recorder))
        try:
            yield rec
        finally:
            recorder.close(None)  # calls made outside any module
            recorder.active = False
