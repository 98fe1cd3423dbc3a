"""The norms a Dynamo graph computes inside modules written by hand (Llama's, Qwen's,
Gemma's, T5's RMS norms; Cohere's layer norm): found by the module's math, for the
compile backend's pass (``norm_pass.py``).

Such a norm is no one node of the graph: Dynamo inlines its ``forward`` into ``to``,
``pow``, ``mean``, ``add``, ``rsqrt``, ``mul``... nodes, each carrying the module in its
``nn_module_stack`` (keyed by the module's ``id``, ``@n`` for its n-th call). The nodes
of one call of one module are its *region*. The module itself is found among the objects
of the frame Dynamo compiles (its locals and globals, and their modules), by that id, and
its class checked; then it is probed as ``replace_norms`` probes it (``probe.norm_form``:
one predicate for the pass, ``replace_norms`` and ``trace``). A region that reads the
input and the module's parameters alone and gives one tensor can be replaced by one call.

Imports torch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from ..probe import EPS_NAMES, NormForm, is_candidate, norm_form

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Region:
    """One call of a candidate module (``probe.is_candidate``) in a Dynamo graph."""

    key: str  # its nn_module_stack key
    module: torch.nn.Module
    nodes: tuple[torch.fx.Node, ...]  # in graph order
    form: NormForm | None  # None: not probed (auto=False)
    input: torch.fx.Node | None  # the one tensor it reads besides its parameters
    output: torch.fx.Node | None  # the one node whose value leaves it
    weight: torch.fx.Node | None
    bias: torch.fx.Node | None
    # its eps as a graph input (a float attribute Dynamo did not specialize: dynamic=True), None where a constant
    eps: torch.fx.Node | None
    problem: str  # why its nodes cannot be replaced by one call, "" where they can


ROOT = "root"  # the key of the nodes of the compiled frame itself (no nn_module_stack): a module's forward


def _root_tx() -> Any:
    from torch._dynamo.symbolic_convert import InstructionTranslator

    return InstructionTranslator.current_tx().output.root_tx


def frame_modules() -> dict[int | str, torch.nn.Module]:
    """Every module reachable from the frame Dynamo is compiling (its locals, closure
    cells and globals, in tuples, lists and dicts one level down, and their submodules),
    by id, and under ``ROOT`` the module whose ``forward`` the frame is, if any; {}
    outside a compile."""
    try:
        tx = _root_tx()
        cells = [_contents(c) for c in (getattr(tx, "closure", None) or ())]
        values: list[Any] = list(tx.f_locals.values()) + cells + list(tx.f_globals.values())
    except Exception:  # noqa: BLE001 - no frame (called outside a compile, another torch): nothing found
        return {}
    out: dict[int | str, torch.nn.Module] = {}
    me = tx.f_locals.get("self")
    if isinstance(me, torch.nn.Module) and getattr(type(me).forward, "__code__", None) is tx.f_code:
        out[ROOT] = me  # torch.compile(module): its own nodes carry no module stack

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, torch.nn.Module):
            if id(v) not in out:
                out.update((id(m), m) for m in v.modules())
        elif depth and isinstance(v, (tuple, list)):
            for item in v:
                walk(item, depth - 1)
        elif depth and isinstance(v, dict):
            for item in v.values():
                walk(item, depth - 1)

    for v in values:
        walk(v, 2)
    return out


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except (ValueError, AttributeError):  # an empty cell, not a cell
        return None


def _real(node: torch.fx.Node, gm: torch.fx.GraphModule) -> Any:
    """The real object a graph input stands for: a placeholder's example (a parameter), a
    ``get_attr``'s attribute; None for computed values."""
    if node.op == "placeholder":
        arg = node.meta.get("grapharg")
        return getattr(arg, "example", None) if arg is not None else None
    if node.op == "get_attr":
        obj: Any = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part, None)
        return obj
    return None


def _in_place(node: torch.fx.Node) -> bool:
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return isinstance(name, str) and (name.endswith("_") and not name.endswith("__") or name.startswith("i") and
                                      getattr(node.target, "__module__", "") in ("_operator", "operator"))


def regions(gm: torch.fx.GraphModule, skip: Iterable[torch.fx.Node], auto: bool = True) -> list[Region]:
    """The regions of ``gm`` whose module is a candidate (``probe.is_candidate``), but those
    holding a node of ``skip`` (a norm spelled as one node, which the pass serves itself);
    each probed (unless ``auto`` is False), and its input, output and parameters found
    where it reads and gives one tensor."""
    by_key: dict[str, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            stack = node.meta.get("nn_module_stack")
            by_key.setdefault(list(stack)[-1] if stack else ROOT, []).append(node)
    if not by_key:
        return []
    modules = frame_modules()
    if not modules:
        log.info("boo backend: the compiled frame's modules were not found: norms written by hand are not probed")
    skipped = set(skip)
    out: list[Region] = []
    for key, nodes in by_key.items():
        if key == ROOT:
            m = modules.get(ROOT)
            cls = type(m)
        else:
            _, cls = nodes[0].meta["nn_module_stack"][key]
            try:
                m = modules.get(int(key.split("@")[0]))
            except ValueError:  # a key of another torch: not an id
                m = None
        if m is None or type(m) is not cls or not is_candidate(m) or any(n in skipped for n in nodes):
            continue
        out.append(_region(gm, key, m, tuple(nodes), norm_form(m) if auto else None))
    return out


def _region(gm: torch.fx.GraphModule, key: str, m: torch.nn.Module, nodes: tuple[torch.fx.Node, ...],
            form: NormForm | None) -> Region:
    inside = set(nodes)
    weight = bias = x = eps = None
    data: list[torch.fx.Node] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a in inside or a is weight or a is bias or a is eps or a in data:
                continue
            real = _real(a, gm)
            if real is not None and real is getattr(m, "weight", None):
                weight = a
            elif real is not None and real is getattr(m, "bias", None):
                bias = a
            elif _is_eps(a):
                eps = a
            elif isinstance(a.meta.get("example_value"), torch.Tensor):
                data.append(a)
    leaving = [n for n in nodes if any(u not in inside for u in n.users)]
    problem = ""
    if len(data) != 1:
        problem = f"its nodes read {len(data)} tensors besides its parameters ({', '.join(d.name for d in data)})"
    elif len(leaving) != 1:
        problem = f"{len(leaving)} of its values are used outside it"
    elif any(_in_place(n) for n in nodes):
        problem = "it modifies a tensor in place"
    elif weight is None:
        problem = "its weight is not a graph input"
    else:
        x = data[0]
        y = leaving[0].meta.get("example_value")
        xv = x.meta.get("example_value")
        if not isinstance(y, torch.Tensor) or not isinstance(xv, torch.Tensor) or y.dim() != xv.dim():
            problem = "it does not give one tensor of its input's shape"
    return Region(key, m, nodes, form, x, leaving[0] if len(leaving) == 1 else None, weight, bias, eps, problem)


def _is_eps(node: torch.fx.Node) -> bool:
    """A graph input standing for the module's eps attribute (``L['self'].norm.variance_epsilon``,
    a float Dynamo made an input rather than a constant)."""
    arg = node.meta.get("grapharg") if node.op == "placeholder" else None
    name = str(getattr(getattr(arg, "source", None), "name", ""))
    v = node.meta.get("example_value")
    return isinstance(v, torch.Tensor) and v.dim() == 0 and any(name.endswith("." + e) for e in EPS_NAMES)


__all__ = ["ROOT", "Region", "frame_modules", "regions"]
