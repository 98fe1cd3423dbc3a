"""Calls a norm module sent to torch's function itself (``torch_path.py``), counted per
kernel key with nothing taken per call: each key's ``itertools.count``, whose
``__next__`` counts one atomically (under the GIL) and keeps nothing, read by
``Bundle.stats()`` against its value at the last ``reset_stats()``. Torch-free, as
``bundle.py``, which holds one."""

from __future__ import annotations

import itertools
from typing import Callable


class TorchCounts:
    def __init__(self) -> None:
        self._counts: dict[str, list] = {}  # key -> [its itertools.count, its value at the last reset]

    def counter(self, key: str) -> Callable[[], int]:
        """The function that counts one call under ``key``."""
        return self._counts.setdefault(key, [itertools.count(), 0])[0].__next__

    def add_to(self, per_key: dict[str, dict[str, int]]) -> None:
        """Add the calls counted since the last reset to ``per_key``'s ``eager`` counts."""
        for key, (c, base) in self._counts.items():
            if (n := _count_of(c) - base) > 0:
                per_key.setdefault(key, {"hits": 0, "misses": 0, "eager": 0})["eager"] += n

    def reset(self) -> None:
        for entry in self._counts.values():
            entry[1] = _count_of(entry[0])


def _count_of(c: itertools.count) -> int:
    """How many an ``itertools.count`` has counted (it has no reader but its repr, ``count(N)``)."""
    return int(repr(c)[6:-1])


__all__ = ["TorchCounts"]
