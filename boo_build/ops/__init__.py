"""The ops: one module per op, and the registry the stages look ops up in.

Pure Python (the loader imports it): an op module imports torch only inside
functions. Each op is an immutable ``Op`` (``base.py``) registered by name:

    from boo_build import ops
    ops.get("layer_norm").masks        # (1, 2, 4, 6, 8, 10, 12, 14)
    ops.names()                        # ("layer_norm", "rms_norm", "group_norm")

Adding an op: see "Adding an op" in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import importlib
import threading

from ..errors import UnknownOp
from .base import Op

__all__ = ["Op", "UnknownOp", "get", "names", "register", "unregister"]

# The built-in ops: name -> (module, attribute), imported by the first ``get`` of
# the name (``import boo_build.loader`` pays for no op module: docs/loader.md, start-up).
BUILTIN: dict[str, tuple[str, str]] = {
    "layer_norm": (".layer_norm", "LAYER_NORM"),
    "rms_norm": (".rms_norm", "RMS_NORM"),
    "group_norm": (".group_norm", "GROUP_NORM"),
}

_REGISTRY: dict[str, Op] = {}
_lock = threading.Lock()


def _load(name: str) -> Op | None:
    """The built-in op ``name``, its module imported and the op registered on first
    use (a cache: the registry holds it from then on); None for any other name."""
    where = BUILTIN.get(name)
    if where is None:
        return None
    op = getattr(importlib.import_module(where[0], __name__), where[1])
    with _lock:
        if name not in _REGISTRY:  # not replaced meanwhile (``register(..., replace=True)``)
            _add(op)
        return _REGISTRY[name]


def _load_all() -> None:
    for name in BUILTIN:
        if name not in _REGISTRY:
            _load(name)


def _add(op: Op) -> None:
    """Put ``op`` in the registry (under ``_lock``)."""
    _REGISTRY[op.name] = op


def register(op: Op, *, replace: bool = False) -> Op:
    """Add ``op`` under ``op.name``; an op of that name already registered is
    refused unless it is the same (or ``replace``). Returns ``op``."""
    if not isinstance(op, Op):
        raise TypeError(f"op must be a boo_build.ops.Op, got {type(op).__name__}")
    _load_all()  # the built-in ops' names are taken
    with _lock:
        have = _REGISTRY.get(op.name)
        if have is not None and have != op and not replace:
            raise ValueError(f"op {op.name!r} is already registered")
        _add(op)
    return op


def unregister(name: str) -> Op:
    """Remove the op ``name`` (a test's own op, after the test); returns it."""
    _load_all()
    with _lock:
        op = _REGISTRY.pop(name, None)
        if op is None:
            raise UnknownOp(f"unknown op {name!r}: use one of {', '.join(names())}")
    return op


def get(name: str) -> Op:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        op = _load(name) if isinstance(name, str) else None
        if op is None:
            raise UnknownOp(f"unknown op {name!r}: use one of {', '.join(names())}") from None
        return op


def names() -> tuple[str, ...]:
    """Registered op names, in registration order (the built-in ones first, loaded or not)."""
    return tuple(dict.fromkeys([*BUILTIN, *_REGISTRY]))
