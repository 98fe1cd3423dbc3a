"""What each stage action of the graph is handed: one frozen record per task (its
paths as strings, as doit and Dask carry them), built by the task creators
(``tasks.py``) and read by the actions (``actions.py``). Named fields instead of
positional lists: a task's arguments read the same where they are made and
where they are used, and a missing one fails where the job is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExportJob:
    """Export ``module`` (a ``ModuleId`` key) to ``mlir``, its record at ``record``;
    ``variant``: an export variant (``candidates.EXPORT_VARIANTS``)."""

    module: str
    mlir: str
    record: str
    run_id: str
    variant: str = ""


@dataclass(frozen=True)
class CompileJob:
    """Compile ``module``'s export (``mlir``, its ``export_record``) for ``target`` with
    ``flags`` into ``vmfb``, its record at ``record``. ``variant``: a variant of the
    export; ``gate``: (candidate, traffic record) of every candidate of the kernel on
    this target where the traffic model decides which compiles (empty: it does not;
    the variant's own alone with ``--all-variants``: it compiles where modelled);
    ``bases``: the compile records of the kernel's implementations among them (where
    every one failed, the variants are ranked without them)."""

    module: str
    target: str
    flags: tuple[str, ...]
    mlir: str
    export_record: str
    vmfb: str
    record: str
    timeout: float
    run_id: str
    scheduler: str | None = None
    variant: str = ""
    gate: tuple[tuple[str, str], ...] = ()
    bases: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrafficJob:
    """The traffic model of ``module`` for ``target`` at ``shape`` (None: its own), from
    its export, written to ``record``."""

    module: str
    target: str
    flags: tuple[str, ...]
    mlir: str
    export_record: str
    record: str
    shape: tuple[int, ...] | None
    run_id: str
    variant: str = ""


@dataclass(frozen=True)
class TrafficCopyJob:
    """Another target's traffic record (``source``) as ``target``'s (``record``)."""

    source: str
    record: str
    target: str
    run_id: str


@dataclass(frozen=True)
class ValidateJob:
    """Run ``vmfb`` (``module`` for ``target``; its ``compile_record``) on ``device`` (a
    ``DeviceInfo``'s fields; None: none) against float64, at ``shapes`` for a dynamic
    kernel; the result at ``record``."""

    module: str
    target: str
    vmfb: str
    compile_record: str
    record: str
    device: dict[str, Any] | None
    run_id: str
    scheduler: str | None = None
    shapes: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class FallbackModule:
    """One module a fallback step may try: its compile, and where the target has them,
    its traffic model (a GPU target's) and its validation (a device here); ``export``:
    its export variant's export, where no task of the graph writes it."""

    compile: CompileJob
    traffic: TrafficJob | None = None
    validate: ValidateJob | None = None
    export: ExportJob | None = None

    def files(self) -> list[str]:
        """Every file its jobs write."""
        jobs = (self.compile, self.traffic, self.validate, self.export)
        return [self.compile.vmfb] + ([self.export.mlir] if self.export else []) + [
            j.record for j in jobs if j is not None]


@dataclass(frozen=True)
class FallbackJob:
    """The fallback step of kernel ``key`` on ``target``: where none of its candidates
    compiled (their compile records: ``candidates``) and one failed in iree-compile,
    try ``modules`` (``candidates.fallbacks``) in order until one works; what it tried
    at ``record``."""

    key: str
    target: str
    candidates: tuple[str, ...]
    modules: tuple[FallbackModule, ...]
    record: str
    run_id: str


@dataclass(frozen=True)
class BenchJob:
    """Benchmark ``kernel`` (a ``select.KernelTarget``) of the build folder ``root`` on
    ``device``, at ``shapes`` for a dynamic kernel; ``reselect``: decide afresh, not
    keeping the folder's previous decision where the rounds cannot tell otherwise;
    ``compiled``/``untimed``: torch.compile's sizes in the rounds (``bench_candidates``)."""

    kernel: Any
    root: str
    device: dict[str, Any] | None
    run_id: str
    scheduler: str | None = None
    shapes: tuple[tuple[int, ...], ...] = ()
    reselect: bool = False
    # at how many of its sizes (the first ones) torch.compile joins the rounds (the build's compile budget's
    # share: ``creators.compile_shares``), and why not at the others
    compiled: int = 0
    untimed: str = ""


@dataclass(frozen=True)
class SelectJob:
    """Decide ``kernel`` (a ``select.KernelTarget``) from the records of the build folder
    ``root``; the decision at ``record``."""

    kernel: Any
    root: str
    record: str
    run_id: str


__all__ = ["BenchJob", "CompileJob", "ExportJob", "FallbackJob", "FallbackModule", "SelectJob", "TrafficCopyJob", "TrafficJob",
           "ValidateJob"]
