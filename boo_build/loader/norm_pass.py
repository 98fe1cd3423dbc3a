"""The graph pass of the ``torch.compile`` backend (``backend.py``): every norm of a
Dynamo graph found, however the model wrote it, decided on (does the bundle serve it,
and do its records say the kernels beat torch eager), and rewritten, where it runs
the kernels, into a call of its ``boo::`` custom op; the decision records.

A norm whose input is an add the fused residual form takes (``boo_build.residual_adds``)
runs that form's kernels where the bundle holds them (and, with ``prefer_eager``, they win by
the records), the add and the norm one call (``fused_graph``); else its plain kernels, or
the graph's code; the decision says why its add was not fused.

Imports torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple, Sequence

import torch

from .. import ops
from ..dtypes import name_of
from ..errors import SignatureError
from ..inline_norms import InlineNorm, find
from ..ops.base import FORWARD
from ..residual_adds import ResidualAdd, other_users, residual_add
from ..signature import KernelSignature
from . import entries
from .bundle import Bundle
from .fused_graph import anchor, rewire
from .graph_functions import boo_add_layer_norm, boo_add_rms_norm, boo_group_norm, boo_layer_norm, boo_rms_norm
from .module_norms import Region, regions
from .norm_spellings import Spelling, never_served, spelling_of


class Runs(StrEnum):
    """What runs a norm of the graph."""
    KERNEL = "kernel"  # the bundle's kernels, through its boo:: custom op
    GRAPH = "graph"  # the graph's own code, compiled by the inner backend


class Why(StrEnum):
    """Why (``NormDecision.why``)."""
    SERVED = "served"  # every kernel it needs held (and faster than torch.compile by the records, where asked)
    COMPILED_FASTER = "compiled-faster"  # the bundle's records: torch.compile's code beat a kernel it needs
    EAGER_FASTER = "eager-faster"  # no verdict against torch.compile: torch eager beat a kernel it needs
    NO_KERNEL = "no-kernel"  # no kernel for the call (its shape, dtype, affine form, eps, gradient mask)
    STATIC_ONLY = "static-only"  # symbolic sizes, but the kernel serves one size
    DEVICE = "device"  # its tensors are not on the bundle's device
    DTYPE = "dtype"  # a dtype no kernel takes
    UNSUPPORTED = "unsupported"  # arguments no kernel takes (a symbolic normalized shape or eps, ...)
    FORM = "form"  # a module that may be a norm written by hand, whose probe found no norm a kernel computes,
    # or code written inline that looks like a norm and is not one exactly (``inline_norms``: a look-alike)
    KIND = "kind"  # a norm no kernel computes: batch, instance, local response norms


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
    fused: bool = False  # fused with the add before it (its kernels the fused residual form's)
    add: str = ""  # why the add before it was not fused ("": fused, or no add of two tensors before it)

    def __str__(self) -> str:
        shape = "x".join(str(d) for d in self.shape)
        at = f" [{self.source}]" if self.source and self.source != self.where else ""
        runs = ("kernels " + ", ".join(self.kernels)) if self.runs is Runs.KERNEL else "the graph's code"
        fused = " fused with its add" if self.fused else ""
        add = f"; its add not fused: {self.add}" if self.add else ""
        return (f"{self.where}{at}: {self.spelling}{fused} {self.dtype} {shape} (masks "
                f"{', '.join(map(str, self.masks))}) -> {runs}: {self.detail}{add}")


# not norms the bundle could serve: fallback=None raises for none of them
NEVER_SERVED = (Why.FORM, Why.KIND, Why.COMPILED_FASTER, Why.EAGER_FASTER)


class NormNotServed(ValueError):
    """``fallback=None``: a norm of the graph the bundle cannot serve (``decision`` says which and why)."""

    def __init__(self, decision: NormDecision):
        self.decision = decision
        super().__init__(f"the bundle cannot serve {decision.where}{' at ' + decision.source if decision.source else ''}"
                         f": {decision.detail} (fallback=None; fallback=\"eager\" leaves it to the graph's code)")


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
        path = re.sub(r"^L\['[^']*'\](?:\[\d+\])?\.?", "", str(path))  # the frame's root (self, args[0])
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
               bias: bool, offset: float = 0.0, residual: bool = False) -> KernelSignature:
    spec = ops.get(op)
    fields = spec.call_fields(shape, param)
    return KernelSignature(op=op, input_shape=shape, dtype=dtype, mask=mask, eps=spec.none_eps if eps is None else eps,
                           affine=weight or bias, bias=bias, weight_offset=offset, residual=residual, **fields)


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


class _Call(NamedTuple):
    """One norm of the graph, as traced: what the decision reads."""

    op: str
    spelling: str
    where: str
    source: str
    x: Any  # the input's example value
    w: Any
    b: Any
    eps: float | None
    param: Any  # group norm's groups, else the normalized shape as traced
    out: Any  # the output's example value
    native: bool  # ATen's native op: returns (out, *statistics)
    offset: float = 0.0


_EPS = object()  # in a fused call's arguments: the eps read from the graph's input (``_Pass.fuse``)


class _Pass:
    """One graph's rewrite for one serving bundle."""

    def __init__(self, bundle: Bundle, token: str, prefer_eager: bool, gm: torch.fx.GraphModule,
                 fuse_adds: bool = True):
        self.bundle, self.token, self.prefer_eager, self.gm = bundle, token, prefer_eager, gm
        self.fuse_adds = fuse_adds
        self.moved: dict[torch.fx.Node, torch.fx.Node] = {}  # a fused add -> the node of its sum

    def call_of(self, sp: Spelling, node: torch.fx.Node) -> tuple[_Call, dict[str, Any]] | NormDecision:
        """A norm node's call and its arguments by name, or the decision where they were not traced."""
        args: dict[str, Any] = dict(zip(sp.params, node.args))
        args.update(node.kwargs)
        for k, v in sp.defaults.items():
            args.setdefault(k, v)
        where, source = _where(node)
        gm = self.gm
        x = _value(args.get("input"), gm)
        if not isinstance(x, torch.Tensor) or any(n not in args for n in sp.params):
            dtype = str(getattr(x, "dtype", "?")).removeprefix("torch.")
            return NormDecision(where, source, sp.name, sp.op, (), dtype, (FORWARD,), (), Runs.GRAPH,
                                Why.UNSUPPORTED, "arguments not traced")
        out = node.meta.get("example_value")
        out = out[0] if sp.native and isinstance(out, (tuple, list)) else out
        param = (_value(args.get("num_groups", args.get("group")), gm) if sp.op == "group_norm"
                 else _value(args["normalized_shape"], gm))
        call = _Call(sp.op, sp.name, where, source, x, _value(args.get("weight"), gm), _value(args.get("bias"), gm),
                     _number(_value(args.get("eps"), gm)), param, out, sp.native)
        return call, args

    def decide(self, c: _Call, residual: bool = False, grad_h: bool = False) -> tuple[NormDecision, bool]:
        """The decision on one norm, and whether it runs the kernels; ``residual``: on the kernels of
        its fused residual form (the backward's with ``grad_h`` where the sum has other users)."""
        x, w, b = c.x, c.w, c.b
        dims = [_dim(d) for d in x.shape]
        hints = tuple(h for h, _ in dims)
        symbols = [s for _, s in dims if s is not None]
        shape = tuple(s or h for h, s in dims)
        dtype = str(x.dtype).removeprefix("torch.")
        masks = _masks(c.op, x, w, b, c.out)

        def decision(runs: Runs, why: Why, detail: str, kernels=()) -> tuple[NormDecision, bool]:
            return NormDecision(c.where, c.source, c.spelling, c.op, shape, dtype, tuple(masks), tuple(kernels), runs,
                                why, detail), runs is Runs.KERNEL

        if x.device.type != self.bundle.device_type:
            return decision(Runs.GRAPH, Why.DEVICE, f"on {x.device}, the bundle runs on {self.bundle.device.uri}")
        kdt = name_of(x.dtype)
        if kdt is None:
            return decision(Runs.GRAPH, Why.DTYPE, f"{dtype}: kernels take float32, float16 or bfloat16")
        mixed = [f"{n} {str(t.dtype).removeprefix('torch.')}" for n, t in (("weight", w), ("bias", b))
                 if isinstance(t, torch.Tensor) and t.dtype != x.dtype]
        if mixed and c.native:  # (its statistics' dtypes are ATen's for the mix; the kernels' are their dtype's)
            return decision(Runs.GRAPH, Why.DTYPE, f"{', '.join(mixed)} beside a {dtype} input to ATen's native op")
        if c.op == "group_norm":
            if not isinstance(c.param, int):
                return decision(Runs.GRAPH, Why.UNSUPPORTED, f"groups {c.param!r} not a constant")
            param: Any = c.param
        else:
            ns = [_dim(d) for d in c.param]
            if any(sym is not None for _, sym in ns):
                return decision(Runs.GRAPH, Why.UNSUPPORTED, "a symbolic normalized shape")
            param = tuple(h for h, _ in ns)
        if c.op != "rms_norm" and c.eps is None:
            return decision(Runs.GRAPH, Why.UNSUPPORTED, "eps unknown while tracing")
        try:
            sigs = [_signature(c.op, hints, kdt, m, c.eps, param, w is not None, b is not None, c.offset,
                               residual and (m == FORWARD or grad_h and bool(m & ops.get(c.op).grads[0])))
                    for m in masks]
        except (SignatureError, ValueError, TypeError) as e:
            return decision(Runs.GRAPH, Why.UNSUPPORTED, str(e))
        found = [self.bundle.serving(s) for s in sigs]
        kernels = [k.key for k in found if k is not None]
        missing = [s.key for s, k in zip(sigs, found) if k is None]
        if missing:
            return decision(Runs.GRAPH, Why.NO_KERNEL, "no kernel " + ", ".join(missing), kernels)
        fixed = ""
        if symbols:
            static = [k.key for k in found if k is not None and not k.sig.is_dynamic]
            if static:
                return decision(Runs.GRAPH, Why.STATIC_ONLY, f"sizes {', '.join(symbols)} are symbolic, kernel "
                                f"{', '.join(static)} serves {list(hints)} only", kernels)
            pinned = _pinned(dims, [k.sig for k in found if k is not None])
            if pinned:
                fixed = f"; other sizes of {', '.join(pinned)} (fixed in the kernels) run torch's op"
        detail = "the bundle's kernels" + ("" if self.prefer_eager else " (prefer_eager=False)")
        if self.prefer_eager:
            beaten, eager, fell_back = [], [], []
            for s, k in zip(sigs, found):
                assert k is not None  # none missing
                v = k.compiled_for(s)
                if v is None:  # no verdict against torch.compile: torch eager's decides, said so
                    fell_back.append(f"{k.key} ({k.compiled_why})")
                    if k.eager_for(s):
                        eager.append(k.key)
                elif v:
                    beaten.append(k.key)
            against = (f"; no verdict against torch.compile for {', '.join(fell_back)}: decided against torch "
                       "eager" if fell_back else "")
            if beaten:
                return decision(Runs.GRAPH, Why.COMPILED_FASTER, f"torch.compile's code not beaten by kernel "
                                f"{', '.join(beaten)} in the build's timings (prefer_eager=False runs it)" + against,
                                kernels)
            if eager:
                return decision(Runs.GRAPH, Why.EAGER_FASTER, f"torch eager beat kernel {', '.join(eager)} in the "
                                "build's timings (prefer_eager=False runs it)" + against, kernels)
            detail += ("; the build found them faster than torch.compile" if len(fell_back) < len(sigs) else
                       "; the build did not find torch eager faster") + against
        if mixed:
            detail += f"; {', '.join(mixed)} cast to {dtype}, whose kernel runs"
        return decision(Runs.KERNEL, Why.SERVED, detail + fixed, kernels)

    def with_add(self, c: _Call, x: Any, norm: Sequence[torch.fx.Node], args: Sequence[Any]
                 ) -> tuple[NormDecision, bool, ResidualAdd | None, torch.fx.Node | None]:
        """The decision on a norm whose input is node ``x`` (its nodes ``norm``, the fused call's other
        arguments ``args``): fused with the add giving ``x`` where that add fuses (``residual_adds``) and
        the fused form's kernels are held (and win, with ``prefer_eager``), else as ``decide``;
        -> (decision, runs the kernels, the add to fuse and where its call goes, or None)."""
        add = residual_add(self.moved.get(x, x)) if self.fuse_adds and ops.get(c.op).residuals else None
        if add is None:
            return (*self.decide(c), None, None)
        why = add.problem
        at = anchor(self.gm.graph, add, args, norm) if not why else None
        if not why and at is None:
            why = "the sum is used before the norm's weight or eps is computed"
        if not why:
            d, runs = self.decide(c, residual=True, grad_h=other_users(add, norm))
            if runs:
                return replace(d, fused=True), True, add, at
            why = f"its fused form not run: {d.detail}"
        d, runs = self.decide(c)
        return replace(d, add=why), runs, None, None

    def fuse(self, c: _Call, add: ResidualAdd, at: torch.fx.Node, output: torch.fx.Node,
             norm: Sequence[torch.fx.Node], rest: tuple, eps_input: torch.fx.Node | None = None,
             perm: Sequence[int] | None = None) -> torch.fx.Node:
        """The add and the norm (``output``, its nodes ``norm``) replaced by one fused call after ``at``,
        its arguments the add's operands and ``rest`` (an eps read from ``eps_input`` at each call
        where given); -> the node of the norm's results."""
        g = self.gm.graph
        a, b = add.operands
        with g.inserting_after(at):
            # an eps the graph takes as an input is read at each call: the op looks its kernel up by it
            eps: Any = None if eps_input is None else g.call_method("item", (eps_input,))
        if eps is not None:
            eps.meta["example_value"] = c.eps
            rest = tuple(eps if r is _EPS else r for r in rest)
        target = boo_add_rms_norm if c.op == "rms_norm" else boo_add_layer_norm
        with g.inserting_after(eps if eps is not None else at):
            call = g.call_function(target, (a, b, *rest, *(() if perm is None else (list(perm),))))
        y = rewire(g, call, output, add, norm)
        self.moved[add.node] = next(u for u in call.users if u.args[1] == 1)
        return y

    def respell(self, sp: Spelling, node: torch.fx.Node, args: dict[str, Any], out_dtype: Any) -> None:
        tok = self.token
        if sp.op == "layer_norm":
            node.target = boo_layer_norm
            node.args = (args["input"], args["normalized_shape"], args["weight"], args["bias"], args["eps"], tok,
                         sp.native, out_dtype)
        elif sp.op == "rms_norm":
            node.target = boo_rms_norm
            node.args = (args["input"], args["normalized_shape"], args["weight"], args["eps"], tok, sp.native, 0.0,
                         out_dtype)
        else:
            node.target = boo_group_norm
            node.args = (args["input"], args["weight"], args["bias"], args.get("num_groups", args.get("group")),
                         args["eps"], tok, sp.native, out_dtype)
        node.kwargs = {}

    def region_call(self, r: Region) -> _Call | NormDecision:
        """A probed module's call, or the decision where it is not served as one (its probe, its nodes)."""
        where, source = _where(r.output if r.output is not None else r.nodes[-1])
        spelling = f"{type(r.module).__name__}.forward"
        x = r.input.meta.get("example_value") if r.input is not None else None
        shape = tuple(_dim(d)[1] or _dim(d)[0] for d in x.shape) if isinstance(x, torch.Tensor) else ()
        dtype = str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else "?"
        form = r.form
        why = ("not probed (auto=False): a weight and an eps, it may be a norm written by hand" if form is None
               else "probed: " + form.why() if not form.ok else r.problem)
        if why or form is None:
            op = form.op or "" if form is not None else ""
            return NormDecision(where, source, spelling, op, shape, dtype, (FORWARD,), (), Runs.GRAPH, Why.FORM, why)
        assert r.weight is not None and r.output is not None and form.op is not None
        w = r.weight.meta.get("example_value")
        b = r.bias.meta.get("example_value") if r.bias is not None and form.bias else None
        return _Call(form.op, spelling, where, source, x, w, b, form.eps, form.normalized_shape,
                     r.output.meta.get("example_value"), False, form.weight_offset)

    def inline_call(self, n: InlineNorm) -> _Call | NormDecision:
        """A norm written inline's call (its input permuted where it is normalized over other dims than
        the last), or the decision where its match is not exact."""
        where, source = _where(n.output if n.output is not None else n.anchor)
        x = n.input.meta.get("example_value") if n.input is not None else None
        shape = tuple(_dim(d)[1] or _dim(d)[0] for d in x.shape) if isinstance(x, torch.Tensor) else ()
        dtype = str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else "?"
        if n.problem or n.output is None or not isinstance(x, torch.Tensor):
            return NormDecision(where, source, n.spelling, n.op, shape, dtype, (FORWARD,), (), Runs.GRAPH, Why.FORM,
                                n.problem)
        perm = n.permutation
        spelling = n.spelling if perm is None else f"{n.spelling} over dims {list(n.dims)}, permuted last"
        w, b = (p.meta.get("example_value") if p is not None else None for p in (n.weight, n.bias))
        return _Call(n.op, spelling, where, source, x if perm is None else x.permute(perm), w, b, n.eps,
                     n.normalized_shape, n.output.meta.get("example_value"), False, n.offset)

    def replace(self, input: torch.fx.Node, output: torch.fx.Node, weight: torch.fx.Node | None,
                bias: torch.fx.Node | None, eps_input: torch.fx.Node | None, nodes: Sequence[torch.fx.Node], c: _Call,
                perm: Sequence[int] | None = None, add: tuple[ResidualAdd, torch.fx.Node] | None = None
                ) -> torch.fx.Node:
        """A norm's nodes (a module's region, a norm written inline) replaced by one call of the op's graph
        function, giving the dtype its output had (``add``: fused with that add, the call after that
        node); -> that call."""
        g, y = self.gm.graph, output
        out_dtype = c.out.dtype if c.out.dtype != c.x.dtype else None
        if add is not None:
            eps_arg = c.eps if eps_input is None else _EPS
            rest = ((list(c.param), weight, eps_arg, self.token, False, c.offset, out_dtype) if c.op == "rms_norm"
                    else (list(c.param), weight, bias if c.b is not None else None, eps_arg, self.token, False,
                          out_dtype))
            return self.fuse(c, add[0], add[1], y, nodes, rest, eps_input, perm)
        with g.inserting_after(y):
            # an eps the graph takes as an input is read at each call: the op looks its kernel up by it
            eps: Any = c.eps if eps_input is None else g.call_method("item", (eps_input,))
            if eps_input is not None:
                eps.meta["example_value"] = c.eps
        perm = list(perm) if perm is not None else None
        if c.op == "rms_norm":
            target: Any = boo_rms_norm
            args: tuple = (input, list(c.param), weight, eps, self.token, False, c.offset, out_dtype, perm)
        else:
            target = boo_layer_norm
            args = (input, list(c.param), weight, bias if c.b is not None else None, eps, self.token, False,
                    out_dtype, perm)
        with g.inserting_after(eps if isinstance(eps, torch.fx.Node) else y):
            new = g.call_function(target, args)
        new.meta.update(y.meta)  # its example value (shape, dtype), module stack and source line
        y.replace_all_uses_with(new)
        for n in reversed(nodes):
            if not n.users:
                g.erase_node(n)
        return new


def rewrite(gm: torch.fx.GraphModule, bundle: Bundle, token: str, prefer_eager: bool,
            fallback: str | None, auto: bool = True, fuse_adds: bool = True) -> list[NormDecision]:
    """Rewrite, in place, the norms of Dynamo graph ``gm`` that ``bundle`` serves
    (named by ``token`` in the graph) into its custom ops; -> every norm found and
    what runs it, and every module that may be a norm written by hand, and every
    look-alike written inline, and why it is not served. ``fallback=None``: ``NormNotServed`` for a norm it cannot serve.
    ``auto=False``: modules written by hand are not probed (``module_norms``), norms
    written inline not matched (``inline_norms``). ``fuse_adds=False``: no add fused with its norm."""
    p = _Pass(bundle, token, prefer_eager, gm, fuse_adds)
    out: list[tuple[torch.fx.Node, NormDecision]] = []
    spelled: list[torch.fx.Node] = []

    def decided(node: torch.fx.Node, d: NormDecision) -> None:
        if fallback is None and d.runs is Runs.GRAPH and d.why not in NEVER_SERVED:
            raise NormNotServed(d)
        out.append((node, d))

    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        sp = spelling_of(node.target)
        if sp is None:
            never = never_served(node.target)
            if never is not None:
                spelled.append(node)
                where, source = _where(node)
                x = _value(node.args[0] if node.args else node.kwargs.get("input"), gm)
                shape = tuple(_dim(d)[1] or _dim(d)[0] for d in x.shape) if isinstance(x, torch.Tensor) else ()
                decided(node, NormDecision(where, source, never[0], "", shape,
                                           str(getattr(x, "dtype", "?")).removeprefix("torch."), (FORWARD,), (),
                                           Runs.GRAPH, Why.KIND, never[1]))
            continue
        spelled.append(node)
        got = p.call_of(sp, node)
        if isinstance(got, NormDecision):
            decided(node, got)
            continue
        call, args = got
        d, runs, add, at = p.with_add(call, args["input"], [node], [args[k] for k in sp.params if k != "input"])
        if runs:
            out_dtype = call.out.dtype if isinstance(call.out, torch.Tensor) and call.out.dtype != call.x.dtype \
                else None
            if add is not None and at is not None:
                rest = ((args["normalized_shape"], args["weight"], args["eps"], p.token, sp.native, 0.0, out_dtype)
                        if sp.op == "rms_norm" else (args["normalized_shape"], args["weight"], args["bias"],
                                                     args["eps"], p.token, sp.native, out_dtype))
                node = p.fuse(call, add, at, node, [node], rest)
            else:
                p.respell(sp, node, args, out_dtype)
        decided(node, d)
    found = regions(gm, spelled, auto)
    for r in found:
        where = r.output if r.output is not None else r.nodes[-1]
        rc = p.region_call(r)
        if isinstance(rc, NormDecision):
            decided(where, rc)
            continue
        d, runs, add, at = p.with_add(rc, r.input, r.nodes, [r.weight, r.bias, r.eps])
        if runs:
            assert r.input is not None and r.output is not None
            where = p.replace(p.moved.get(r.input, r.input), r.output, r.weight, r.bias, r.eps, r.nodes, rc,
                              add=(add, at) if add is not None and at is not None else None)
        decided(where, d)
    inline = find(gm.graph, [n for r in found for n in r.nodes] + spelled) if auto else []
    for n in inline:
        ic = p.inline_call(n)
        if isinstance(ic, NormDecision):
            decided(n.anchor, ic)
            continue
        d, runs, add, at = p.with_add(ic, n.input, n.nodes, [n.weight, n.bias, n.eps_input])
        if n.permutation is not None and not runs:
            d = replace(d, detail=f"normalized over dim{'s' * (len(n.dims) > 1)} {', '.join(map(str, n.dims))}: "
                        f"{d.detail}")
        if runs:
            assert n.input is not None and n.output is not None
            node = p.replace(p.moved.get(n.input, n.input), n.output, n.weight, n.bias, n.eps_input, n.nodes, ic,
                             n.permutation, (add, at) if add is not None and at is not None else None)
        decided(node if runs else n.anchor, d)
    if any(d.runs is Runs.KERNEL for _, d in out):
        gm.graph.lint()
        gm.recompile()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}  # graph order (a replaced region's node is gone: last)
    return [d for _, d in sorted(out, key=lambda nd: order.get(nd[0], len(order)))]


__all__ = ["NEVER_SERVED", "NormDecision", "NormNotServed", "Runs", "Why", "boo_add_layer_norm", "boo_add_rms_norm",
           "boo_group_norm", "boo_layer_norm", "boo_rms_norm", "never_served", "rewrite", "spelling_of"]
