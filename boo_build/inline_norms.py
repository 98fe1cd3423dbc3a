"""Norms written inline in a bigger module's ``forward`` (no module of their own), found
in a graph's dataflow: one matcher for the compile backend's pass (``loader/norm_pass.py``)
and the trace recorder (``boo_build.trace``), which must agree on what is served and
recorded.

Such a norm is a handful of ordinary nodes: ``pow``, ``mean``, ``add``, ``rsqrt``,
``mul``, casts... The matcher starts where every spelling looks like a norm, an ``rsqrt``
or ``sqrt`` of a statistic plus eps (``mean(... ** 2, dims, keepdim=True) + eps``, or a
variance), and grows the match along the norm's math, one small pattern per spelling
family (``_STATISTICS``, ``root_kind``, ``_normalized``, ``_tail``), each naming
where it is seen. A match is exact: each intermediate is used by the norm alone, the
statistics reduce the same dims, the normalized tensor is the one the statistics read,
casts stay within the input's dtype and float32/float64 (in any order), and the weight
and bias are graph inputs that broadcast as the normalized shape. Anything else on the
way (a gate, an extra term, a weight of another shape, an unbiased variance...) leaves
the code as it is, and the match says why (``InlineNorm.problem``). An exact match is
then run on a small probe input, its output compared with the norm's float64 math: a
safety net under the structure, never a replacement for it.

The graph is a Dynamo graph (``call_method`` and ``call_function`` nodes on torch's
functions and ``operator``'s) or one written the same way from eager calls (``Tensor``
methods as functions); each node's ``meta["example_value"]`` holds its value's shape
and dtype (a fake or meta tensor).

Imports torch (every caller runs torch models).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch.fx import Node

from .dtypes import TOLERANCES
from .graph_ops import (
    VIEWS,
    arg,
    cast_source,
    dims_of,
    is_op,
    number,
    op_of,
    rank,
    real_mode,
    root,
    run_node,
    static,
    value_of,
    widens,
)
from .probe import PROBE_MEAN, normalized  # the probe input's offset, and the float64 math it is compared with

RMS, LAYER = "rms_norm", "layer_norm"

# the reasons' leading words (docs/torch.md lists them; tests match them)
REUSED = "an intermediate is used outside the norm"
GATE = "a gate multiplies the normalized value"
EXTRA = "an extra term is added to the normalized value"
SCALED = "a number scales the normalized value before its weight"
WEIGHT_SHAPE = "its weight does not broadcast as the normalized shape"
BIAS_ONLY = "a bias without a weight: no kernel adds one alone"
OFFSET_LN = "a layer norm scaling by a number + weight: no layer-norm kernel has a weight offset"
DIMS = "its statistics reduce different dims"
UNBIASED = "its variance is unbiased (correction 1): a norm's is biased"
OTHER_INPUT = "it scales another tensor than the one its statistics read"
CASTS = "a cast to a narrower dtype inside the norm"
NOT_A_NORM = "its value on a probe input is not the norm's"
SIZES = "a symbolic size among the normalized dims"


@dataclass(frozen=True)
class InlineNorm:
    """One norm written inline, found in a graph: served where ``problem`` is empty."""

    op: str  # what it computes or looks like: rms_norm or layer_norm
    spelling: str  # how it is written: ``inline rms_norm (rsqrt)``...
    anchor: Node  # its rsqrt or sqrt (where it is reported)
    input: Node | None  # the tensor normalized, before its upcasts
    output: Node | None  # the node whose value is the norm's (its weight, bias and casts applied)
    nodes: tuple[Node, ...]  # every node of the match, in graph order (those left unused once replaced are erased)
    dims: tuple[int, ...]  # the normalized dims, >= 0, ascending
    normalized_shape: tuple[int, ...]
    weight: Node | None  # the graph input its weight is (before views and casts)
    bias: Node | None
    eps: float | None
    eps_input: Node | None  # the graph input eps is read from (a float attribute under dynamic=True), else None
    offset: float  # an RMS norm scaling by offset + weight (Gemma's 1 + weight: 1.0)
    problem: str  # why it is left; "" where the match is exact

    @property
    def permutation(self) -> tuple[int, ...] | None:
        """The dims' order that moves the normalized dims last (channels-last), None where they are."""
        r = rank(self.input)
        if self.dims == tuple(range(r - len(self.dims), r)):
            return None
        return tuple(d for d in range(r) if d not in self.dims) + self.dims


# --------------------------------------------------------------- the patterns
@dataclass
class _Match:
    """A match being grown."""

    op: str
    how: str  # the spelling's words
    x: Node
    dims: tuple[int, ...]
    core: list[Node]  # the norm's own nodes: none may be used outside the match
    prep: list[Node]  # casts of the input, views and casts of the parameters, eps's read: may be shared
    eps: float | None = None
    eps_input: Node | None = None
    weight: Node | None = None
    bias: Node | None = None
    offset: float = 0.0
    output: Node | None = None
    problem: str = ""


def _square(n: Any) -> Node | None:
    """The tensor ``n`` squares: ``t.pow(2)``, ``t ** 2``, ``t * t``, ``t.square()`` (Llama's, T5's,
    Mamba's ``x.square()``; the ``x * x`` of hand-rolled kernels' references)."""
    o = op_of(n)
    if o is None:
        return None
    name, args, _ = o
    if name == "pow" and len(args) == 2 and number(args[1]) == 2.0:
        return args[0]
    if name == "mul" and len(args) == 2 and args[0] is args[1]:
        return args[0]
    if name == "square" and args:
        return args[0]
    return None


def _mean_of_squares(s: Node) -> _Match | None:
    """RMS norms: ``mean(t ** 2, dims, keepdim=True)``. Seen in Llama's and Mistral's reference
    code (``x.pow(2).mean(-1, keepdim=True)``), transformers' Llama/Qwen2/Gemma/T5 classes
    written inline, Mamba's ``rms_norm_ref`` (``x.square().mean(dim=-1, keepdim=True)``)."""
    o = op_of(s)
    if o is None or o[0] != "mean" or arg(o, 2, "keepdim") is not True or o[2].get("dtype") is not None:
        return None
    t = _square(o[1][0])
    if t is None or root(t)[0] is None:
        return None
    x, casts = root(t)
    dims = dims_of(o, rank(x))
    if dims is None:
        return None
    return _Match(RMS, "mean of squares", x, dims, [s, o[1][0]], casts)


def _centred(d: Any) -> tuple[Node, Node, list[Node]] | None:
    """(x, its mean, x's casts) where ``d`` is ``x - mean(x, dims, keepdim=True)``."""
    o = op_of(d)
    if o is None or o[0] != "sub" or len(o[1]) != 2:
        return None
    a, u = o[1]
    uo = op_of(u)
    if uo is None or uo[0] != "mean" or arg(uo, 2, "keepdim") is not True or uo[2].get("dtype") is not None:
        return None
    x, casts = root(a)
    ux, ucasts = root(uo[1][0])
    return (x, u, casts + ucasts) if x is ux and isinstance(x, Node) else None


def _variance(s: Node) -> _Match | None:
    """Layer norms written out: ``mean((x - u) ** 2, dims, keepdim=True)`` with ``u = x.mean(dims,
    keepdim=True)`` (the original BERT port's ``BertLayerNorm``, ConvNeXt's channels-first
    ``LayerNorm``, GPT-2's ``norm``), or ``x.var(dims, unbiased=False, keepdim=True)``
    (lucidrains' channel layer norms)."""
    o = op_of(s)
    if o is None or arg(o, 2 if o[0] == "mean" else 3, "keepdim") is not True:
        return None
    if o[0] == "mean" and o[2].get("dtype") is None:
        c = _centred(_square(o[1][0]))
        if c is None:
            return None
        x, u, casts = c
        dims, udims = dims_of(o, rank(x)), dims_of(op_of(u), rank(x))  # type: ignore[arg-type]
        if dims is None or udims is None:
            return None
        m = _Match(LAYER, "mean and biased variance", x, dims, [s, o[1][0], _square(o[1][0]), u], casts)
        if udims != dims:
            m.problem = f"{DIMS}: its mean over {list(udims)}, its variance over {list(dims)}"
        return m
    if o[0] == "var":
        x, casts = root(o[1][0])
        dims = dims_of(o, rank(x))
        if dims is None or not isinstance(x, Node):
            return None
        m = _Match(LAYER, "mean and var", x, dims, [s], casts)
        unbiased, correction = arg(o, 2, "unbiased"), o[2].get("correction")
        if not (unbiased is False or (unbiased is None and correction == 0)):
            m.problem = UNBIASED
        return m
    return None


_STATISTICS: tuple[Callable[[Node], _Match | None], ...] = (_variance, _mean_of_squares)  # a centred x first


def _eps(a: Node, s: Node, m: _Match) -> bool:
    """``a`` is ``s + eps``: eps a number, or a float attribute read from a graph input
    (Dynamo's ``item`` of ``L['self'].eps`` under ``dynamic=True``)."""
    o = op_of(a)
    if o is None or o[0] != "add" or len(o[1]) != 2 or s not in o[1]:
        return False
    e = o[1][1] if o[1][0] is s else o[1][0]
    if number(e) is not None:
        m.eps = number(e)
        return True
    if isinstance(e, Node) and e.op == "call_method" and e.target == "item" and isinstance(e.args[0], Node):
        src = e.args[0]
        value = _real(src)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            m.eps, m.eps_input = float(value.item()), src
            m.prep.append(e)
            return True
    return False


def _real(n: Node) -> Any:
    """The real value a graph input stands for (Dynamo's ``grapharg``), None where unknown."""
    arg = n.meta.get("grapharg") if n.op == "placeholder" else None
    if arg is not None:
        return getattr(arg, "example", None)
    v = n.meta.get("real_value")  # the eager graph keeps it so
    return v if isinstance(v, torch.Tensor) else None


def _normalized(m: _Match, kind: str, r: Node) -> Node | None:
    """The normalized tensor: ``x * rsqrt(...)``, ``x * (1 / sqrt(...))``, ``x * sqrt(...).reciprocal()``
    (Mamba's ``rstd = 1 / torch.sqrt(...)``), ``x / sqrt(...)`` (the BERT port's, ConvNeXt's), with
    ``x - mean`` in place of ``x`` for a layer norm; None where ``r`` is used otherwise."""
    if len(r.users) != 1:
        m.problem = f"{REUSED} ({kind} {r.name} is used by {', '.join(u.name for u in r.users)})"
        return None
    u = next(iter(r.users))
    o = op_of(u)
    if o is None:
        return None
    if kind == "sqrt" and (o[0] == "div" and len(o[1]) == 2 and number(o[1][0]) == 1.0 and o[1][1] is r
                           or o[0] == "reciprocal" and o[1][:1] == [r]):
        m.core.append(u)  # 1 / sqrt: an rsqrt
        return _normalized(m, "rsqrt", u)
    if kind == "rsqrt" and o[0] == "mul" and r in o[1] and len(o[1]) == 2:
        t = o[1][1] if o[1][0] is r else o[1][0]
    elif kind == "sqrt" and o[0] == "div" and len(o[1]) == 2 and o[1][1] is r:
        t = o[1][0]
    else:
        return None
    if m.op == LAYER:
        c = _centred(t)
        if c is None or c[0] is not m.x:
            m.problem = OTHER_INPUT + f" ({t.name if isinstance(t, Node) else t!r}, not {m.x.name} - its mean)"
            return u
        udims = dims_of(op_of(c[1]), rank(m.x))  # type: ignore[arg-type]
        if udims != m.dims:
            m.problem = f"{DIMS}: its mean over {list(udims or ())}, its variance over {list(m.dims)}"
            return u
        m.core.append(t)
        m.core.append(c[1])
        m.prep.extend(c[2])
    else:
        x, casts = root(t)
        if x is not m.x:
            m.problem = f"{OTHER_INPUT} ({t.name if isinstance(t, Node) else t!r}, not {m.x.name})"
            return u
        m.prep.extend(casts)
    m.core.append(u)
    return u


def _parameter(o: Any, m: _Match, x: torch.Tensor, offset_ok: bool) -> tuple[Node | None, float, list[Node], str]:
    """(the graph input ``o`` is, its offset, the views and casts on the way, a problem) where ``o``
    is a weight or bias: a graph input (a Parameter) through views that add or drop size-1 dims
    (``w[:, None, None]``, ConvNeXt's), casts (``w.float()``) and, for a weight, a number added
    (Gemma's ``1 + w``); (None, 0, [], "") where ``o`` is computed from other tensors."""
    offset, nodes, n = 0.0, [], o
    while isinstance(n, Node) and n.op not in ("placeholder", "get_attr"):
        p = op_of(n)
        src = cast_source(n)
        if src is not None:
            nodes.append(n)
            n = src
        elif p is not None and p[0] in VIEWS and _pure_view(p):
            nodes.append(n)
            n = p[1][0]
        elif p is not None and p[0] == "add" and offset_ok and not offset and len(p[1]) == 2 \
                and any(number(a) is not None for a in p[1]):
            offset = next(number(a) for a in p[1] if number(a) is not None) or 0.0
            nodes.append(n)
            n = next(a for a in p[1] if number(a) is None)
        else:
            return None, 0.0, [], ""
    v, ov = value_of(n), value_of(o)
    if not isinstance(v, torch.Tensor) or not isinstance(ov, torch.Tensor):
        return None, 0.0, [], ""
    shape, rank = list(ov.shape), x.dim()
    aligned = [1] * (rank - len(shape)) + shape if len(shape) <= rank else None
    want = [x.shape[d] if d in m.dims else 1 for d in range(rank)]
    if aligned is None or any(static(a) != static(w) for a, w in zip(aligned, want)) \
            or v.numel() != math.prod(want):
        if aligned is None or 0 not in m.dims and static(aligned[0]) != 1:  # it varies along the batch: a gate
            return None, 0.0, [], ""
        return n, offset, nodes, (f"{WEIGHT_SHAPE} ({n.name} of shape {list(ov.shape)} over a {list(x.shape)} "
                                  f"input normalized over dims {list(m.dims)})")
    return n, offset, nodes, ""


def _pure_view(p: tuple[str, list, dict]) -> bool:
    """A view that adds or drops size-1 dims and keeps the elements' order (so ``reshape`` to the
    normalized shape gives the same weight): ``w[:, None, None]``, ``w.view(1, 1, -1)``, ``w.unsqueeze(0)``."""
    name, args, _ = p
    if name == "getitem":
        idx = args[1] if isinstance(args[1], tuple) else (args[1],)
        return all(i is None or i is Ellipsis or i == slice(None) for i in idx)
    return name in ("view", "reshape", "unsqueeze")


def _tail(m: _Match, n: Node, x: torch.Tensor) -> None:
    """The norm's steps after the normalized tensor (``_normalized``): casts (Llama's ``.to(input_dtype)``,
    T5's, Gemma's ``.type_as(x)``), then times a weight (or ``offset + weight``), then, for a layer norm, plus
    a bias (``w * y + b``: the BERT port's, ConvNeXt's with ``[:, None, None]``). The match ends after its
    weight (or its bias); before that, anything else done to the normalized tensor leaves it."""
    cur, done = n, False
    while not m.problem:
        users = list(cur.users)
        if len(users) != 1:
            steps = [u for u in users if is_op(u, "mul", "add", "sub", "div")]
            if steps and not done:
                m.problem = f"{REUSED} (the normalized {cur.name} is used by {', '.join(u.name for u in users)})"
            break
        u = users[0]
        o, src = op_of(u), cast_source(u)
        if src is not None:
            if not done and not widens(x.dtype, value_of(u).dtype) and value_of(u).dtype != x.dtype:
                m.problem = f"{CASTS} ({u.name} to {str(value_of(u).dtype).removeprefix('torch.')})"
                break
            m.core.append(u)
            cur = u
            continue
        if o is None or o[0] not in ("mul", "add", "sub", "div") or len(o[1]) != 2 or cur not in o[1]:
            break
        name, other = o[0], (o[1][1] if o[1][0] is cur else o[1][0])
        num = number(other)
        if name == "mul" and m.weight is None and num is None:
            p, offset, nodes, problem = _parameter(other, m, x, offset_ok=True)
            if p is not None:
                m.problem = problem or (OFFSET_LN if offset and m.op == LAYER else "")
                m.weight, m.offset, done = p, offset, True
                m.core.append(u)
                m.prep.extend(nodes)
                cur = u
                continue
        if name == "add" and m.op == LAYER and m.bias is None and num is None:
            p, _, nodes, problem = _parameter(other, m, x, offset_ok=False)
            if p is not None:
                m.problem = problem or ("" if m.weight is not None else BIAS_ONLY)
                m.bias, done = p, True
                m.core.append(u)
                m.prep.extend(nodes)
                cur = u
                continue
        if not done:
            what = other.name if isinstance(other, Node) else repr(other)
            m.problem = (f"{SCALED if num is not None else GATE if name in ('mul', 'div') else EXTRA} "
                         f"({u.name}: {name} {what})")
        break
    m.output = cur


def _grow(r: Node, kind: str) -> _Match | None:
    """The match from an rsqrt or sqrt ``r``: None where ``r`` is not a root of a statistic plus eps."""
    a = r.args[0] if r.args else None
    o = op_of(a)
    if not isinstance(a, Node) or o is None or o[0] != "add" or len(o[1]) != 2:
        return None
    for s in o[1]:
        if not isinstance(s, Node):
            continue
        for pattern in _STATISTICS:
            m = pattern(s)
            if m is None:
                continue
            m.core += [a, r]
            if not _eps(a, s, m):
                m.problem = m.problem or f"{EXTRA} where eps is ({a.name}: {s.name} + something not a number)"
            return m
    return None


# --------------------------------------------------------------- the matcher
def find(graph: torch.fx.Graph, skip: Iterable[Node] = ()) -> list[InlineNorm]:
    """Every norm written inline in ``graph`` (but those with a node in ``skip``: norms spelled as
    one node, modules written by hand, which the caller serves itself), exact or with the reason
    it is left, in graph order."""
    skipped = set(skip)
    out: list[InlineNorm] = []
    for r in list(graph.nodes):
        kind = root_kind(r) if r not in skipped else None
        if kind is None:
            continue
        m = _grow(r, kind)
        if m is None:
            continue
        xv = value_of(m.x)
        if not isinstance(xv, torch.Tensor):
            continue
        n = _normalized(m, kind, r) if not m.problem else None
        if n is None and not m.problem:
            m.problem = f"{OTHER_INPUT} ({r.name} is used by {', '.join(u.name for u in r.users)})"
        if n is not None and not m.problem:
            _tail(m, n, xv)
        if any(c in skipped for c in m.core):
            continue
        out.append(_finish(m, r, kind, xv))
    return out


def root_kind(r: Node) -> str | None:
    """``rsqrt`` or ``sqrt`` where ``r`` takes one: ``torch.rsqrt(a)``, ``a ** -0.5`` (rsqrt),
    ``torch.sqrt(a)``, ``a.sqrt()``, ``a ** 0.5`` (sqrt); else None."""
    o = op_of(r)
    if o is None or not o[1] or not isinstance(o[1][0], Node):
        return None
    if o[0] in ("rsqrt", "sqrt") and len(o[1]) == 1:
        return o[0]
    if o[0] == "pow" and len(o[1]) == 2 and number(o[1][1]) in (-0.5, 0.5):
        return "rsqrt" if number(o[1][1]) == -0.5 else "sqrt"
    return None


def _finish(m: _Match, r: Node, kind: str, x: torch.Tensor) -> InlineNorm:
    """The match checked: its intermediates used by it alone, its dims' sizes static, its value on a probe."""
    core = list(dict.fromkeys(c for c in m.core if isinstance(c, Node)))
    inside = set(core) | set(m.prep)
    problem = m.problem
    if not problem:
        for c in core:
            if c is not m.output and any(u not in inside for u in c.users):
                used = [u.name for u in c.users if u not in inside]
                problem = f"{REUSED} ({c.name} is used by {', '.join(used)})"
                break
    sizes = tuple(static(x.shape[d]) for d in m.dims)
    if not problem and any(s is None for s in sizes):
        problem = f"{SIZES} ({list(x.shape)} over dims {list(m.dims)})"
    shape = tuple(s if s is not None else 0 for s in sizes)
    if not problem and m.output is not None:
        problem = _probe(m, core + list(m.prep), x, shape)
    order = {n: i for i, n in enumerate(r.graph.nodes)}
    nodes = tuple(sorted(set(core) | set(m.prep), key=lambda n: order.get(n, -1)))
    how = f"inline {m.op} ({m.how}, {'1 / ' if kind == 'sqrt' else ''}{kind})"
    return InlineNorm(m.op, how, r, m.x, m.output, nodes, m.dims, shape, m.weight, m.bias, m.eps, m.eps_input,
                      m.offset, problem)


# --------------------------------------------------------------- the probe
def _probe(m: _Match, nodes: list[Node], x: torch.Tensor, shape: tuple[int, ...]) -> str:
    """"" where the match's nodes, run on a small random input (its normalized dims' sizes, 2 rows
    along each other dim) and random parameters, give the norm's value within the tolerance of the
    input's dtype; else how they differ."""
    g = torch.Generator().manual_seed(0)  # its own: the process's random stream is left as it was
    size = [2] * x.dim()
    for d, s in zip(m.dims, shape):
        size[d] = s
    x64 = torch.randn(size, generator=g, dtype=torch.float64) + PROBE_MEAN
    env: dict[Node, Any] = {m.x: x64.to(x.dtype)}
    params: dict[str, torch.Tensor | None] = {"weight": None, "bias": None}
    for name, p in (("weight", m.weight), ("bias", m.bias)):
        v = value_of(p)
        if p is not None and isinstance(v, torch.Tensor):
            t = torch.randn(tuple(int(s) for s in v.shape), generator=g, dtype=torch.float64) * 0.3
            params[name] = t + 1 if name == "weight" else t
            env[p] = params[name].to(v.dtype)  # type: ignore[union-attr]
    if m.eps_input is not None:
        env[m.eps_input] = torch.tensor(m.eps, dtype=torch.float64)
    order = {n: i for i, n in enumerate(m.x.graph.nodes)}
    try:
        with real_mode():
            for n in sorted(set(nodes), key=lambda n: order.get(n, -1)):
                env[n] = run_node(n, env)
            y = env[m.output]
    except Exception as e:  # noqa: BLE001 - a failure is the answer: not a norm's math
        return f"{NOT_A_NORM} (it raised on a probe input: {type(e).__name__}: {e})"
    xd = x64.to(x.dtype).double()
    dims = list(m.dims)
    ref = normalized(xd, dims, m.op == LAYER, m.eps or 0.0)
    view = [s if d in m.dims else 1 for d, s in enumerate(size)]
    for name, t in params.items():
        if t is not None:
            t = t.to(value_of(m.weight if name == "weight" else m.bias).dtype).double().reshape(view)
            ref = ref * (m.offset + t) if name == "weight" else ref + t
    lowest = min((x.dtype, y.dtype), key=lambda d: d.itemsize)
    tol = TOLERANCES.get(str(lowest).removeprefix("torch."), TOLERANCES["float32"])
    err = (y.double() - ref).abs()
    if tuple(y.shape) != tuple(ref.shape) or not bool((err <= tol.atol * float(ref.abs().max()) + tol.rtol *
                                                        ref.abs()).all()):
        worst = float(err.max()) if tuple(y.shape) == tuple(ref.shape) else float("nan")
        return f"{NOT_A_NORM} (max error {worst:.3g})"
    return ""


__all__ = ["BIAS_ONLY", "CASTS", "DIMS", "EXTRA", "GATE", "InlineNorm", "LAYER", "NOT_A_NORM", "OFFSET_LN", "root_kind",
           "OTHER_INPUT", "REUSED", "RMS", "SCALED", "SIZES", "UNBIASED", "WEIGHT_SHAPE", "find"]
