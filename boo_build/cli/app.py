"""``boo-build``: the parser and the one place errors become messages and exit codes.

    boo-build build [MANIFEST ...] [--targets T1,T2] [--out DIR] [-j N] ...
    boo-build bench MANIFEST ...          validate + benchmark, no bundle
    boo-build list|clean|forget [MANIFEST ...]
    boo-build info|verify BUNDLE, boo-build diff OLD NEW   [--max-size SIZE: 512MiB, 2GiB, bytes]
    boo-build report BUNDLE_OR_OUTPUT_DIR [--out FILE]   the HTML report page
    boo-build measure BUNDLE --out NEW    validate, time, select on this machine's devices
    boo-build publish BUNDLE STORE_DIR    add a bundle to a store (docs/store.md)
    boo-build lock NAME[==VERSION]... --store URL_OR_DIR [-o boo.lock]
    boo-build fetch LOCK_FILE             download locked bundles into the cache
    boo-build cache list|clean            the loader's cache of downloads
    boo-build trace --out M.toml SCRIPT [ARGS...]   record a script's norm calls as a manifest
    boo-build --version                   boo-build <version>

Each subcommand is a module of this package with ``add_arguments(parser)``
and ``run(namespace) -> exit status``, imported only when it runs (``measure``
and ``report`` never import the build side, ``info`` not even torch). A
``BooBuildError`` (and the loader's ``BundleError``, for a bundle that cannot
be read) is printed as ``boo-build: <message>`` with exit status 2; a
command's own statuses are documented in its module (``diff`` and ``verify``
1 on a difference or mismatch, ``measure`` 1 on a failure). A bad option
value (``--max-size 12XB``) is argparse's usage error, exit status 2 too.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .. import __version__
from ..errors import BooBuildError
from ..loader.errors import BundleError

EXIT_USAGE = 2
# Exit status when stdout is closed early (``boo-build info B | head -1``):
# 128 + SIGPIPE, what a shell reports for cat, grep and the like in the same
# spot, so `set -o pipefail` scripts see the same thing as with those.
EXIT_BROKEN_PIPE = 141
# subcommand -> (module of this package, help)
COMMANDS = {
    "build": ("graph", "export, compile, validate, benchmark and pack"),
    "bench": ("graph", "validate and benchmark without packing"),
    "list": ("graph", "list the graph's tasks"),
    "clean": ("graph", "remove the files a build wrote (exports, compiles, records, the bundle and its page)"),
    "forget": ("graph", "forget every task's up-to-date state, so that the next build runs them all again"),
    "info": ("info", "describe a bundle"),
    "verify": ("verify", "check every checksum in a bundle, and its iree-base-runtime range"),
    "diff": ("diff", "compare two bundles"),
    "report": ("report", "write the HTML report page of a bundle or a build's output folder"),
    "measure": ("measure", "validate, time and select a bundle's kernels on this machine's devices "
                           "and write a new bundle (needs torch, not the build side)"),
    "publish": ("publish", "copy a bundle into a store folder and list it in the store's index.json"),
    "lock": ("lock", "pin bundles of a store (newest or NAME==VERSION) in a lock file"),
    "fetch": ("fetch", "download the bundles a lock file pins into the local cache"),
    "cache": ("cache", "list or clean the local cache of downloaded bundles"),
    "trace": ("trace", "run a script, record its norm calls and write the manifest of their kernels"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="boo-build", description="Ahead-of-time IREE norm kernels, packed into "
                                                              "bundles, and their commands.")
    # the one version source (pyproject.toml reads it too)
    p.add_argument("--version", action="version", version=f"boo-build {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands",
                           description="boo-build COMMAND --help describes one")
    for name, (module, help_) in COMMANDS.items():
        mod = _command(module)
        sp = sub.add_parser(name, help=help_, description=help_[:1].upper() + help_[1:] + ".")
        # a module serving several commands (graph) gives each its own options: add_<name>_arguments
        getattr(mod, f"add_{name}_arguments", mod.add_arguments)(sp)
    return p


def _command(module: str):
    # every command module imports only the standard library at module level
    return importlib.import_module(f"{__package__}.{module}")


def main(argv: list[str] | None = None) -> int:
    """The entry point: every subcommand, its errors printed once, a closed
    stdout handled quietly (Python docs, signal module, "Note on SIGPIPE")."""
    try:
        try:
            p = parser()
            ns = p.parse_args(argv)
            if ns.cmd is None:  # bare boo-build: what it can do
                p.print_help(sys.stderr)
                return EXIT_USAGE
            return _command(COMMANDS[ns.cmd][0]).run(ns)
        except (BooBuildError, BundleError) as e:
            print(f"boo-build: {e}", file=sys.stderr)
            return EXIT_USAGE
        finally:  # output still buffered fails here, not at interpreter exit
            sys.stdout.flush()
    except BrokenPipeError:
        # stdout to devnull, so the interpreter's own final flush cannot fail again
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a file descriptor (an in-process caller's)
            pass
        return EXIT_BROKEN_PIPE
