"""The ops: one module per op, and the registry the stages look ops up in.

Pure Python (the loader imports it): an op module imports torch only inside
functions. Each op is an immutable ``Op`` (``base.py``) registered by name:

    from boo_build import ops
    ops.get("layer_norm").masks        # (1, 2, 4, 6, 8, 10, 12, 14)
    ops.names()                        # ("layer_norm", "rms_norm")

Adding an op: see "Adding an op" in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import threading
from typing import Callable

from ..errors import UnknownOp
from .base import Op
from .layer_norm import LAYER_NORM
from .rms_norm import RMS_NORM

__all__ = ["Op", "UnknownOp", "entry_point", "entry_points", "get", "names", "register", "unregister"]

_REGISTRY: dict[str, Op] = {}
_ENTRIES: dict[str, Callable] = {}  # every op's entry points by name (ops are immutable: kept, not rebuilt)
_lock = threading.Lock()



def register(op: Op, *, replace: bool = False) -> Op:
    """Add ``op`` under ``op.name``; an op of that name already registered is
    refused unless it is the same (or ``replace``). Returns ``op``."""
    if not isinstance(op, Op):
        raise TypeError(f"op must be a boo_build.ops.Op, got {type(op).__name__}")
    with _lock:
        have = _REGISTRY.get(op.name)
        if have is not None and have != op and not replace:
            raise ValueError(f"op {op.name!r} is already registered")
        taken = {e: o.name for o in _REGISTRY.values() if o.name != op.name for e in o.entry_points()}
        clash = sorted(set(op.entry_points()) & set(taken))
        if clash:
            raise ValueError(f"op {op.name!r}: entry point {clash[0]!r} already belongs to {taken[clash[0]]!r}")
        if have is not None:
            for name in have.entry_points():
                _ENTRIES.pop(name, None)
        _REGISTRY[op.name] = op
        _ENTRIES.update(op.entry_points())
    return op


def unregister(name: str) -> Op:
    """Remove the op ``name`` (a test's own op, after the test); returns it."""
    with _lock:
        op = _REGISTRY.pop(name, None)
        if op is None:
            raise UnknownOp(f"unknown op {name!r}: use one of {', '.join(_REGISTRY)}")
        for entry in op.entry_points():
            _ENTRIES.pop(entry, None)
    return op


def get(name: str) -> Op:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownOp(f"unknown op {name!r}: use one of {', '.join(names())}") from None


def names() -> tuple[str, ...]:
    """Registered op names, in registration order (the built-in ones first)."""
    return tuple(_REGISTRY)


def entry_points() -> dict[str, Callable]:
    """Every op's loader entry points by name (``Bundle`` methods)."""
    return dict(_ENTRIES)


def entry_point(name: str) -> Callable | None:
    return _ENTRIES.get(name)


register(LAYER_NORM)
register(RMS_NORM)
