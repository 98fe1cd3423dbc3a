"""``boo-build cache list|clean``: the loader's local cache of downloaded bundles.

``list`` prints each cached file (sha256, size, path) as found on disk:
``open_bundle`` verifies an entry each time it uses it. ``clean`` removes
every entry, download in progress and lock file; run it while no process is
opening bundles. The cache is ``$BOO_BUILD_CACHE_DIR`` (``loader/remote.py``).
"""

from __future__ import annotations

import argparse

from ..loader.remote import cache_dir, cache_entries, clean_cache
from .text import size_text

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Show or empty the local cache of downloaded bundles ($BOO_BUILD_CACHE_DIR)."
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="list the cached bundles")
    sub.add_parser("clean", help="remove every cached bundle")


def run(ns: argparse.Namespace) -> int:
    root = cache_dir()
    if ns.action == "list":
        entries = cache_entries(root)
        print(f"cache {root}: {len(entries)} bundle(s), {size_text(sum(e.size for e in entries))}")
        for e in entries:
            print(f"{e.sha256}  {size_text(e.size):>10}  {e.path}")
        return 0
    files, size = clean_cache(root)
    print(f"cache {root}: removed {files} file(s), {size_text(size)}")
    return 0
