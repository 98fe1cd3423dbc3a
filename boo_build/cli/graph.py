"""``boo-build build|bench|list|clean|forget``: the doit graph of ``build.tasks``.

``build`` drives the same task generators as ``doit build`` through doit's
API; nothing here reimplements the graph.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..candidates import TUNE_DEFAULT  # pure Python
from ..errors import UsageError
from ..stages.comparison import COMPILE_BUDGET  # stdlib only
from ..stages.compile import DEFAULT_TIMEOUT_S  # stdlib only

DEFAULT_MANIFEST_DIR = Path("manifests")
DEFAULT_OUT = Path("artifacts")
DEP_FILE = ".doit.db"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


def default_manifests(folder: Path = DEFAULT_MANIFEST_DIR) -> tuple[Path, ...]:
    return tuple(sorted(folder.glob("*.toml")) + sorted(folder.glob("*.txt")) + sorted(folder.glob("*.tsv")))


def doit_config(out_dir: Path, jobs: int | None, quiet: bool) -> dict[str, Any]:
    from ..build.progress import ProgressReporter, QuietReporter

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

    from ..build.creators import task_creators

    mod: dict[str, Any] = dict(task_creators(config, plans))
    mod["DOIT_CONFIG"] = doit_config(config.out_dir, jobs, quiet)
    config.out_dir.mkdir(parents=True, exist_ok=True)
    # doit swaps sys.stdout to capture each Python action; with thread
    # workers the swaps interleave and may not be undone in order.
    saved = sys.stdout, sys.stderr
    try:
        rc = DoitMain(ModuleTaskLoader(mod)).run(doit_args)
    finally:
        sys.stdout, sys.stderr = saved
    return 0 if rc is None else int(rc)  # doit's clean and forget return None when done


def _files(folder: Path) -> set[Path]:
    return {p for p in Path(folder).rglob("*") if p.is_file()}


def _split(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _flags(items: list[str] | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out = []
    for item in items or ():
        target, sep, flag = item.partition("=")
        if not sep or not flag.startswith("-"):
            raise UsageError(f"--flag expects TARGET=--compiler-flag, got {item!r}")
        out.append((target, (flag,)))
    return tuple(out)


def _add_selection(p: argparse.ArgumentParser) -> None:
    """What every graph command takes: which manifests, targets and output folder."""
    p.add_argument("manifests", nargs="*", type=Path, metavar="MANIFEST",
                   help="manifest files (.toml, or command lines: MIOpen's .txt, iree-turbine's .txt or .tsv); "
                        "default: every manifest in manifests/")
    p.add_argument("--targets", help="comma-separated targets, overriding the manifests' (e.g. cpu,gfx942)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="OUTPUT_DIR",
                   help="output folder (default: artifacts)")


def add_build_arguments(p: argparse.ArgumentParser, packs: bool = True) -> None:
    _add_selection(p)
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel tasks (default: number of cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    if packs:
        p.add_argument("--allow-missing", action="store_true",
                       help="ship failed kernels as explicitly unavailable instead of failing the build")
        p.add_argument("--no-bench", action="store_true", help="skip benchmarks (the report says so)")
        p.add_argument("--no-validate", action="store_true", help="skip validation and benchmarks")
    p.add_argument("--no-traffic", action="store_true",
                   help="GPU targets: no traffic model and no variants ranked by it (defaults in fixed order)")
    p.add_argument("--all-variants", action="store_true",
                   help="GPU targets the traffic model ranks, without a device to time them: compile and ship every "
                        "variant it ranks, not only the best-modelled one, for `boo-build measure` to time on the "
                        "device (the build still selects by the model)")
    p.add_argument("--compile-budget", type=int, default=None, metavar="N",
                   help="kernel sizes at which the benchmarks may time torch.compile's baseline (two Inductor "
                        "compiles each: the op's and its call's; each kernel's first size first, in manifest "
                        "order; 0: none; default "
                        f"$BOO_COMPILE_BUDGET, else {COMPILE_BUDGET}); torch.compile(backend='boo') decides "
                        "against torch eager where it was not timed")
    p.add_argument("--tune", type=int, default=None, metavar="N",
                   help="CPU targets, where candidates are explored: compile, validate and time N tuned lowering "
                        f"configurations per kernel and implementation (0: none; default $BOO_TUNE, else {TUNE_DEFAULT};"
                        " docs/tuning.md); GPU targets with --all-variants: N tuned workgroup configurations shipped "
                        "for `boo-build measure` to choose among")
    p.add_argument("--reselect", action="store_true",
                   help="benchmark every kernel again and decide afresh, not keeping the output folder's previous "
                        "decisions where the timings cannot tell (docs/validation-and-selection.md)")
    p.add_argument("--flag", action="append", metavar="TARGET=FLAG",
                   help="append an iree-compile flag for one target (repeatable)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"per-compile timeout in seconds (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--scheduler", default=os.environ.get("DASK_SCHEDULER_ADDRESS"),
                   help="Dask scheduler address, or 'local' for a LocalCluster (default: $DASK_SCHEDULER_ADDRESS)")


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    add_build_arguments(p, packs=False)
    p.set_defaults(allow_missing=False, no_bench=False, no_validate=False)


def add_list_arguments(p: argparse.ArgumentParser) -> None:
    _add_selection(p)
    # what build_config reads of the options these commands do not take (nothing runs)
    p.set_defaults(jobs=None, quiet=False, allow_missing=False, no_bench=False, no_validate=False,
                   no_traffic=False, all_variants=False, reselect=False, flag=None, timeout=DEFAULT_TIMEOUT_S, scheduler=None,
                   compile_budget=None, tune=None)


add_clean_arguments = add_forget_arguments = add_list_arguments
add_arguments = add_build_arguments  # the graph module's default (app.py asks for add_<command>_arguments first)


def build_config(ns: argparse.Namespace):
    """The ``BuildConfig`` of a graph command's options."""
    from ..build.tasks import BuildConfig

    manifests = tuple(ns.manifests) or default_manifests()
    if not manifests:
        raise UsageError("no manifests given and none found in manifests/")
    missing = [str(m) for m in manifests if not Path(m).is_file()]
    if missing:
        raise UsageError(f"manifest not found: {', '.join(missing)}")
    for opt, n in (("--compile-budget", ns.compile_budget), ("--tune", ns.tune)):
        if n is not None and n < 0:
            raise UsageError(f"{opt} must be 0 or more, got {n}")
    if ns.all_variants and ns.no_traffic:
        raise UsageError("--all-variants ships the variants the traffic model ranks: it needs the model "
                         "(drop --no-traffic)")
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
        traffic=not ns.no_traffic,
        reselect=ns.reselect,
        all_variants=ns.all_variants,
        **({} if ns.compile_budget is None else {"compile_budget": ns.compile_budget}),
        **({} if ns.tune is None else {"tune": ns.tune}),
    )


def run(ns: argparse.Namespace) -> int:
    """One graph command (``ns.cmd``); a ``BooBuildError`` for a build that cannot start.
    Interrupted (Ctrl-C, SIGTERM) at any point: ``EXIT_INTERRUPTED``, once no task runs."""
    from ..stages import interrupt

    interrupt.resume()  # work may start again after an interrupted build in this process
    saved = sys.stdout, sys.stderr
    try:
        rc = _run(ns)
    except KeyboardInterrupt:
        return _interrupted(*saved)
    # a KeyboardInterrupt swallowed on the main thread (raised in a finalizer, say) still stopped the build
    return _interrupted(*saved) if interrupt.stopping() else rc


def _interrupted(out, err) -> int:
    """Wait for the tasks still running: doit's threads are daemons, and the interpreter
    must not exit while one is in torch or IREE (``stages.interrupt``). An export in
    torch finishes; compiles were killed; no task starts."""
    from ..stages import interrupt
    from ..stages.compile import kill_running

    if interrupt.stop():  # raised before the handler was installed: nothing may start now
        kill_running()
    if n := interrupt.running():
        print(f"boo-build: interrupted; waiting for {n} running task(s) to finish or stop", file=err, flush=True)
    interrupt.wait_idle()
    # a task that ended meanwhile swapped them (doit captures each action's output)
    sys.stdout, sys.stderr = out, err
    print("boo-build: interrupted; finished work is kept, rerun to continue", file=err)
    return EXIT_INTERRUPTED


def _run(ns: argparse.Namespace) -> int:
    from ..build.tasks import interrupt_on_sigterm, plan

    config = build_config(ns)
    plans = plan(config)
    interrupt_on_sigterm()
    jobs = ns.jobs
    if ns.cmd in ("list", "clean", "forget"):  # nothing runs: no cluster needed
        config = replace(config, scheduler=None)
    if ns.cmd == "list":
        # doit reports a closed pipe as a failure with a traceback: it writes to a buffer, printed here
        # (a closed stdout then ends as every command's does: cli.app, EXIT_BROKEN_PIPE)
        listing = io.StringIO()
        with contextlib.redirect_stdout(listing):  # doit's list writes to the sys.stdout of its making
            rc = run_doit(config, plans, ["list", "--all"], jobs, ns.quiet)
        sys.stdout.write(listing.getvalue())
        return rc
    if ns.cmd == "clean":
        before = _files(config.out_dir)
        with contextlib.redirect_stdout(io.StringIO()):  # doit's line per file action: the count says it
            rc = run_doit(config, plans, ["clean", "--clean-all"], jobs, ns.quiet)
        gone = len(before - _files(config.out_dir))
        print(f"removed {gone} built file{'s' * (gone != 1)} of {len(plans)} manifest{'s' * (len(plans) != 1)} "
              f"from {config.out_dir}")
        return rc
    if ns.cmd == "forget":
        with contextlib.redirect_stdout(io.StringIO()):  # doit's "forgetting all tasks"
            rc = run_doit(config, plans, ["forget", "--all"], jobs, ns.quiet)
        print(f"forgot every task's up-to-date state in {config.out_dir}: the next build runs them again "
              "(the files built are kept)")
        return rc
    if config.scheduler:
        from ..build.distributed import scheduler_session

        # an unreachable scheduler, no worker, a compiler mismatch: DistributedError
        with scheduler_session(config.scheduler) as address:
            return _build(replace(config, scheduler=address), plans, ns, jobs)
    return _build(config, plans, ns, jobs)


def _build(config, plans, ns: argparse.Namespace, jobs: int | None) -> int:
    names = [f"report:{p.manifest.bundle.name}" for p in plans] if ns.cmd == "bench" else ["build"]
    start = time.monotonic()
    rc = run_doit(config, plans, ["run", "-n", str(jobs or os.cpu_count() or 1), *names], jobs, ns.quiet)
    took = time.monotonic() - start
    print(f"{ns.cmd} took {int(took // 60)} min {int(took % 60)} s" if took >= 60 else f"{ns.cmd} took {took:.1f} s")
    if ns.cmd == "build" and rc == 0:
        for p in plans:
            for path in (p.layout.page, p.layout.bundle(p.manifest)):  # the bundle last
                rel = os.path.relpath(path)
                print(path if rel.startswith("..") else rel)
    return rc
