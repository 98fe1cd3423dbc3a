"""``boo-build measure BUNDLE --out NEW``: validate, time and select a bundle's
kernels on the devices of this machine, and write a new bundle that records
what was measured.

For every bundle target a device here runs (``loader.devices.match_target``;
``--targets`` narrows the list), every shipped implementation of every
kernel is validated against the float64 reference (``validate``; computed on
the device where torch can reach it), the validated ones are timed through
the loader's call path (``benchmark.bench_kernel``) next to torch eager and
``torch.compile`` for the same signature on the same device, and the fastest
validated one is selected (``selection.select``). The new bundle keeps every
validated implementation (another device may choose differently), drops the
ones that failed (listed under ``rejected`` with the reason; a kernel whose
implementations all failed becomes ``unavailable``), and records per kernel
the baselines and the bytes moved; the device goes into the provenance.
Kernels of targets not measured here keep their old records.

Timing: CUDA events around the calls on a GPU (torch's current stream; the
loader's calls are synchronous, so the events bracket the whole call), the
``perf_counter`` on the CPU; warm-up first, median of samples until stable
(``benchmark.measure``), on seeded random inputs (never zeros).

Achieved bandwidth is the minimum traffic (every input read once, every
output written once) over the median time, also as a share of the device's
peak where it is known (``PEAK_BANDWIDTH``, datasheet figures).

Needs the loader's dependencies and torch only: no compiler, no iree-turbine,
no doit. New index fields are optional (format version 1 stays)::

    kernels.<key>.targets.<target>.measured = {
        "device": str, "bytes": int,
        "eager": BenchResult.to_json(), "torch_compile": BenchResult.to_json()}
    provenance.measured.<target> = {
        "device": {"name", "driver", "uri", "arch", "compute_capability"?, "software"?},
        "timing": str, "versions": {...}, "peak_gbs": float|null,
        "kernels": int, "not_measured": [key, ...]}
"""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from ..candidates import module_file
from ..errors import MeasureError
from ..loader.archive import Archive, read_archive, sha256_hex
from ..loader.devices import DeviceInfo, discover_for, match_target
from ..loader.errors import BundleFormatError
from ..loader.format import CSV_NAME, BundleIndex, TargetRecord
from ..loader.target_choice import bundle_targets
from ..reasons import Kind, Reason
from ..records import COMPILED, EAGER, BenchResult, BenchStatus, ValidationResult, ValidationStatus
from ..report.bench_table import COLUMNS, eager_key, table_rows, table_text
from ..signature import KernelSignature, ModuleId
from ..stages.benchmark import NOT_ASKED, bench_candidates, bench_kernel_at
from ..stages.pack import write_bundle
from ..stages.selection import decide, target_entry
from ..stages.traffic import Traffic, minimal_bytes
from ..stages.validate import eager_record, validate_kernel
from ..targets import Target, cuda_capability
from .results import KernelMeasurement, MeasureReport, summary_line

EXIT_OK, EXIT_PROBLEM, EXIT_UNUSABLE = 0, 1, 2

# Datasheet peak memory bandwidth (GB/s) by device name; the first name
# contained in the device's wins, so specific names come first.
PEAK_BANDWIDTH = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),  # SXM5
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),  # 40 GB
    ("MI300X", 5300.0),
)




# ------------------------------------------------------------------ devices
def torch_device_for(dev: DeviceInfo) -> str | None:
    """torch's name for ``dev``'s memory ("cpu", "cuda:0"), or None when this
    torch cannot reach it (a CPU build of torch, or CUDA torch on an AMD GPU)."""
    if dev.is_cpu:
        return "cpu"
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        if (dev.driver == "cuda" and torch.version.cuda) or (dev.driver == "hip" and torch.version.hip):
            index = dev.uri.split("://", 1)[1] if "://" in dev.uri else "0"
            return f"cuda:{int(index or 0)}"
    except Exception:  # noqa: BLE001 - no usable torch GPU: stage through the host
        return None
    return None


def device_record(dev: DeviceInfo) -> dict[str, Any]:
    rec: dict[str, Any] = {"name": dev.name, "driver": dev.driver, "uri": dev.uri, "arch": dev.arch}
    cc = cuda_capability(dev.arch) if dev.driver == "cuda" else None
    if cc:
        rec["compute_capability"] = f"{cc[0]}.{cc[1]}"
    if dev.software:  # lavapipe: its times are the CPU's (the report says so)
        rec["software"] = True
    return rec


def peak_bandwidth(dev: DeviceInfo) -> float | None:
    """Datasheet peak memory bandwidth in GB/s, or None where unknown (CPUs)."""
    if dev.is_cpu:
        return None
    for name, gbs in PEAK_BANDWIDTH:
        if name.lower() in dev.name.lower():
            return gbs
    return None


def event_clock(torch_device: str) -> Callable[[], float]:
    """A clock (seconds) read from CUDA events on torch's current stream: each
    reading records an event and waits for it, so the time between two
    readings is the device's time for the work issued between them."""
    import torch

    dev = torch.device(torch_device)
    stream = torch.cuda.current_stream(dev)
    base = torch.cuda.Event(enable_timing=True)
    base.record(stream)

    def clock() -> float:
        e = torch.cuda.Event(enable_timing=True)
        e.record(stream)
        e.synchronize()
        return base.elapsed_time(e) / 1e3

    return clock


def bytes_moved(sig: KernelSignature) -> int:
    """The least traffic a kernel can have: every input read once, every output written once."""
    return minimal_bytes(sig)


# ------------------------------------------------------------------ measuring
def _versions() -> dict[str, str | None]:
    import platform

    import torch

    from .. import __version__

    try:
        from ..loader.native import runtime_version

        runtime = runtime_version()
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            runtime = version("iree-base-runtime")
        except PackageNotFoundError:
            runtime = None
    return {"boo-build": __version__, "torch": torch.__version__, "iree-base-runtime": runtime,
            "python": platform.python_version()}


def plan_targets(index: BundleIndex | Mapping[str, Any], devices, only: tuple[str, ...] | None = None
                 ) -> tuple[dict[str, tuple[Target, DeviceInfo]], dict[str, str]]:
    """({target: (Target, device)} measured here, {target: why not})."""
    targets = bundle_targets(index)
    if only:
        unknown = [t for t in only if t not in targets]
        if unknown:
            raise MeasureError(f"target(s) {', '.join(unknown)} not in the bundle; it has "
                               f"{', '.join(sorted(targets))}")
    runs, skipped = {}, {}
    for name, t in sorted(targets.items()):
        if only and name not in only:
            skipped[name] = "not asked for (--targets)"
            continue
        dev, why = match_target(t, devices)
        if dev is None:
            skipped[name] = why
        else:
            runs[name] = (t, dev)
    return runs, skipped


def measure_bundle(src: str | Path, out: str | Path, *, targets: tuple[str, ...] | None = None,
                   devices=None, compile_baseline: bool = True, compile_budget_s: float = 300.0,
                   budget_s: float | None = None, max_seconds: float = 0.5,
                   log: Callable[[str], None] | None = None) -> MeasureReport:
    """Measure ``src`` on this machine's devices and write the new bundle to
    ``out`` (a folder or a ``.tar.zst`` path). ``budget_s`` bounds the whole
    run (kernels not reached keep their old records; the first always runs); ``compile_budget_s``
    bounds the time spent on ``torch.compile`` baselines (compiles included)."""
    log = log or (lambda _: None)
    start = time.monotonic()
    try:
        archive = read_archive(src)
    except BundleFormatError as e:
        raise MeasureError(str(e)) from None
    index = archive.bundle_index  # immutable: each measured entry makes a new one
    members = {m.member: archive.members[m.member] for *_, m in index.impl_records()}
    runs, skipped = plan_targets(index, discover_for(index.targets.values()) if devices is None else devices,
                                 targets)
    if not runs:
        lines = "\n".join(f"  {t}: {why}" for t, why in sorted(skipped.items())) or "  (no targets)"
        raise MeasureError(f"no device on this machine runs a target of {archive.path}:\n{lines}")

    measured: list[KernelMeasurement] = []
    not_measured: list[tuple[str, str, str]] = []
    dev_records, peaks = {}, {}
    compile_spent = 0.0
    todo = [(key, name) for name in sorted(runs) for key in sorted(index.kernels)
            if (te := index.kernels[key].targets.get(name)) is not None and te.is_available]
    for key, name in todo:  # every checksum before anything runs
        _check_members(archive, key, name, index.kernels[key].targets[name])
    for n, (key, name) in enumerate(todo, 1):
        target, dev = runs[name]
        # the first kernel always runs: on a loaded machine opening the archive and the devices can
        # take the whole of a small budget, and a run that measures nothing tells nothing
        if budget_s is not None and n > 1 and time.monotonic() - start > budget_s:
            not_measured.append((key, name, f"time budget of {budget_s:g} s spent"))
            continue
        tdev = torch_device_for(dev)
        kw = _measure_kw(tdev, max_seconds)
        sig = index.kernels[key].signature
        te = index.kernels[key].targets[name]
        assert te.impls is not None  # todo holds available entries
        # a dynamic kernel is validated at its validation shapes, timed at its export example
        timed = sig.example()
        shapes = (timed.input_shape,) if sig.is_dynamic else ()
        vals: dict[str, ValidationResult] = {}
        bens: dict[str, BenchResult] = {}
        passed: list[tuple[str, bytes]] = []
        for impl in sorted(te.impls):
            vmfb = archive.members[te.impls[impl].member]
            mid = ModuleId(sig, impl.partition("+")[0])  # a module name: <impl>[+<variant>] (candidates)
            vals[impl] = validate_kernel(vmfb, mid, target, dev, torch_device=tdev)
            if vals[impl].passed:
                passed.append((impl, vmfb))
        unreachable = f"not run: torch cannot reach {dev.uri}"
        rounds = None
        # torch.compile of the op joins the same rounds (as a build's), unless --no-compile or its budget is spent
        untimed = ("not timed: --no-compile" if not compile_baseline else
                   f"not timed: torch.compile budget of {compile_budget_s:g} s spent"
                   if compile_spent > compile_budget_s else "")
        if tdev:  # the implementations, torch eager and torch.compile in paired rounds, as a build times them
            kb = bench_candidates(sig, target, dev, passed, shapes, torch_device=tdev,
                                  compiled=0 if untimed else max(1, len(shapes)), untimed=untimed or NOT_ASKED,
                                  **_rounds_kw(tdev))
            bens, eager, rounds, compile_spent = dict(kb.results), kb.eager, kb.rounds, compile_spent + kb.compile_s
            compiled = kb.compiled or BenchResult(COMPILED, sig.key, name, BenchStatus.NOT_RUN, untimed or NOT_ASKED)
        else:  # torch cannot reach the device: the kernels alone, no eager to pair them with
            for impl, vmfb in passed:
                bens[impl] = bench_kernel_at(vmfb, ModuleId(sig, impl.partition("+")[0]), target, dev, shapes, **kw)
            eager = BenchResult(EAGER, sig.key, name, BenchStatus.NOT_RUN, unreachable)
            compiled = BenchResult(COMPILED, sig.key, name, BenchStatus.NOT_RUN, unreachable)
        ev = eager_record(sig, name, shapes, torch_device=tdev) if tdev else None
        # torch calls go to torch only where eager was faster and its results pass. A software device's
        # times are the CPU's: there the selection follows the traffic model, as the build's does
        soft = dev.software
        decision = decide(sig, name, list(te.impls), list(te.impls), vals, {} if soft else bens, eager=eager,
                          eager_validation=ev, rounds=None if soft else rounds,
                          traffic={i: Traffic.from_json(r.traffic) if r.traffic else None
                                   for i, r in te.impls.items()} if soft else None)
        m = KernelMeasurement(key, name, vals, bens, eager, compiled, decision, bytes_moved(timed), ev)
        measured.append(m)
        dev_records[name] = device_record(dev)
        peaks[name] = peak_bandwidth(dev)
        index = _update_entry(index, members, m, dev)
        log(f"[{n}/{len(todo)}] {name} {key}: {summary_line(m)}")

    prov = dict(index.provenance or {})
    meas = dict(prov.get("measured") or {})
    versions = _versions()
    for name, (target, dev) in sorted(runs.items()):
        if name not in dev_records:
            continue
        tdev = torch_device_for(dev)
        meas[name] = {
            "device": dev_records[name],
            "timing": ("CUDA events on torch's current stream, median" if tdev and tdev != "cpu"
                       else "perf_counter, median"),
            "versions": versions,
            "peak_gbs": peaks[name],
            "kernels": sum(1 for m in measured if m.target == name),
            "not_measured": sorted(k for k, t, _ in not_measured if t == name),
        }
    prov["measured"] = meas
    csv_bytes = _merged_csv(archive, measured)
    index = dataclasses.replace(index, provenance=prov, csv=CSV_NAME, absent=index.absent - {"csv"})
    path = write_bundle(Path(out), index, members, csv_bytes)
    read_archive(path)  # what was written reads back (format, members, sizes)
    return MeasureReport(source=archive.path, bundle=str(path), devices=dev_records, skipped=skipped,
                         kernels=tuple(measured), not_measured=tuple(not_measured), peaks=peaks)


def _rounds_kw(tdev: str) -> dict[str, Any]:
    """``bench_candidates``' clock on a GPU: CUDA events on torch's current stream, samples of 100 us at least."""
    if tdev != "cpu":
        return {"clock": event_clock(tdev), "min_sample_s": 100e-6}
    return {}


def _measure_kw(tdev: str | None, max_seconds: float) -> dict[str, Any]:
    if tdev and tdev != "cpu":
        return {"clock": event_clock(tdev), "max_seconds": max_seconds, "min_sample_s": 100e-6}
    return {"max_seconds": max_seconds}


def _check_members(archive: Archive, key: str, target: str, te: TargetRecord) -> None:
    assert te.impls is not None  # an available entry (measure_bundle's todo)
    for impl, m in te.impls.items():
        actual = sha256_hex(archive.members[m.member])
        if actual != m.sha256:
            raise MeasureError(f"{archive.path}: member {m.member} ({key} on {target}, {impl}) is corrupt: "
                               f"sha256 {actual}, the index says {m.sha256}")


def _update_entry(index: BundleIndex, members: dict[str, bytes], m: KernelMeasurement,
                  dev: DeviceInfo) -> BundleIndex:
    """``index`` with ``m`` written in (and the members of failed implementations dropped)."""
    te = index.kernels[m.key].targets[m.target]
    assert te.impls is not None  # an available entry (measure_bundle's todo)
    rejected = dict(te.rejected or {})
    kept = {}
    for impl, rec in te.impls.items():
        v = m.validations[impl]
        if v.passed:
            b = m.benches.get(impl)
            # a software device's times stay in the report, not in the bundle as a GPU's
            bench = rec.benchmark if dev.software else b.to_json() if b is not None else None
            kept[impl] = dataclasses.replace(rec, validation=v.to_json(), absent=frozenset(), benchmark=bench)
        else:
            rejected[impl] = m.selection.rejected.get(impl) or Reason(
                _NOT_PASSED.get(v.status, Kind.NOT_VALIDATED), f"validation {v.status}: {v.reason}")
            members.pop(rec.member, None)
    ev = m.eager_validation
    measured = {"device": dev.name, "bytes": m.bytes_moved,
                "eager": {**m.eager.to_json(), "validation": ev.to_json() if ev is not None else None},
                "torch_compile": m.compiled.to_json()}
    why = None
    if m.selection.impl is None or m.selection.impl not in kept:
        reason = m.selection.reason if m.selection.impl is None else f"{m.selection.impl} not validated"
        why = Reason(Kind.NONE_AVAILABLE, f"measured on {dev.name}: {reason}")
    # the build's one way to write a decision into the index (selection.target_entry)
    return index.with_entry(m.key, m.target, target_entry(m.decision, kept, rejected, why, measured=measured))


def _module_key(sig: KernelSignature, module: str) -> str:
    """A module name (``manual+fused``) of ``sig`` as the bench table keys it (``candidates.module_file``)."""
    impl, _, variant = module.partition("+")
    return module_file(ModuleId(sig, impl).key, variant)


# a validation status that did not pass -> the kind of its rejection
_NOT_PASSED = {ValidationStatus.FAILED: Kind.VALIDATION_FAILED, ValidationStatus.ERROR: Kind.VALIDATION_ERROR}


def _merged_csv(archive: Archive, measured: list[KernelMeasurement]) -> bytes:
    """The bundle's benchmark table with the measured rows replaced (others kept)."""
    old: list[dict[str, str]] = []
    name = archive.bundle_index.csv
    if name and name in archive.members:
        old = list(csv.DictReader(io.StringIO(archive.members[name].decode("utf-8", "replace"))))
    vals, bens, decisions = {}, {}, {}
    for m in measured:
        sig = KernelSignature.parse(m.key)
        # by module name (``<impl>[+<variant>]``, candidates): a GPU variant's too, as the build keys them
        for impl, v in m.validations.items():
            vals[(_module_key(sig, impl), m.target)] = v
        for impl, b in m.benches.items():
            bens[(_module_key(sig, impl), m.target)] = b
        bens[eager_key(m.key, m.target)] = m.eager
        decisions[(m.key, m.target)] = m.decision
    new: dict[tuple[str | None, str | None], dict[str, str]] = {}
    for m in measured:
        for row in table_rows([KernelSignature.parse(m.key)], [m.target], vals, bens, decisions):
            new[(m.key, m.target)] = row
    rows = [new.pop((r.get("key"), r.get("target")), {}) or {c: r.get(c, "") for c in COLUMNS} for r in old]
    rows += [new[k] for k in sorted(new)]
    return table_text(rows).encode()
