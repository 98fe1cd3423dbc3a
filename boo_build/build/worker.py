"""What a Dask worker runs for a distributed build (``boo_build.distributed``).

Dask pickles a task's function by reference, so a worker imports this module
when the first task arrives: it holds the functions that run there (compile,
validate, benchmark, device match, version report) and what both sides
share (the errors, the resource names, the version check), and imports no
Dask client. A worker checks its own compiler before every compile, finds
its own device for validations and benchmarks, and says why not when it has
none: those records read as a local build's would.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from functools import lru_cache

# the errors both sides share: distributed.py imports them from here
from ..errors import DistributedError as DistributedError
from ..errors import SchedulerLost as SchedulerLost
from ..errors import WorkerMismatch
from ..stages import not_run
from ..stages.compile import CompileResult


def target_resource(target_name: str) -> str:
    """The Dask worker resource that runs ``target_name``'s kernels: the
    target's name itself (``cpu``, ``cpu-x86-64-v4``, ``gfx942``, ...)."""
    return target_name


def catalogue_target(target_name: str):
    """The driver's catalogue entry, which travels with the task: a worker of
    another architecture would resolve "cpu" to its own CPU target."""
    from ..targets import catalogue

    return catalogue()[target_name]


# -------------------------------------------------------------- versions
def toolchain_versions() -> dict[str, str]:
    """This process's compiler: ``iree-compile --version`` and the package version,
    what must be equal on the driver and every worker for byte-identical output."""
    from importlib.metadata import PackageNotFoundError, version

    from ..stages.compile import compiler_version

    try:
        pkg = version("iree-base-compiler")
    except PackageNotFoundError:
        pkg = "not installed"
    return {"iree-compile": compiler_version(), "iree-base-compiler": pkg}


@lru_cache(maxsize=1)
def worker_versions() -> dict[str, str]:
    # Run in the worker process: its compiler does not change while it lives
    # (a cache of a constant, not state), and --version costs ~0.4 s.
    return toolchain_versions()


def differences(have: dict[str, str], want: dict[str, str]) -> list[str]:
    return [f"{k} {have.get(k, 'missing')!r} (driver: {want[k]!r})" for k in want if have.get(k) != want[k]]


# ---------------------------------------------------------- on the worker
def compile_on_worker(mlir: str, flags: tuple[str, ...], timeout: float, expected: dict[str, str]) -> CompileResult:
    from distributed import get_worker

    from ..stages.compile import compile_mlir

    diffs = differences(worker_versions(), expected)
    if diffs:
        raise WorkerMismatch(f"worker {get_worker().address} has {'; '.join(diffs)}: refusing to compile",
                             [get_worker().address])
    return compile_mlir(mlir, tuple(flags), timeout=timeout)


def _worker_device(target, device: dict | None):
    """(this worker's device for ``target``, or None, and why not)."""
    from ..loader.devices import DeviceInfo, discover_for, match_target

    devices = discover_for([target])
    if device:
        wanted = DeviceInfo(**device)
        if wanted in devices:  # the very device the driver chose (same machine)
            return wanted, ""
    return match_target(target, devices)


def _no_device_reason(target, why: str) -> str:
    from distributed import get_worker

    res = target_resource(target.name)
    return f"{why} on worker {get_worker().address} (it declared resource {res})"


def validate_on_worker(vmfb: bytes, module_key: str, target, device: dict | None, shapes=None) -> dict:
    from ..signature import ModuleId
    from ..stages.validate import validate_kernel

    dev, why = _worker_device(target, device)
    if dev is None:
        return not_run.validation(module_key, target.name, _no_device_reason(target, why)).to_json()
    return validate_kernel(vmfb, ModuleId.parse(module_key), target, dev, shapes=shapes).to_json()


def _eager_threads() -> int | None:
    """torch's own thread count (None), as in a local build; but Dask's nanny
    starts workers with OMP_NUM_THREADS=1, which would time eager on one
    thread: then every core this worker may use (benchmarks run one at a time)."""
    return len(os.sched_getaffinity(0)) if os.environ.get("OMP_NUM_THREADS") == "1" else None


def bench_on_worker(signature: str, target, device: dict | None, candidates: list, shapes=(),
                    previous: dict | None = None, compiled: int = 0, untimed: str = "") -> dict:
    """A kernel's candidates and torch eager in paired rounds (``benchmark.bench_candidates``),
    as ``actions.bench_action`` runs them locally: ``KernelBench.to_json()`` (every
    record "not run" where this worker has no device for the target). ``previous``: the
    previous build's decision (``comparison.Previous.to_json``), kept if made on this machine."""
    from ..signature import KernelSignature
    from ..stages.benchmark import NOT_ASKED, KernelBench, bench_candidates
    from ..stages.comparison import Previous

    sig = KernelSignature.parse(signature)
    dev, why = _worker_device(target, device)
    if dev is None:
        return KernelBench.not_run(sig, target.name, candidates, _no_device_reason(target, why)).to_json()
    return bench_candidates(sig, target, dev, candidates, [tuple(s) for s in shapes], eager_threads=_eager_threads(),
                            previous=None if previous is None else Previous.from_json(previous),
                            compiled=compiled, untimed=untimed or NOT_ASKED).to_json()


def match_on_worker(target) -> tuple[dict | None, str]:
    dev, why = _worker_device(target, None)
    return (asdict(dev) if dev else None), why
