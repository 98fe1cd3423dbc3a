"""A cold build locally vs. through a Dask LocalCluster, and Dask's per-task cost.

Measures, each cold build in a fresh output folder:
  1. `boo-build build MANIFEST --no-validate -j J`, J = 2 and 4        (local threads)
  2. `boo-build build MANIFEST --no-validate -j J --scheduler local`    (2 worker processes,
     1 thread each; the driver keeps exporting while the workers compile), J = 2 and 4
  3. the session alone: start a LocalCluster, check the workers' compilers, close it
  4. the round trip of a trivial task (submit + result), one at a time and from 4 threads
  5. one small compile through the cluster vs. compile_mlir in this process: the
     difference is the per-compile overhead (MLIR out, vmfb back, scheduling)

Both builds must produce the same vmfb files (checked). Writes
benchmarks/results/dask_build.md. Usage:

    .venv/bin/python benchmarks/dask_build.py [--manifest PATH] [--targets cpu,gfx942]
                                              [--local-jobs 2,4] [--dask-jobs 2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BUILD_ARGS: list[str] = []  # --targets, when given


def env() -> dict:
    e = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    e.pop("DASK_SCHEDULER_ADDRESS", None)
    return e


def build(manifest: Path, out: Path, jobs: int, *extra: str) -> float:
    extra = (*BUILD_ARGS, *extra)
    t0 = time.perf_counter()
    # --allow-missing: a kernel that fails to compile is timed like the rest and
    # must not stop the comparison (the same kernels fail in every build).
    proc = subprocess.run([str(BIN / "boo-build"), "build", str(manifest), "--out", str(out), "--no-validate",
                           "--allow-missing", "-j", str(jobs), "-q", *extra], env=env(), capture_output=True,
                          text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"build {' '.join(extra) or 'local'} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return dt


def vmfbs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.vmfb"))}


KILLED = ("exit status -15", "exit status -9")  # iree-compile ended by a signal from outside the build


def records(out: Path) -> dict[str, dict]:
    """compile records by the vmfb path they describe (relative to ``out``)."""
    return {str(p.relative_to(out)).replace(".compile.json", ".vmfb"): json.loads(p.read_text())
            for p in sorted(out.rglob("*.compile.json"))}


def compare(base: Path, other: Path) -> tuple[list[str], list[str]]:
    """(vmfb files that differ, compiles not comparable because a signal from
    outside the build killed iree-compile in either build)."""
    import hashlib

    ra, rb = records(base), records(other)
    differ, killed = [], []
    for rel in sorted(set(ra) | set(rb)):
        errs = (ra.get(rel, {}).get("error", ""), rb.get(rel, {}).get("error", ""))
        if any(e in KILLED for e in errs):
            killed.append(f"`{rel}`")
            continue
        fa, fb = base / rel, other / rel
        da = fa.read_bytes() if fa.exists() else None
        db = fb.read_bytes() if fb.exists() else None
        if da != db:
            def desc(data, rec):
                body = f"{len(data)} B sha256 {hashlib.sha256(data).hexdigest()[:12]}" if data is not None else "absent"
                return f"{body} ({rec.get('status', 'no record')})"

            differ.append(f"`{rel}`: {desc(da, ra.get(rel, {}))} vs. {desc(db, rb.get(rel, {}))}")
    return differ, killed


def count_compiles(out: Path) -> tuple[int, int]:
    """(compile records, of which failed)."""
    recs = [json.loads(p.read_text()) for p in out.rglob("*.compile.json")]
    return len(recs), sum(r.get("status") == "failed" for r in recs)


def mem_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    return "unknown"


def _noop(x):
    return x


def overheads(reps: int) -> dict[str, float]:
    """Session start/stop, trivial-task round trip, per-compile overhead (seconds)."""
    from boo_build.build import distributed as bd
    from boo_build.signature import KernelSignature, ModuleId
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir
    from boo_build.targets import catalogue

    mid = ModuleId(KernelSignature(op="layer_norm", input_shape=(4, 6, 10), normalized_shape=(10,),
                                   dtype="float32", mask=1), "manual")
    mlir = export_mlir(mid)
    flags = catalogue()["cpu"].flags
    compile_mlir(mlir, flags)  # warm the page cache
    local = [compile_mlir(mlir, flags) for _ in range(reps)]
    local_s = statistics.median(r.seconds for r in local)
    local_wall = []
    for _ in range(reps):
        t0 = time.perf_counter()
        compile_mlir(mlir, flags)
        local_wall.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with bd.scheduler_session(bd.LOCAL) as addr:
        started = time.perf_counter() - t0
        client = bd._session(addr).client
        client.submit(_noop, 0, pure=False).result()  # first task: imports on the worker
        trips = []
        for i in range(max(50, reps)):
            t1 = time.perf_counter()
            client.submit(_noop, i, pure=False).result()
            trips.append(time.perf_counter() - t1)
        n = 200
        t1 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: client.submit(_noop, i, pure=False).result(), range(n)))
        threaded = (time.perf_counter() - t1) / n
        bd.remote_compile(addr, mlir, flags, 120)  # warm: the worker's --version check, imports
        remote_wall, remote_in = [], []
        for _ in range(reps):
            t1 = time.perf_counter()
            r = bd.remote_compile(addr, mlir, flags, 120)
            remote_wall.append(time.perf_counter() - t1)
            remote_in.append(r.seconds)
        t_close = time.perf_counter()
    closed = time.perf_counter() - t_close
    return {
        "session_start_s": started, "session_close_s": closed,
        "trivial_rt_s": statistics.median(trips), "trivial_rt_4threads_s": threaded,
        "local_compile_wall_s": statistics.median(local_wall), "local_compile_s": local_s,
        "remote_compile_wall_s": statistics.median(remote_wall), "remote_compile_in_worker_s": statistics.median(remote_in),
        "mlir_bytes": len(mlir.encode()), "vmfb_bytes": len(local[0].vmfb),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", type=Path, default=ROOT / "manifests" / "default.toml")
    ap.add_argument("--targets", help="build only these targets (boo-build --targets)")
    ap.add_argument("--local-jobs", default="2,4",
                    help="comma-separated -j values for the local builds; the first is the baseline")
    ap.add_argument("--dask-jobs", default="2,4", help="comma-separated -j values for the Dask builds")
    ap.add_argument("--note", action="append", default=[], help="a line for the results' Machine section")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of the small-compile comparison")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "dask_build.md")
    ns = ap.parse_args()
    if ns.targets:
        BUILD_ARGS.extend(["--targets", ns.targets])
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="boo-build-cluster-bench-"))
    manifest = work / ns.manifest.name
    shutil.copy(ns.manifest, manifest)
    try:
        t_locals = {}
        for j in (int(x) for x in ns.local_jobs.split(",")):
            t_locals[j] = build(manifest, work / f"local-j{j}", j)
        base_j = next(iter(t_locals))
        t_local, local_dir = t_locals[base_j], work / f"local-j{base_j}"
        a = vmfbs(local_dir)
        t_dask, diffs = {}, {}
        for j in (int(x) for x in ns.dask_jobs.split(",")):
            t_dask[j] = build(manifest, work / f"dask-j{j}", j, "--scheduler", "local")
            diffs[f"--scheduler local -j {j}"] = compare(local_dir, work / f"dask-j{j}")
        for j in list(t_locals)[1:]:
            diffs[f"local -j {j}"] = compare(local_dir, work / f"local-j{j}")
        identical = not any(d for d, _ in diffs.values())
        killed = sorted({k for _, ks in diffs.values() for k in ks})
        compiles, failed = count_compiles(local_dir)
        over = overheads(ns.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    # Dask's own share of a compile: the driver's wall time less iree-compile's time on the worker
    per_task = over["remote_compile_wall_s"] - over["remote_compile_in_worker_s"]
    lines = [
        "# Dask build vs. local build",
        "",
        "Written by `benchmarks/dask_build.py`; cold builds with `--no-validate` (export, compile, pack).",
        "",
        "## Machine",
        "",
        f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores; memory {mem_gib()}",
        f"- {platform.system()} {platform.release()} {platform.machine()}, Python {platform.python_version()}",
        f"- iree-base-compiler {version('iree-base-compiler')}, iree-turbine {version('iree-turbine')}, "
        f"torch {version('torch')}, dask {version('dask')}, distributed {version('distributed')}, doit {version('doit')}",
        "- the LocalCluster shares this machine with the driver: 2 worker processes x 1 thread, loopback",
        f"- load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)} (other work on the machine makes timings noisy)",
        *(f"- {n}" for n in ns.note),
        "",
        f"## Cold build of `{ns.manifest.relative_to(ROOT) if ns.manifest.is_relative_to(ROOT) else ns.manifest}`"
        + (f", `--targets {ns.targets}`" if ns.targets else "")
        + f" ({compiles} compiles, {failed} of them failing in both builds, {len(a)} vmfb files)",
        "",
        f"| build | seconds | vs. local -j {base_j} |",
        "|---|---:|---:|",
        *(f"| local, `-j {j}` | {t:.1f} | {t / t_local:.2f} |" for j, t in t_locals.items()),
        *(f"| `--scheduler local -j {j}` (2 workers) | {t:.1f} | {t / t_local:.2f} |" for j, t in t_dask.items()),
        "",
        f"vmfb files byte-identical across all these builds: **{'yes' if identical else 'NO'}**"
        + (f" (of the compiles that completed in every build; {len(killed)} iree-compile runs were killed "
           "by a signal from outside the build (exit status -15/-9: other work on this machine), which also "
           "shortens that build's time)" if killed else "") + ".",
        *(f"\n- `{name}` differs from local -j {base_j}: " + "; ".join(d[:10]) for name, (d, _) in diffs.items() if d),
        "",
        "## Per-task cost of Dask",
        "",
        "| measurement | value |",
        "|---|---:|",
        f"| LocalCluster session start (2 worker processes, compiler check) | {over['session_start_s']:.2f} s |",
        f"| LocalCluster session close | {over['session_close_s']:.2f} s |",
        f"| trivial task round trip, one at a time (median) | {over['trivial_rt_s'] * 1e3:.1f} ms |",
        f"| trivial task, 4 driver threads (wall / task) | {over['trivial_rt_4threads_s'] * 1e3:.1f} ms |",
        f"| small compile in this process (median wall) | {over['local_compile_wall_s'] * 1e3:.0f} ms |",
        f"| same compile through the cluster (median wall) | {over['remote_compile_wall_s'] * 1e3:.0f} ms |",
        f"| ... of which iree-compile on the worker | {over['remote_compile_in_worker_s'] * 1e3:.0f} ms |",
        f"| per-compile overhead (cluster wall - iree-compile on the worker) | {per_task * 1e3:.0f} ms |",
        "",
        f"The small compile is `layer_norm-f32-4x6x10-n10-wb-m1-manual` for `cpu` "
        f"({over['mlir_bytes']} bytes of MLIR out, {over['vmfb_bytes']} bytes of vmfb back).",
        "",
        "## Reading",
        "",
        f"- Per task, Dask adds ~{over['trivial_rt_s'] * 1e3:.0f} ms of round trip; per compile, "
        f"~{per_task * 1e3:.0f} ms ({100 * per_task / over['local_compile_wall_s']:.1f} % of a "
        f"{over['local_compile_wall_s']:.1f}-s compile), plus {over['session_start_s'] + over['session_close_s']:.1f} s "
        "per build to start and stop the LocalCluster. iree-compile itself takes as long in a worker as here; "
        "differences between the two compile rows are the machine's load.",
        "- A LocalCluster adds no cores: its two workers, its scheduler (inside the driver process, where "
        "it and the client share the GIL with the exports) and the driver's exports share this machine's, so "
        "the ratios above are the machinery's cost, not a speed-up; the exports, one at a time on the driver, "
        "are much of the critical path. The cluster pays off with worker machines: each adds its cores to "
        "the compiles, while exports stay on the driver.",
    ]
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
