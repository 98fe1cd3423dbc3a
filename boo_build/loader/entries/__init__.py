"""The ATen-style loader entry points (``Bundle.native_layer_norm`` & co.), one module
per op, and the description of each op's ``boo::`` torch ops (``torch_ops()``: a ``library.TorchOps``).

What runs at call time lives here, in the loader: an entry point checks a call
(``call_checks``), runs its kernel or torch's op (``calls``), or, where autograd
records the call, the op's custom op (``library``), whose body calls the entry
point back with autograd handled. ``boo_build.ops`` describes the op (signature
rules, shapes, torch's own calls); the loader imports it, never the reverse.

Adding an op with entry points: a module here with its functions (``ENTRY_POINTS``)
and ``torch_ops()``, and a line in ``MODULES``.
"""

from __future__ import annotations

import functools
import importlib
import types
from typing import Any, Callable, Mapping

# op name -> its module here (imported on first use: ``import boo_build.loader`` imports none)
MODULES: dict[str, str] = {"layer_norm": ".layer_norm", "rms_norm": ".rms_norm", "group_norm": ".group_norm"}


def module(op: str):
    """The entry-point module of ``op`` (None: an op without entry points)."""
    where = MODULES.get(op)
    return None if where is None else importlib.import_module(where, __name__)


def of_op(op: str) -> dict[str, Callable]:
    """``op``'s entry points by name (empty: none)."""
    m = module(op)
    return {} if m is None else dict(m.ENTRY_POINTS)


@functools.cache
def all_entry_points() -> Mapping[str, Callable]:
    """Every op's entry points by name (a cache: built once, read by ``Bundle``'s attribute lookups)."""
    out: dict[str, Callable] = {}
    for op in MODULES:
        out.update(of_op(op))
    return types.MappingProxyType(out)


def entry_point(name: str) -> Callable | None:
    return all_entry_points().get(name)


def torch_ops() -> list[Any]:
    """Every op's ``boo::`` torch ops, described (``library.TorchOps``, which imports this
    package: it is named in words here)."""
    return [m.torch_ops() for op in MODULES if (m := module(op)) is not None]
