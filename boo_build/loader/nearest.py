"""The kernel keys closest to one a call asked for (``KernelNotFound``'s hint).

Pure Python: ``boo_build.signature`` and the standard library.
"""

from __future__ import annotations

import difflib
import math
from typing import Iterable

from ..errors import SignatureError
from ..signature import KernelSignature


def _distance(a: KernelSignature, b: KernelSignature) -> float:
    d = 0.0
    d += 100 * (a.op != b.op)
    d += 10 * (a.dtype != b.dtype)
    d += 8 * ((a.normalized_shape, a.groups) != (b.normalized_shape, b.groups))
    if a.is_dynamic or b.is_dynamic:  # a dynamic kernel of the right width is the closest to any shape
        d += 2 + 0.5 * (a.input_shape != b.input_shape) + 0.1 * abs(len(a.input_shape) - len(b.input_shape))
    elif a.input_shape != b.input_shape:
        d += 4 + abs(math.log(max(a.rows, 1) / max(b.rows, 1))) + abs(len(a.input_shape) - len(b.input_shape))
    d += 6 * (a.mask != b.mask)
    d += 5 * ((a.affine, a.bias) != (b.affine, b.bias))
    d += 3 * (a.eps != b.eps)
    d += 3 * (a.stats_dtype != b.stats_dtype)
    return d


def nearest_keys(key: str, keys: Iterable[str], n: int = 3) -> list[str]:
    """Keys of ``keys`` closest to ``key``: by signature field distance, then text similarity."""
    keys = list(keys)
    try:
        sig = KernelSignature.parse(key)
    except SignatureError:
        return difflib.get_close_matches(key, keys, n=n, cutoff=0.0)
    scored = []
    for k in keys:
        try:
            dist = _distance(sig, KernelSignature.parse(k))
        except SignatureError:
            dist = 1000.0
        scored.append((dist, -difflib.SequenceMatcher(None, key, k).ratio(), k))
    return [k for _, _, k in sorted(scored)[:n]]


__all__ = ["nearest_keys"]
