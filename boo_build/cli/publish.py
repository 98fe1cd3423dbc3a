"""``boo-build publish BUNDLE STORE_DIR``: add a checked bundle to a store folder.

Copies the bundle to ``STORE_DIR/<name>/<version>/<name>-<version>.tar.zst``
and lists it in ``STORE_DIR/index.json`` (``boo_build.store.publish``: atomic,
under a lock, never replacing a published version). Standard library and the
loader's archive reader only. Exit status 0 published (or already published
with the same bytes); 2 for a missing or corrupt bundle, a version already
published with other bytes, or a store that cannot be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..store import publish
from .text import add_max_size, size_text

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Copy BUNDLE into the store folder STORE_DIR (STORE_DIR/<name>/<version>/) and list it in "
                     "STORE_DIR/index.json. A published version is never replaced. Serve STORE_DIR as it is: "
                     "a shared file system or any static HTTP server.")
    p.add_argument("bundle", type=Path, metavar="BUNDLE", help="the .tar.zst bundle to publish")
    # a str: Path() would fold a URL's "//" and publish into a local "https:" folder
    p.add_argument("store", metavar="STORE_DIR", help="the store folder (created if need be)")
    add_max_size(p)


def run(ns: argparse.Namespace) -> int:
    done = publish(ns.bundle, ns.store, max_size=ns.max_size)
    e = done.entry
    state = "published" if done.new else "already published (same sha256)"
    print(f"{e.name} {e.version}: {state}: {done.file} ({size_text(e.size)}, sha256 {e.sha256})")
    return 0
