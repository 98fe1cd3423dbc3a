"""The build graph as doit task generators (plain functions yielding dicts).

``task_creators(config)`` returns the ``task_*`` functions for a
``BuildConfig``; the root ``dodo.py`` and the ``boo-build`` CLI both load
them, so there is one graph. Task names:

    export:<bundle>/<module key>                     one per (signature, impl)
    compile:<bundle>/<target>/<module key>           one per module x target
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

(export, traffic, compile, validate, bench, select, report, pack, page: the
stages in the order data flows; a module's ``+<variant>`` and a benchmark
subject's ``@<mode>`` name the candidates, ``candidates.candidates``, which
every generator here, the select stage and the report enumerate alike.)

A stage depends on the *content* of the previous stage's output
(``inputs_unchanged``): the MLIR text, and records minus their run id and
timings. Re-exporting an identical module therefore recompiles nothing, and
recompiling an identical vmfb revalidates nothing.

Here: the build's configuration, the plan (manifests and targets), the
up-to-date checks and the graph. The actions the tasks run are in
``actions``, where outputs go in ``layout``, how records are written in
``records``. Stage records are JSON files beside the artifacts (see
docs/ARCHITECTURE.md). A failed export/compile/validation is recorded, not
raised, so other tasks carry on; like a success it is redone when its inputs
change (``boo-build forget`` retries it as is). The report task fails the
build when a requested kernel is missing, unless ``allow_missing``.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from doit.tools import config_changed

from .. import candidates
from ..candidates import Candidate, export_variant, modelled, module_file, variant_flags
from ..errors import BuildError
from ..files import read_json, write_json
from ..layout import Layout, eager_subject
from ..manifest.reader import Manifest, load_manifest
from ..records import stable_record
from ..signature import KernelSignature, ModuleId
from ..stages.compile import DEFAULT_TIMEOUT_S  # stdlib only: cheap at graph load
from ..stages.not_run import VALIDATION_DISABLED
from ..stages.select import KernelTarget
from ..targets import Target, arch_free, catalogue, dynamic_flags, resolve
from .actions import (
    bench_action,
    compile_action,
    export_action,
    pack_action,
    report_action,
    select_action,
    traffic_action,
    traffic_copy_action,
    validate_action,
)
from .durations import expected as expected_seconds
from .toolchain import Toolchain
from .uptodate import content_digest, inputs_unchanged, record_ok

__all__ = ["BuildConfig", "BuildError", "Layout", "Plan", "Toolchain", "bench_action", "compile_action",
           "content_digest", "export_action", "inputs_unchanged", "interrupt_on_sigterm", "pack_action", "plan",
           "read_json", "record_ok", "report_action", "stable_record", "task_creators", "validate_action",
           "write_json"]

PKG_DIR = Path(__file__).resolve().parent.parent  # boo_build/
STAGES_DIR = PKG_DIR / "stages"
# Source files whose change must re-export every module (the ops' math lives in ops/).
OP_SOURCES = tuple(str(p) for p in sorted((PKG_DIR / "ops").glob("*.py")))
EXPORT_SOURCES = (str(STAGES_DIR / "torch_modules.py"), str(STAGES_DIR / "export.py"),
                  str(PKG_DIR / "signature.py")) + OP_SOURCES
# Source files whose change must decide every kernel again (the rules, their reasons)
SELECT_SOURCES = tuple(str(p) for p in (STAGES_DIR / "selection.py", STAGES_DIR / "select.py",
                                         STAGES_DIR / "comparison.py", PKG_DIR / "reasons.py"))


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
    from ..manifest.reader import ManifestError

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



# ------------------------------------------------------------ generators
def _device_map(plans: list[Plan], scheduler: str | None = None) -> dict[str, tuple[dict | None, str]]:
    """target name -> (device as a dict, or None, and the reason). With a
    scheduler, the devices of the workers that declared each target."""
    from dataclasses import asdict

    if scheduler:
        from .distributed import remote_device_map

        return remote_device_map(scheduler, [t.name for p in plans for t in p.targets])

    from ..loader.devices import discover, match_target

    devices = discover()
    out = {}
    for p in plans:
        for t in p.targets:
            if t.name not in out:
                dev, why = match_target(t, devices)
                out[t.name] = (asdict(dev) if dev else None, why)
    return out


def task_creators(config: BuildConfig, plans: list[Plan] | None = None) -> dict[str, Callable[[], Iterator[dict]]]:
    """The graph for ``config`` as doit ``task_*`` functions."""
    plans = plan(config) if plans is None else plans
    toolchain = Toolchain.detect(config.out_dir)
    devices = _device_map(plans, config.scheduler) if config.validate else {}
    run = config.run_id

    def task_export():
        """Export each (signature, implementation) to MLIR through iree-turbine, and
        each export variant a target explores or models (``candidates.EXPORT_VARIANTS``)."""
        for p in plans:
            for mid, v in [(m, "") for m in p.manifest.module_ids] + _export_variants(p, config, devices):
                lay = p.layout
                yield {
                    "name": f"{p.manifest.bundle.name}/{module_file(mid.key, v)}",
                    "actions": [(export_action, [mid.key, str(lay.mlir(mid, v)), str(lay.export_record(mid, v)), run]
                                 + ([v] if v else []))],
                    "file_dep": list(EXPORT_SOURCES),
                    "targets": [str(lay.export_record(mid, v)), str(lay.mlir(mid, v))],
                    "uptodate": [config_changed({"torch": toolchain.versions["torch"],
                                                 "turbine": toolchain.versions["iree-turbine"],
                                                 "compiler": toolchain.compiler}),
                                 record_ok(lay.export_record(mid, v))],
                    "clean": [_rm(lay.mlir(mid, v)), _rm(lay.export_record(mid, v))],
                    "doc": f"export {module_file(mid.key, v)}",
                }

    def task_compile():
        """Compile each exported module (and its variants, where explored or modelled) for each target."""
        for p in plans:
            lay = p.layout
            for t in p.targets:
                modules = _modules(p, t, config, devices)
                # where the traffic model decides which variant compiles (a GPU target, the
                # model on, no device to measure them): each kernel's modules, its peers
                peers: dict[str, list[tuple[ModuleId, str]]] = {}
                if modelled(t, config.traffic) and not explores(t, config, devices):
                    for mid, v in modules:
                        peers.setdefault(mid.signature.key, []).append((mid, v))
                for mid, v in modules:
                    ev = export_variant(v)  # the export the module comes from
                    mlir, export_rec = str(lay.mlir(mid, ev)), str(lay.export_record(mid, ev))
                    vmfb, rec = lay.vmfb(t.name, mid, v), lay.compile_record(t.name, mid, v)
                    flags = _flags(config, t, mid, v)
                    # a modelled variant compiles only where the model ranks it first of its peers
                    gated = peers.get(mid.signature.key, []) if v else []
                    gate = [(candidates.Candidate(m.impl, pv).key, str(lay.traffic(t.name, m, pv)))
                            for m, pv in gated]
                    yield {
                        "name": f"{p.manifest.bundle.name}/{t.name}/{module_file(mid.key, v)}",
                        "actions": [(compile_action, [mid.key, t.name, flags, mlir, export_rec, str(vmfb),
                                                      str(rec), config.compile_timeout, run, config.scheduler, v,
                                                      gate or None])],
                        "task_dep": [f"export:{p.manifest.bundle.name}/{module_file(mid.key, ev)}"]
                        + [f"traffic:{p.manifest.bundle.name}/{t.name}/{module_file(m.key, pv)}" for m, pv in gated],
                        "targets": [str(rec)],
                        "uptodate": [config_changed({"flags": flags, "compiler": toolchain.compiler}),
                                     inputs_unchanged(export_rec, mlir, *(path for _, path in gate)),
                                     record_ok(rec)],
                        "clean": [_rm(vmfb), _rm(rec)],
                        "doc": f"compile {module_file(mid.key, v)} for {t.name}",
                    }

    def task_traffic():
        """The traffic model of each GPU module (``stages/traffic.py``): dispatches and
        bytes per call, from iree-compile's executable sources, without a device
        and before the compile (it ranks the variants: ``task_compile``'s peers)."""
        if not config.traffic:
            return
        for p in plans:
            lay = p.layout
            b = p.manifest.bundle.name
            modelled_on: dict[tuple, str] = {}  # (module, arch-free flags) -> the target that models it
            for t in p.targets:
                if not modelled(t, config.traffic):
                    continue
                for mid, v in _modules(p, t, config, devices):
                    ev = export_variant(v)
                    flags = _flags(config, t, mid, v)
                    rec, exp = lay.traffic(t.name, mid, v), lay.export_record(mid, ev)
                    stem = module_file(mid.key, v)
                    leader = modelled_on.setdefault((stem, arch_free(t, flags)), t.name)
                    if leader != t.name:  # the same executable sources: the model of the first such target
                        src = lay.traffic(leader, mid, v)
                        yield {
                            "name": f"{b}/{t.name}/{stem}",
                            "actions": [(traffic_copy_action, [str(src), str(rec), t.name, run])],
                            "task_dep": [f"traffic:{b}/{leader}/{stem}"],
                            "targets": [str(rec)],
                            "uptodate": [inputs_unchanged(src), record_ok(rec)],
                            "clean": [_rm(rec)],
                            "doc": f"traffic model of {stem} for {t.name} (as for {leader})",
                        }
                        continue
                    shape = _traffic_shape(p.manifest, mid.signature)
                    yield {
                        "name": f"{b}/{t.name}/{stem}",
                        "actions": [(traffic_action, [mid.key, t.name, flags, str(lay.mlir(mid, ev)), str(exp),
                                                      str(rec), shape, run] + ([v] if v else []))],
                        "file_dep": [str(STAGES_DIR / "traffic.py")],
                        "task_dep": [f"export:{b}/{module_file(mid.key, ev)}"],
                        "targets": [str(rec)],
                        "uptodate": [config_changed({"flags": flags, "compiler": toolchain.compiler, "shape": shape}),
                                     inputs_unchanged(exp, lay.mlir(mid, ev))],
                        "clean": [_rm(rec)],
                        "doc": f"traffic model of {stem} for {t.name}",
                    }

    def _runnable(p: Plan):
        for t in p.targets:
            dev, why = devices.get(t.name, (None, VALIDATION_DISABLED))
            if dev is not None:
                yield t, dev

    def task_validate():
        """Run each compiled kernel on a device present and compare with float64."""
        for p in plans:
            for t, dev in _runnable(p):
                for mid, v in _modules(p, t, config, devices):
                    lay = p.layout
                    shapes = _validation_shapes(p.manifest, mid.signature)
                    name = module_file(mid.key, v)
                    yield {
                        "name": f"{p.manifest.bundle.name}/{t.name}/{name}",
                        "actions": [(validate_action, [mid.key, t.name, str(lay.vmfb(t.name, mid, v)),
                                                       str(lay.compile_record(t.name, mid, v)),
                                                       str(lay.validation(t.name, mid, v)), dev, run,
                                                       config.scheduler, shapes])],
                        "file_dep": [str(STAGES_DIR / f) for f in ("tolerances.py", "reference.py", "validate.py")]
                        + [str(PKG_DIR / "dtypes.py")]  # the tolerance table
                        + list(OP_SOURCES),  # the reference's forward is the op's
                        "task_dep": [f"compile:{p.manifest.bundle.name}/{t.name}/{name}"],
                        "targets": [str(lay.validation(t.name, mid, v))],
                        "uptodate": [config_changed(_with_shapes({"device": dev}, shapes)),
                                     inputs_unchanged(lay.compile_record(t.name, mid, v)),
                                     record_ok(lay.validation(t.name, mid, v))],
                        "clean": [_rm(lay.validation(t.name, mid, v))],
                        "doc": f"validate {name} on {t.name}",
                    }

    def task_bench():
        """Benchmark each kernel on each target with a device: its candidates, torch eager and
        a reference loop in paired rounds, one kernel at a time, after every compile."""
        if not config.bench:
            return
        previous = None
        for p in plans:
            b = p.manifest.bundle.name
            lay = p.layout
            for t, dev in _runnable(p):
                for req in p.manifest.kernels:
                    kt = _kernel_target(req.signature, req.impls, t, config, devices)
                    name = f"{b}/{t.name}/{req.signature.key}"
                    shapes = [list(s) for s in p.manifest.bench_shapes(req.signature)]
                    outs = [str(path) for path in kt.bench_outputs(lay)]
                    yield {
                        "name": name,
                        "actions": [(bench_action, [kt, str(lay.root), dev, run, config.scheduler, shapes])],
                        "targets": outs,
                        # Timing shares the machine with nothing: after all compiles, one at a time.
                        "task_dep": [f"ready:{b}"] + ([f"bench:{previous}"] if previous else []),
                        "file_dep": [str(STAGES_DIR / f) for f in ("benchmark.py", "comparison.py")],
                        "uptodate": [config_changed(_with_shapes({"device": dev}, shapes)),
                                     inputs_unchanged(*kt.bench_inputs(lay)),
                                     # torch eager's record carries its validation (validate_eager)
                                     record_ok(lay.bench(t.name, eager_subject(req.signature.key)), "validation"),
                                     record_ok(lay.rounds(t.name, req.signature.key))],
                        "clean": [_rm(Path(o)) for o in outs],
                        "doc": f"benchmark {req.signature.key} on {t.name} (its candidates and torch eager)",
                    }
                    previous = name

    def task_select():
        """Decide each kernel on each target from its candidates' records (``stages/select.py``).
        Its inputs are those records (``file_dep``: doit orders it after the tasks that
        write them, and reruns it when one changes)."""
        for p in plans:
            b = p.manifest.bundle.name
            for req in p.manifest.kernels:
                for t in p.targets:
                    kt = _kernel_target(req.signature, req.impls, t, config, devices)
                    out = p.layout.select(t.name, req.signature.key)
                    yield {
                        "name": f"{b}/{t.name}/{req.signature.key}",
                        "actions": [(select_action, [kt, str(p.layout.root), str(out), run])],
                        "file_dep": [str(f) for f in kt.inputs(p.layout)] + list(SELECT_SOURCES),
                        "task_dep": [f"ready:{b}"],
                        "targets": [str(out)],
                        # (no record check: its record is small and written whole; doit reruns it when missing)
                        "uptodate": [config_changed({"explore": kt.explore, "model": kt.model, "bench": kt.bench,
                                                     "no_device": kt.no_device})],
                        "clean": [_rm(out)],
                        "doc": f"select {req.signature.key} on {t.name}",
                    }

    def task_ready():
        """Barrier: every export, compile and validation of a bundle is done."""
        for p in plans:
            b = p.manifest.bundle.name
            yield {"name": b, "actions": None, "task_dep": _all_names(p, devices, config),
                   "doc": f"all compiles of {b} done"}

    def task_report():
        """Summary, build report and benchmark CSV (always runs; fails if kernels are missing)."""
        for p in plans:
            b = p.manifest.bundle.name
            yield {
                "name": b,
                "actions": [(report_action, [p, config, devices, toolchain])],
                "task_dep": [f"ready:{b}"] + _bench_names(p, devices, config)
                + [f"select:{b}/{t.name}/{r.signature.key}" for r in p.manifest.kernels for t in p.targets],
                "uptodate": [False],
                "verbosity": 2,
                "doc": f"report on {b}",
            }

    def task_pack():
        """Pack one versioned, compressed bundle per manifest."""
        for p in plans:
            b = p.manifest.bundle.name
            out = p.layout.bundle(p.manifest)
            yield {
                "name": b,
                "actions": [(pack_action, [p, config, toolchain])],
                "task_dep": [f"report:{b}"],
                # the decisions it writes (the report embeds them too: it changes with them)
                "file_dep": [str(p.layout.report), str(STAGES_DIR / "pack.py")]
                + [str(p.layout.select(t.name, r.signature.key)) for r in p.manifest.kernels for t in p.targets],
                "targets": [str(out)],
                "clean": [_rm(out)],
                "doc": f"pack {out.name}",
            }

    def task_page():
        """The HTML report page of each bundle (boo_build.report.page), after packing.
        Up to date while the page shows the records as they are (a digest in the
        page); a failed build's report task draws it instead (no bundle)."""
        from ..report.page import page_action, page_current

        for p in plans:
            b = p.manifest.bundle.name
            root, bundle = str(p.layout.root), str(p.layout.bundle(p.manifest))
            yield {
                "name": b,
                "actions": [(page_action, [root, bundle])],
                "task_dep": [f"pack:{b}"],
                "targets": [str(p.layout.page)],
                "uptodate": [page_current(root, bundle)],
                "clean": [_rm(p.layout.page)],
                "doc": f"report page {p.layout.page}",
            }

    def task_build():
        """Build every manifest: export, compile, validate, benchmark, pack, report page."""
        return {"actions": None, "task_dep": [f"page:{p.manifest.bundle.name}" for p in plans]}

    return {
        "task_export": task_export,
        "task_compile": task_compile,
        "task_traffic": task_traffic,
        "task_validate": task_validate,
        "task_ready": task_ready,
        "task_bench": task_bench,
        "task_select": task_select,
        "task_report": task_report,
        "task_pack": task_pack,
        "task_page": task_page,
        "task_build": task_build,
    }


def _traffic_shape(manifest: Manifest, sig: KernelSignature) -> list[int] | None:
    """The shape a kernel's traffic is modelled at: its own (None) when static; a
    dynamic one's largest benchmark shape (where bandwidth tells)."""
    shapes = manifest.bench_shapes(sig)
    return list(max(shapes, key=math.prod)) if sig.is_dynamic and shapes else None


def _validation_shapes(manifest: Manifest, sig: KernelSignature) -> list[list[int]] | None:
    """A dynamic kernel's validation shapes (None for a static one): more rows
    than any shape of its width the manifest names."""
    if not sig.is_dynamic:
        return None
    from ..stages.validate import validation_shapes

    return [list(s) for s in validation_shapes(sig, manifest.largest_rows(sig))]


def _with_shapes(config: dict, shapes) -> dict:
    """A task's config, plus its shapes where it has any: static kernels' tasks
    keep the config they had before dynamic dims existed (no rebuild)."""
    return {**config, "shapes": shapes} if shapes else config


def explores(t: Target, config: BuildConfig, devices: dict) -> bool:
    """Whether the graph tries ``t``'s candidates beyond the baselines (``candidates.explores``)."""
    return candidates.explores(t, bench=config.bench, distributed=bool(config.scheduler),
                               device=devices.get(t.name, (None,))[0])


def _kernel_target(sig: KernelSignature, impls, t: Target, config: BuildConfig, devices: dict) -> KernelTarget:
    """What decides a kernel's candidates (``candidates.candidates``) and records on ``t``."""
    dev, why = devices.get(t.name, (None, VALIDATION_DISABLED))
    return KernelTarget.of(sig, impls, t, bench=config.bench, distributed=bool(config.scheduler), device=dev,
                           why_no_device=why, traffic=config.traffic)


def _candidate_modules(p: Plan, t: Target, config: BuildConfig, devices: dict) -> list[tuple[ModuleId, Candidate]]:
    """(module id, candidate) of every candidate of every kernel of ``p`` on ``t`` (``candidates.candidates``:
    the baselines, and where explored or modelled each variant that changes the module, each mode)."""
    return [(ModuleId(r.signature, c.impl), c) for r in p.manifest.kernels
            for c in _kernel_target(r.signature, r.impls, t, config, devices).candidates()]


def _modules(p: Plan, t: Target, config: BuildConfig, devices: dict) -> list[tuple[ModuleId, str]]:
    """(module id, variant) of every compiled module of ``t``: its candidates' modules."""
    return list(dict.fromkeys((mid, c.variant) for mid, c in _candidate_modules(p, t, config, devices)))


def _flags(config: BuildConfig, t: Target, mid: ModuleId, variant: str) -> list[str]:
    return list(variant_flags(variant, config.flags_for(t))) + list(dynamic_flags(t, mid.signature.is_dynamic))


def _export_variants(p: Plan, config: BuildConfig, devices: dict) -> list[tuple]:
    """(module id, export variant) of every variant some target of ``p`` compiles."""
    seen = dict.fromkeys((mid, export_variant(v)) for t in p.targets for mid, v in _modules(p, t, config, devices)
                         if export_variant(v))
    return list(seen)


def _all_names(p: Plan, devices: dict, config: BuildConfig) -> list[str]:
    """The barrier's dependencies: every export, compile, validation and traffic model of ``p``,
    the longest expected first (``durations``). doit starts tasks in the order
    this list reaches them, dependencies permitting, so the few compiles that
    take minutes start early instead of last, where they would hold up the
    benchmarks. The order changes when tasks run, not what they do or write."""
    b = p.manifest.bundle.name
    exports = [f"export:{b}/{m.key}" for m in p.manifest.module_ids]
    exports += [f"export:{b}/{module_file(m.key, v)}" for m, v in _export_variants(p, config, devices)]
    chain = {e: _expected(e) for e in exports}  # an export and the longest of what waits for it
    compiles: list[tuple[float, str]] = []
    validates: list[tuple[float, str]] = []  # and traffic models: what waits for a compile
    for t in p.targets:
        runs = bool(devices.get(t.name, (None,))[0])
        for mid, v in _modules(p, t, config, devices):
            stem = module_file(mid.key, v)
            comp, val = f"compile:{b}/{t.name}/{stem}", f"validate:{b}/{t.name}/{stem}"
            after = _expected(comp) + (_expected(val) if runs else 0.0)
            compiles.append((after, comp))
            if runs:
                validates.append((_expected(val), val))
            if modelled(t, config.traffic):
                validates.append((_expected(f"traffic:{b}/{t.name}/{stem}"), f"traffic:{b}/{t.name}/{stem}"))
            export = f"export:{b}/{module_file(mid.key, export_variant(v))}"
            chain[export] = max(chain[export], _expected(export) + after)
    return _longest_first((s, e) for e, s in chain.items()) + _longest_first(compiles) + _longest_first(validates)


def _expected(name: str) -> float:
    return expected_seconds(name) or 0.0


def _longest_first(pairs) -> list[str]:
    """Names by expected seconds, longest first; ties keep their order (a stable sort)."""
    return [name for _, name in sorted(pairs, key=lambda pair: -pair[0])]


def _bench_names(p: Plan, devices: dict, config: BuildConfig) -> list[str]:
    if not config.bench:
        return []
    b = p.manifest.bundle.name
    return [f"bench:{b}/{t.name}/{r.signature.key}" for t in p.targets if devices.get(t.name, (None,))[0]
            for r in p.manifest.kernels]


def _rm(path: Path) -> Callable[[], None]:
    def remove() -> None:
        Path(path).unlink(missing_ok=True)

    remove.__name__ = f"rm {path}"
    return remove


def interrupt_on_sigterm() -> None:
    """SIGTERM behaves like Ctrl-C: doit then writes its database for the
    tasks already finished, so a restarted build redoes only the rest. Either
    signal first kills the compilers in flight (they run in their own
    sessions, so neither signal reaches them)."""
    from ..stages.compile import kill_running

    def handler(signum, frame):  # noqa: ARG001
        kill_running()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
