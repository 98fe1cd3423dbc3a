"""Dask distribution: compiles, validations and benchmarks on a Dask cluster.

doit still drives the graph, its up-to-date checks and its database on the
machine that started the build (the *driver*); only the work of an action
travels. Imported only when ``--scheduler`` (or ``$DASK_SCHEDULER_ADDRESS``)
is given: nothing else in boo_build imports Dask's client (``worker``, the
functions Dask runs on a worker, asks only for ``get_worker`` there).

    with scheduler_session("tcp://host:8786") as address:   # or "local"
        res = remote_compile(address, mlir_text, flags, timeout)   # CompileResult
        rec = remote_validate(address, vmfb, module_key, "gfx942", device)  # dict
        rec = remote_bench(address, sig_key, "gfx942", device, [(name, vmfb)])  # dict: a KernelBench

Compiles run on any worker: the worker gets the MLIR text and the flags, runs
the same ``compile.compile_mlir`` a local build runs and returns the
``CompileResult`` (vmfb bytes); the driver writes the files. Validations and
benchmarks of a target run only on workers that declared the resource named
like the target (``dask worker ... --resources "gfx942=1"``; the CPU targets'
resources are ``cpu`` and ``cpu-x86-64-v4``); with no such worker the record
says ``"not run: no device (gfx942)"``, as a local build without that device
does (``not_run`` makes both; the bundles are byte-identical), and nothing
is submitted.

Faults: a task whose worker dies is run again elsewhere (Dask reschedules it;
``distributed.scheduler.allowed-failures`` bounds how many worker deaths one
task may cause, ``RETRIES`` how many times an exception raised by the task is
retried). A lost scheduler raises ``SchedulerLost`` from every remote call,
so the doit tasks in flight fail and the ones already finished stay recorded:
rerunning the build continues. Every worker's compiler (``iree-compile
--version`` and the ``iree-base-compiler`` package version) must equal the
driver's: ``check_workers`` refuses a mismatch with ``WorkerMismatch`` naming
the worker before any work is sent, and every compile checks again on the
worker that runs it, so a worker joining later with another compiler is
refused too.

doit runs actions in threads: every remote call from every thread shares
the session's one ``Client`` (its methods are thread-safe).
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator

import dask
from distributed import Client, LocalCluster
from distributed.client import FutureCancelledError
from distributed.comm.addressing import normalize_address
from distributed.comm.core import CommClosedError

from ..errors import DistributedError, SchedulerLost, WorkerMismatch
from ..stages import not_run
from ..stages.compile import CompileResult
from .worker import (
    bench_on_worker,
    catalogue_target,
    compile_on_worker,
    differences,
    match_on_worker,
    target_resource,
    toolchain_versions,
    validate_on_worker,
    worker_versions,
)

__all__ = ["LOCAL", "check_workers", "local_resources", "remote_bench", "remote_compile", "remote_device_map", "remote_validate", "run_on_resource", "scheduler_session", "scheduler_workers", "workers_with_resource"]

LOCAL = "local"
LOCAL_WORKERS = 2
RETRIES = 2  # an exception raised by a task: tried at most 1 + RETRIES times
log = logging.getLogger(__name__)
ALLOWED_FAILURES = 3  # worker deaths one task may cause (scheduler started here)
CONNECT_TIMEOUT_S = 30.0
WAIT_FOR_WORKERS_S = 120.0


# ------------------------------------------------------------- resources
def scheduler_workers(client: Client) -> dict[str, dict]:
    """Worker address -> the scheduler's view of it, fresh from the scheduler."""
    # Not client.scheduler_info(): it refreshes a cache shared by all threads
    # and then returns that cache, which the client's periodic update
    # (n_workers=0, so no "workers") may overwrite in between.
    return client.sync(client.scheduler.identity, n_workers=-1).get("workers", {})


def workers_with_resource(client: Client, name: str) -> list[str]:
    """Addresses of the workers that declared resource ``name``."""
    return sorted(addr for addr, w in scheduler_workers(client).items()
                  if (w.get("resources") or {}).get(name, 0) > 0)


def local_resources() -> dict[str, float]:
    """Resources of this machine: one per catalogue target a device here can run."""
    from ..loader.devices import discover, match_target
    from ..targets import catalogue

    devices = discover(vulkan=True)
    return {target_resource(t.name): 1 for t in catalogue().values() if match_target(t, devices)[0] is not None}


# -------------------------------------------------------------- versions
def _expected(expected: dict[str, str] | str | None) -> dict[str, str]:
    """The driver's versions; a string replaces the iree-compile version (tests)."""
    if isinstance(expected, dict):
        return dict(expected)
    base = toolchain_versions()
    if isinstance(expected, str):
        base["iree-compile"] = expected
    return base


def check_workers(client: Client, expected: dict[str, str] | str | None = None,
                  workers: list[str] | None = None) -> dict[str, dict[str, str]]:
    """Every worker's compiler versions, refused with ``WorkerMismatch`` (naming
    each bad worker) unless equal to ``expected`` (default: the driver's own;
    a string stands for the driver's ``iree-compile --version``)."""
    want = _expected(expected)
    got = client.run(worker_versions, workers=workers, on_error="return")
    problems, bad = [], []
    for addr in sorted(got):
        have = got[addr]
        if isinstance(have, BaseException):
            problems.append(f"worker {addr} cannot report its compiler ({type(have).__name__}: {have}); "
                            "is boo-build installed there?")
            bad.append(addr)
            continue
        diffs = differences(have, want)
        if diffs:
            problems.append(f"worker {addr} has {'; '.join(diffs)}")
            bad.append(addr)
    if problems:
        raise WorkerMismatch("refusing to send work to a worker whose compiler differs from the driver's: "
                             + " | ".join(problems), bad)
    return got


# --------------------------------------------------------------- session
@dataclass
class Session:
    """One build's connection: the Client all driver threads share, and the
    driver's versions every compile is checked against."""

    address: str
    client: Client
    versions: dict[str, str]
    compiler: str  # the driver's iree-compile path, for the records' command line
    closing: bool = False


# The open sessions by scheduler address: the one piece of module state.
# doit hands an action only plain arguments (BuildConfig carries the address
# as a string), so remote_compile must find the build's Client from the
# address. distributed's default client (Client.current()) is process-global
# as well, but it forgets a client once the connection closes, and falling
# back to a new Client would turn "scheduler lost" into a 30-s connection
# attempt for every remaining task instead of an immediate, clear failure.
# Entries are added and removed only by scheduler_session.
_SESSIONS: dict[str, Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _norm(address: str) -> str:
    return normalize_address(address) if "://" in address else normalize_address(f"tcp://{address}")


def _lost_message(address: str, why: object) -> str:
    return f"lost the Dask scheduler at {address}: {why}; finished work is kept, rerun to continue"


def _connect(address: str) -> Client:
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise SchedulerLost(f"cannot reach the Dask scheduler at {address}: {e}") from e


@contextmanager
def scheduler_session(address: str, *, n_workers: int = LOCAL_WORKERS, resources: dict[str, float] | None = None,
                      expected: dict[str, str] | str | None = None,
                      wait_for_workers_s: float = WAIT_FOR_WORKERS_S) -> Iterator[str]:
    """Connect to the scheduler at ``address`` (or start a loopback
    ``LocalCluster`` of ``n_workers`` one-thread worker processes for
    ``"local"``, whose workers declare ``resources``, default
    ``local_resources()``), wait for a worker, check every worker's compiler,
    and yield the scheduler's address for ``remote_*`` calls. Closes what it
    opened on exit."""
    with _quiet_distributed_logs(), _cluster(address, n_workers, resources) as address:
        client = _connect(_norm(address))
        session = None
        try:
            addr = _norm(client.scheduler.address)
            try:
                client.wait_for_workers(1, timeout=wait_for_workers_s)
            except TimeoutError as e:
                raise DistributedError(f"no Dask worker joined the scheduler at {addr} within "
                                       f"{wait_for_workers_s:g} s: start one with `dask worker {addr}`") from e
            versions = _expected(expected)
            check_workers(client, versions)
            from ..stages.compile import compiler_path

            session = Session(addr, client, versions, compiler_path())
            with _SESSIONS_LOCK:
                _SESSIONS[addr] = session
            yield addr
        finally:
            if session is not None:
                session.closing = True
                with _SESSIONS_LOCK:
                    if _SESSIONS.get(session.address) is session:
                        del _SESSIONS[session.address]
            if client.status == "running":
                client.close(timeout=10)
            else:  # the scheduler is gone: stop reconnecting, without a traceback in the log
                with _quiet_distributed_logs(logging.CRITICAL + 1):
                    client.close(timeout=10)


@contextmanager
def _cluster(address: str, n_workers: int, resources: dict[str, float] | None) -> Iterator[str]:
    """``address`` itself, or a loopback LocalCluster's for ``"local"``."""
    if address != LOCAL:
        yield address
        return
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, silence_logs=logging.ERROR,
                               # no dashboard; the scheduler's bare HTTP routes on a free loopback port
                               scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                               resources=local_resources() if resources is None else resources)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close(timeout=10)


@contextmanager
def _quiet_distributed_logs(level: int = logging.WARNING) -> Iterator[None]:
    """Dask logs connections and workers at INFO; once anything configured the
    root logger (the export does), they would fill the build's output."""
    loggers = [logging.getLogger(n) for n in ("distributed", "distributed.client")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.getEffectiveLevel() < level:
            lg.setLevel(level)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)


def _session(address: str) -> Session:
    """The open session for ``address`` (see ``scheduler_session``)."""
    addr = _norm(address)
    with _SESSIONS_LOCK:
        s = _SESSIONS.get(addr)
    if s is None or s.closing:
        raise DistributedError(f"no open session with the Dask scheduler at {addr}: remote work runs inside "
                               "scheduler_session (boo-build build --scheduler ADDRESS)")
    if s.client.status != "running":
        raise SchedulerLost(_lost_message(addr, f"the connection is down (client {s.client.status})"))
    return s


def _result(s: Session, fut) -> Any:
    """``fut.result()``, a lost scheduler turned into ``SchedulerLost``."""
    try:
        return fut.result()
    except (FutureCancelledError, CommClosedError, OSError) as e:
        if s.closing:
            raise DistributedError(f"the build's session with {s.address} closed while a task was running") from e
        lost = isinstance(e, FutureCancelledError) and e.reason == "scheduler-connection-lost"
        if lost or isinstance(e, CommClosedError) or s.client.status != "running":
            raise SchedulerLost(_lost_message(s.address, f"the connection closed while {fut.key} was running")) from e
        raise


def _submit(s: Session, fn, *args, prefix: str, resources: dict[str, float] | None = None) -> Any:
    try:
        fut = s.client.submit(fn, *args, key=f"{prefix}-{uuid.uuid4().hex[:12]}", pure=False,
                              retries=RETRIES, resources=resources)
    except (CommClosedError, OSError) as e:
        raise SchedulerLost(_lost_message(s.address, f"{type(e).__name__}: {e}")) from e
    return _result(s, fut)


# -------------------------------------------------------------- compile
def remote_compile(address: str, mlir: str, flags: tuple[str, ...], timeout: float) -> CompileResult:
    """Compile ``mlir`` with ``flags`` on any worker; same result as ``compile_mlir``.

    The command in the result names the driver's iree-compile (the versions
    are equal), so records do not depend on which worker compiled."""
    s = _session(address)
    digest = hashlib.sha256(mlir.encode()).hexdigest()[:10]
    res: CompileResult = _submit(s, compile_on_worker, mlir, tuple(flags), float(timeout), s.versions,
                                 prefix=f"boo-compile-{digest}")
    parts = shlex.split(res.command)
    if parts:
        res = replace(res, command=shlex.join([s.compiler, *parts[1:]]))
    return res


# ------------------------------------------------- validate and benchmark
def _no_worker(target_name: str, resource: str) -> str:
    """The reason for a target no worker declared: the words a local build
    without its device writes (the bundle must not depend on where it was
    built); which resource was missing goes to the log only."""
    log.info("%s not run: no worker declared resource %s", target_name, resource)
    return not_run.no_device(catalogue_target(target_name).arch)


def run_on_resource(address: str, resource: str, fn, *args, prefix: str = "boo-task") -> tuple[bool, Any]:
    """``(True, fn(*args))`` run on a worker that declared ``resource``, or
    ``(False, reason)`` without submitting anything when no worker has it."""
    s = _session(address)
    if not workers_with_resource(s.client, resource):
        return False, f"not run: no worker with {resource}"
    return True, _submit(s, fn, *args, prefix=prefix, resources={resource: 1})


def remote_validate(address: str, vmfb: bytes, module_key: str, target_name: str, device_dict: dict | None,
                    shapes=None) -> dict:
    """``validate_kernel(...).to_json()`` on a worker with the target's
    resource, that worker's own device; a "not run" record when no worker has it.
    ``shapes``: a dynamic kernel's validation shapes."""
    target = catalogue_target(target_name)
    res = target_resource(target_name)
    ok, out = run_on_resource(address, res, validate_on_worker,
                              vmfb, module_key, target, device_dict, shapes, prefix=f"boo-validate-{target_name}")
    return out if ok else not_run.validation(module_key, target_name, _no_worker(target_name, res)).to_json()


def remote_bench(address: str, signature: str, target_name: str, device_dict: dict | None,
                 candidates: list, shapes=(), previous: dict | None = None, compiled: int = 0,
                 untimed: str = "") -> dict:
    """``benchmark.bench_candidates(...).to_json()`` (a kernel's candidates, (name, vmfb),
    and torch eager in paired rounds) on a worker with the target's resource; every
    record "not run" when no worker has it. ``shapes``: a dynamic signature's
    benchmark shapes; ``previous``: the previous build's decision (``comparison.Previous``);
    ``compiled``/``untimed``: torch.compile's sizes in the rounds."""
    target = catalogue_target(target_name)
    res = target_resource(target_name)
    ok, out = run_on_resource(address, res, bench_on_worker, signature, target, device_dict, list(candidates),
                              list(shapes), previous, compiled, untimed, prefix=f"boo-bench-{target_name}")
    if ok:
        return out
    from ..signature import KernelSignature
    from ..stages.benchmark import KernelBench

    return KernelBench.not_run(KernelSignature.parse(signature), target_name, candidates,
                               _no_worker(target_name, res)).to_json()


def remote_device_map(address: str, target_names: Iterable[str]) -> dict[str, tuple[dict | None, str]]:
    """target name -> (a device dict from a worker declaring the target's
    resource, ""), or (None, why not): the distributed counterpart of
    ``tasks.device_map``, so the graph validates a target when some worker can."""
    s = _session(address)
    out: dict[str, tuple[dict | None, str]] = {}
    for name in dict.fromkeys(target_names):
        res = target_resource(name)
        workers = workers_with_resource(s.client, res)
        if not workers:
            out[name] = (None, _no_worker(name, res))
            continue
        found = s.client.run(match_on_worker, catalogue_target(name), workers=workers, on_error="return")
        reasons = []
        for w in sorted(found):
            got = found[w]
            if isinstance(got, BaseException):
                reasons.append(f"{w}: {type(got).__name__}: {got}")
            elif got[0] is not None:
                out[name] = (got[0], "")
                break
            else:
                reasons.append(f"{w}: {got[1]}")
        else:
            out[name] = (None, f"not run: workers with {res} have no such device ({'; '.join(reasons)})")
    return out
