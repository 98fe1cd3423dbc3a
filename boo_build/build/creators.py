"""The build graph's task creators: one function per stage (``export_tasks(g)``, ...)
yielding doit's task dicts for a ``Graph`` (the plans, the configuration, the
toolchain, the devices, the run id), and ``task_creators``, which binds them into
the ``task_*`` functions doit loads (task names and the graph's rules: ``tasks``).
Each creator is a module-level function: a test can call one alone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from doit.tools import config_changed

from .. import candidates
from ..candidates import Candidate, export_variant, modelled, module_file, variant_flags
from ..layout import eager_subject
from ..manifest.reader import Manifest
from ..signature import KernelSignature, ModuleId
from ..stages import interrupt
from ..stages.not_run import VALIDATION_DISABLED
from ..stages.select import KernelTarget
from ..targets import Target, arch_free, dynamic_flags
from .actions import (
    bench_action,
    compile_action,
    export_action,
    fallback_action,
    pack_action,
    report_action,
    select_action,
    traffic_action,
    traffic_copy_action,
    validate_action,
)
from .durations import expected as expected_seconds
from .jobs import (
    BenchJob,
    CompileJob,
    ExportJob,
    FallbackJob,
    FallbackModule,
    SelectJob,
    TrafficCopyJob,
    TrafficJob,
    ValidateJob,
)
from .tasks import EXPORT_SOURCES, OP_SOURCES, PKG_DIR, SELECT_SOURCES, STAGES_DIR, BuildConfig, Plan, device_map, plan
from .toolchain import Toolchain
from .uptodate import inputs_unchanged, record_ok


@dataclass(frozen=True)
class Graph:
    """What every task creator reads: the plans, the build's configuration, the toolchain,
    each target's device (or why none) and the run's id."""

    plans: list[Plan]
    config: BuildConfig
    toolchain: Toolchain
    devices: dict[str, tuple[dict | None, str]]
    run: str


def _creator(make: Callable[[Graph], Any], g: Graph) -> Callable[[], Any]:
    """A doit ``task_*`` function: ``make(g)``, with ``make``'s docstring (doit's ``list`` shows it),
    every task's actions tracked (``_tracked``)."""
    def task():
        made = make(g)
        return _tracked(made) if isinstance(made, dict) else (_tracked(t) for t in made)
    task.__doc__ = make.__doc__
    return task


def _tracked(task: dict) -> dict:
    """``task`` with its Python actions under ``interrupt.tracked``: an interrupted build waits
    for those running before the interpreter exits, and none starts after the signal
    (``stages.interrupt``). Here, once, so that no stage's action can miss it."""
    actions = task.get("actions")
    if actions:
        task["actions"] = [(interrupt.tracked(a[0]), *a[1:]) if isinstance(a, tuple)
                           else interrupt.tracked(a) if callable(a) else a for a in actions]
    return task


def task_creators(config: BuildConfig, plans: list[Plan] | None = None) -> dict[str, Callable[[], Any]]:
    """The graph for ``config`` as doit ``task_*`` functions (each a creator below, bound to the graph)."""
    plans = plan(config) if plans is None else plans
    g = Graph(plans, config, Toolchain.detect(config.out_dir),
              device_map(plans, config.scheduler) if config.validate else {}, config.run_id)
    return {
        "task_export": _creator(export_tasks, g),
        "task_compile": _creator(compile_tasks, g),
        "task_fallback": _creator(fallback_tasks, g),
        "task_traffic": _creator(traffic_tasks, g),
        "task_validate": _creator(validate_tasks, g),
        "task_bench": _creator(bench_tasks, g),
        "task_select": _creator(select_tasks, g),
        "task_ready": _creator(ready_tasks, g),
        "task_report": _creator(report_tasks, g),
        "task_pack": _creator(pack_tasks, g),
        "task_page": _creator(page_tasks, g),
        "task_build": _creator(build_tasks, g),
    }


def export_tasks(g: Graph):
    """Export each (signature, implementation) to MLIR through iree-turbine, and
    each export variant a target explores or models (``candidates.EXPORT_VARIANTS``)."""
    for p in g.plans:
        for mid, v in [(m, "") for m in p.manifest.module_ids] + _export_variants(p, g.config, g.devices):
            lay = p.layout
            yield {
                "name": f"{p.manifest.bundle.name}/{module_file(mid.key, v)}",
                "actions": [(export_action, [ExportJob(mid.key, str(lay.mlir(mid, v)), str(lay.export_record(mid, v)),
                                                       g.run, v)])],
                "file_dep": list(EXPORT_SOURCES),
                "targets": [str(lay.export_record(mid, v)), str(lay.mlir(mid, v))],
                "uptodate": [config_changed({"torch": g.toolchain.versions["torch"],
                                             "turbine": g.toolchain.versions["iree-turbine"],
                                             "compiler": g.toolchain.compiler}),
                             record_ok(lay.export_record(mid, v))],
                "clean": [_rm(lay.mlir(mid, v)), _rm(lay.export_record(mid, v))],
                "doc": f"export {module_file(mid.key, v)}",
            }


def compile_tasks(g: Graph):
    """Compile each exported module (and its variants, where explored or modelled) for each target."""
    for p in g.plans:
        lay = p.layout
        for t in p.targets:
            modules = _modules(p, t, g.config, g.devices)
            # where the traffic model decides which variant compiles (a GPU target, the
            # model on, no device to measure them): each kernel's modules, its peers
            peers: dict[str, list[tuple[ModuleId, str]]] = {}
            if modelled(t, g.config.traffic) and not explores(t, g.config, g.devices):
                for mid, v in modules:
                    peers.setdefault(mid.signature.key, []).append((mid, v))
            for mid, v in modules:
                ev = export_variant(v)  # the export the module comes from
                mlir, export_rec = str(lay.mlir(mid, ev)), str(lay.export_record(mid, ev))
                vmfb, rec = lay.vmfb(t.name, mid, v), lay.compile_record(t.name, mid, v)
                flags = _flags(g.config, t, mid, v)
                # a modelled variant compiles only where the model ranks it first of its peers;
                # with --all-variants wherever the model ranks it at all (its own model: modelled_gate)
                gated = peers.get(mid.signature.key, []) if not candidates.is_base(v) else []
                every = bool(gated) and g.config.all_variants
                if every:
                    gated = [(mid, v)]
                gate = [(candidates.Candidate(m.impl, pv).key, str(lay.traffic(t.name, m, pv)))
                        for m, pv in gated]
                # the kernel's implementations: where every one fails, the gate ranks the variants alone
                bases = [] if every else [(m, pv) for m, pv in gated if candidates.is_base(pv)]
                base_recs = [str(lay.compile_record(t.name, m, pv)) for m, pv in bases]
                yield {
                    "name": f"{p.manifest.bundle.name}/{t.name}/{module_file(mid.key, v)}",
                    "actions": [(compile_action, [CompileJob(mid.key, t.name, tuple(flags), mlir, export_rec,
                                                             str(vmfb), str(rec), g.config.compile_timeout, g.run,
                                                             g.config.scheduler, v, tuple(gate),
                                                             tuple(base_recs))])],
                    "task_dep": [f"export:{p.manifest.bundle.name}/{module_file(mid.key, ev)}"]
                    + [f"traffic:{p.manifest.bundle.name}/{t.name}/{module_file(m.key, pv)}" for m, pv in gated]
                    + [f"compile:{p.manifest.bundle.name}/{t.name}/{module_file(m.key, pv)}" for m, pv in bases],
                    "targets": [str(rec)],
                    "file_dep": [str(STAGES_DIR / "tuning.py")] if candidates.tuned_base(v) != v else [],  # its edits
                    # (the option only where it decides something: other builds' tasks stay up to date)
                    "uptodate": [config_changed({"flags": flags, "compiler": g.toolchain.compiler}
                                                | ({"all_variants": True} if every else {})),
                                 inputs_unchanged(export_rec, mlir, *(path for _, path in gate), *base_recs),
                                 record_ok(rec)],
                    "clean": [_rm(vmfb), _rm(rec)],
                    "doc": f"compile {module_file(mid.key, v)} for {t.name}",
                }


def fallback_tasks(g: Graph):
    """Where none of a kernel's candidates compiled on a target (and one failed in
    iree-compile), try its fallback variants (``candidates.fallbacks``: no single
    dispatch, no split reduction, ...) in order until one works, each compiled,
    modelled and validated as the target's modules are: a kernel is missing only once
    they failed too. One task per kernel and target with fallbacks, after its
    candidates' compiles; where a candidate compiled it only says so (no compile)."""
    for p in g.plans:
        b, lay = p.manifest.bundle.name, p.layout
        exported = set(_export_variants(p, g.config, g.devices))  # (module id, export variant) a task writes
        for req in p.manifest.kernels:
            for t in p.targets:
                kt = _kernel_target(req.signature, req.impls, t, g.config, g.devices)
                modules = kt.fallback_modules()
                if not modules:
                    continue
                own = list(dict.fromkeys((ModuleId(kt.sig, c.impl), c.variant) for c in kt.candidates()))
                dev = g.devices.get(t.name, (None,))[0]
                shapes = _validation_shapes(p.manifest, kt.sig) if dev is not None else None
                jobs = [_fallback_module(g, p, t, mid, v, dev, shapes, exported) for mid, v in modules]
                exports = dict.fromkeys((m, export_variant(v)) for m, v in modules)
                by_task = [(m, ev) for m, ev in exports if not ev or (m, ev) in exported]  # the others: by the step
                rec = lay.fallback(t.name, kt.sig.key)
                versions = {"torch": g.toolchain.versions["torch"], "turbine": g.toolchain.versions["iree-turbine"]}
                yield {
                    "name": f"{b}/{t.name}/{kt.sig.key}",
                    "actions": [(fallback_action, [FallbackJob(
                        kt.sig.key, t.name, tuple(str(lay.compile_record(t.name, m, v)) for m, v in own), tuple(jobs),
                        str(rec), g.run)])],
                    "task_dep": [f"compile:{b}/{t.name}/{module_file(m.key, v)}" for m, v in own]
                    + [f"export:{b}/{module_file(m.key, ev)}" for m, ev in by_task],
                    "file_dep": ([str(STAGES_DIR / "traffic.py")] if kt.model else [])
                    + (_VALIDATE_SOURCES if dev is not None else [])
                    + (list(EXPORT_SOURCES) if len(by_task) < len(exports) else []),
                    "targets": [str(rec)],
                    "uptodate": [config_changed(_with_shapes({
                        "flags": {module_file(m.key, v): j.compile.flags for (m, v), j in zip(modules, jobs)},
                        "compiler": g.toolchain.compiler, "model": kt.model, "device": dev}
                        | (versions if len(by_task) < len(exports) else {}), shapes)),
                                 inputs_unchanged(*(lay.compile_record(t.name, m, v) for m, v in own),
                                                  *(f for m, ev in by_task for f in (lay.export_record(m, ev),
                                                                                     lay.mlir(m, ev)))),
                                 record_ok(rec)],
                    "clean": [_rm(rec)] + [_rm(Path(f)) for j in jobs for f in j.files()],
                    "doc": f"fallback variants of {kt.sig.key} for {t.name}, where none of its candidates compiled",
                }


def _fallback_module(g: Graph, p: Plan, t: Target, mid: ModuleId, v: str, dev, shapes, exported) -> FallbackModule:
    """The jobs of one module a fallback step may try, as ``compile_tasks``, ``traffic_tasks``,
    ``validate_tasks`` (and ``export_tasks``, for an export variant none of the graph's
    tasks writes: ``exported``) make them."""
    lay, ev = p.layout, export_variant(v)
    mlir, export_rec = str(lay.mlir(mid, ev)), str(lay.export_record(mid, ev))
    flags = tuple(_flags(g.config, t, mid, v))
    vmfb, rec = str(lay.vmfb(t.name, mid, v)), str(lay.compile_record(t.name, mid, v))
    comp = CompileJob(mid.key, t.name, flags, mlir, export_rec, vmfb, rec, g.config.compile_timeout, g.run,
                      g.config.scheduler, v)
    traffic = None
    if modelled(t, g.config.traffic):
        shape = _traffic_shape(p.manifest, mid.signature)
        traffic = TrafficJob(mid.key, t.name, flags, mlir, export_rec, str(lay.traffic(t.name, mid, v)),
                             None if shape is None else tuple(shape), g.run, v)
    validate = None
    if dev is not None:
        validate = ValidateJob(mid.key, t.name, vmfb, rec, str(lay.validation(t.name, mid, v)), dev, g.run,
                               g.config.scheduler, None if shapes is None else tuple(tuple(x) for x in shapes))
    export = ExportJob(mid.key, mlir, export_rec, g.run, ev) if ev and (mid, ev) not in exported else None
    return FallbackModule(comp, traffic, validate, export)


def traffic_tasks(g: Graph):
    """The traffic model of each GPU module (``stages/traffic.py``): dispatches and
    bytes per call, from iree-compile's executable sources, without a device
    and before the compile (it ranks the variants: ``task_compile``'s peers)."""
    if not g.config.traffic:
        return
    for p in g.plans:
        lay = p.layout
        b = p.manifest.bundle.name
        modelled_on: dict[tuple, str] = {}  # (module, arch-free flags) -> the target that models it
        for t in p.targets:
            if not modelled(t, g.config.traffic):
                continue
            for mid, v in _modules(p, t, g.config, g.devices):
                ev = export_variant(v)
                flags = _flags(g.config, t, mid, v)
                rec, exp = lay.traffic(t.name, mid, v), lay.export_record(mid, ev)
                stem = module_file(mid.key, v)
                leader = modelled_on.setdefault((stem, arch_free(t, flags)), t.name)
                base = candidates.tuned_base(v)  # a tuned module: its untuned one's dispatches, hence traffic
                leader = t.name if base != v else leader  # else the same sources as the first such target's
                source, src = module_file(mid.key, base), lay.traffic(leader, mid, base)
                if src != rec:
                    yield {
                        "name": f"{b}/{t.name}/{stem}",
                        "actions": [(traffic_copy_action, [TrafficCopyJob(str(src), str(rec), t.name, g.run)])],
                        "task_dep": [f"traffic:{b}/{leader}/{source}"],
                        "targets": [str(rec)],
                        "uptodate": [inputs_unchanged(src), record_ok(rec)],
                        "clean": [_rm(rec)],
                        "doc": f"traffic model of {stem} for {t.name} (as {source}'s for {leader})",
                    }
                    continue
                shape = _traffic_shape(p.manifest, mid.signature)
                yield {
                    "name": f"{b}/{t.name}/{stem}",
                    "actions": [(traffic_action, [TrafficJob(mid.key, t.name, tuple(flags), str(lay.mlir(mid, ev)),
                                                             str(exp), str(rec), None if shape is None else tuple(shape),
                                                             g.run, v)])],
                    "file_dep": [str(STAGES_DIR / "traffic.py")],
                    "task_dep": [f"export:{b}/{module_file(mid.key, ev)}"],
                    "targets": [str(rec)],
                    "uptodate": [config_changed({"flags": flags, "compiler": g.toolchain.compiler, "shape": shape}),
                                 inputs_unchanged(exp, lay.mlir(mid, ev))],
                    "clean": [_rm(rec)],
                    "doc": f"traffic model of {stem} for {t.name}",
                }


# a validation's sources: its stage's, the tolerance table, the ops (the reference's forward is the op's)
_VALIDATE_SOURCES = [str(STAGES_DIR / f) for f in ("tolerances.py", "reference.py", "validate.py")] + [
    str(PKG_DIR / "dtypes.py")] + list(OP_SOURCES)


def _runnable(g: Graph, p: Plan):
    for t in p.targets:
        dev, why = g.devices.get(t.name, (None, VALIDATION_DISABLED))
        if dev is not None:
            yield t, dev


def validate_tasks(g: Graph):
    """Run each compiled kernel on a device present and compare with float64."""
    for p in g.plans:
        for t, dev in _runnable(g, p):
            for mid, v in _modules(p, t, g.config, g.devices):
                lay = p.layout
                shapes = _validation_shapes(p.manifest, mid.signature)
                name = module_file(mid.key, v)
                yield {
                    "name": f"{p.manifest.bundle.name}/{t.name}/{name}",
                    "actions": [(validate_action, [ValidateJob(
                        mid.key, t.name, str(lay.vmfb(t.name, mid, v)), str(lay.compile_record(t.name, mid, v)),
                        str(lay.validation(t.name, mid, v)), dev, g.run, g.config.scheduler,
                        None if shapes is None else tuple(tuple(x) for x in shapes))])],
                    "file_dep": list(_VALIDATE_SOURCES),
                    "task_dep": [f"compile:{p.manifest.bundle.name}/{t.name}/{name}"],
                    "targets": [str(lay.validation(t.name, mid, v))],
                    "uptodate": [config_changed(_with_shapes({"device": dev}, shapes)),
                                 inputs_unchanged(lay.compile_record(t.name, mid, v)),
                                 record_ok(lay.validation(t.name, mid, v))],
                    "clean": [_rm(lay.validation(t.name, mid, v))],
                    "doc": f"validate {name} on {t.name}",
                }


def bench_tasks(g: Graph):
    """Benchmark each kernel on each target with a device: its candidates, torch eager and
    a reference loop in paired rounds, one kernel at a time, after every compile."""
    if not g.config.bench:
        return
    previous = None
    shares, untimed = compile_shares(g)
    for p in g.plans:
        b = p.manifest.bundle.name
        lay = p.layout
        for t, dev in _runnable(g, p):
            for req in p.manifest.kernels:
                kt = _kernel_target(req.signature, req.impls, t, g.config, g.devices)
                name = f"{b}/{t.name}/{req.signature.key}"
                shapes = [list(s) for s in p.manifest.bench_shapes(req.signature)]
                outs = [str(path) for path in kt.bench_outputs(lay)]
                compiled = shares.get(name, 0)
                yield {
                    "name": name,
                    "actions": [(bench_action, [BenchJob(kt, str(lay.root), dev, g.run, g.config.scheduler,
                                                         tuple(tuple(x) for x in shapes), g.config.reselect,
                                                         compiled, untimed)])],
                    "targets": outs,
                    # Timing shares the machine with nothing: after all compiles, one at a time.
                    "task_dep": [f"ready:{b}"] + ([f"bench:{previous}"] if previous else []),
                    "file_dep": [str(STAGES_DIR / f) for f in ("benchmark.py", "sampling.py", "comparison.py", "load.py")],
                    "uptodate": [config_changed(_with_shapes({"device": dev, "compiled": compiled}, shapes)),
                                 inputs_unchanged(*kt.bench_inputs(lay)),
                                 # torch eager's record carries its validation (validate_eager)
                                 record_ok(lay.bench(t.name, eager_subject(req.signature.key)), "validation"),
                                 record_ok(lay.rounds(t.name, req.signature.key)),
                                 not g.config.reselect],  # --reselect: every kernel timed and decided afresh
                    "clean": [_rm(path) for path in kt.bench_outputs(lay, fallbacks=True)],
                    "doc": f"benchmark {req.signature.key} on {t.name} (its candidates and torch eager)",
                }
                previous = name


def compile_shares(g: Graph) -> tuple[dict[str, int], str]:
    """The build's Inductor compile budget (``config.compile_budget``) shared among its
    benchmarks on CPU targets (torch.compile's baseline in their rounds: one compile per
    size timed): {bench task name: how many of its sizes, the first ones}, every kernel's
    first size before any second one, in manifest order; and why a size left out is
    not timed. Planned here, so that a build's choice does not depend on timing."""
    todo: list[tuple[str, int]] = []
    for p in g.plans:
        for t, _ in _runnable(g, p):
            if t.is_cpu:
                todo += [(f"{p.manifest.bundle.name}/{t.name}/{req.signature.key}",
                          max(1, len(p.manifest.bench_shapes(req.signature)))) for req in p.manifest.kernels]
    left, shares = g.config.compile_budget, {name: 0 for name, _ in todo}
    for depth in range(max((n for _, n in todo), default=0)):
        for name, n in todo:
            if depth < n and left > 0:
                shares[name] += 1
                left -= 1
    return shares, (f"not timed: the build's torch.compile budget ({g.config.compile_budget} sizes, "
                    "--compile-budget) spent")


def select_tasks(g: Graph):
    """Decide each kernel on each target from its candidates' records (``stages/select.py``).
    Its inputs are those records (``file_dep``: doit orders it after the tasks that
    write them, and reruns it when one changes)."""
    for p in g.plans:
        b = p.manifest.bundle.name
        for req in p.manifest.kernels:
            for t in p.targets:
                kt = _kernel_target(req.signature, req.impls, t, g.config, g.devices)
                out = p.layout.select(t.name, req.signature.key)
                yield {
                    "name": f"{b}/{t.name}/{req.signature.key}",
                    "actions": [(select_action, [SelectJob(kt, str(p.layout.root), str(out), g.run)])],
                    "file_dep": [str(f) for f in kt.inputs(p.layout)] + list(SELECT_SOURCES),
                    "task_dep": [f"ready:{b}"],
                    "targets": [str(out)],
                    # (no record check: its record is small and written whole; doit reruns it when missing)
                    "uptodate": [config_changed({"explore": kt.explore, "model": kt.model, "bench": kt.bench,
                                                 "no_device": kt.no_device} | kt.tune_config())],
                    "clean": [_rm(out)],
                    "doc": f"select {req.signature.key} on {t.name}",
                }


def ready_tasks(g: Graph):
    """Barrier: every export, compile and validation of a bundle is done."""
    for p in g.plans:
        b = p.manifest.bundle.name
        yield {"name": b, "actions": None, "task_dep": _all_names(p, g.devices, g.config),
               "doc": f"all compiles of {b} done"}


def report_tasks(g: Graph):
    """Summary, build report and benchmark CSV (always runs; fails if kernels are missing)."""
    for p in g.plans:
        b = p.manifest.bundle.name
        yield {
            "name": b,
            "actions": [(report_action, [p, g.config, g.devices, g.toolchain])],
            "task_dep": [f"ready:{b}"] + _bench_names(p, g.devices, g.config)
            + [f"select:{b}/{t.name}/{r.signature.key}" for r in p.manifest.kernels for t in p.targets],
            "uptodate": [False],
            "verbosity": 2,
            "clean": [_rm(p.layout.report), _rm(p.layout.csv)],
            "doc": f"report on {b}",
        }


def pack_tasks(g: Graph):
    """Pack one versioned, compressed bundle per manifest."""
    for p in g.plans:
        b = p.manifest.bundle.name
        out = p.layout.bundle(p.manifest)
        yield {
            "name": b,
            "actions": [(pack_action, [p, g.config, g.toolchain])],
            "task_dep": [f"report:{b}"],
            # the decisions it writes (the report embeds them too: it changes with them)
            # and the writer's code: pack.py, and the container it lays out (loader/split_format.py)
            "file_dep": [str(p.layout.report), str(STAGES_DIR / "pack.py"),
                         str(STAGES_DIR.parent / "loader" / "split_format.py")]
            + [str(p.layout.select(t.name, r.signature.key)) for r in p.manifest.kernels for t in p.targets],
            "targets": [str(out)],
            "clean": [_rm(out)],
            "doc": f"pack {out.name}",
        }


def page_tasks(g: Graph):
    """The HTML report page of each bundle (boo_build.report.page), after packing.
    Up to date while the page shows the records as they are (a digest in the
    page); a failed build's report task draws it instead (no bundle)."""
    from ..report.page import page_action, page_current

    for p in g.plans:
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


def build_tasks(g: Graph):
    """Build every manifest: export, compile, validate, benchmark, pack, report page."""
    return {"actions": None, "task_dep": [f"page:{p.manifest.bundle.name}" for p in g.plans]}


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
                           why_no_device=why, traffic=config.traffic, tune=config.tune_for(t))


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
    fallbacks = [f"fallback:{b}/{t.name}/{r.signature.key}" for r in p.manifest.kernels for t in p.targets
                 if _kernel_target(r.signature, r.impls, t, config, devices).fallbacks()]
    return (_longest_first((s, e) for e, s in chain.items()) + _longest_first(compiles) + _longest_first(validates)
            + fallbacks)


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
