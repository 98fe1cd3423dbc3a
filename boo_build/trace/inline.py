"""Norms written inline, seen while recording: the dataflow of a forward's torch calls,
written as the graph the compile backend's pass reads (``boo_build.inline_norms``), so that
one matcher decides what the pass serves and what ``record_norms`` records.

``record_norms``' function mode hands every call it sees to ``EagerGraph.log``: each call
that takes or gives a tensor becomes a ``call_function`` node (its target the function the
mode saw: ``Tensor.pow``, ``torch.rsqrt``...), a tensor no logged call made becomes a
graph input, and each node keeps its value's shape and dtype (a meta tensor: no data is
kept) and its autograd node. At the end of the outermost module's forward the graph is
closed (the forward's outputs are its last users), matched, and dropped.

What differs from the compiled graph: calls torch's function modes do not see (inside
C++ and autograd) are missing, and so are uses no torch function makes (a tensor kept in
an attribute); such a use of an intermediate leaves the norm in the compiled graph and is
recorded here: the manifest may hold a kernel the backend does not use, never miss one it
asks for because of this.

Imports torch, never the compiler, iree-turbine, doit or the loader.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch
from torch.fx import Graph, Node
from torch.utils.weak import WeakIdKeyDictionary

from ..inline_norms import InlineNorm, find, root_kind

_USES = ("item", "tolist", "numpy")  # calls that use a tensor and give no tensor
_HERE = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)


def _returned(*values: Any) -> None:
    """The target of the node that uses a forward's outputs (never called)."""


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(tuple(t.shape), dtype=t.dtype, device="meta", requires_grad=t.requires_grad)


def _grad_fn(t: torch.Tensor) -> Any:
    """``t.grad_fn``, None where torch refuses to give it (a view made under no_grad whose base was
    modified in place: an embedding's padding row set at initialization)."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _caller() -> str:
    """``file.py:12`` of the model's line making the current call."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_HERE):
        f = f.f_back  # type: ignore[assignment]
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else ""


class EagerGraph:
    """One forward's torch calls as a graph (on the recording thread only)."""

    def __init__(self, before: EagerGraph | None = None) -> None:
        self.graph = Graph()
        self.nodes: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> the node that gave it
        self.broken = ""  # why a call could not be written: the graph is not matched
        # the earlier forwards' tensors -> their nodes there: a use here is marked on that node ("used_later":
        # a sum that fuses with a norm there has another user, whose gradient its backward takes)
        self.earlier: WeakIdKeyDictionary = WeakIdKeyDictionary()
        if before is not None:
            self.earlier.update(before.earlier)
            self.earlier.update(before.nodes)

    def __len__(self) -> int:
        return len(self.graph.nodes)

    def node(self, t: torch.Tensor) -> Node:
        n = self.nodes.get(t)
        if n is None:
            old = self.earlier.get(t)
            if old is not None:
                old.meta["used_later"] = True
            n = self.graph.placeholder(f"input{len(self.graph.nodes)}")
            n.meta["example_value"] = _meta(t)
            self.nodes[t] = n
        return n

    def call_of(self, out: Any) -> Node | None:
        """The node of the logged call that gave ``out`` (a tensor, or a call's tuple of them); None: none."""
        t = out[0] if isinstance(out, (tuple, list)) and out else out
        n = self.nodes.get(t) if isinstance(t, torch.Tensor) else None
        return n.args[0] if n is not None and n.target is _getitem else n

    def arg(self, a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return self.node(a)
        if isinstance(a, (list, tuple)) and any(isinstance(i, torch.Tensor) for i in a):
            return type(a)(self.arg(i) for i in a)
        return a

    def log(self, func: Callable, args: tuple, kwargs: dict, out: Any) -> None:
        """One call the mode saw: a node where it takes a tensor and gives one (or uses one: ``item``).
        A call that cannot be written (a tensor of a kind a meta tensor cannot stand for) breaks the
        graph: nothing of this forward is matched, and ``broken`` says why."""
        if self.broken:
            return
        try:
            self._log(func, args, kwargs, out)
        except Exception as e:  # noqa: BLE001 - the model's call already ran: only the matching stops
            self.broken = f"{getattr(func, '__name__', func)}: {type(e).__name__}: {e}"

    def _log(self, func: Callable, args: tuple, kwargs: dict, out: Any) -> None:
        outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)] \
            if isinstance(out, (tuple, list)) else []
        flat = list(args) + list(kwargs.values())
        if not any(isinstance(a, torch.Tensor) or isinstance(a, (list, tuple)) and
                   any(isinstance(i, torch.Tensor) for i in a) for a in flat):
            return
        if not outs and getattr(func, "__name__", "") not in _USES:
            return  # metadata (``x.shape``, ``x.dtype``...): no use of its value
        n = self.graph.call_function(func, tuple(self.arg(a) for a in args),
                                     {k: self.arg(v) for k, v in kwargs.items()})
        if isinstance(out, torch.Tensor):
            n.meta["example_value"] = _meta(out)
            n.meta["grad_fn"] = _grad_fn(out)
            self.nodes[out] = n  # (an in-place call gives its input: later uses read this node)
            if root_kind(n) is not None:
                n.meta["source"] = _caller()
        else:
            for i, o in enumerate(outs):
                g = self.graph.call_function(_getitem, (n, i))
                g.meta["example_value"], g.meta["grad_fn"] = _meta(o), _grad_fn(o)
                self.nodes[o] = g

    def close(self, outputs: Any) -> list[InlineNorm]:
        """The norms written inline the forward made (``outputs``: what it returned, their last user);
        none where the graph is ``broken``."""
        if self.broken:
            return []
        flat: list[Any] = []

        def walk(v: Any) -> None:
            if isinstance(v, torch.Tensor):
                if v in self.nodes:
                    flat.append(self.nodes[v])
            elif isinstance(v, (list, tuple)):
                for i in v:
                    walk(i)
            elif isinstance(v, dict):
                for i in v.values():
                    walk(i)
            elif hasattr(v, "to_tuple"):  # transformers' ModelOutput
                walk(v.to_tuple())

        walk(outputs)
        if flat:
            self.graph.create_node("call_function", _returned, tuple(flat), name="output")
        return find(self.graph)


def _getitem(v: Any, i: int) -> Any:
    """One tensor of a call's results (a node's target; never called)."""
    return v[i]


__all__ = ["EagerGraph"]
