"""Which add before a norm fuses with it (the fused residual form, ``KernelSignature.residual``:
``h = x + residual``, then the norm of h, one kernel returning h too): the one predicate of
the compile backend's pass (``loader/norm_pass.py``) and the trace recorder
(``boo_build.trace``), read on a graph's nodes in ``graph_ops``' vocabulary (a Dynamo graph,
or the graph ``trace`` writes from eager calls).

An add fuses where it is an out-of-place add of two tensors of one shape and one dtype, with
no scale: ``a + b``, ``torch.add(a, b)``, ``a.add(b)``. Those that look alike and are left,
each with its reason: an in-place add (``+=``, ``add_``), an add that broadcasts, one with
``alpha=``, operands of different dtypes. Whether the sum has other users than the norm
(``other_users``) decides the backward kernel: the fused one takes their gradient
(``grad_h``), without them the plain kernel of h runs.

Imports torch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Collection

import torch
from torch.fx import Node

from .graph_ops import value_of

IN_PLACE = "an in-place add (+=, add_): it writes over its operand, the fused kernel returns a new sum"
BROADCAST = "a broadcasting add"
ALPHA = "an add with alpha="
DTYPES = "operands of different dtypes"

_ADDS = {operator.add: False, torch.add: False, operator.iadd: True}
_TENSOR_ADDS = {"add": False, "__add__": False, "__radd__": False, "add_": True, "__iadd__": True}


@dataclass(frozen=True)
class ResidualAdd:
    """The add giving a norm's input: its node, its two operands, and why it does not fuse ("": it fuses)."""

    node: Node
    operands: tuple[Any, Any]
    problem: str

    @property
    def fuses(self) -> bool:
        return not self.problem


def _kind(n: Node) -> bool | None:
    """Whether node ``n`` adds in place (True), out of place (False); None: no add."""
    if n.op == "call_method":
        return _TENSOR_ADDS.get(str(n.target))
    if n.op != "call_function":
        return None
    t = n.target
    try:
        if t in _ADDS:
            return _ADDS[t]
    except TypeError:  # unhashable
        return None
    name = getattr(t, "__name__", "")
    if getattr(torch.Tensor, name, None) is t:  # a Tensor method called as a function (the eager graph)
        return _TENSOR_ADDS.get(name)
    aten = torch.ops.aten
    if t in (aten.add.Tensor, aten.add_.Tensor):
        return t is aten.add_.Tensor
    return None


def _dims(t: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's sizes, a symbolic one by its expression (compared without adding guards)."""
    return tuple(d.node.expr if isinstance(d, torch.SymInt) else int(d) for d in t.shape)


def _text(t: torch.Tensor) -> str:
    return "x".join(str(d) for d in _dims(t)) or "a scalar"


def residual_add(x: Any) -> ResidualAdd | None:
    """The add that gives node ``x`` (a norm's input), whether it fuses and why not; None where
    ``x`` is no add of two tensors (a scalar added is not a residual)."""
    if not isinstance(x, Node):
        return None
    inplace = _kind(x)
    if inplace is None:
        return None
    args, kwargs = list(x.args), dict(x.kwargs)
    if len(args) < 2 and "other" in kwargs:
        args.append(kwargs.pop("other"))
    if len(args) < 2:
        return None
    a, b = args[0], args[1]
    va, vb = value_of(a), value_of(b)
    if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)):
        return None
    alpha = args[2] if len(args) > 2 else kwargs.get("alpha")
    if inplace or kwargs.get("out") is not None:
        problem = IN_PLACE
    elif alpha is not None and not (isinstance(alpha, (int, float)) and alpha == 1):
        problem = f"{ALPHA}{alpha}: the fused kernel adds with no scale"
    elif _dims(va) != _dims(vb):
        problem = f"{BROADCAST} ({_text(va)} + {_text(vb)}): the fused kernel adds two tensors of one shape"
    elif va.dtype != vb.dtype:
        problem = (f"{DTYPES} ({str(va.dtype).removeprefix('torch.')} + {str(vb.dtype).removeprefix('torch.')}): "
                   "the fused kernel adds in its one dtype")
    else:
        problem = ""
    return ResidualAdd(x, (a, b), problem)


def other_users(add: ResidualAdd, norm: Collection[Node]) -> bool:
    """Whether the sum has users besides the norm's nodes ``norm`` (the next residual, an output):
    the fused backward then takes their gradient (``grad_h``)."""
    return any(u not in norm for u in add.node.users)


__all__ = ["ALPHA", "BROADCAST", "DTYPES", "IN_PLACE", "ResidualAdd", "other_users", "residual_add"]
