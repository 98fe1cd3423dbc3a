"""The graph pass of the ``torch.compile`` backend (``backend.py``): every norm of a
Dynamo graph found, however the model wrote it, decided on (does the bundle serve it,
and do its records say the kernels beat torch eager), and rewritten, where it runs
the kernels, into a call of its ``boo::`` custom op; the decision records.

Imports torch.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Mapping, Sequence

import torch

from .. import ops
from ..dtypes import name_of
from ..errors import SignatureError
from ..ops.base import FORWARD
from ..signature import KernelSignature
from . import entries
from .bundle import Bundle


class Runs(StrEnum):
    """What runs a norm of the graph."""
    KERNEL = "kernel"  # the bundle's kernels, through its boo:: custom op
    GRAPH = "graph"  # the graph's own code, compiled by the inner backend


class Why(StrEnum):
    """Why (``NormDecision.why``)."""
    SERVED = "served"  # every kernel it needs held (and faster than torch eager by the records, where asked)
    EAGER_FASTER = "eager-faster"  # the bundle's records: torch eager beat a kernel it needs
    NO_KERNEL = "no-kernel"  # no kernel for the call (its shape, dtype, affine form, eps, gradient mask)
    STATIC_ONLY = "static-only"  # symbolic sizes, but the kernel serves one size
    DEVICE = "device"  # its tensors are not on the bundle's device
    DTYPE = "dtype"  # a dtype no kernel takes
    UNSUPPORTED = "unsupported"  # arguments no kernel takes (a symbolic normalized shape or eps, ...)


@dataclass(frozen=True)
class NormDecision:
    """One norm of a compiled graph and what runs it."""
    where: str  # the module that called it (``layers.0.norm (LayerNorm)``), else its source line
    source: str  # ``file.py:12`` of the call, "" if unknown
    spelling: str  # how the graph wrote it: ``F.layer_norm``, ``aten.native_group_norm``...
    op: str  # layer_norm, rms_norm, group_norm
    shape: tuple  # the traced input shape: ints, a symbolic size by its name (``s0``)
    dtype: str
    masks: tuple[int, ...]  # the kernels it needs: (1,) forward only, (1, m) in a training graph
    kernels: tuple[str, ...]  # the keys of the kernels that serve it (those found, whatever runs)
    runs: Runs
    why: Why
    detail: str  # the reason in words

    def __str__(self) -> str:
        shape = "x".join(str(d) for d in self.shape)
        at = f" [{self.source}]" if self.source and self.source != self.where else ""
        runs = ("kernels " + ", ".join(self.kernels)) if self.runs is Runs.KERNEL else "the graph's code"
        return (f"{self.where}{at}: {self.spelling} {self.dtype} {shape} (masks {', '.join(map(str, self.masks))})"
                f" -> {runs}: {self.detail}")


class NormNotServed(ValueError):
    """``fallback=None``: a norm of the graph the bundle cannot serve (``decision`` says which and why)."""

    def __init__(self, decision: NormDecision):
        self.decision = decision
        super().__init__(f"the bundle cannot serve {decision.where}{' at ' + decision.source if decision.source else ''}"
                         f": {decision.detail} (fallback=None; fallback=\"eager\" leaves it to the graph's code)")


# ------------------------------------------------------------- the spellings
@dataclass(frozen=True)
class _Spelling:
    name: str
    op: str
    params: tuple[str, ...]  # positional parameters, by the names keyword arguments use
    defaults: Mapping[str, Any]
    native: bool  # ATen's native op: returns (out, *statistics), not out


_LN = ("input", "normalized_shape", "weight", "bias", "eps")
_RMS = ("input", "normalized_shape", "weight", "eps")
_GN = ("input", "num_groups", "weight", "bias", "eps")
_NATIVE_GN = ("input", "weight", "bias", "N", "C", "HxW", "group", "eps")


def _spellings() -> dict[Any, _Spelling]:
    F, aten = torch.nn.functional, torch.ops.aten
    ln_d = {"weight": None, "bias": None, "eps": 1e-5}
    rms_d = {"weight": None, "eps": None}
    table = {
        F.layer_norm: _Spelling("F.layer_norm", "layer_norm", _LN, ln_d, False),
        torch.layer_norm: _Spelling("torch.layer_norm", "layer_norm", _LN, ln_d, False),
        aten.layer_norm.default: _Spelling("aten.layer_norm", "layer_norm", _LN, ln_d, False),
        aten.native_layer_norm.default: _Spelling("aten.native_layer_norm", "layer_norm", _LN, {}, True),
        F.rms_norm: _Spelling("F.rms_norm", "rms_norm", _RMS, rms_d, False),
        torch.rms_norm: _Spelling("torch.rms_norm", "rms_norm", _RMS, rms_d, False),
        aten.rms_norm.default: _Spelling("aten.rms_norm", "rms_norm", _RMS, rms_d, False),
        F.group_norm: _Spelling("F.group_norm", "group_norm", _GN, {"weight": None, "bias": None, "eps": 1e-5},
                                False),
        torch.group_norm: _Spelling("torch.group_norm", "group_norm", _GN, {"weight": None, "bias": None,
                                                                             "eps": 1e-5}, False),
        aten.group_norm.default: _Spelling("aten.group_norm", "group_norm", _GN, {"weight": None, "bias": None,
                                                                                   "eps": 1e-5}, False),
        aten.native_group_norm.default: _Spelling("aten.native_group_norm", "group_norm", _NATIVE_GN, {}, True),
    }
    fused = getattr(aten, "_fused_rms_norm", None)  # CUDA's RMS norm after some decompositions
    if fused is not None:
        table[fused.default] = _Spelling("aten._fused_rms_norm", "rms_norm", _RMS, {}, True)
    return table


_SPELLINGS: dict[Any, _Spelling] | None = None  # built on first use (a cache: torch's functions as keys)


def spelling_of(target: Any) -> _Spelling | None:
    """The norm a graph node's target is (an ATen op packet as its default overload), else None."""
    global _SPELLINGS
    if _SPELLINGS is None:
        _SPELLINGS = _spellings()
    if isinstance(target, torch._ops.OpOverloadPacket):
        target = getattr(target, "default", target)
    try:
        return _SPELLINGS.get(target)
    except TypeError:  # unhashable
        return None


# -------------------------------------------------- what replaces a norm node
# Plain functions in the graph: AOT autograd traces through them to the custom ops.
def boo_layer_norm(input, normalized_shape, weight, bias, eps, bundle, native):
    out = torch.ops.boo.layer_norm(input, normalized_shape, weight, bias, eps, bundle)
    return out if native else out[0]


def boo_rms_norm(input, normalized_shape, weight, eps, bundle, native):
    out = torch.ops.boo.rms_norm(input, normalized_shape, weight, eps, 0.0, bundle)  # no weight offset: ATen's math
    return out if native else out[0]


def boo_group_norm(input, weight, bias, group, eps, bundle, native):
    shape = input.shape
    out = torch.ops.boo.group_norm(input, weight, bias, shape[0], shape[1], math.prod(shape[2:]), group, eps, bundle)
    return out if native else out[0]


# ---------------------------------------------------------------- the pass
def _value(a: Any, gm: torch.fx.GraphModule) -> Any:
    """What a node argument was while Dynamo traced: a node's example value (a
    fake tensor, a SymInt...), a module attribute's value; lists item by item."""
    if isinstance(a, torch.fx.Node):
        if a.op == "get_attr":
            obj: Any = gm
            for part in str(a.target).split("."):
                obj = getattr(obj, part)
            return obj
        return a.meta.get("example_value")
    if isinstance(a, (list, tuple)):
        return [_value(v, gm) for v in a]
    return a


def _dim(d: Any) -> tuple[int, str | None]:
    """(size, symbol): a symbolic size's hint and name (None: static, also where
    Dynamo specialized it)."""
    if isinstance(d, int):
        return d, None
    if isinstance(d, torch.SymInt):
        node = d.node
        c = node.maybe_as_int()
        if c is not None:
            return int(c), None
        env = node.shape_env
        expr = env.replace(node.expr)
        if expr.is_number:
            return int(expr), None
        hint = node.hint if node.has_hint() else env.size_hint(node.expr)
        return int(hint), str(expr)
    raise TypeError(f"not a size: {d!r}")


def _number(v: Any) -> float | None:
    """An eps as traced: a float, a SymFloat (its hint), a 0-d tensor; None where unknown."""
    if v is None or isinstance(v, (int, float)):
        return v
    if isinstance(v, torch.SymFloat):
        return float(v.node.hint) if v.node.has_hint() else None
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        try:
            return float(v.item())
        except Exception:  # a fake tensor has no value
            return None
    return None


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_MODULE_PART = re.compile(r"\._modules\['([^']+)'\]|\['([^']+)'\]|\[(\d+)\]")


def _where(node: torch.fx.Node) -> tuple[str, str]:
    """(the module that called the norm, ``file:line`` of the call)."""
    source = ""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    own = [f for f in frames if not f[0].startswith(_TORCH_DIR)]  # the model's line, not F.rms_norm's inside torch
    stack = node.meta.get("nn_module_stack") or {}
    if own or (frames and not stack):  # a torch module's own line says nothing its name does not
        file, line = (own or frames)[-1]
        source = f"{os.path.basename(file)}:{line}"
    if stack:
        path, cls = list(stack.values())[-1]
        path = re.sub(r"^L\['[^']*'\]\.?", "", str(path))
        path = _MODULE_PART.sub(lambda m: "." + (m.group(1) or m.group(2) or m.group(3)), path).lstrip(".")
        name = getattr(cls, "__name__", str(cls))
        return (f"{path} ({name})" if path else f"the model ({name})"), source
    return (source or node.name), source


def _pinned(dims: Sequence[tuple[int, str | None]], kernels: Sequence[KernelSignature]) -> list[str]:
    """The call's symbolic sizes some dynamic kernel fixes (a dim it does not name;
    a kernel of another rank flattens the leading dims into its first: fixed where that is)."""
    out: list[str] = []
    for ks in kernels:
        kshape = ks.input_shape
        for i, (_, sym) in enumerate(dims):
            if sym is None or sym in out:
                continue
            lead = len(dims) - len(kshape)  # > 0: leading dims flattened into the kernel's first
            j = 0 if i <= lead else i - lead
            if not isinstance(kshape[j], str):
                out.append(sym)
    return out


def _signature(op: str, shape: tuple[int, ...], dtype: str, mask: int, eps: Any, param: Any, weight: bool,
               bias: bool) -> KernelSignature:
    spec = ops.get(op)
    fields = spec.call_fields(shape, param)
    return KernelSignature(op=op, input_shape=shape, dtype=dtype, mask=mask, eps=spec.none_eps if eps is None else eps,
                           affine=weight or bias, bias=bias, **fields)


def _masks(op: str, x: Any, w: Any, b: Any, out: Any) -> tuple[int, ...]:
    """The kernels a norm needs: the forward, and in a training graph (its output
    requires grad) the combined backward of the gradients autograd will ask for
    (as the custom op's autograd formula works them out)."""
    if not getattr(out, "requires_grad", False):
        return (FORWARD,)
    d = entries.module(op).torch_ops()
    given = {"input": x, "weight": w, "bias": b}
    mask = d.mask_bits(d.output_mask({n: bool(getattr(t, "requires_grad", False)) for n, t in given.items()}, given))
    return (FORWARD, mask) if mask else (FORWARD,)


class _Pass:
    """One graph's rewrite for one serving bundle."""

    def __init__(self, bundle: Bundle, token: str, prefer_eager: bool, gm: torch.fx.GraphModule):
        self.bundle, self.token, self.prefer_eager, self.gm = bundle, token, prefer_eager, gm

    def decide(self, sp: _Spelling, node: torch.fx.Node) -> tuple[NormDecision, dict[str, Any] | None]:
        """The decision on one norm node, and its arguments by name where it runs the kernels."""
        args: dict[str, Any] = dict(zip(sp.params, node.args))
        args.update(node.kwargs)
        for k, v in sp.defaults.items():
            args.setdefault(k, v)
        where, source = _where(node)
        gm = self.gm
        x = _value(args.get("input"), gm)
        shape: tuple = ()
        dtype = str(getattr(x, "dtype", "?")).removeprefix("torch.")

        def decision(runs: Runs, why: Why, detail: str, masks=(FORWARD,), kernels=()) -> NormDecision:
            return NormDecision(where, source, sp.name, sp.op, shape, dtype, tuple(masks), tuple(kernels), runs, why,
                                detail)

        if not isinstance(x, torch.Tensor) or any(n not in args for n in sp.params):
            return decision(Runs.GRAPH, Why.UNSUPPORTED, "arguments not traced"), None
        dims = [_dim(d) for d in x.shape]
        hints = tuple(h for h, _ in dims)
        symbols = [s for _, s in dims if s is not None]
        shape = tuple(s or h for h, s in dims)
        w, b = _value(args.get("weight"), gm), _value(args.get("bias"), gm)
        out = node.meta.get("example_value")
        out = out[0] if sp.native and isinstance(out, (tuple, list)) else out
        masks = _masks(sp.op, x, w, b, out)
        if x.device.type != self.bundle.device_type:
            return decision(Runs.GRAPH, Why.DEVICE, f"on {x.device}, the bundle runs on {self.bundle.device.uri}",
                            masks), None
        kdt = name_of(x.dtype)
        if kdt is None:
            return decision(Runs.GRAPH, Why.DTYPE, f"{dtype}: kernels take float32, float16 or bfloat16", masks), None
        mixed = [f"{n} {str(t.dtype).removeprefix('torch.')}" for n, t in (("weight", w), ("bias", b))
                 if isinstance(t, torch.Tensor) and t.dtype != x.dtype]
        if mixed:  # (torch's op takes float32 parameters beside a half-precision input; the kernels do not)
            return decision(Runs.GRAPH, Why.DTYPE, f"{', '.join(mixed)} beside a {dtype} input", masks), None
        eps = _number(_value(args.get("eps"), gm))
        if sp.op == "group_norm":
            param = _value(args.get("num_groups", args.get("group")), gm)
            if not isinstance(param, int):
                return decision(Runs.GRAPH, Why.UNSUPPORTED, f"groups {param!r} not a constant", masks), None
        else:
            ns = [_dim(d) for d in _value(args["normalized_shape"], gm)]
            if any(s is not None for _, s in ns):
                return decision(Runs.GRAPH, Why.UNSUPPORTED, "a symbolic normalized shape", masks), None
            param = tuple(h for h, _ in ns)
        if sp.op != "rms_norm" and eps is None:
            return decision(Runs.GRAPH, Why.UNSUPPORTED, "eps unknown while tracing", masks), None
        try:
            sigs = [_signature(sp.op, hints, kdt, m, eps, param, w is not None, b is not None) for m in masks]
        except (SignatureError, ValueError, TypeError) as e:
            return decision(Runs.GRAPH, Why.UNSUPPORTED, str(e), masks), None
        found = [self.bundle.serving(s) for s in sigs]
        kernels = [k.key for k in found if k is not None]
        missing = [s.key for s, k in zip(sigs, found) if k is None]
        if missing:
            return decision(Runs.GRAPH, Why.NO_KERNEL, "no kernel " + ", ".join(missing), masks, kernels), None
        fixed = ""
        if symbols:
            static = [k.key for k in found if k is not None and not k.sig.is_dynamic]
            if static:
                return decision(Runs.GRAPH, Why.STATIC_ONLY,
                                f"sizes {', '.join(symbols)} are symbolic, kernel {', '.join(static)} serves "
                                f"{list(hints)} only", masks, kernels), None
            pinned = _pinned(dims, [k.sig for k in found if k is not None])
            if pinned:
                fixed = f"; other sizes of {', '.join(pinned)} (fixed in the kernels) run torch's op"
        if self.prefer_eager:
            slower = [k.key for s, k in zip(sigs, found) if k is not None and k.eager_for(s)]
            if slower:
                return decision(Runs.GRAPH, Why.EAGER_FASTER,
                                f"torch eager beat kernel {', '.join(slower)} in the build's timings "
                                "(prefer_eager=False runs it)", masks, kernels), None
        detail = "the bundle's kernels" + ("; the build did not find torch eager faster" if self.prefer_eager
                                            else " (prefer_eager=False)")
        return decision(Runs.KERNEL, Why.SERVED, detail + fixed, masks, kernels), args

    def replace(self, sp: _Spelling, node: torch.fx.Node, args: dict[str, Any]) -> None:
        tok = self.token
        if sp.op == "layer_norm":
            node.target = boo_layer_norm
            node.args = (args["input"], args["normalized_shape"], args["weight"], args["bias"], args["eps"], tok,
                         sp.native)
        elif sp.op == "rms_norm":
            node.target = boo_rms_norm
            node.args = (args["input"], args["normalized_shape"], args["weight"], args["eps"], tok, sp.native)
        else:
            node.target = boo_group_norm
            node.args = (args["input"], args["weight"], args["bias"], args.get("num_groups", args.get("group")),
                         args["eps"], tok, sp.native)
        node.kwargs = {}


def rewrite(gm: torch.fx.GraphModule, bundle: Bundle, token: str, prefer_eager: bool,
            fallback: str | None) -> list[NormDecision]:
    """Rewrite, in place, the norms of Dynamo graph ``gm`` that ``bundle`` serves
    (named by ``token`` in the graph) into its custom ops; -> every norm found and
    what runs it. ``fallback=None``: ``NormNotServed`` for a norm it cannot serve."""
    p = _Pass(bundle, token, prefer_eager, gm)
    out = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        sp = spelling_of(node.target)
        if sp is None:
            continue
        decision, args = p.decide(sp, node)
        if fallback is None and decision.runs is Runs.GRAPH and decision.why is not Why.EAGER_FASTER:
            raise NormNotServed(decision)
        if args is not None:
            p.replace(sp, node, args)
        out.append(decision)
    if any(d.runs is Runs.KERNEL for d in out):
        gm.graph.lint()
        gm.recompile()
    return out


__all__ = ["NormDecision", "NormNotServed", "Runs", "Why", "boo_group_norm", "boo_layer_norm", "boo_rms_norm",
           "rewrite", "spelling_of"]
