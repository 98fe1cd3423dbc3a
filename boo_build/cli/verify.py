"""``boo-build verify BUNDLE``: every member's sha256 against the index, and its ``iree_runtime`` field.
Given a lock file, each bundle it pins (the download checks the pinned sha256 first).

Light: imports only the loader's archive reader and typed index (stdlib and
zstandard), never torch, iree or doit (the iree-base-runtime version is read
from its package's version file, the runtime is not loaded).

Exit status 0 all verified, 1 a mismatch. The ``iree_runtime`` field is held
to what ``open_bundle`` holds it to (``versions.check_runtime``): malformed,
the bundle is refused like any malformed index, ``BundleFormatError`` (exit
2); absent (a bundle built before the field), it is not checked; a range
that leaves out this process's iree-base-runtime is a warning, not a failure
(the bundle is intact; the runtime is this machine's). An unreadable bundle,
or one over ``--max-size``, raises ``BundleFormatError`` (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from ..loader.archive import DEFAULT_MAX_SIZE, sha256_hex
from ..loader.errors import BundleFormatError
from ..loader.format import INDEX_NAME
from .text import add_max_size, bundles_named, read_bundle, runtime_fit

__all__ = ["add_arguments", "cmd_verify", "run"]
EXIT_OK, EXIT_PROBLEM = 0, 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, metavar="BUNDLE",
                   help="a bundle (.tar.zst), or a lock file: the bundles it pins (downloaded if need be)")
    add_max_size(p)


def run(ns: argparse.Namespace) -> int:
    # a lock file: each bundle it pins (fetched through the cache, which checks the pinned sha256)
    return max(cmd_verify(path, max_size=ns.max_size) for _, path in bundles_named(ns.bundle, ns.max_size))


def cmd_verify(path, *, out: TextIO | None = None, err: TextIO | None = None,
               max_size: int = DEFAULT_MAX_SIZE) -> int:
    """Check every member's sha256 against the index (1 on any mismatch) and
    the ``iree_runtime`` field (malformed: ``BundleFormatError``; a range
    without this process's runtime: a warning)."""
    out, err = out or sys.stdout, err or sys.stderr
    a = read_bundle(path, max_size)  # BundleFormatError: exit 2 (cli.app)
    ix = a.bundle_index
    fit = runtime_fit(ix, a.path)
    if fit.state == "malformed":  # what open_bundle raises: exit 2, as for any malformed index
        raise BundleFormatError(f"{a.path}: {fit.message}")
    checked, bad = 0, []
    referenced = {INDEX_NAME} | ({ix.csv} if ix.csv else set()) | a.parts  # parts: read_archive checked them
    for *_, m in sorted(ix.impl_records(), key=lambda r: r[:3]):
        referenced.add(m.member)
        checked += 1
        actual = sha256_hex(a.members[m.member])
        if actual != m.sha256:
            bad.append((m.member, m.sha256, actual))
    for member, want, got in bad:
        print(f"MISMATCH {member}: sha256 {got}, index says {want}", file=err)
    extra = sorted(set(a.members) - referenced)
    for name in extra:
        print(f"warning: member {name} is not named by the index", file=err)
    print(f"{a.path}: iree_runtime {fit.text()}", file=out)
    if fit.problem:
        print(f"warning: {fit.message}", file=err)
    if bad:
        print(f"{a.path}: {len(bad)} of {checked} kernel members FAILED verification", file=out)
        return EXIT_PROBLEM
    print(f"{a.path}: OK, {checked} kernel members verified (sha256)", file=out)
    return EXIT_OK


