"""Graph nodes read as torch ops, in one vocabulary (for ``inline_norms``): a Dynamo graph's
``call_method`` and ``call_function`` nodes on torch's functions and ``operator``'s, and a
graph written the same way from eager calls (``Tensor`` methods as functions, as a torch
function mode sees them: ``boo_build.trace``). Each node's ``meta["example_value"]`` holds
its value's shape and dtype (a fake or meta tensor). And one node run on real tensors.

Imports torch.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

# torch's functions and operator's as Dynamo records them, Tensor methods as the eager graph does
_FUNCTIONS: dict[Any, str] = {
    operator.add: "add", operator.mul: "mul", operator.truediv: "div", operator.sub: "sub", operator.pow: "pow",
    operator.getitem: "getitem", torch.add: "add", torch.mul: "mul", torch.div: "div", torch.true_divide: "div",
    torch.sub: "sub", torch.pow: "pow", torch.rsqrt: "rsqrt", torch.sqrt: "sqrt", torch.mean: "mean",
    torch.var: "var", torch.square: "square", torch.reciprocal: "reciprocal", torch.unsqueeze: "unsqueeze",
    torch.reshape: "reshape"}
_DUNDERS = {"__add__": "add", "__mul__": "mul", "__truediv__": "div", "__div__": "div", "__sub__": "sub",
            "__pow__": "pow", "__getitem__": "getitem"}
_SWAPPED = {"__radd__": "add", "__rmul__": "mul", "__rtruediv__": "div", "__rdiv__": "div", "__rsub__": "sub",
            "__rpow__": "pow"}
_METHODS = {"add", "mul", "div", "true_divide", "sub", "pow", "mean", "var", "rsqrt", "sqrt", "square", "reciprocal",
            "view", "reshape", "unsqueeze", "float", "half", "bfloat16", "double", "to", "type", "type_as"}
_CAST_NAMES = {"float", "half", "bfloat16", "double", "to", "type", "type_as"}
VIEWS = {"view", "reshape", "unsqueeze", "getitem"}


def op_of(n: Any) -> tuple[str, list, dict] | None:
    """(name, positional arguments with the tensor first, keyword arguments) of a node the
    matcher reads, in one vocabulary; None for any other node (or one with arguments that
    change its math: ``alpha``, ``rounding_mode``, ``out``)."""
    if not isinstance(n, Node):
        return None
    args, kwargs = list(n.args), dict(n.kwargs)
    if n.op == "call_method":
        name = "div" if n.target == "true_divide" else n.target
        if name not in _METHODS:
            return None
    elif n.op == "call_function":
        t = n.target
        name = _FUNCTIONS.get(t) if _hashable(t) else None
        tname = getattr(t, "__name__", "")
        if name is None and getattr(torch.Tensor, tname, None) is t:  # a Tensor method called as a function
            if tname in _SWAPPED:
                name, args = _SWAPPED[tname], args[::-1]
            else:
                name = _DUNDERS.get(tname, "div" if tname == "true_divide" else tname)
                if name not in _METHODS and name not in _DUNDERS.values():
                    return None
        if name is None:
            return None
    else:
        return None
    if any(kwargs.get(k) not in (None, 1) for k in ("alpha", "rounding_mode", "out")):
        return None
    kwargs = {k: v for k, v in kwargs.items() if k not in ("alpha", "rounding_mode", "out")}
    return name, args, kwargs


def _hashable(t: Any) -> bool:
    try:
        hash(t)
    except TypeError:
        return False
    return True


def value_of(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, Node) else None


def rank(n: Any) -> int:
    v = value_of(n)
    return v.dim() if isinstance(v, torch.Tensor) else 0


def static(d: Any) -> int | None:
    """A size as an int, None where it is symbolic."""
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        c = d.node.maybe_as_int()
        return None if c is None else int(c)
    return None


def number(a: Any) -> float | None:
    return float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None


def is_op(n: Any, *names: str) -> bool:
    o = op_of(n)
    return o is not None and o[0] in names


def arg(o: tuple[str, list, dict], i: int, name: str, default: Any = None) -> Any:
    _, args, kwargs = o
    return args[i] if len(args) > i else kwargs.get(name, default)


# casts and roots
def cast_source(n: Any) -> Node | None:
    """The tensor ``n`` casts (``.float()``, ``.to(dtype)``, ``.type_as(t)``...), None where
    ``n`` is no cast: same shape and device, another or the same dtype."""
    o = op_of(n)
    if o is None or o[0] not in _CAST_NAMES or not o[1] or not isinstance(o[1][0], Node):
        return None
    src, v, sv = o[1][0], value_of(n), value_of(o[1][0])
    if not (isinstance(v, torch.Tensor) and isinstance(sv, torch.Tensor)) or v.shape != sv.shape:
        return None
    return src if v.device == sv.device and v.dtype.is_floating_point else None


def widens(a: torch.dtype, b: torch.dtype) -> bool:
    """A cast from ``a`` to ``b`` loses nothing the norm needs: the same dtype, or float32/float64 from a narrower float."""
    return a == b or (b in (torch.float32, torch.float64) and a.is_floating_point and b.itemsize >= a.itemsize)


def root(n: Any) -> tuple[Any, list[Node]]:
    """(the tensor ``n`` is, before its widening casts; those casts)."""
    casts: list[Node] = []
    while isinstance(n, Node):
        src = cast_source(n)
        if src is None or not widens(value_of(src).dtype, value_of(n).dtype):
            break
        casts.append(n)
        n = src
    return n, casts


def dims_of(o: tuple[str, list, dict], rank: int) -> tuple[int, ...] | None:
    """A reduction's dims, >= 0 and ascending; None where it reduces all or they are not constants."""
    d = arg(o, 1, "dim")
    d = [d] if isinstance(d, int) else d
    if not isinstance(d, (list, tuple)) or not d or not all(isinstance(i, int) for i in d) or rank == 0:
        return None
    return tuple(sorted({i % rank for i in d}))


def run_node(n: Node, env: dict[Node, Any]) -> Any:
    """One node on real tensors: its arguments from ``env`` (a graph input not there: an empty tensor
    of its dtype, what a cast reads of it)."""
    def value(a: Any) -> Any:
        if isinstance(a, Node):
            if a in env:
                return env[a]
            v = value_of(a)
            return torch.empty(0, dtype=v.dtype) if isinstance(v, torch.Tensor) else v
        if isinstance(a, (list, tuple)):
            return type(a)(value(i) for i in a)
        return a

    args, kwargs = [value(a) for a in n.args], {k: value(v) for k, v in n.kwargs.items()}
    if n.op == "call_method":
        return getattr(args[0], str(n.target))(*args[1:], **kwargs)
    return n.target(*args, **kwargs)


def real_mode() -> Any:
    """Real tensors while a compile is under way (Dynamo's fake mode unset)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


__all__ = ["VIEWS", "arg", "cast_source", "dims_of", "is_op", "number", "op_of", "rank", "real_mode", "root", "run_node",
           "static", "value_of", "widens"]
