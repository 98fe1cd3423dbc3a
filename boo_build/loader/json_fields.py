"""The bundle format's JSON helpers (``format.py``'s records): read-only JSON
values inside records (mappings as MappingProxyType, arrays as tuples) written
back as plain dicts and lists, and field checks. Pure Python."""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Any, Mapping


def frozen(v: Any) -> Any:
    if isinstance(v, Mapping):
        return MappingProxyType({k: frozen(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(frozen(x) for x in v)
    return v


def plain(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


def as_mapping(d: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise TypeError(f"{what} must be an object, got {type(d).__name__}")
    return d


def typed_value(v: Any, kind: type, what: str) -> Any:
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise TypeError(f"{what} must be a {kind.__name__}, got {v!r}")
    return v


def extra_fields(d: Mapping[str, Any], known: tuple[str, ...]) -> Mapping[str, Any]:
    return frozen({k: v for k, v in d.items() if k not in known})


def freeze_fields(obj: Any, *names: str) -> None:
    """Make a frozen dataclass's mapping fields read-only (the caller's dicts are copied)."""
    for n in names:
        v = getattr(obj, n)
        if v is not None:
            object.__setattr__(obj, n, frozen(v))



def is_seconds(v) -> bool:
    """a number of seconds"""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_by_rows(v) -> bool:
    """[[rows, eager faster], ...]"""
    return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
                                       and isinstance(p[1], bool) for p in v)
