"""``boo-build trace --out M.toml [options] SCRIPT [ARGS...]``: run a script
under ``boo_build.trace.record_norms`` and write the manifest of the norm
kernels it called (docs/trace.md).

SCRIPT runs as ``__main__`` in this process, as ``python SCRIPT ARGS`` would
run it (``sys.argv``, ``sys.path[0]`` its folder), so it needs torch, not the
build side. Checked before it runs: SCRIPT, ``--out`` (writable), ``--name``,
``--version``, ``--targets``, ``--merge`` and the ``--rms-class`` spellings
that name an importable module (exit 2).

Exit status: 0 written; 1 the script raised (what was recorded before is
still written; its traceback is printed), the script's own status if it
exited with one (written too), 1 if it made no norm call (nothing written); 2 a bad option, or an ``--rms-class`` that named
no module the script called (nothing written: its norms would be missing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Iterator

from ..errors import UsageError

__all__ = ["add_arguments", "run"]
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="the manifest to write (.toml)")
    p.add_argument("--name", help="the bundle's name (default: <script>-norms)")
    p.add_argument("--version", default="0.1.0", help="the bundle's version (default 0.1.0)")
    p.add_argument("--targets", help="comma-separated targets (default: the default manifest's)")
    p.add_argument("--dynamic", choices=("auto", "always", "never"), default="auto",
                   help="dynamic entries: for kernels seen at 2+ input shapes (auto), all, or none")
    p.add_argument("--static", type=int, default=4, metavar="N",
                   help="static entries beside a dynamic one: its N most-called shapes (default 4)")
    p.add_argument("--rms-class", action="append", default=[], metavar="module.Class",
                   help="a norm class written by hand to probe whatever it holds (norms with a weight and an eps "
                        "are probed anyway: Llama's, Gemma's, T5's...); repeatable")
    p.add_argument("--no-fuse-adds", dest="fuse_adds", action="store_false",
                   help="record a norm after an add as its plain kernel, not the fused residual form's (for a "
                        "model compiled with fuse_adds=False, or served by replace_norms alone)")
    p.add_argument("--no-auto", dest="auto", action="store_false",
                   help="probe only the --rms-class classes: record no other norm written by hand")
    p.add_argument("--merge", type=Path, metavar="OLD.toml",
                   help="add to this manifest (its text, comments and [bundle] kept) what it does not cover")
    p.add_argument("script", type=Path, metavar="SCRIPT", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's arguments")


def _check_writable(out: Path) -> None:
    if out.is_dir():
        raise UsageError(f"--out {out}: it is a folder, not a file")
    parent = out.parent if str(out.parent) else Path(".")
    while not parent.exists():  # write_atomic creates the missing folders
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out {out}: cannot write in {parent}: not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot write in {parent}: permission denied")
    if out.exists() and not os.access(out, os.W_OK) and not os.access(out.parent, os.W_OK):
        raise UsageError(f"--out {out}: the file is not writable")


def _default_name(script: Path) -> str:
    from ..bundle_names import name_problem

    name = re.sub(r"[^A-Za-z0-9._-]+", "-", script.stem).strip("-._") + "-norms"
    return name if not name_problem(name) else "traced-norms"


def _checks(ns: argparse.Namespace) -> tuple[str, tuple[str, ...] | None]:
    """Everything that can be checked before the script runs: (name, targets)."""
    from ..bundle_names import name_problem, version_problem
    from ..errors import UnknownTarget
    from ..targets import catalogue, resolve

    if not ns.script.is_file():
        raise UsageError(f"script not found: {ns.script}")
    _check_writable(ns.out)
    name = ns.name or _default_name(ns.script)
    problems = [p for p in (name_problem(name), version_problem(ns.version)) if p]
    if ns.static < 0:
        problems.append(f"--static {ns.static}: give 0 or more")
    targets = None
    if ns.targets:
        targets = tuple(t.strip() for t in ns.targets.split(",") if t.strip())
        try:
            resolve(targets, catalogue())
        except UnknownTarget as e:
            problems.append(str(e))
    if problems:
        raise UsageError("; ".join(problems))
    if ns.merge is not None:
        from ..manifest.reader import load_manifest

        if not ns.merge.is_file():
            raise UsageError(f"--merge {ns.merge}: no such file")
        load_manifest(ns.merge)  # ManifestError: exit 2 before anything runs
    return name, targets


def _script_traceback(exc: BaseException, script: Path) -> str:
    """The traceback from the script's first frame on (not this module's or runpy's)."""
    tb = exc.__traceback__
    want = {str(script), os.path.abspath(script), str(script.resolve())}
    while tb is not None and tb.tb_frame.f_code.co_filename not in want:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


@contextlib.contextmanager
def _as_script(script: Path, args: list[str]) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as ``python SCRIPT ARGS`` sets them."""
    saved_argv, saved_path0 = sys.argv, sys.path[0]
    sys.argv = [str(script), *args]
    sys.path[0] = str(script.resolve().parent)
    try:
        yield
    finally:
        sys.argv, sys.path[0] = saved_argv, saved_path0


def _run_script(script: Path) -> tuple[int, str, bool]:
    """Run ``script`` as ``__main__``: (its exit status, what to print on stderr, whether it raised)."""
    import runpy

    try:
        runpy.run_path(str(script), run_name="__main__")
        return EXIT_OK, "", False
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return EXIT_OK, "", False
        if isinstance(e.code, int):
            return e.code, "", False
        return EXIT_FAILED, f"{e.code}\n", False  # sys.exit("message"): Python prints it, status 1
    except BaseException as e:  # KeyboardInterrupt too: what was recorded is still written
        return EXIT_FAILED, _script_traceback(e, script), True


def run(ns: argparse.Namespace) -> int:
    name, targets = _checks(ns)
    from ..trace import record_norms
    from ..trace.recorder import UnknownRmsClass, resolve_rms_classes

    shown = " ".join([str(ns.script), *ns.args])
    with _as_script(ns.script, list(ns.args)):
        try:  # the script's folder on sys.path: its own modules' classes resolve
            classes = resolve_rms_classes(ns.rms_class)
        except UnknownRmsClass as e:
            raise UsageError(f"--rms-class: {e}") from None
        with record_norms(classes, source=f"`{shown}`", auto=ns.auto, fuse_adds=ns.fuse_adds) as rec:
            status, text, raised = _run_script(ns.script)
    sys.stdout.flush()
    if text:
        print(text, end="", file=sys.stderr)
    if status != EXIT_OK:
        print(f"boo-build trace: the script {'raised' if raised else f'exited with status {status}'}",
              file=sys.stderr)
    unmatched = rec.unmatched_rms_classes()
    if unmatched:
        print(f"boo-build trace: --rms-class {', '.join(unmatched)}: no module of that class ran in the script; "
              "nothing written (its norms would be missing). Give the class as the script defines it "
              "(its name, or module.Class: __main__.Class for one defined in the script)", file=sys.stderr)
        return EXIT_USAGE
    if not rec.calls:
        why = "" if not rec.unrecorded else " that a kernel can serve"
        print(rec.table() if rec.unrecorded else "", end="\n" if rec.unrecorded else "")
        print(f"boo-build trace: the script made no norm call{why}: nothing written to {ns.out}", file=sys.stderr)
        return status or EXIT_FAILED
    rec.write(ns.out, name=name, version=ns.version, targets=targets, dynamic=ns.dynamic, static=ns.static,
              merge=ns.merge)
    print(rec.table())
    what = f"added to {ns.merge} and wrote" if ns.merge is not None else "wrote"
    print(f"{what} {ns.out}" + (" (what was recorded before the script failed)" if status else "")
          + f"; build it: boo-build build {ns.out}")
    return status
