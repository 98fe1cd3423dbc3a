"""The compile backend's graph surgery for a norm fused with the add before it
(``norm_pass.py``; which adds fuse: ``boo_build.residual_adds``): one call of a fused graph
function (``graph_functions.boo_add_*``) in place of the add and the norm's nodes, its first
result to the norm's users, its second (the sum) to the add's other users.

Imports torch.
"""

from __future__ import annotations

import operator
from typing import Any, Collection, Sequence

import torch
from torch.fx import Node

from ..residual_adds import ResidualAdd


def _nodes(args: Sequence[Any]) -> list[Node]:
    out: list[Node] = []

    def seen(n: Node) -> Node:
        out.append(n)
        return n

    torch.fx.node.map_arg(tuple(args), seen)
    return out


def anchor(graph: torch.fx.Graph, add: ResidualAdd, args: Sequence[Any], norm: Collection[Node]) -> Node | None:
    """Where the fused call goes: after the add and every node among the fused call's other
    arguments ``args`` (weight, bias, eps...); None where some other user of the sum comes
    before that point (it could not read the fused call's sum)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    at = max([add.node, *(n for n in _nodes(args) if n not in norm)], key=lambda n: order.get(n, -1))
    if any(u not in norm and order.get(u, -1) <= order[at] for u in add.node.users):
        return None
    return at


def rewire(graph: torch.fx.Graph, call: Node, output: Node, add: ResidualAdd, norm: Sequence[Node]) -> Node:
    """The fused ``call`` (results: the norm's, the sum) in place of the norm (its ``output``, its
    nodes ``norm``) and the add; -> the node of the norm's results."""
    with graph.inserting_after(call):
        y = graph.call_function(operator.getitem, (call, 0))
    with graph.inserting_after(y):
        h = graph.call_function(operator.getitem, (call, 1))
    y.meta.update(output.meta)  # its example value (shape, dtype), module stack and source line
    h.meta.update(add.node.meta)
    call.meta.update({k: v for k, v in output.meta.items() if k != "example_value"})
    call.meta["example_value"] = (output.meta.get("example_value"), add.node.meta.get("example_value"))
    inside = set(norm)
    output.replace_all_uses_with(y)
    add.node.replace_all_uses_with(h, delete_user_cb=lambda u: u not in inside and u is not call)
    for n in reversed(list(norm)):
        if not n.users:
            graph.erase_node(n)
    if not add.node.users:
        graph.erase_node(add.node)
    return y


__all__ = ["anchor", "rewire"]
