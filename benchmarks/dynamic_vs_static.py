"""Dynamic vs static kernels, and dynamic kernels vs torch eager across row counts.

Per (op, width, dtype, mask) of the default manifest's dynamic entries:

1. the dynamic kernel (input ``["batch", "seq", W]``) against the static kernel
   of the default manifest's static shape, at that shape, for each
   implementation and for the best of each (what a bundle selects);
2. the best dynamic kernel against torch eager at 1 to a few thousand rows.

Kernels are exported and compiled here for the ``cpu`` target with the flags a
build uses (``targets.dynamic_flags`` included) and timed through the loader's
call path (``loader.invoke.KernelRunner``, zero-copy) with ``benchmark.measure``.
By default on one thread (IREE's ``local-sync``, torch with 1 thread): on a
small shared machine, multi-threaded timings of both IREE and torch jump by
scheduler quanta (8 ms steps seen with 2 threads under load); ``--device
local-task`` times as a bundle runs by default, torch with as many threads as
IREE's workers. Static and dynamic are measured in alternating rounds (median
of the round medians), so the machine's load hits both alike. Goal: the
dynamic kernel within 10% of the static one at the same shape.

    .venv/bin/python benchmarks/dynamic_vs_static.py [--quick] [--out benchmarks/results/dynamic_vs_static.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

from boo_build.loader.hal import open_device
from boo_build.loader.invoke import KernelRunner
from boo_build.ops.base import IMPLS
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.benchmark import eager_fn, local_task_threads, measure
from boo_build.stages.compile import compile_mlir
from boo_build.stages.export import export_module
from boo_build.stages.torch_modules import sample_args
from boo_build.targets import catalogue, dynamic_flags

ROOT = Path(__file__).resolve().parents[1]

# (op, width, static shape of the default manifest, dtypes, masks, eps)
CASES = (
    ("layer_norm", 768, (8, 128, 768), ("float32", "bfloat16"), (1, 14), 1e-5),
    ("rms_norm", 4096, (2, 128, 4096), ("float32", "bfloat16"), (1, 6), 1e-6),
)
ROWS = (1, 16, 128, 1024, 4096)


def signature(op, shape, width, dtype, mask, eps) -> KernelSignature:
    return KernelSignature(op, shape, (width,), dtype, mask, eps=eps, bias=op == "layer_norm")


def runner(mid: ModuleId, device, target):
    exp = export_module(mid)
    if not exp.ok:
        return None, f"export: {exp.reason}"
    res = compile_mlir(exp.mlir, target.flags + dynamic_flags(target, mid.signature.is_dynamic))
    if not res.ok:
        return None, f"compile: {res.error.splitlines()[0] if res.error else 'failed'}"
    return KernelRunner(device, res.vmfb, mid.func_name), ""


def timed(fns: dict, rounds: int, seconds: float) -> dict:
    """Median of per-round medians (us) of each callable, rounds alternating."""
    out = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            out[k].append(measure(fn, max_seconds=seconds, warmup=2).median * 1e6)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="float32 only, fewer rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.5, help="budget of one measurement")
    ap.add_argument("--device", default="local-sync", choices=("local-sync", "local-task"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "dynamic_vs_static.md")
    args = ap.parse_args()
    import torch

    target = catalogue()["cpu"]
    device = open_device(args.device)
    threads = local_task_threads() if args.device == "local-task" else 1
    torch.set_num_threads(threads)
    load0 = os.getloadavg()[0]
    t_start = time.time()
    static_rows, eager_rows, notes = [], [], []
    for op, width, static_shape, dtypes, masks, eps in CASES:
        for dtype in dtypes[:1] if args.quick else dtypes:
            for mask in masks:
                dyn = signature(op, ("batch", "seq", width), width, dtype, mask, eps)
                sta = signature(op, static_shape, width, dtype, mask, eps)
                runners = {}
                for s in (sta, dyn):
                    for impl in IMPLS:
                        r, why = runner(ModuleId(s, impl), device, target)
                        if r is None:
                            notes.append(f"{ModuleId(s, impl).key}: {why}")
                        else:
                            runners[(s.is_dynamic, impl)] = r
                at = dyn.bind(static_shape)
                a = sample_args(at)
                fns = {k: (lambda r=r: r(*a)) for k, r in runners.items()}
                med = timed(fns, 1 if args.quick else args.rounds, args.seconds)
                best = {d: min(((med[(d, i)], i) for i in IMPLS if (d, i) in med), default=(None, None))
                        for d in (False, True)}
                static_rows.append((dyn.key, "x".join(map(str, static_shape)),
                                    {i: (med.get((False, i)), med.get((True, i))) for i in IMPLS}, best))
                # dynamic (best impl at the static shape) vs eager across row counts
                impl = best[True][1]
                if impl is None:
                    continue
                for rows in ROWS:
                    s = dyn.with_rows(rows)
                    a = sample_args(s)
                    r = runners[(True, impl)]
                    m = timed({"dyn": lambda: r(*a), "eager": eager_fn(s)}, 1 if args.quick else args.rounds,
                              args.seconds)
                    eager_rows.append((dyn.key, impl, rows, m["dyn"], m["eager"]))
                print(f"done {dyn.key}", file=sys.stderr, flush=True)

    lines = ["# Dynamic vs static kernels (`benchmarks/dynamic_vs_static.py`)", ""]
    lines.append(f"Machine: {platform.platform()}; CPU {cpu_model()}; {os.cpu_count()} logical CPUs (nproc); "
                 f"IREE {args.device}, {threads} thread(s); torch threads: {threads}. Target `cpu` (x86-64-v3 baseline).")
    vers = []
    from importlib.metadata import version

    for dist in ("torch", "iree-turbine", "iree-base-compiler", "iree-base-runtime"):
        vers.append(f"{dist} {version(dist)}")
    lines.append("Versions: " + ", ".join(vers) + ".")
    lines.append(f"Load average (1 min): {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end; "
                 f"{time.time() - t_start:.0f} s in all. Medians in microseconds (median of "
                 f"{1 if args.quick else args.rounds} alternating rounds).")
    lines.append("")
    lines.append("## Dynamic kernel vs static kernel at the static shape")
    lines.append("")
    lines.append("| dynamic kernel | shape | aten static | aten dynamic | manual static | manual dynamic "
                 "| best static | best dynamic | dynamic / static |")
    lines.append("|---|---|---:|---:|---:|---:|---|---|---:|")
    f = lambda x: "-" if x is None else f"{x:.0f}"  # noqa: E731
    for key, shape, per, best in static_rows:
        (bs, bsi), (bd, bdi) = best[False], best[True]
        ratio = f"**{bd / bs:.2f}**" if bs and bd else "-"
        lines.append(f"| `{key}` | {shape} | {f(per['aten'][0])} | {f(per['aten'][1])} | {f(per['manual'][0])} | "
                     f"{f(per['manual'][1])} | {f(bs)} ({bsi}) | {f(bd)} ({bdi}) | {ratio} |")
    lines.append("")
    lines.append("## Best dynamic kernel vs torch eager across row counts")
    lines.append("")
    lines.append("| dynamic kernel | impl | rows | dynamic | eager | eager / dynamic |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for key, impl, rows, d, e in eager_rows:
        lines.append(f"| `{key}` | {impl} | {rows} | {d:.0f} | {e:.0f} | {e / d:.2f} |")
    if notes:
        lines += ["", "Not built:", ""] + [f"* {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
