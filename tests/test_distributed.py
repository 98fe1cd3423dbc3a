"""Dask distribution on real loopback clusters: worker processes, real iree-compile.

Clusters here: ``scheduler_session("local")`` (the CLI's LocalCluster: two
one-thread worker processes under nannies), and a scheduler with two plain
``dask worker`` processes, one declaring ``cpu=1`` and one declaring nothing,
started as subprocesses so that a test can kill them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dask  # noqa: E402
import pytest
from distributed import Client, get_task_stream  # noqa: E402
from helpers import BIN, REPO, TINY_MANIFEST, compiles  # noqa: E402
from helpers import env as cli_env  # noqa: E402

from boo_build.build import distributed as bd  # noqa: E402
from boo_build.build.jobs import ValidateJob  # noqa: E402
from boo_build.build.worker import toolchain_versions  # noqa: E402
from boo_build.errors import SchedulerLost, WorkerMismatch  # noqa: E402
from boo_build.records import ValidationResult  # noqa: E402
from boo_build.signature import KernelSignature, ModuleId  # noqa: E402
from boo_build.stages.compile import compile_mlir  # noqa: E402
from boo_build.targets import catalogue  # noqa: E402

# the cluster's workers compile in their own processes, where conftest.py does not see them
pytestmark = pytest.mark.build

MID = ModuleId(KernelSignature(op="layer_norm", input_shape=(4, 6, 10), normalized_shape=(10,), dtype="float32",
                               mask=1), "manual")
CPU = catalogue()["cpu"]


def env() -> dict:
    e = cli_env()
    e.pop("DASK_SCHEDULER_ADDRESS", None)
    # Dask pickles a task's function by reference: the stand-in task functions
    # below must be importable (as test_distributed) by the scheduler and workers.
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), e.get("PYTHONPATH")]))
    return e


@pytest.fixture(scope="module")
def mlir() -> str:
    from boo_build.stages.export import export_mlir

    return export_mlir(MID)


@pytest.fixture(scope="module")
@compiles
def local_vmfb(mlir) -> bytes:
    res = compile_mlir(mlir, CPU.flags)
    assert res.ok, res.error
    return res.vmfb


# ------------------------------------------------------------ subprocess cluster
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    """Processes this test started; stopped by their own ids."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", *args], env=env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=REPO)
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.procs):  # workers before their scheduler
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_cluster(procs: Procs, workers: list[str | None]) -> tuple[str, subprocess.Popen]:
    """A loopback scheduler and one nanny-less worker per entry of ``workers``
    (its --resources, or None); returns once every worker has joined."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    sched = procs.start("distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
                        "--no-dashboard")
    for res in workers:
        procs.start("distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                    "--host", "127.0.0.1", *(["--resources", res] if res else []))
    with Client(address, timeout=30) as c:
        c.wait_for_workers(len(workers), timeout=60)
    return address, sched


@pytest.fixture(scope="module")
def mixed():
    """(address, cpu worker, plain worker) inside an open session."""
    procs = Procs()
    try:
        address, _ = start_cluster(procs, ["cpu=1", None])
        with bd.scheduler_session(address) as addr:
            client = bd._session(addr).client
            info = bd.scheduler_workers(client)
            cpu_w = [w for w, i in info.items() if (i.get("resources") or {}).get("cpu")]
            plain = [w for w in info if w not in cpu_w]
            assert len(cpu_w) == 1 and len(plain) == 1
            yield addr, cpu_w[0], plain[0]
    finally:
        procs.stop()


def _where_am_i(tag: str) -> tuple[str, str]:
    from distributed import get_worker

    return tag, get_worker().address


# ------------------------------------------------------------------- compile
def test_compile_through_cluster_is_byte_identical(mixed, mlir, local_vmfb):
    addr, cpu_w, plain = mixed
    client = bd._session(addr).client
    # from several driver threads at once, as doit's thread pool calls it
    with get_task_stream(client) as ts, ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: bd.remote_compile(addr, mlir, CPU.flags, 120), range(4)))
    assert all(r.ok for r in results), [r.error for r in results]
    assert all(r.vmfb == local_vmfb for r in results)
    # the record's command line is the one a local build writes
    assert {r.command for r in results} == {compile_mlir(mlir, CPU.flags).command}
    ran_on = {t["worker"] for t in ts.data if str(t["key"]).startswith("boo-compile-")}
    assert ran_on == {cpu_w, plain}, "compiles run on any worker, resource or not"


def test_failed_compile_comes_back_as_a_result(mixed):
    addr, _, _ = mixed
    res = bd.remote_compile(addr, "this is not MLIR", CPU.flags, 60)
    assert not res.ok and res.error


# ------------------------------------------------------------ resources
def test_resource_task_runs_only_on_a_worker_declaring_it(mixed):
    addr, cpu_w, plain = mixed
    client = bd._session(addr).client
    assert bd.workers_with_resource(client, "cpu") == [cpu_w]
    assert bd.workers_with_resource(client, "gfx942") == []
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: bd.run_on_resource(addr, "cpu", _where_am_i, f"t{i}"), range(6)))
    assert got == [(True, (f"t{i}", cpu_w)) for i in range(6)]


def test_resource_lookup_is_race_free_under_the_clients_periodic_update(mixed):
    """The client's own periodic scheduler-info refresh (here every 1 ms)
    stores an identity without workers; concurrent lookups must still see
    the cpu worker every time (they used to read that shared cache)."""
    addr, cpu_w, _ = mixed
    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}), \
            Client(addr, timeout=30, set_as_default=False) as client:
        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(lambda _: bd.workers_with_resource(client, "cpu"), range(600)))
    assert got.count([cpu_w]) == len(got), f"{len(got) - got.count([cpu_w])} of {len(got)} lookups missed it"


def test_target_without_a_worker_is_not_run_and_nothing_is_submitted(mixed, local_vmfb):
    addr, _, _ = mixed
    client = bd._session(addr).client
    with get_task_stream(client) as ts:
        ok, why = bd.run_on_resource(addr, "gfx942", _where_am_i, "x")
        rec = bd.remote_validate(addr, local_vmfb, MID.key, "gfx942", None)
        kb = bd.remote_bench(addr, MID.signature.key, "gfx942", None, [(MID.impl, local_vmfb)])
    assert (ok, why) == (False, "not run: no worker with gfx942")
    # the records read as a local build's without the device (the bundle index keeps the reason)
    assert rec == ValidationResult.not_run(MID.key, "gfx942", "not run: no device (gfx942)").to_json()
    for bench in (kb["results"][MID.impl], kb["eager"]):
        assert bench["status"] == "not run" and bench["reason"] == "not run: no device (gfx942)"
        assert bench["signature"] == MID.signature.key
    assert kb["rounds"]["sizes"] == []
    assert ts.data == []
    devmap = bd.remote_device_map(addr, ["cpu", "gfx942"])
    assert devmap["gfx942"] == (None, "not run: no device (gfx942)")
    assert devmap["cpu"][0]["driver"] == "local-task"


def test_real_validation_and_benchmarks_run_on_the_cpu_worker(mixed, local_vmfb):
    from boo_build.loader.devices import discover, match_target
    from boo_build.stages.validate import validate_kernel

    addr, cpu_w, _ = mixed
    client = bd._session(addr).client
    with get_task_stream(client) as ts:
        rec = bd.remote_validate(addr, local_vmfb, MID.key, "cpu", None)
        kb = bd.remote_bench(addr, MID.signature.key, "cpu", None, [(MID.impl, local_vmfb)])
    kernel, eager, rounds = kb["results"][MID.impl], kb["eager"], kb["rounds"]
    ran = {t["worker"] for t in ts.data if str(t["key"]).startswith(("boo-validate-", "boo-bench-"))}
    # the kernel and torch eager in one task: paired rounds on the worker
    assert ran == {cpu_w} and len([t for t in ts.data if str(t["key"]).startswith("boo-bench-")]) == 1
    (size,) = rounds["sizes"]
    assert set(size["times"]) == {MID.impl, "eager", "reference"} and sum(size["passes"]) >= 12
    here = validate_kernel(local_vmfb, MID, CPU, match_target(CPU, discover())[0]).to_json()
    assert rec["status"] == here["status"] == "passed", rec
    assert kernel["status"] == "ok" and kernel["subject"] == MID.key and kernel["median_s"] > 0, kernel
    assert eager["status"] == "ok" and eager["signature"] == MID.signature.key, eager


# --------------------------------------------------------------- versions
def test_compiler_mismatch_is_refused_naming_the_worker(mixed):
    addr, cpu_w, plain = mixed
    client = bd._session(addr).client
    assert set(bd.check_workers(client)) == {cpu_w, plain}  # the driver's own versions: accepted
    with pytest.raises(WorkerMismatch) as e:
        bd.check_workers(client, expected="IREE compiler version 0.0.0 (something else)")
    assert set(e.value.workers) == {cpu_w, plain}
    assert cpu_w in str(e.value) and plain in str(e.value) and "something else" in str(e.value)
    with pytest.raises(WorkerMismatch) as e:
        bd.check_workers(client, expected={**toolchain_versions(), "iree-base-compiler": "9.9.9"}, workers=[plain])
    assert e.value.workers == (plain,) and "9.9.9" in str(e.value)


def test_session_refuses_a_mismatched_cluster(mixed):
    addr, _, plain = mixed
    with pytest.raises(WorkerMismatch, match=plain):
        with bd.scheduler_session(addr, expected="something else"):
            pytest.fail("a session with a mismatched worker must not open")


def test_each_compile_checks_its_worker(mixed, mlir):
    """A worker that joins after the session's check is refused by the task itself."""
    addr, _, _ = mixed
    s = bd._session(addr)
    fut = s.client.submit(bd.compile_on_worker, mlir, CPU.flags, 60.0, {**s.versions, "iree-compile": "other"},
                          pure=False)
    with pytest.raises(WorkerMismatch, match="refusing to compile"):
        fut.result()


# ----------------------------------------------------------------- faults
def test_killed_worker_loses_no_work(mlir, local_vmfb):
    """scheduler_session("local"): a worker process SIGKILLed while compiles
    are in flight; its tasks run again elsewhere and every result arrives."""
    with bd.scheduler_session("local", resources={"cpu": 1}) as addr:
        client = bd._session(addr).client
        info = bd.scheduler_workers(client)
        assert len(info) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in info)
        assert all(i["nthreads"] == 1 and i["resources"] == {"cpu": 1} for i in info.values())
        pids = client.run(os.getpid)
        assert len(set(pids.values()) | {os.getpid()}) == 3, "workers are processes of their own"
        with ThreadPoolExecutor(4) as pool:
            futs = [pool.submit(bd.remote_compile, addr, mlir, CPU.flags, 120) for _ in range(4)]
            victim = None
            deadline = time.monotonic() + 60
            while victim is None and time.monotonic() < deadline:
                busy = [w for w, keys in client.processing().items()
                        if any(str(k).startswith("boo-compile-") for k in keys)]
                if busy:
                    victim = busy[0]
                time.sleep(0.05)
            assert victim, "no compile reached a worker"
            os.kill(pids[victim], signal.SIGKILL)
            results = [f.result(timeout=180) for f in futs]
        assert all(r.ok and r.vmfb == local_vmfb for r in results)
        rerun = client.run_on_scheduler(_compile_keys_processed_twice)
        assert rerun, "a task of the killed worker was run again"
        assert victim not in bd.scheduler_workers(client)


def _compile_keys_processed_twice(dask_scheduler) -> list[str]:
    counts: dict = {}
    for entry in dask_scheduler.transition_log:
        key, _start, finish = entry[:3]
        if str(key).startswith("boo-compile-") and finish == "processing":
            counts[key] = counts.get(key, 0) + 1
    return [k for k, n in counts.items() if n > 1]


def test_lost_scheduler_fails_with_a_clear_message(mlir):
    procs = Procs()
    try:
        address, sched = start_cluster(procs, [None])
        with bd.scheduler_session(address) as addr:
            assert bd.remote_compile(addr, mlir, CPU.flags, 60).ok
            with ThreadPoolExecutor(2) as pool:
                futs = [pool.submit(bd.remote_compile, addr, mlir, CPU.flags, 60) for _ in range(2)]
                time.sleep(0.3)
                sched.kill()
                errors = [f.exception(timeout=30) for f in futs]
            t0 = time.monotonic()
            with pytest.raises(SchedulerLost) as later:
                bd.remote_compile(addr, mlir, CPU.flags, 60)
            assert time.monotonic() - t0 < 5, "later tasks fail at once, not after a reconnect timeout"
        for e in [*errors, later.value]:
            assert isinstance(e, SchedulerLost), e
            msg = str(e)
            assert msg.startswith(f"lost the Dask scheduler at {addr}: ")
            assert msg.endswith("; finished work is kept, rerun to continue")
    finally:
        procs.stop()


# ------------------------------------------------------------------ graph
def test_graph_validates_on_the_cluster(mixed, tmp_path, local_vmfb):
    """With a scheduler the graph validates the targets some worker declared,
    reports the others as not run, and validate_action runs on that worker."""
    from boo_build.build import tasks
    from boo_build.build.actions import validate_action
    from boo_build.build.creators import task_creators

    addr, cpu_w, _ = mixed
    (tmp_path / "tiny.toml").write_text(TINY_MANIFEST.replace('targets = ["cpu"]', 'targets = ["cpu", "gfx942"]'))
    config = tasks.BuildConfig(manifests=(tmp_path / "tiny.toml",), out_dir=tmp_path / "out", bench=False,
                               scheduler=addr)
    gens = task_creators(config)
    validations = [t["name"] for t in gens["task_validate"]()]
    assert validations and all(n.startswith("tiny/cpu/") for n in validations)
    report = next(iter(gens["task_report"]()))
    devices = report["actions"][0][1][2]
    assert devices["gfx942"] == (None, "not run: no device (gfx942)")
    assert devices["cpu"][0]["driver"] == "local-task"

    mid_key = MID.key
    vmfb = tmp_path / "k.vmfb"
    vmfb.write_bytes(local_vmfb)
    rec_path = tmp_path / "k.compile.json"
    rec_path.write_text('{"status": "ok"}')
    out = tmp_path / "k.validate.json"
    with get_task_stream(bd._session(addr).client) as ts:
        job = ValidateJob(mid_key, "cpu", str(vmfb), str(rec_path), str(out), devices["cpu"][0], "r1", addr)
        assert validate_action(job) == {"status": "passed"}
    assert {t["worker"] for t in ts.data if str(t["key"]).startswith("boo-validate-")} == {cpu_w}


# ------------------------------------------------------------- end to end


def test_cli_bundle_through_local_cluster_is_byte_identical(tmp_path):
    # gfx942: a target no device runs here, so its "not run" reason (in the
    # index) must read the same whether the driver or the cluster looked
    (tmp_path / "tiny.toml").write_text(TINY_MANIFEST.replace('targets = ["cpu"]', 'targets = ["cpu", "gfx942"]'))

    def build(out: str, *extra: str) -> subprocess.CompletedProcess:
        # validated (the cpu kernel through the cluster's cpu worker), not benchmarked (timings differ)
        proc = subprocess.run([str(BIN / "boo-build"), "build", "tiny.toml", "--out", out, "--no-bench", "-q",
                               *extra], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    build("local", "-j", "2")
    build("dask", "-j", "2", "--scheduler", "local")
    a, b = tmp_path / "local" / "tiny-0.1.0.tar.zst", tmp_path / "dask" / "tiny-0.1.0.tar.zst"
    vm_a = sorted((tmp_path / "local" / "tiny" / "vmfb").rglob("*.vmfb"))
    vm_b = sorted((tmp_path / "dask" / "tiny" / "vmfb").rglob("*.vmfb"))
    assert [p.name for p in vm_a] == [p.name for p in vm_b] and vm_a
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(vm_a, vm_b))
    assert a.read_bytes() == b.read_bytes()


def test_without_scheduler_nothing_imports_dask(tmp_path):
    """The graph and the CLI import boo_build.build.distributed (and Dask) only for --scheduler."""
    (tmp_path / "tiny.toml").write_text(TINY_MANIFEST)
    code = ("import sys\n"
            "from boo_build.cli import main\n"
            "rc = main(['list', 'tiny.toml', '--out', 'out'])\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')"
            " or m == 'boo_build.build.distributed')\n"
            "print('IMPORTED', bad)\n"
            "sys.exit(rc or bool(bad))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "IMPORTED []" in proc.stdout, proc.stdout + proc.stderr
