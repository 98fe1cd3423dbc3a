"""The bundle format's JSON helpers (``format.py``'s records): read-only JSON
values inside records (mappings as MappingProxyType, arrays as tuples) written
back as plain dicts and lists, and field checks. Pure Python."""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Any, Mapping


def _frozen(v: Any) -> Any:
    if isinstance(v, Mapping):
        return MappingProxyType({k: _frozen(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v


def _plain(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _mapping(d: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise TypeError(f"{what} must be an object, got {type(d).__name__}")
    return d


def _typed(v: Any, kind: type, what: str) -> Any:
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise TypeError(f"{what} must be a {kind.__name__}, got {v!r}")
    return v


def _extra(d: Mapping[str, Any], known: tuple[str, ...]) -> Mapping[str, Any]:
    return _frozen({k: v for k, v in d.items() if k not in known})


def _freeze_fields(obj: Any, *names: str) -> None:
    """Make a frozen dataclass's mapping fields read-only (the caller's dicts are copied)."""
    for n in names:
        v = getattr(obj, n)
        if v is not None:
            object.__setattr__(obj, n, _frozen(v))



def _is_seconds(v) -> bool:
    """a number of seconds"""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_by_rows(v) -> bool:
    """[[rows, eager faster], ...]"""
    return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
                                       and isinstance(p[1], bool) for p in v)
