"""``boo-build``: the command line over the doit graph in ``boo_build.tasks``.

    boo-build build [MANIFEST ...] [--targets T1,T2] [--out DIR] [-j N] ...
    boo-build bench MANIFEST ...          validate + benchmark, no bundle
    boo-build list|clean|forget [MANIFEST ...]
    boo-build info|verify BUNDLE, boo-build diff OLD NEW
    boo-build report BUNDLE_OR_OUTPUT_DIR [--out FILE]   the HTML report page
    boo-build measure BUNDLE --out NEW    validate, time, select on this machine's devices
    boo-build --version                   boo-build <version>

``build`` drives the same task generators as ``doit build`` through doit's
API; nothing here reimplements the graph.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from . import __version__
from .compile import DEFAULT_TIMEOUT_S  # stdlib only

DEFAULT_MANIFEST_DIR = Path("manifests")
DEFAULT_OUT = Path("artifacts")
DEP_FILE = ".doit.db"


def default_manifests(folder: Path = DEFAULT_MANIFEST_DIR) -> tuple[Path, ...]:
    return tuple(sorted(folder.glob("*.toml")) + sorted(folder.glob("*.txt")))


def doit_config(out_dir: Path, jobs: int | None, quiet: bool) -> dict:
    from .progress import ProgressReporter, QuietReporter

    return {
        "dep_file": str(Path(out_dir) / DEP_FILE),
        "backend": "sqlite3",
        "num_process": jobs or os.cpu_count() or 1,
        "par_type": "thread",  # compiles are subprocesses; threads are enough
        "continue": True,  # one failed task never stops the others
        # the reporter divides its time-left estimate by -j
        "reporter": (QuietReporter if quiet else ProgressReporter).for_jobs(jobs or os.cpu_count() or 1),
        "default_tasks": ["build"],
        "verbosity": 0,
        # the stdout of this call: doit's default is the one it saw at import
        # (an in-process caller's may be gone by now: pytest's, a closed pipe)
        "outfile": sys.stdout,
    }


def run_doit(config, plans, doit_args: list[str], jobs: int | None, quiet: bool) -> int:
    from doit.cmd_base import ModuleTaskLoader
    from doit.doit_cmd import DoitMain

    from .tasks import task_creators

    mod = dict(task_creators(config, plans))
    mod["DOIT_CONFIG"] = doit_config(config.out_dir, jobs, quiet)
    config.out_dir.mkdir(parents=True, exist_ok=True)
    # doit swaps sys.stdout to capture each Python action; with thread
    # workers the swaps interleave and may not be undone in order.
    saved = sys.stdout, sys.stderr
    try:
        return DoitMain(ModuleTaskLoader(mod)).run(doit_args)
    finally:
        sys.stdout, sys.stderr = saved


def _split(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _flags(items: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out = []
    for item in items or ():
        target, sep, flag = item.partition("=")
        if not sep or not flag.startswith("-"):
            raise SystemExit(f"boo-build: --flag expects TARGET=--compiler-flag, got {item!r}")
        out.append((target, (flag,)))
    return tuple(out)


def _add_graph_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifests", nargs="*", type=Path,
                   help="manifest files (.toml or MIOpen .txt); default: every manifest in manifests/")
    p.add_argument("--targets", help="comma-separated targets, overriding the manifests' (e.g. cpu,gfx942)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: artifacts)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel tasks (default: number of cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    p.add_argument("--allow-missing", action="store_true",
                   help="ship failed kernels as explicitly unavailable instead of failing the build")
    p.add_argument("--no-bench", action="store_true", help="skip benchmarks (the report says so)")
    p.add_argument("--no-validate", action="store_true", help="skip validation and benchmarks")
    p.add_argument("--flag", action="append", metavar="TARGET=FLAG",
                   help="append an iree-compile flag for one target (repeatable)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"per-compile timeout in seconds (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--scheduler", default=os.environ.get("DASK_SCHEDULER_ADDRESS"),
                   help="Dask scheduler address, or 'local' for a LocalCluster (default: $DASK_SCHEDULER_ADDRESS)")


def _config(ns):
    from .tasks import BuildConfig

    manifests = tuple(ns.manifests) or default_manifests()
    if not manifests:
        raise SystemExit("boo-build: no manifests given and none found in manifests/")
    missing = [str(m) for m in manifests if not Path(m).is_file()]
    if missing:
        raise SystemExit(f"boo-build: manifest not found: {', '.join(missing)}")
    return BuildConfig(
        manifests=manifests,
        out_dir=ns.out,
        targets=_split(ns.targets),
        allow_missing=ns.allow_missing,
        bench=not (ns.no_bench or ns.no_validate),
        validate=not ns.no_validate,
        extra_flags=_flags(ns.flag),
        compile_timeout=ns.timeout,
        scheduler=ns.scheduler,
    )


# Exit status when stdout is closed early (``boo-build info B | head -1``):
# 128 + SIGPIPE, what a shell reports for cat, grep and the like in the same
# spot, so `set -o pipefail` scripts see the same thing as with those.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """The entry point: every subcommand, with a closed stdout handled quietly
    (Python docs, signal module, "Note on SIGPIPE"): no traceback."""
    try:
        try:
            return _main(argv)
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


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="boo-build", description=__doc__.split("\n\n")[0])
    # the one version source (pyproject.toml reads it too)
    parser.add_argument("--version", action="version", version=f"boo-build {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("build", "export, compile, validate, benchmark and pack"),
                        ("bench", "validate and benchmark without packing"),
                        ("list", "list the graph's tasks"),
                        ("clean", "remove built files"),
                        ("forget", "forget up-to-date state")):
        _add_graph_options(sub.add_parser(name, help=help_))
    p = sub.add_parser("info", help="describe a bundle")
    p.add_argument("bundle", type=Path)
    p = sub.add_parser("verify", help="check every checksum in a bundle")
    p.add_argument("bundle", type=Path)
    p = sub.add_parser("diff", help="compare two bundles")
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p = sub.add_parser("report", help="write the HTML report page of a bundle or a build's output folder")
    p.add_argument("source", type=Path, metavar="BUNDLE_OR_OUTPUT_DIR")
    p.add_argument("--out", type=Path, help="page to write (default: report.html in the build folder, "
                                            "NAME-VERSION.report.html beside a bundle)")
    p = sub.add_parser("measure", help="validate, time and select a bundle's kernels on this machine's devices "
                                       "and write a new bundle (needs torch, not the build side)")
    from .measure import add_arguments as add_measure_arguments  # light: no torch until it runs

    add_measure_arguments(p)
    ns = parser.parse_args(argv)

    if ns.cmd == "measure":
        from .measure import run as cmd_measure

        return cmd_measure(ns)
    if ns.cmd == "report":
        from .report_page import cmd_report

        return cmd_report(ns.source, ns.out)
    if ns.cmd in ("info", "verify", "diff"):
        from . import bundle_cli

        if ns.cmd == "diff":
            return bundle_cli.cmd_diff(ns.old, ns.new)
        return getattr(bundle_cli, f"cmd_{ns.cmd}")(ns.bundle)

    from .tasks import BuildError, interrupt_on_sigterm, plan

    config = _config(ns)
    try:
        plans = plan(config)
    except BuildError as e:
        print(f"boo-build: {e}", file=sys.stderr)
        return 2
    interrupt_on_sigterm()
    from .compile import resume

    resume()  # compiles may start again after an interrupted build in this process
    jobs = ns.jobs
    if ns.cmd in ("list", "clean", "forget"):  # nothing runs: no cluster needed
        config = replace(config, scheduler=None)
    if ns.cmd == "list":
        return run_doit(config, plans, ["list", "--all"], jobs, ns.quiet)
    if ns.cmd in ("clean", "forget"):
        return run_doit(config, plans, [ns.cmd, "build"] if ns.cmd == "clean" else ["forget"], jobs, ns.quiet)
    if config.scheduler:
        from .distributed import DistributedError, scheduler_session

        try:
            with scheduler_session(config.scheduler) as address:
                config = replace(config, scheduler=address)
                rc = _build(config, plans, ns, jobs)
        except DistributedError as e:  # unreachable scheduler, no worker, compiler mismatch
            print(f"boo-build: {e}", file=sys.stderr)
            return 2
    else:
        rc = _build(config, plans, ns, jobs)
    return rc


def _build(config, plans, ns, jobs) -> int:
    names = [f"report:{p.manifest.bundle.name}" for p in plans] if ns.cmd == "bench" else ["build"]
    try:
        rc = run_doit(config, plans, ["run", "-n", str(jobs or os.cpu_count() or 1), *names], jobs, ns.quiet)
    except KeyboardInterrupt:
        print("boo-build: interrupted; finished work is kept, rerun to continue", file=sys.stderr)
        return 130
    if ns.cmd == "build" and rc == 0:
        for p in plans:
            for path in (p.layout.page, p.layout.bundle(p.manifest)):  # the bundle last
                rel = os.path.relpath(path)
                print(path if rel.startswith("..") else rel)
    return rc


if __name__ == "__main__":
    sys.exit(main())
