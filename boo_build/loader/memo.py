"""The loader's per-bundle memos (documented caches): bounded by clearing.

A memo over ``MEMO_LIMIT`` entries is emptied before the next one goes in: a
process that calls with ever new shapes keeps bounded memory, one with a
steady set of shapes rebuilds its entries once. dict get/set are atomic under
the GIL; a race only recomputes an entry."""

from __future__ import annotations

MEMO_LIMIT = 4096  # entries per memo and bundle (also: pending hits per bundle)


def remember(memo: dict, key, value) -> None:
    if len(memo) > MEMO_LIMIT:
        memo.clear()
    memo[key] = value
