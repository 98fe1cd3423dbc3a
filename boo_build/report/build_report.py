"""Gather stage records into the build report, its summary and the CSV rows.

The report gathers; it decides nothing: each kernel's decision on each target
is its select record (``stages/select.py``), embedded as it is (``decision``),
beside the records of its candidates' modules. The report file holds no
run-specific fields (run ids, compile seconds), so an unchanged build
rewrites nothing and the pack task stays up to date. Pure functions of the
records on disk; ``actions.report_action`` writes the report and prints the
summary.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..candidates import export_variant, module_file
from ..layout import bench_subject
from ..reasons import Kind, Reason
from ..records import BenchResult, CompileStatus, ValidationResult, ValidationStatus, stable_record
from ..signature import ModuleId
from ..stages import not_run
from ..stages.routing import compared_time
from ..stages.select import KernelRecords, KernelTarget, SelectRecord
from ..stages.selection import Decision, Selection
from ..stages.traffic import TrafficRecord


def _no_select_record(path: Path) -> Decision:
    why = Reason(Kind.NONE_AVAILABLE, f"no select record at {path}: its select task did not run")
    return Decision(Selection(None, False, why, {}), {})


def gather(plan, config, devices: dict, toolchain) -> tuple[dict[str, Any], dict[str, Any]]:
    """(report, run statistics) for one plan, from the records on disk."""
    from .bench_table import eager_key, table_rows

    lay = plan.layout
    run = config.run_id
    stats: Counter = Counter()
    per_target: dict[str, Counter] = {t.name: Counter() for t in plan.targets}
    # failures: implementations of kernels that ship none (FAILED); dropped:
    # failed implementations of kernels that ship another one
    kernels: list[dict[str, Any]] = []
    missing: list[str] = []
    failures: list[str] = []
    dropped: list[str] = []
    fallbacks: list[str] = []  # kernels none of whose candidates compiled: the fallback variants tried
    validations: dict = {}
    benches: dict = {}
    traffics: dict = {}  # (module file, target) -> a GPU module's modelled traffic
    decisions: dict = {}  # (signature key, target) -> selection.Decision

    def note(stage: str, rec: dict | None) -> None:
        if rec is None:
            stats[f"{stage}:missing"] += 1
        elif rec.get("run_id") == run:
            stats[f"{stage}:built"] += 1
        else:
            stats[f"{stage}:up to date"] += 1

    noted: set[str] = set()  # export records counted once, whichever target reads them
    for req in plan.manifest.kernels:
        sig = req.signature
        entry: dict[str, Any] = {"key": sig.key, "signature": sig.to_json(), "targets": {}, "impls": list(req.impls)}
        for t in plan.targets:
            dev, dev_reason = devices.get(t.name, (None, not_run.VALIDATION_DISABLED))
            kt = KernelTarget.of(sig, req.impls, t, bench=config.bench, distributed=bool(config.scheduler),
                                 device=dev, why_no_device=dev_reason, traffic=config.traffic, tune=config.tune_for(t))
            recs = KernelRecords.read(lay, kt)
            path = lay.select(t.name, sig.key)
            sel_rec = SelectRecord.read(path)
            note("select", None if sel_rec is None else {"run_id": sel_rec.run_id})
            decision = sel_rec.decision if sel_rec is not None else _no_select_record(path)
            decisions[(sig.key, t.name)] = decision
            impls: dict[str, Any] = {}  # per compiled module: <impl>[+<variant>]
            impl_failures = []
            if recs.fallback is not None and recs.fallback.tried:
                fallbacks.append(f"{sig.key} on {t.name}: {recs.fallback.reason}; tried "
                                 + ", ".join(f"{m} ({_outcome(recs.modules[m])})" for m in recs.fallback.tried))
            for c in recs.candidates:
                m = recs.modules[c.module]
                mfile = module_file(ModuleId(sig, c.impl).key, c.variant)
                if c.module not in impls:  # once per module: its records
                    efile = module_file(ModuleId(sig, c.impl).key, export_variant(c.variant))
                    if efile not in noted:
                        noted.add(efile)
                        note("export", m.export)
                    note("compile", m.compile)
                    if kt.ran:
                        note("validate", m.validation)
                    # where nothing ran, the not-run record: the bundle says why, not only the selection
                    impls[c.module] = {"export": stable_record(m.export), "compile": stable_record(m.compile),
                                       "validation": stable_record(recs.module_validation(c.module)), "bench": None}
                    if kt.model:  # a GPU module's traffic model (stages/traffic.py)
                        note("traffic", m.traffic)
                        impls[c.module]["traffic"] = stable_record(m.traffic)
                        traffics[(mfile, t.name)] = TrafficRecord.from_json(m.traffic).traffic if m.traffic else None
                    comp, val = m.compile, m.validation
                    if comp and comp.get("status") == CompileStatus.FAILED:
                        first = (comp.get("error") or "").strip().splitlines()[:1]
                        impl_failures.append(f"{mfile} on {t.name}: compile failed: {first[0] if first else ''}")
                    if val and val.get("status") in (ValidationStatus.FAILED, ValidationStatus.ERROR):
                        impl_failures.append(f"{mfile} on {t.name}: validation {val['status']}: "
                                             f"{val.get('reason', '')}")
                    if val:
                        validations[(mfile, t.name)] = ValidationResult.from_json(val)
                ben = recs.benches.get(c.key)
                if not c.mode:
                    impls[c.module]["bench"] = stable_record(ben)
                if ben:
                    benches[(bench_subject(mfile, c.mode), t.name)] = BenchResult.from_json(ben)
            bens = recs.bench_results()
            eager = recs.eager
            if eager:
                benches[eager_key(sig.key, t.name)] = BenchResult.from_json(eager)
                note("bench", eager)  # one bench task per kernel and target times eager beside its candidates
            sel = decision.selection
            if decision.candidates is not None:
                for module in impls:  # its benchmark in the chosen mode, or its best one
                    own = [c.key for c in recs.candidates if c.module == module and (cb := bens.get(c.key)) is not None
                           and cb.ok]
                    # own's benchmarks ran (ok): their compared times are floats
                    pick = sel.impl if sel.impl is not None and module == decision.module else min(
                        own, key=lambda n: compared_time(bens[n]),  # type: ignore[arg-type, return-value]
                        default=module)
                    impls[module]["bench"] = stable_record(recs.benches.get(pick))
            if sel.impl is None:
                failures.extend(impl_failures)
                why = decision.unavailable_reason
                status: dict[str, Any] = {"status": "unavailable", "reason": why.text}
                missing.append(f"{sig.key} on {t.name}: {why}")
                per_target[t.name]["unavailable"] += 1
            else:
                dropped.extend(f"{f} (ships {sel.impl})" for f in impl_failures)
                validated = recs.validations().get(sel.impl)
                vstatus = validated.status if validated else ValidationStatus.NOT_RUN
                passed = vstatus == ValidationStatus.PASSED
                vtext = ValidationStatus.PASSED if passed else (dev_reason if dev is None else vstatus)
                status = {"status": "available", "validation": vtext, "selected": decision.module}
                per_target[t.name]["available"] += 1
                per_target[t.name]["validated" if passed else "not validated"] += 1
            entry["targets"][t.name] = {**status, "decision": decision.to_json(), "impls": impls,
                                        "eager": stable_record(eager)}
        kernels.append(entry)
    _dynamic_sizes(kernels)
    timings = [d.timing for d in decisions.values() if d.timing is not None]

    report = {
        "format": "boo-build-report",
        "format_version": 2,  # 2: each target entry's decision is its select record's (typed reasons)
        "manifest": str(plan.manifest.path),
        "bundle": {"name": plan.manifest.bundle.name, "version": plan.manifest.bundle.version,
                   "targets": [t.name for t in plan.targets]},
        "toolchain": {"compiler": toolchain.compiler, **toolchain.versions},
        "targets": {t.name: {"flags": list(config.flags_for(t)), "driver": t.driver,
                             "device": devices.get(t.name, (None, ""))[0],
                             "device_status": devices.get(t.name, (None, not_run.VALIDATION_DISABLED))[1]}
                    for t in plan.targets},
        "benchmarks": "ran" if config.bench else "skipped (--no-bench)",
        "kernels": kernels,
        "missing": missing,
        "failures": failures,
        "dropped": dropped,
        **({"fallbacks": fallbacks} if fallbacks else {}),  # (absent where none ran: the report keeps its bytes)
        "per_target": {t: dict(sorted(c.items())) for t, c in per_target.items()},
        # how the timings were taken: kernels timed in paired rounds, their ties, those measured
        # again, speed-ups beyond comparison.FACTOR not confirmed, those timed on a busy machine, and
        # those whose previous decision (this folder's last build, comparison.Previous) was kept in a tie
        "timing": {"kernels": len(timings), "ties": sum(1 for t in timings if t.ties),
                   "previous": sum(1 for t in timings if t.previous),
                   "remeasured": sum(1 for t in timings if t.remeasured),
                   "unconfirmed": sum(1 for t in timings if t.eager is not None and t.eager_figure is None),
                   "busy": sum(1 for t in timings if t.busy),
                   # timed at normal priority (not root, or on a Dask worker): other work competed
                   "normal_priority": sum(1 for t in timings if t.nice is not None and t.nice >= 0),
                   # against torch.compile too (the compile backend's baseline), and those the budget or a
                   # compile left out (the backend decides them against torch eager)
                   "compiled": sum(1 for t in timings if t.compiled is not None),
                   "compiled_untimed": sum(1 for t in timings if t.compiled is None and t.compiled_untimed)},
    }
    rows = table_rows([r.signature for r in plan.manifest.kernels], [t.name for t in plan.targets],
                      validations, benches, decisions, traffics)
    return report, {"stats": dict(stats), "rows": rows}


_OUTCOMES: dict[str, str] = {ValidationStatus.PASSED: "compiled, passed validation",
             ValidationStatus.FAILED: "compiled, failed validation", ValidationStatus.ERROR: "compiled, validation error"}


def _outcome(m) -> str:
    """A module's outcome in a few words (a fallback line): compiled, and validated where it ran."""
    if not m.compiled:
        return "compile failed" if (m.compile or {}).get("status") == CompileStatus.FAILED else "not compiled"
    return _OUTCOMES.get(str((m.validation or {}).get("status")), "compiled")


def _dynamic_sizes(kernels: list[dict]) -> None:
    """Add ``sizes`` to each available dynamic kernel's target entry: per
    benchmarked shape, the selected implementation's median, torch eager's and,
    where the manifest also has that shape as a static signature, the static
    kernel's (its selected implementation), in microseconds."""
    from ..signature import KernelSignature

    static_us: dict[tuple[str, str], float] = {}
    for k in kernels:
        for tname, te in k["targets"].items():
            b = ((te.get("impls") or {}).get(te.get("selected")) or {}).get("bench") or {}
            if b.get("median_s") is not None and not b.get("sizes"):
                static_us[(k["key"], tname)] = b["median_s"] * 1e6
    for k in kernels:
        sig = KernelSignature.from_json(k["signature"])
        if not sig.is_dynamic:
            continue
        for tname, te in k["targets"].items():
            b = ((te.get("impls") or {}).get(te.get("selected")) or {}).get("bench") or {}
            eager = {tuple(x["shape"]): x.get("median_s") for x in (te.get("eager") or {}).get("sizes") or ()}
            rows = []
            for x in b.get("sizes") or ():
                shape = tuple(x["shape"])
                us = lambda v: None if v is None else round(v * 1e6, 1)  # noqa: E731
                static = static_us.get((sig.bind(shape).key, tname))
                rows.append({"shape": list(shape), "dynamic_us": us(x.get("median_s")), "eager_us": us(eager.get(shape)),
                             "static_us": None if static is None else round(static, 1)})
            if rows:
                te["sizes"] = rows


def failed(report: dict) -> bool:
    """A requested kernel (signature x target) with no working implementation."""
    return bool(report["missing"])


def summary_text(report: dict, stats: dict, bundle_path: Path, allow_missing: bool) -> str:
    s = stats["stats"]
    lines = [f"== {report['bundle']['name']} {report['bundle']['version']} =="]
    for stage in ("export", "compile", "traffic", "validate", "bench", "select"):
        built, up = s.get(f"{stage}:built", 0), s.get(f"{stage}:up to date", 0)
        if built or up:
            lines.append(f"  {stage:8s} built {built}, up to date {up}")
    if str(report["benchmarks"]).startswith("skipped"):  # a run that timed something says so in its bench line
        lines.append(f"  benchmarks: {report['benchmarks']}")
    tm = report.get("timing") or {}
    if tm.get("kernels"):
        busy = (f"; the machine was busy while {tm['busy']} of them were timed (their figures are less sure)"
                if tm["busy"] else "")
        if tm.get("normal_priority"):
            busy += (f"; {tm['normal_priority']} timed at normal priority, where other work competes (a raised "
                     "one needs root; Dask workers keep theirs)")
        kept = (f", {tm['previous']} against the previous build's decision (kept unless beaten in every pass)"
                if tm.get("previous") else "")
        lines.append(f"  timing   {tm['kernels']} kernel(s) compared in paired rounds: {tm['ties']} with ties, "
                     f"{tm['remeasured']} measured again, {tm['unconfirmed']} speed-up(s) not confirmed{kept}{busy}")
        if tm.get("compiled"):
            left = tm.get("compiled_untimed")
            lines.append(f"           {tm['compiled']} of them against torch.compile too (what torch.compile(backend="
                         f"\"boo\") decides on)" + (f"; {left} not (--compile-budget, or a compile that failed): the "
                                                     "backend decides those against torch eager" if left else ""))
    for t, c in report["per_target"].items():
        dev = report["targets"][t]["device_status"]
        info = report["targets"][t].get("device") or {}
        where = (f"ran on {info.get('arch')}, a software device: numerics and host side, not a GPU's timings"
                 if info.get("software") else "ran on this machine's device")
        lines.append(f"  {t:14s} available {c.get('available', 0)} (an implementation ships), failed "
                     f"{c.get('unavailable', 0)}, validated {c.get('validated', 0)} ({where}), not validated "
                     f"{c.get('not validated', 0)}" + (f"  ({dev})" if dev and not c.get("validated") else ""))
    for f in report.get("fallbacks") or ():
        lines.append(f"  fallback {f}")
    for d in report["dropped"]:
        lines.append(f"  dropped  {d}")
    if report["dropped"]:
        lines.append("  (a dropped implementation is not shipped; its kernel ships the working one named after it)")
    for f in report["failures"]:
        lines.append(f"  FAILED  {f}")
    if report["failures"]:
        lines.append("  (no implementation of a FAILED kernel works: it is MISSING below)")
    for m in report["missing"]:
        lines.append(f"  MISSING {m}")
    if failed(report) and not allow_missing:
        lines.append(f"  {len(report['missing'])} requested kernel(s) missing: no bundle written "
                     "(--allow-missing ships them as unavailable)")
    # (the bundle's path is printed once it is packed, after this summary: boo-build build's last line)
    return "\n".join(lines)
