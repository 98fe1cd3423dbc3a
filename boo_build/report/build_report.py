"""Gather stage records into the build report, its summary and the CSV rows.

The report file holds no run-specific fields (run ids, compile seconds), so
an unchanged build rewrites nothing and the pack task stays up to date.
Pure functions of the records on disk; ``actions.report_action`` writes the
report and prints the summary.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..build import not_run
from ..build.layout import bench_subject, eager_subject
from ..candidates import candidates, explores, export_variant, modelled, module_file
from ..files import read_json
from ..records import CompileStatus, ValidationStatus, stable_record
from ..signature import ModuleId
from ..stages.traffic import Traffic, TrafficRecord


def gather(plan, config, devices: dict, toolchain) -> tuple[dict[str, Any], dict[str, Any]]:
    """(report, run statistics) for one plan, from the records on disk."""
    from ..records import BenchResult, ValidationResult
    from ..stages.selection import compared_time, decide
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

    exports = {}
    for mid in plan.manifest.module_ids:
        exports[mid.key] = rec = read_json(lay.export_record(mid))
        note("export", rec)

    for req in plan.manifest.kernels:
        sig = req.signature
        entry: dict[str, Any] = {"key": sig.key, "signature": sig.to_json(), "targets": {}, "impls": list(req.impls)}
        for t in plan.targets:
            dev, dev_reason = devices.get(t.name, (None, not_run.VALIDATION_DISABLED))
            explore = explores(t, bench=config.bench, distributed=bool(config.scheduler), device=dev)
            # candidates by name; without exploring, the implementations (names and records as ever)
            model = modelled(t, config.traffic)  # the traffic model ranks a GPU target's variants
            cands = candidates(req.impls, t, lambda i: ModuleId(sig, i), explore, model)
            impls: dict[str, Any] = {}  # per compiled module: <impl>[+<variant>]
            modules: dict[str, tuple] = {}
            compiled, vals, bens, benrecs, impl_failures = [], {}, {}, {}, []
            for c in cands:
                mid = ModuleId(sig, c.impl)
                mfile = module_file(mid.key, c.variant)
                if c.module not in modules:  # once per module: its compile and validation
                    comp = read_json(lay.compile_record(t.name, mid, c.variant))
                    note("compile", comp)
                    val = read_json(lay.validation(t.name, mid, c.variant)) if dev else None
                    if dev:
                        note("validate", val)
                    modules[c.module] = comp, val
                    ev = export_variant(c.variant)
                    efile = module_file(mid.key, ev)
                    if efile not in exports:  # an export variant's own export, once
                        exports[efile] = read_json(lay.export_record(mid, ev))
                        note("export", exports[efile])
                    impls[c.module] = {"export": stable_record(exports.get(module_file(mid.key, ev))),
                                       "compile": stable_record(comp),
                                       "validation": stable_record(val), "bench": None}
                    if model:  # a GPU module's traffic model (stages/traffic.py)
                        traffic = read_json(lay.traffic(t.name, mid, c.variant))
                        note("traffic", traffic)
                        impls[c.module]["traffic"] = stable_record(traffic)
                        traffics[(mfile, t.name)] = _traffic_of(impls[c.module])
                    if comp and comp.get("status") == CompileStatus.FAILED:
                        first = (comp.get("error") or "").strip().splitlines()[:1]
                        impl_failures.append(f"{mfile} on {t.name}: compile failed: {first[0] if first else ''}")
                    if val and val.get("status") in (ValidationStatus.FAILED, ValidationStatus.ERROR):
                        impl_failures.append(f"{mfile} on {t.name}: validation {val['status']}: "
                                             f"{val.get('reason', '')}")
                    if val:
                        validations[(mfile, t.name)] = ValidationResult.from_json(val)
                comp, val = modules[c.module]
                subject = bench_subject(mfile, c.mode)
                ben = read_json(lay.bench(t.name, subject)) if dev and config.bench else None
                benrecs[c.key] = ben
                if not c.mode:
                    impls[c.module]["bench"] = stable_record(ben)
                if comp and comp.get("status") == CompileStatus.OK:
                    compiled.append(c.key)
                vals[c.key] = ValidationResult.from_json(val) if val else None
                bens[c.key] = BenchResult.from_json(ben) if ben else None
                if ben:
                    benches[(subject, t.name)] = bens[c.key]
            if dev is None:
                # Nothing ran: say why instead of leaving validation empty.
                vals = {c.key: not_run.validation(ModuleId(sig, c.impl).key, t.name, dev_reason)
                        if c.key in compiled else None for c in cands}
            names = [c.key for c in cands]
            eager = read_json(lay.bench(t.name, eager_subject(sig.key))) if dev and config.bench else None
            eager_bench = BenchResult.from_json(eager) if eager else None
            if eager_bench is not None:
                benches[eager_key(sig.key, t.name)] = eager_bench
            # say why an implementation did not compile, not just that it did not
            not_compiled = {c.key: _why_not_compiled(impls[c.module]["compile"]) for c in cands
                            if c.key not in compiled}
            # torch calls go to torch only where explored, eager faster and its results pass
            decision = decide(sig, t.name, names, compiled, vals, bens, not_compiled=not_compiled, explored=explore,
                              eager=eager_bench if explore else None,
                              eager_validation=eager_bench.validation if eager_bench is not None else None,
                              traffic={c.key: traffics.get((module_file(ModuleId(sig, c.impl).key, c.variant), t.name))
                                       for c in cands})
            decisions[(sig.key, t.name)] = decision
            sel = decision.selection
            rejected = decision.rejected
            if decision.candidates is not None:
                for module in impls:  # its benchmark in the chosen mode, or its best one
                    own = [c.key for c in cands if c.module == module and (cb := bens.get(c.key)) is not None
                           and cb.ok]
                    # own's benchmarks ran (ok): their compared times are floats
                    pick = sel.impl if sel.impl is not None and module == decision.module else min(
                        own, key=lambda n: compared_time(bens[n]),  # type: ignore[arg-type, return-value]
                        default=module)
                    impls[module]["bench"] = stable_record(benrecs.get(pick))
            if sel.impl is None:
                failures.extend(impl_failures)
            else:
                dropped.extend(f"{f} (ships {sel.impl})" for f in impl_failures)
            if sel.impl is None:
                reasons = "; ".join(f"{i}: {r}" for i, r in sorted(rejected.items())) or sel.reason
                # rejected: per module, why (the bundle index keeps it; the page tells
                # a failed validation from a failed compile by it)
                status = {"status": "unavailable", "reason": reasons, **decision.report_fields()}
                missing.append(f"{sig.key} on {t.name}: {reasons}")
                per_target[t.name]["unavailable"] += 1
            else:
                validated = vals.get(sel.impl)
                vstatus = validated.status if validated else ValidationStatus.NOT_RUN
                passed = vstatus == ValidationStatus.PASSED
                vtext = ValidationStatus.PASSED if passed else (dev_reason if dev is None else vstatus)
                status = {"status": "available", "validation": vtext, **decision.report_fields()}
                per_target[t.name]["available"] += 1
                per_target[t.name]["validated" if passed else "not validated"] += 1
            entry["targets"][t.name] = {**status, "impls": impls, "eager": stable_record(eager)}
        kernels.append(entry)
    _dynamic_sizes(kernels)

    report = {
        "format": "boo-build-report",
        "format_version": 1,
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
        "per_target": {t: dict(sorted(c.items())) for t, c in per_target.items()},
    }
    rows = table_rows([r.signature for r in plan.manifest.kernels], [t.name for t in plan.targets],
                      validations, benches, decisions, traffics)
    return report, {"stats": dict(stats), "rows": rows}


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


def _why_not_compiled(comp: dict | None) -> str:
    from ..records import CompileRecord

    return CompileRecord.from_json(comp).why_not() if comp else "not compiled: no compile record"


def failed(report: dict) -> bool:
    """A requested kernel (signature x target) with no working implementation."""
    return bool(report["missing"])


def _traffic_of(impl: dict[str, Any]) -> Traffic | None:
    """A module's modelled traffic from its report entry, where modelled."""
    rec = impl.get("traffic")
    return TrafficRecord.from_json(rec).traffic if rec else None


def summary_text(report: dict, stats: dict, bundle_path: Path, allow_missing: bool) -> str:
    s = stats["stats"]
    lines = [f"== {report['bundle']['name']} {report['bundle']['version']} =="]
    for stage in ("export", "compile", "traffic", "validate"):
        built, up = s.get(f"{stage}:built", 0), s.get(f"{stage}:up to date", 0)
        if built or up:
            lines.append(f"  {stage:8s} built {built}, up to date {up}")
    lines.append(f"  benchmarks: {report['benchmarks']}")
    for t, c in report["per_target"].items():
        dev = report["targets"][t]["device_status"]
        lines.append(f"  {t:14s} available {c.get('available', 0)}, failed {c.get('unavailable', 0)}, "
                     f"validated {c.get('validated', 0)}, not validated {c.get('not validated', 0)}"
                     + (f"  ({dev})" if dev and not c.get("validated") else ""))
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
    else:
        lines.append(f"  bundle: {bundle_path}")
    return "\n".join(lines)
