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
import sys
import time
from pathlib import Path

from doit.exceptions import TaskFailed

from . import not_run
from .candidates import apply_variant, split_module_file
from .layout import subject_signature
from .records import CompileStatus, ExportStatus, ValidationStatus, read_json, record_bytes, write_atomic, write_json
from .signature import KernelSignature, ModuleId
from .targets import catalogue

Status = dict[str, str]  # {"status": ...}: the task's values


def export_action(mid_key: str, mlir_path: str, record_path: str, run_id: str, variant: str = "") -> Status:
    """``variant``: an export variant (``candidates.EXPORT_VARIANTS``); its record says so."""
    from .export import export_module

    mid = ModuleId.parse(mid_key)
    t0 = time.monotonic()
    res = export_module(mid, variant)
    rec = {"module": mid_key, "status": res.status, "reason": res.reason, "run_id": run_id,
           "seconds": round(time.monotonic() - t0, 3), "func_name": mid.func_name,
           **({"variant": variant} if variant else {})}
    # An unavailable export leaves an empty file (a missing input would make
    # the compile task's content check fail on every build); the record says why.
    text = res.mlir.encode() if res.ok else b""
    write_atomic(Path(mlir_path), text)
    if res.ok:
        rec["mlir_sha256"] = hashlib.sha256(text).hexdigest()
    write_json(Path(record_path), rec)
    return {"status": res.status}


def compile_action(mid_key: str, target: str, flags: list[str], mlir_path: str, export_record: str,
                   vmfb_path: str, record_path: str, timeout: float, run_id: str,
                   scheduler: str | None = None, variant: str = "") -> Status:
    """``variant``: a compile variant (``candidates``) of the exported MLIR; its
    record says so (a baseline record is as it always was)."""
    from .compile import compile_mlir

    exp = read_json(Path(export_record)) or {}
    base = {"module": mid_key, "target": target, "flags": list(flags), "run_id": run_id,
            **({"variant": variant} if variant else {})}

    def unavailable(reason: str) -> Status:
        Path(vmfb_path).unlink(missing_ok=True)
        write_json(Path(record_path), {**base, "status": CompileStatus.UNAVAILABLE, "reason": reason})
        return {"status": CompileStatus.UNAVAILABLE}

    if exp.get("status") != ExportStatus.OK:
        return unavailable(f"export unavailable: {exp.get('reason', 'no export record')}")
    mlir = Path(mlir_path).read_text()
    if variant:
        mlir = apply_variant(variant, mlir)
        if mlir is None:
            return unavailable(f"variant {variant} changes nothing in this module")
    if scheduler:
        from .distributed import remote_compile

        res = remote_compile(scheduler, mlir, tuple(flags), timeout)
    else:
        res = compile_mlir(mlir, tuple(flags), timeout=timeout)
    if res.ok:
        write_atomic(Path(vmfb_path), res.vmfb)
        write_json(Path(record_path), {**base, "status": CompileStatus.OK, "command": res.command,
                                       "seconds": round(res.seconds, 3), "size": len(res.vmfb),
                                       "sha256": hashlib.sha256(res.vmfb).hexdigest()})
    else:
        Path(vmfb_path).unlink(missing_ok=True)
        write_json(Path(record_path), {**base, "status": CompileStatus.FAILED, "command": res.command,
                                       "error": res.error, "seconds": round(res.seconds, 3)})
    return {"status": CompileStatus.OK if res.ok else CompileStatus.FAILED}


def validate_action(mid_key: str, target_name: str, vmfb_path: str, compile_record: str,
                    record_path: str, device: dict | None, run_id: str, scheduler: str | None = None,
                    shapes: list | None = None) -> Status:
    """``shapes``: a dynamic kernel's validation shapes (``validate.validation_shapes``)."""
    from .loader.devices import DeviceInfo
    from .validate import validate_kernel

    mid = ModuleId.parse(mid_key)
    comp = read_json(Path(compile_record)) or {}
    if comp.get("status") != CompileStatus.OK:
        rec = not_run.validation(mid_key, target_name, not_run.not_compiled(comp.get("status"))).to_json()
    elif scheduler:
        from .distributed import remote_validate

        rec = remote_validate(scheduler, Path(vmfb_path).read_bytes(), mid_key, target_name, device, shapes)
    else:
        target = catalogue()[target_name]
        dev = DeviceInfo(**device) if device else None
        rec = validate_kernel(Path(vmfb_path).read_bytes(), mid, target, dev, shapes=shapes).to_json()
    rec["run_id"] = run_id
    write_json(Path(record_path), rec)
    return {"status": rec["status"]}


def bench_action(subject: str, target_name: str, vmfb_path: str | None, validation_record: str | None,
                 record_path: str, device: dict | None, run_id: str, scheduler: str | None = None,
                 shapes: list | tuple = (), mode: str = "") -> Status:
    """``subject``: a module key (``+<variant>`` for a compile variant's
    module), or ``<signature>-eager`` (``vmfb_path`` None) for torch eager;
    ``shapes``: a dynamic signature's benchmark shapes (``Manifest.bench_shapes``);
    ``mode``: a CPU driver to run the module on instead of the device's own
    (``candidates.modes``; the record then names it)."""
    from .bench_process import in_bench_process
    from .benchmark import bench_eager_at, bench_kernel_at
    from .loader.devices import DeviceInfo

    dev = DeviceInfo(**device) if device else None
    if mode and dev is not None:  # the same CPU, another driver: the device is opened by URI
        dev = dataclasses.replace(dev, driver=mode, uri=mode)
    val = read_json(Path(validation_record)) if validation_record else None
    passed = (val or {}).get("status") == ValidationStatus.PASSED
    eager_validation, sig = None, None
    if vmfb_path is None:  # torch eager for a signature: whether its results, as the
        from .validate import eager_record  # loader routes torch calls, pass as a kernel's must

        sig = KernelSignature.parse(subject_signature(subject))
        eager_validation = {"validation": eager_record(sig, target_name, shapes)}
    if scheduler and (vmfb_path is None or passed):
        from .distributed import remote_bench

        vmfb = Path(vmfb_path).read_bytes() if vmfb_path else None
        rec = {**remote_bench(scheduler, vmfb, subject, target_name, device, shapes), **(eager_validation or {}),
               "run_id": run_id}
        write_json(Path(record_path), rec)
        return {"status": rec["status"]}
    mid_key, variant = split_module_file(subject)
    if sig is not None:
        res = in_bench_process(bench_eager_at, sig, shapes, threads=None)
    elif not passed:
        res = not_run.skipped_bench(mid_key, target_name, (val or {}).get("status"))
    else:
        res = in_bench_process(bench_kernel_at, Path(vmfb_path).read_bytes(), ModuleId.parse(mid_key),
                               catalogue()[target_name], dev, shapes)
    rec = {**res.to_json(), **(eager_validation or {})}
    if variant or mode:  # a candidate's record says which (a baseline's is as it always was)
        rec.update({"variant": variant, "mode": mode})
    rec["run_id"] = run_id
    write_json(Path(record_path), rec)
    return {"status": rec["status"]}


def report_action(plan, config, devices, toolchain) -> bool | TaskFailed:
    """Gather the records of ``plan`` (a ``tasks.Plan``) into the build report
    and CSV, print the summary; fail when a requested kernel is missing
    (unless ``config.allow_missing``), drawing the page without a bundle."""
    from .bench_table import write_table
    from .report import failed, gather, summary_text

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
        from .report_page import from_build, write_page

        # No pack (and no page task) follows: the page shows this build without a bundle.
        write_page(from_build(lay.root, None, f"not written: {len(report['missing'])} requested kernel(s) "
                              "missing (--allow-missing ships them as unavailable)"), lay.page)
        return TaskFailed(f"{len(report['missing'])} requested kernel(s) missing; see {lay.report} and {lay.page}")
    return True


def pack_action(plan, config, toolchain) -> bool:  # noqa: ARG001 (the graph's arguments)
    from .pack import pack_from_report

    pack_from_report(plan.layout.report, plan.layout.root, plan.layout.bundle(plan.manifest),
                     csv_path=plan.layout.csv)
    return True
