"""The graph's stage actions: the Python functions doit runs for each task.

Each reads the previous stage's record, does its work (locally, or on a Dask
worker when the build has a scheduler) and writes its own record; a failure
is recorded, not raised, so other tasks carry on. The returned dict (the
stage's status) is what doit keeps as the task's values and what the
progress line shows. Actions run in doit's threads and must not print,
except the report's summary. Imports of the heavy stages (export, compile,
validation, Dask) happen inside the actions, so loading the graph stays cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from doit.exceptions import TaskFailed

from ..candidates import WORDS, Candidate, apply_variant, gpu_tune_params, module_file, tune_params, tuned_part
from ..files import read_json, record_bytes, write_atomic, write_json
from ..layout import bench_subject, eager_subject
from ..records import (
    BenchResult,
    BenchStatus,
    CompileRecord,
    CompileStatus,
    ExportRecord,
    ExportStatus,
    FallbackRecord,
    ValidationResult,
)
from ..signature import ModuleId
from ..stages import not_run
from ..targets import catalogue
from .jobs import BenchJob, CompileJob, ExportJob, FallbackJob, SelectJob, TrafficCopyJob, TrafficJob, ValidateJob
from .uptodate import content_digest

Status = dict[str, str]  # {"status": ...}: the task's values


def export_action(job: ExportJob) -> Status:
    """``job.variant``: an export variant (``candidates.EXPORT_VARIANTS``); its record says so."""
    mid_key, mlir_path, record_path, run_id, variant = job.module, job.mlir, job.record, job.run_id, job.variant
    from ..stages.export import export_module

    mid = ModuleId.parse(mid_key)
    t0 = time.monotonic()
    res = export_module(mid, variant)
    # An unavailable export leaves an empty file (a missing input would make
    # the compile task's content check fail on every build); the record says why.
    text = res.mlir.encode() if res.ok else b""
    write_atomic(Path(mlir_path), text)
    rec = ExportRecord(module=mid_key, status=ExportStatus(res.status), reason=res.reason, func_name=mid.func_name,
                       variant=variant, mlir_sha256=hashlib.sha256(text).hexdigest() if res.ok else None,
                       run_id=run_id, seconds=round(time.monotonic() - t0, 3))
    write_json(Path(record_path), rec.to_json())
    return {"status": rec.status}


def compile_action(job: CompileJob) -> Status:
    """``job.variant``: a variant (``candidates``) of the exported MLIR; its record says
    so (a baseline record is as it always was). ``job.gate``: (candidate name, traffic
    record) of every candidate of the kernel on this target, where the traffic
    model decides: the variant compiles only where it models best
    (``selection.modelled_gate``), among them all or, where every implementation of the
    kernel failed to compile (``job.bases``), among the variants; else its record says
    why not; with ``--all-variants`` its own alone: it compiles wherever it is modelled."""
    mid_key, target, flags, mlir_path, export_record = job.module, job.target, job.flags, job.mlir, job.export_record
    vmfb_path, record_path, timeout, run_id = job.vmfb, job.record, job.timeout, job.run_id
    scheduler, variant, gate = job.scheduler, job.variant, job.gate
    from ..stages.compile import compile_mlir

    exp_json = read_json(Path(export_record))
    exp = ExportRecord.from_json(exp_json) if exp_json else None

    def record(status: CompileStatus, **fields: Any) -> Status:
        rec = CompileRecord(module=mid_key, target=target, flags=tuple(flags), status=status, variant=variant,
                            run_id=run_id, **fields)
        write_json(Path(record_path), rec.to_json())
        return {"status": rec.status}

    def unavailable(reason: str) -> Status:
        Path(vmfb_path).unlink(missing_ok=True)
        return record(CompileStatus.UNAVAILABLE, reason=reason)

    if exp is None or not exp.ok:
        return unavailable(_export_unavailable(exp))
    from ..targets import catalogue, dtype_problem

    known = catalogue().get(target)
    if (known is not None and WORDS not in variant.split(".")
            and (why := dtype_problem(known, ModuleId.parse(mid_key).signature.dtype))):
        return unavailable(why)
    if variant and gate:
        from ..stages.selection import modelled_gate
        from ..stages.traffic import TrafficRecord

        models = {name: TrafficRecord.from_json(rec).traffic if (rec := read_json(Path(path))) else None
                  for name, path in gate}
        bases = [CompileRecord.from_json(r) for p in job.bases if (r := read_json(Path(p)))]
        if bases and not any(b.ok for b in bases) and any(b.status is CompileStatus.FAILED for b in bases):
            # none of the kernel's implementations compiled: a better model of theirs is no reason to skip
            # a variant (else the kernel would be left to its fallbacks, this variant untried)
            models = {name: m for name, m in models.items() if not Candidate.parse(name).is_baseline}
        mine = Candidate(ModuleId.parse(mid_key).impl, variant).key
        if (why := modelled_gate(mine, models)) is not None:
            Path(vmfb_path).unlink(missing_ok=True)
            return record(CompileStatus.UNAVAILABLE, reason=why)
    mlir = Path(mlir_path).read_text()
    if variant:
        changed = apply_variant(variant, mlir)
        if changed is None:
            return unavailable(f"variant {variant} changes nothing in this module")
        mlir = changed
    # the tuned part of the variant, wherever it stands in it (``tune-wg32-t4.words``)
    tuned = tuned_part(variant)
    cpu_tune, gpu_tune, applied = tune_params(tuned), gpu_tune_params(tuned), None
    if cpu_tune is not None or gpu_tune is not None:  # dump, edit, compile again (stages/tuning.py): here, not remote
        from ..stages.tuning import GpuTuning, Tuning, compile_tuned

        tuning = Tuning(*cpu_tune) if cpu_tune is not None else GpuTuning(*gpu_tune)  # type: ignore[misc]
        tc = compile_tuned(mlir, tuple(flags), tuning, timeout=timeout)
        if tc.result is None:
            return unavailable(tc.reason)
        res, applied = tc.result, tc.applied or None
    elif scheduler:
        from .distributed import remote_compile

        res = remote_compile(scheduler, mlir, tuple(flags), timeout)
    else:
        res = compile_mlir(mlir, tuple(flags), timeout=timeout)
    if res.ok:
        write_atomic(Path(vmfb_path), res.vmfb)
        return record(CompileStatus.OK, command=res.command, seconds=round(res.seconds, 3), size=len(res.vmfb),
                      sha256=hashlib.sha256(res.vmfb).hexdigest(), tuning=applied)
    Path(vmfb_path).unlink(missing_ok=True)
    return record(CompileStatus.FAILED, command=res.command, error=res.error, seconds=round(res.seconds, 3),
                  tuning=applied)


def _export_unavailable(exp: ExportRecord | None) -> str:
    return f"export unavailable: {exp.reason if exp is not None else 'no export record'}"


def traffic_action(job: TrafficJob) -> Status:
    """The traffic model of a GPU module (``stages/traffic.py``) at ``shape`` (a
    dynamic kernel's: a static input shape it serves; None: its own), from its
    export, before it compiles. Runs here, not on a Dask worker: it needs only
    iree-compile, for a fraction of a second."""
    from ..stages.traffic import TrafficError, TrafficRecord, kernel_traffic

    mid_key, target, flags, mlir_path, export_record = job.module, job.target, list(job.flags), job.mlir, job.export_record
    record_path, shape, run_id, variant = job.record, job.shape, job.run_id, job.variant

    t0 = time.monotonic()
    mid = ModuleId.parse(mid_key)
    exp_json = read_json(Path(export_record))
    exp = ExportRecord.from_json(exp_json) if exp_json else None
    if exp is None or not exp.ok:
        rec = TrafficRecord(module_file(mid_key, variant), target, reason=_export_unavailable(exp))
    else:
        sig = mid.signature.bind(tuple(shape)) if shape else mid.signature
        mlir = Path(mlir_path).read_text()
        if variant:
            mlir = apply_variant(variant, mlir) or mlir
        try:
            rec = TrafficRecord(module_file(mid_key, variant), target,
                                kernel_traffic(mlir, flags, sig, mid.signature))
        except (TrafficError, OSError, subprocess.SubprocessError) as e:
            rec = TrafficRecord(module_file(mid_key, variant), target, reason=f"traffic model failed: {e}")
    rec = dataclasses.replace(rec, run_id=run_id, seconds=round(time.monotonic() - t0, 3))
    write_json(Path(record_path), rec.to_json())
    return {"status": "ok" if rec.ok else "not modelled"}


def traffic_copy_action(job: TrafficCopyJob) -> Status:
    """Another target's traffic record as this one's: their flags differ only in the GPU
    architecture, which iree-compile's output up to executable sources does not depend
    on (``targets.arch_free``). The record names the target it was modelled on."""
    from ..stages.traffic import TrafficRecord

    source, record_path, target, run_id = job.source, job.record, job.target, job.run_id
    src_json = read_json(Path(source))
    src = TrafficRecord.from_json(src_json) if src_json else None
    if src is None:
        rec = TrafficRecord("", target, reason=f"no traffic record at {source}")
    else:
        rec = dataclasses.replace(src, target=target, modelled_on=src.modelled_on or src.target, run_id=run_id,
                                  seconds=0.0)
    write_json(Path(record_path), rec.to_json())
    return {"status": "ok" if rec.ok else "not modelled"}


def validate_action(job: ValidateJob) -> Status:
    """``job.shapes``: a dynamic kernel's validation shapes (``validate.validation_shapes``)."""
    mid_key, target_name, vmfb_path, compile_record = job.module, job.target, job.vmfb, job.compile_record
    record_path, device, run_id, scheduler = job.record, job.device, job.run_id, job.scheduler
    shapes = None if job.shapes is None else [list(s) for s in job.shapes]
    from ..loader.devices import DeviceInfo
    from ..stages.validate import validate_kernel

    mid = ModuleId.parse(mid_key)
    comp_json = read_json(Path(compile_record))
    comp = CompileRecord.from_json(comp_json) if comp_json else None
    if comp is None or not comp.ok:
        res = not_run.validation(mid_key, target_name, not_run.not_compiled(comp.status if comp else None))
    elif scheduler:
        from .distributed import remote_validate

        res = ValidationResult.from_json(remote_validate(scheduler, Path(vmfb_path).read_bytes(), mid_key,
                                                         target_name, device, shapes))
    else:
        target = catalogue()[target_name]
        dev = DeviceInfo(**device) if device else None
        res = validate_kernel(Path(vmfb_path).read_bytes(), mid, target, dev, shapes=shapes)
    rec = dataclasses.replace(res, run_id=run_id)
    write_json(Path(record_path), rec.to_json())
    return {"status": rec.status}


# Fallback steps of one kernel on several targets need the same export variant (the lanes
# export, which no export task writes): the first exports it, the others reuse it.
_FALLBACK_EXPORTS = threading.Lock()


def fallback_action(job: FallbackJob) -> Status:
    """A kernel's fallback step on a target: where none of its candidates compiled and
    at least one failed in iree-compile (not merely unavailable: no export, a dtype the
    target lacks), try its fallback modules (``candidates.fallbacks``) in order until
    one works: each exported where it is its own export and no task writes it, compiled,
    then modelled (a GPU target) and validated (a device here) as the graph's own tasks
    do for the others; it works once it compiles and, where validated, passes. It is a
    fallback, not an exploration: the first that works is the kernel's candidate (the
    ones before it that compiled stay candidates too, their records saying why they
    lost). The record names the modules tried, with the content digest of every record
    written (the benchmark and select tasks compare them). Where not needed, the files
    of an earlier try are removed: nothing reads them, and nothing ships them."""
    t0 = time.monotonic()
    recs = [CompileRecord.from_json(r) for p in job.candidates if (r := read_json(Path(p)))]
    compiled = [Candidate(ModuleId.parse(r.module).impl, r.variant).module for r in recs if r.ok]
    failed = [r for r in recs if r.status is CompileStatus.FAILED]
    tried: list[str] = []
    digests: dict[str, str | None] = {}
    if compiled:
        reason = f"not needed: {compiled[0]} compiled"
    elif not failed:
        reason = "not tried: no candidate failed in iree-compile" + (f" ({recs[0].why_not()})" if recs else "")
    else:
        reason = f"none of its {len(recs)} candidate module(s) compiled"
        for m in job.modules:
            c = m.compile
            tried.append(Candidate(ModuleId.parse(c.module).impl, c.variant).module)
            outputs = [c.record]
            if m.export is not None:
                with _FALLBACK_EXPORTS:  # one export per build: another target's fallback step may have made it
                    done = read_json(Path(m.export.record)) or {}
                    if not (done.get("run_id") == job.run_id and done.get("status") == "ok"):
                        export_action(m.export)
                outputs.append(m.export.record)
            compile_action(c)
            works = CompileRecord.from_json(read_json(Path(c.record)) or {"status": "failed"}).ok
            if m.traffic is not None and works:
                traffic_action(m.traffic)
                outputs.append(m.traffic.record)
            if m.validate is not None:
                validate_action(m.validate)
                outputs.append(m.validate.record)
                works = works and (read_json(Path(m.validate.record)) or {}).get("status") == "passed"
            root = Path(job.record).parents[2]  # the bundle's folder (Layout.fallback)
            digests.update({str(Path(o).relative_to(root)): content_digest(Path(o)) for o in outputs})
            if works:
                break
    if not tried:
        for m in job.modules:
            for stale in m.files():
                Path(stale).unlink(missing_ok=True)
    rec = FallbackRecord(job.key, job.target, tuple(tried), reason, digests, run_id=job.run_id,
                         seconds=round(time.monotonic() - t0, 3))
    write_json(Path(job.record), rec.to_json())
    return {"status": rec.to_json()["status"]}


def bench_action(job: BenchJob) -> Status:
    """Benchmark one kernel on one target (``job.kernel``: a ``select.KernelTarget``): every
    candidate whose module passed validation, torch eager and the reference loop in
    paired rounds (``benchmark.bench_candidates``, in the benchmark process, or on a
    Dask worker with the target), at each of ``shapes`` for a dynamic kernel; the decision the folder's previous
    build made (its select record) kept where the rounds cannot tell otherwise, unless ``job.reselect``. Writes
    each candidate's record (a skipped one where its module did not pass), torch
    eager's (with whether its results, as the loader routes torch calls, validate)
    and the rounds (``comparison.RoundsRecord``)."""
    from ..layout import Layout
    from ..loader.devices import DeviceInfo
    from ..stages.bench_process import in_bench_process
    from ..stages.benchmark import NOT_ASKED, KernelBench, bench_candidates
    from ..stages.select import KernelRecords, SelectRecord
    from ..stages.validate import eager_record

    kt, root, device, run_id, scheduler = job.kernel, job.root, job.device, job.run_id, job.scheduler
    shapes = [list(s) for s in job.shapes]
    lay = Layout(Path(root).parent, Path(root).name)
    t, sig = kt.target, kt.sig
    recs = KernelRecords.read(lay, kt)
    before = None if job.reselect else SelectRecord.read(lay.select(t.name, sig.key))
    previous = before.previous() if before is not None else None
    timed: list[tuple[str, bytes]] = []
    skipped: dict[str, BenchResult] = {}
    for c in recs.candidates:
        mid = ModuleId(sig, c.impl)
        val = recs.modules[c.module].validation
        if val and val.get("status") == "passed":
            timed.append((c.key, lay.vmfb(t.name, mid, c.variant).read_bytes()))
        else:
            skipped[c.key] = dataclasses.replace(not_run.skipped_bench(mid.key, t.name, (val or {}).get("status")),
                                                 variant=c.variant, mode=c.mode)
    # whether torch eager's results, as the loader routes torch calls, pass as a kernel's must
    eager_validation = eager_record(sig, t.name, [list(s) for s in shapes])
    if scheduler:
        from .distributed import remote_bench

        kb = KernelBench.from_json(remote_bench(scheduler, sig.key, t.name, device, timed, shapes,
                                                None if previous is None else previous.to_json(), job.compiled,
                                                job.untimed))
    else:
        dev = DeviceInfo(**device) if device else None
        kb = in_bench_process(bench_candidates, sig, t, dev, timed, [tuple(s) for s in shapes], previous=previous,
                              compiled=job.compiled, untimed=job.untimed or NOT_ASKED)
    for c in recs.candidates:
        rec = skipped.get(c.key) or kb.results[c.key]
        subject = bench_subject(module_file(ModuleId(sig, c.impl).key, c.variant), c.mode)
        write_json(lay.bench(t.name, subject), dataclasses.replace(rec, run_id=run_id).to_json())
    eager = dataclasses.replace(kb.eager, validation=eager_validation, run_id=run_id)
    write_json(lay.bench(t.name, eager_subject(sig.key)), eager.to_json())
    write_json(lay.rounds(t.name, sig.key), dataclasses.replace(kb.rounds, run_id=run_id).to_json())
    # a candidate not timed on purpose (a software device's: "not run", saying why) is no error
    errors = [n for n, r in kb.results.items() if r.status not in (BenchStatus.OK, BenchStatus.NOT_RUN)]
    return {"status": "ok" if not errors and eager.ok else "error" if errors else str(eager.status)}


def select_action(job: SelectJob) -> Status:
    """The decision for ``job.kernel`` (a ``select.KernelTarget``) from its candidates' records
    in the build folder ``job.root``, written as its ``SelectRecord``."""
    kt, root, record_path, run_id = job.kernel, job.root, job.record, job.run_id
    from ..layout import Layout
    from ..stages.select import KernelRecords, SelectRecord

    lay = Layout(Path(root).parent, Path(root).name)
    decision = KernelRecords.read(lay, kt).decide()
    rec = SelectRecord(kt.sig.key, kt.target.name, decision, run_id)
    write_json(Path(record_path), rec.to_json())
    return {"status": "ok" if decision.available else "unavailable"}  # progress prints the latter in capitals


def report_action(plan, config, devices, toolchain) -> bool | TaskFailed:
    """Gather the records of ``plan`` (a ``tasks.Plan``) into the build report
    and CSV, print the summary; fail when a requested kernel is missing
    (unless ``config.allow_missing``), drawing the page without a bundle."""
    from ..report.bench_table import write_table
    from ..report.build_report import failed, gather, summary_text

    report, stats = gather(plan, config, devices, toolchain)
    text = record_bytes(report)
    lay = plan.layout
    if not lay.report.exists() or lay.report.read_bytes() != text:
        write_atomic(lay.report, text)
    write_table(stats["rows"], lay.csv)
    # sys.stdout may be another thread's capture buffer left behind by doit.
    out = sys.__stdout__ or sys.stdout
    out.write(summary_text(report, stats, lay.bundle(plan.manifest), config.allow_missing) + "\n")
    out.flush()
    if failed(report) and not config.allow_missing:
        from ..report.page import from_build, write_page

        # No pack (and no page task) follows: the page shows this build without a bundle.
        write_page(from_build(lay.root, None, f"not written: {len(report['missing'])} requested kernel(s) "
                              "missing (--allow-missing ships them as unavailable)"), lay.page)
        return TaskFailed(f"{len(report['missing'])} requested kernel(s) missing; see {lay.report} and {lay.page}")
    return True


def pack_action(plan, config, toolchain) -> bool:  # noqa: ARG001 (the graph's arguments)
    from ..stages.pack import pack_from_report

    pack_from_report(plan.layout.report, plan.layout.root, plan.layout.bundle(plan.manifest),
                     csv_path=plan.layout.csv)
    return True
