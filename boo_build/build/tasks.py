"""The build graph as doit task generators (plain functions yielding dicts).

``creators.task_creators(config)`` returns the ``task_*`` functions for a
``BuildConfig``; the root ``dodo.py`` and the ``boo-build`` CLI both load
them, so there is one graph. Task names:

    export:<bundle>/<module key>                     one per (signature, impl)
    compile:<bundle>/<target>/<module key>           one per module x target
    fallback:<bundle>/<target>/<signature key>       per kernel x target: where none of its candidates
                                                     compiled, its fallback variants (candidates.fallbacks)
    traffic:<bundle>/<target>/<module key>           a GPU module's modelled traffic, before it compiles
    validate:<bundle>/<target>/<module key>          one per module x target with a device
    ready:<bundle>                                   barrier before the benchmarks
    bench:<bundle>/<target>/<signature key>          serial, after every compile/validate: its candidates
                                                     and torch eager in paired rounds
    select:<bundle>/<target>/<signature key>         the decision per kernel x target (stages/select.py)
    report:<bundle>                                  always runs: summary, build report, CSV
    pack:<bundle>                                    the bundle file, from the decisions
    page:<bundle>                                    report.html, redrawn when what it shows changed
    build                                            everything

(export, traffic, compile, fallback, validate, bench, select, report, pack, page:
the stages in the order data flows; a module's ``+<variant>`` and a benchmark
subject's ``@<mode>`` name the candidates, ``candidates.candidates``, which
every generator here, the select stage and the report enumerate alike.)

A stage depends on the *content* of the previous stage's output
(``inputs_unchanged``): the MLIR text, and records minus their run id and
timings. Re-exporting an identical module therefore recompiles nothing, and
recompiling an identical vmfb revalidates nothing.

Here: the build's configuration and the plan (manifests and targets); the
graph's task creators are in ``creators``, the actions the tasks run in
``actions`` (each handed a record of ``jobs``), where outputs go in ``layout``, how records are written in
``records``. Stage records are JSON files beside the artifacts (see
docs/ARCHITECTURE.md). A failed export/compile/validation is recorded, not
raised, so other tasks carry on; like a success it is redone when its inputs
change (``boo-build forget`` retries it as is). The report task fails the
build when a requested kernel is missing, unless ``allow_missing``.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..candidates import TUNE_DEFAULT
from ..errors import BuildError
from ..layout import Layout
from ..manifest.reader import Manifest, load_manifest
from ..stages.comparison import COMPILE_BUDGET as DEFAULT_COMPILE_BUDGET  # stdlib only
from ..stages.compile import DEFAULT_TIMEOUT_S  # stdlib only: cheap at graph load
from ..targets import Target, catalogue, resolve

__all__ = ["BuildConfig", "Plan", "device_map", "interrupt_on_sigterm", "plan"]

PKG_DIR = Path(__file__).resolve().parent.parent  # boo_build/
STAGES_DIR = PKG_DIR / "stages"
# Source files whose change must re-export every module (the ops' math lives in ops/).
OP_SOURCES = tuple(str(p) for p in sorted((PKG_DIR / "ops").glob("*.py")))
EXPORT_SOURCES = (str(STAGES_DIR / "torch_modules.py"), str(STAGES_DIR / "export.py"),
                  str(PKG_DIR / "signature.py")) + OP_SOURCES
# Source files whose change must decide every kernel again (the rules, their reasons)
SELECT_SOURCES = tuple(str(p) for p in (STAGES_DIR / "selection.py", STAGES_DIR / "select.py",
                                         STAGES_DIR / "comparison.py", PKG_DIR / "reasons.py"))


COMPILE_BUDGET_ENV = "BOO_COMPILE_BUDGET"  # the default of --compile-budget, where set (the tests set 0)
TUNE_ENV = "BOO_TUNE"  # the default of --tune, where set (the tests set 0)


def _env_count(name: str, default: int, what: str) -> int:
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise BuildError(f"{name}={v!r}: a count of {what} (0 or more) is expected")
    return n


def default_compile_budget() -> int:
    """The build's compile budget (kernel sizes) where no option gives one: ``$BOO_COMPILE_BUDGET``, else
    ``DEFAULT_COMPILE_BUDGET``."""
    return _env_count(COMPILE_BUDGET_ENV, DEFAULT_COMPILE_BUDGET, "sizes")


def default_tune() -> int:
    """Tuned configurations per CPU kernel and implementation where no option gives a count:
    ``$BOO_TUNE``, else ``candidates.TUNE_DEFAULT``."""
    return _env_count(TUNE_ENV, TUNE_DEFAULT, "tuned configurations")


@dataclass(frozen=True)
class BuildConfig:
    manifests: tuple[Path, ...]
    out_dir: Path
    targets: tuple[str, ...] | None = None  # overrides every manifest's targets
    allow_missing: bool = False
    bench: bool = True
    validate: bool = True
    extra_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (target, flags) appended
    compile_timeout: float = DEFAULT_TIMEOUT_S
    run_id: str = field(default_factory=lambda: f"{time.time_ns():x}-{os.getpid()}")
    scheduler: str | None = None  # Dask scheduler address, "local", or None
    traffic: bool = True  # GPU targets: the traffic model, and the variants it ranks (candidates.modelled)
    reselect: bool = False  # benchmarks decide afresh, not keeping the folder's previous decisions (comparison.Previous)
    # GPU targets whose variants the traffic model ranks and no device measures: every ranked variant compiles and
    # ships, not only the best-modelled one (the selection still follows the model; `measure` chooses on the device)
    all_variants: bool = False
    # kernel sizes at which a build may time torch.compile's baseline (two Inductor compiles each, seconds) in
    # its CPU targets' benchmarks: each kernel's first size first, in manifest order (creators.compile_shares)
    compile_budget: int = field(default_factory=lambda: default_compile_budget())
    # tuned lowering configurations per kernel and implementation: CPU targets where candidates are explored,
    # GPU targets with all_variants (tune_for; 0: none; candidates.tune_variants, docs/tuning.md)
    tune: int = field(default_factory=lambda: default_tune())

    def tune_for(self, target) -> int:
        """Tuned configurations per kernel and implementation on ``target``: ``tune`` on a CPU
        target; on a GPU target only with ``--all-variants`` (they model the baseline's
        traffic, so only a device's timings, ``boo-build measure``, can choose one)."""
        return self.tune if target.is_cpu or self.all_variants else 0

    def __post_init__(self):
        # Absolute paths: doit keys its dependency state by path string, so
        # `doit build` (absolute) and `boo-build build` (relative) share it.
        object.__setattr__(self, "manifests", tuple(Path(m).resolve() for m in self.manifests))
        object.__setattr__(self, "out_dir", Path(self.out_dir).resolve())

    def flags_for(self, target: Target) -> tuple[str, ...]:
        extra = tuple(f for name, fl in self.extra_flags if name == target.name for f in fl)
        return target.flags + extra


@dataclass(frozen=True)
class Plan:
    """One manifest's build: what to build, for which targets, where."""

    manifest: Manifest
    targets: tuple[Target, ...]
    layout: Layout


def plan(config: BuildConfig) -> list[Plan]:
    """Load every manifest and resolve targets; all errors before anything runs."""
    from ..errors import ManifestError

    cat = catalogue()
    plans, errors = [], []
    for path in config.manifests:
        try:
            m = load_manifest(path, targets=config.targets, catalogue=cat)
        except ManifestError as e:
            errors.append(str(e))
            continue
        try:
            targets = resolve(m.bundle.targets, cat)
        except ValueError as e:
            errors.append(f"{path}: {e}")
            continue
        plans.append(Plan(m, targets, Layout(config.out_dir, m.bundle.name)))
    unknown_extra = [t for t, _ in config.extra_flags if t not in cat]
    if unknown_extra:
        errors.append(f"--flag names unknown target(s) {', '.join(unknown_extra)}: known targets are {', '.join(sorted(cat))}")
    names = [p.manifest.bundle.name for p in plans]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        errors.append(f"several manifests build bundle(s) named {', '.join(dupes)}: bundle names must be unique")
    if errors:
        raise BuildError("\n".join(errors))
    return plans



def device_map(plans: list[Plan], scheduler: str | None = None) -> dict[str, tuple[dict | None, str]]:
    """target name -> (device as a dict, or None, and the reason). With a
    scheduler, the devices of the workers that declared each target."""
    from dataclasses import asdict

    if scheduler:
        from .distributed import remote_device_map

        return remote_device_map(scheduler, [t.name for p in plans for t in p.targets])

    from ..loader.devices import discover_for, match_target

    devices = discover_for(t for p in plans for t in p.targets)
    out = {}
    for p in plans:
        for t in p.targets:
            if t.name not in out:
                dev, why = match_target(t, devices)
                out[t.name] = (asdict(dev) if dev else None, why)
    return out


def interrupt_on_sigterm() -> None:
    """SIGTERM behaves like Ctrl-C: doit then writes its database for the
    tasks already finished, so a restarted build redoes only the rest. Either
    signal stops the build (``stages.interrupt``: no task starts any more),
    kills the compilers in flight (they run in their own sessions, so neither
    signal reaches them) and raises KeyboardInterrupt on the main thread, whose
    caller waits for the tasks still running (``interrupt.wait_idle``). A second
    signal meanwhile is ignored: raised during that wait, it would let the
    interpreter exit under a thread still in torch (the abort the wait avoids)."""
    from ..stages import interrupt
    from ..stages.compile import kill_running

    def handler(signum, frame):  # noqa: ARG001
        if interrupt.stop():
            kill_running()
            raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
