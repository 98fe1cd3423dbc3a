"""``boo-build lock NAME[==VERSION]... --store URL_OR_DIR [-o boo.lock]``: pin bundles.

Reads the store's ``index.json`` (a folder, a ``file://`` or ``http(s)://``
URL), takes each named bundle's newest release by SemVer precedence, or the
version given, and writes a lock file (``loader/lockfile.py``; docs/store.md)
pinning its sha256 and size. Exit status 0; 2 for an unknown name or
version, an unreadable store or an unwritable lock file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..store import lock, write_lock

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Write a lock file pinning each bundle (the newest release where no version is given) by "
                     "sha256 and size, as the store's index.json lists it.")
    p.add_argument("requirements", nargs="+", metavar="NAME[==VERSION]", help="a bundle, optionally pinned")
    p.add_argument("--store", required=True, metavar="URL_OR_DIR",
                   help="the store: a folder, or its file://, http:// or https:// URL (recorded in the lock file)")
    p.add_argument("-o", "--out", type=Path, default=Path("boo.lock"), help="the lock file (default: boo.lock)")


def run(ns: argparse.Namespace) -> int:
    lf = lock(ns.requirements, ns.store)
    path = write_lock(lf, ns.out)
    for b in lf.bundles:
        print(f"{b.name} {b.version}  sha256 {b.sha256}  {lf.store}{b.path}")
    print(f"wrote {path}")
    return 0
