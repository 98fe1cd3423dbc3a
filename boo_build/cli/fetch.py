"""``boo-build fetch LOCK_FILE [--name NAME]``: download locked bundles into the cache.

Every bundle of the lock file (or those named) is fetched and verified as
``open_bundle`` would (``loader/remote.py``), so a container image or a
machine without the store can open them later (``BOO_OFFLINE=1``). Exit
status 0; 2 for a missing or malformed lock file, a name it does not pin, or
a download that fails (unreachable, HTTP error, timeout, other bytes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from ..loader.lockfile import read_lock
from ..loader.remote import cache_dir, fetch_locked
from .text import add_max_size, size_text

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Download every bundle a lock file pins into the local cache ($BOO_BUILD_CACHE_DIR), checking "
                     "each one's size and sha256, so that open_bundle(LOCK_FILE) needs no network later.")
    p.add_argument("lock", type=Path, metavar="LOCK_FILE", help="a lock file written by boo-build lock")
    p.add_argument("--name", action="append", default=None, help="only this bundle (repeatable)")
    add_max_size(p)


def run(ns: argparse.Namespace) -> int:
    if not ns.lock.is_file():
        raise UsageError(f"lock file {ns.lock} does not exist: write one with "
                         "`boo-build lock NAME --store URL_OR_DIR -o FILE`")
    lf = read_lock(ns.lock)
    chosen = [lf.pick(n, str(ns.lock)) for n in ns.name] if ns.name else list(lf.bundles)
    for b in chosen:
        path = fetch_locked(lf, b, max_size=ns.max_size)
        print(f"{b.name} {b.version}: {path} ({size_text(b.size)}, sha256 verified)")
    print(f"{len(chosen)} bundle(s) in the cache {cache_dir()}")
    return 0
