"""``boo-build verify BUNDLE``: every member's sha256 against the index.

Light: imports only the loader's archive reader and typed index (stdlib and
zstandard), never torch, iree or doit. Exit status 0 all verified, 1 a mismatch; an unreadable bundle raises ``BundleFormatError`` (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from ..loader.archive import read_archive, sha256_hex
from ..loader.format import INDEX_NAME

__all__ = ["add_arguments", "cmd_verify", "run"]
EXIT_OK, EXIT_PROBLEM = 0, 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path)


def run(ns: argparse.Namespace) -> int:
    return cmd_verify(ns.bundle)


def cmd_verify(path, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Check every member's sha256 against the index; non-zero on any mismatch."""
    out, err = out or sys.stdout, err or sys.stderr
    a = read_archive(Path(path))  # BundleFormatError: exit 2 (cli.app)
    checked, bad = 0, []
    ix = a.bundle_index
    referenced = {INDEX_NAME} | ({ix.csv} if ix.csv else set())
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
    if bad:
        print(f"{a.path}: {len(bad)} of {checked} kernel members FAILED verification", file=out)
        return EXIT_PROBLEM
    print(f"{a.path}: OK, {checked} kernel members verified (sha256)", file=out)
    return EXIT_OK


