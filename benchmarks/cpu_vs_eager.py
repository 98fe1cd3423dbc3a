"""CPU: every kernel of a bundle, as shipped, against torch eager, in one process.

For each kernel of the bundle's CPU target (the candidate the build shipped:
its module, run in its mode through the loader's ATen-style entry points with
torch tensors, as an application calls it) three paths are timed, interleaved
(batches taken round-robin, order rotated every sample, so that load from other
processes hits all alike), median of ``--samples`` each:

* loader: ``bundle.native_layer_norm(...)`` / ``native_layer_norm_backward`` /
  ``fused_rms_norm`` / ``fused_rms_norm_backward`` with the kernel's output mask;
* torch eager: the op's ``eager_call`` (``boo_build.benchmark.eager_fn``):
  ``aten.native_layer_norm``, ``native_layer_norm_backward`` with the output
  mask, ``aten._fused_rms_norm``, and for the RMS backward autograd of
  ``F.rms_norm`` (torch 2.13 has no CPU ``_fused_rms_norm_backward``: a weak
  baseline, so RMS kernels get their own geomean);
* bare: ``VmContext.invoke`` of the same vmfb on the same device, arguments
  imported once (no conversion, no checks): loader minus bare is the loader's
  per-call overhead.

torch runs as many intra-op threads as IREE's local-task driver runs workers
(``cpu_threads``); a kernel the build chose to run on ``local-sync`` runs on
the calling thread. A dynamic kernel runs at the first of its validation
shapes (``validate.validation_shapes``: each dynamic dim alone at 37 rows,
then the large case) that the loader serves with it, stated per row.

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/cpu_vs_eager.py \\
        [--bundle artifacts/boo-norms-0.1.0.tar.zst] [--samples 40] [--json out.json]

Markdown to stdout; ``--json PATH`` writes the same as a record.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model  # noqa: E402 - benchmarks/ on sys.path

DEFAULT_BUNDLE = ROOT / "artifacts" / "boo-norms-0.1.0.tar.zst"
SLOW = 0.8  # a kernel below this speed-up is counted (and must be explained in docs/cpu-performance.md)


# ------------------------------------------------------------------ the calls
def concrete(bundle, sig):
    """(static signature to call with, the kernel the loader serves it with, the
    signature that kernel runs as): a static kernel as is; a dynamic one at the
    first validation shape the loader serves with it (None when none is)."""
    if not sig.is_dynamic:
        k, ks = bundle._table.resolve(sig)
        return sig, k, ks
    from boo_build.validate import validation_shapes

    shapes = validation_shapes(sig)
    for shape in shapes[1:-1] + shapes[-1:] + shapes[:1]:
        call = sig.bind(shape)
        found = bundle._table.resolve(call)
        if found is not None and found[0].key == sig.key:
            return call, found[0], found[1]
    return None, None, None


def loader_call(bundle, sig, seed: int = 0):
    """A no-argument callable: the loader's entry point for ``sig`` (static) on
    prepared torch tensors, as an application calls it."""
    import torch

    from boo_build import ops
    from boo_build.modules import sample_args

    op = ops.get(sig.op)
    fwd = sample_args(sig.replace(mask=1), seed)
    x, w = fwd[0], (fwd[1] if sig.affine else None)
    b = fwd[2] if sig.bias else None
    ns = tuple(sig.normalized_shape)
    if sig.op not in ("layer_norm", "rms_norm"):
        raise NotImplementedError(f"no entry-point call for op {sig.op}")
    if sig.is_forward:
        if sig.op == "layer_norm":
            return lambda: bundle.native_layer_norm(x, ns, w, b, sig.eps)
        return lambda: bundle.fused_rms_norm(x, ns, w, sig.eps)
    gy = torch.randn(sig.input_shape, generator=torch.Generator().manual_seed(seed + 1)).to(x.dtype)
    mask = tuple(bool(sig.mask & bit) for bit in op.grads)
    if sig.op == "layer_norm":
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, list(ns), w, b, sig.eps)  # as eager's forward saves them
        return lambda: bundle.native_layer_norm_backward(gy, x, ns, mean, rstd, w, b, mask, eps=sig.eps)
    _, rstd = torch.ops.aten._fused_rms_norm(x, list(ns), w, sig.eps)
    return lambda: bundle.fused_rms_norm_backward(gy, x, ns, rstd, w, mask, eps=sig.eps)


def bare_call(bundle, k, ks, seed: int = 0):
    """``VmContext.invoke`` of kernel ``k``'s vmfb on the device the loader runs it
    on, arguments (in the calling convention of ``ks``) imported once."""
    import torch

    from boo_build.loader.native import runtime
    from boo_build.modules import sample_args

    rt = runtime()
    dev = bundle.load(k.key).device
    module = rt.VmModule.copy_buffer(dev.vm_instance, bundle._archive.members[k.member])
    ctx = rt.VmContext(dev.vm_instance, modules=[dev.hal_module, module])
    fn = module.lookup_function(k.function)
    args = tuple(a.contiguous() for a in sample_args(ks, seed))
    arg_list = rt.VmVariantList(len(args))
    for a in args:
        arg_list.push_ref(dev.hal_device.from_dlpack_capsule(torch.utils.dlpack.to_dlpack(a)))
    VariantList, n_out = rt.VmVariantList, len(ks.outputs())

    def bare():
        rets = VariantList(n_out)
        ctx.invoke(fn, arg_list, rets)
        return rets

    bare.keep = (args, module, ctx)  # alive as long as the callable
    return bare


# ------------------------------------------------------------------ timing
def per_call(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n * 1e-9


def interleaved(paths: dict, samples: int, min_batch_s: float, warmup: int = 5) -> dict[str, float]:
    """Median seconds per call of each path: ``samples`` batches each, taken
    round-robin (order rotated every sample); a batch is as many calls as take
    ``min_batch_s`` (at least one)."""
    counts = {}
    for name, fn in paths.items():
        for _ in range(warmup):
            fn()
        one = min(per_call(fn, 1) for _ in range(3))
        counts[name] = max(1, math.ceil(min_batch_s / one)) if one > 0 else 1
    names = list(paths)
    times: dict[str, list[float]] = {n: [] for n in names}
    for s in range(samples):
        for name in names[s % len(names):] + names[: s % len(names)]:
            times[name].append(per_call(paths[name], counts[name]))
    return {n: statistics.median(v) for n, v in times.items()}


def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


# ------------------------------------------------------------------ the run
def measure(bundle_path, samples: int = 40, min_batch_s: float = 2e-4, keys=None, log=None) -> dict:
    import torch

    from boo_build.benchmark import eager_fn
    from boo_build.loader import open_bundle
    from boo_build.loader.invoke import cpu_threads, open_device

    bundle = open_bundle(bundle_path, device="local-task")
    open_device("local-task")
    workers = cpu_threads()
    previous = torch.get_num_threads()
    torch.set_num_threads(workers or previous)
    rows = []
    try:
        host = machine(workers)  # while torch runs the threads it is measured with
        for key in keys or bundle.keys():
            k0 = bundle._kernels.get(key)
            if k0 is None:
                raise SystemExit(f"{key}: no such kernel on target {bundle.target.name}")
            call, k, ks = concrete(bundle, k0.sig)
            row = {"key": key, "op": k0.sig.op, "dtype": k0.sig.dtype, "mask": k0.sig.mask,
                   "candidate": k0.impl + (f"@{k0.mode}" if k0.mode else ""), "device": bundle.device_of(key)}
            if call is None:
                rows.append({**row, "error": "no validation shape is served by this dynamic kernel"})
                continue
            row["shape"] = list(call.input_shape)
            try:
                times = interleaved({"loader": loader_call(bundle, call), "eager": eager_fn(call),
                                     "bare": bare_call(bundle, k, ks)}, samples, min_batch_s)
            except Exception as e:  # noqa: BLE001 - one kernel's failure is reported, the rest still run
                rows.append({**row, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
                continue
            row.update({f"{n}_us": t * 1e6 for n, t in times.items()})
            row["speedup"] = times["eager"] / times["loader"]
            row["overhead_us"] = (times["loader"] - times["bare"]) * 1e6
            rows.append(row)
            if log:
                log(f"{key}: loader {row['loader_us']:.1f} us, eager {row['eager_us']:.1f} us, "
                    f"{row['speedup']:.2f}x, overhead {row['overhead_us']:.1f} us")
    finally:
        torch.set_num_threads(previous)
    return {"bundle": str(bundle.path), "target": bundle.target.name, "samples": samples,
            "min_batch_s": min_batch_s, "machine": host, "kernels": rows, "summary": summary(rows)}


def summary(rows) -> dict:
    ok = [r for r in rows if "speedup" in r]
    out = {}
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in ok if r["op"] == op]
        slow = sorted((r for r in mine if r["speedup"] < SLOW), key=lambda r: r["speedup"])
        out[op] = {"kernels": len(mine), "geomean_speedup": geomean(r["speedup"] for r in mine),
                   "below_0.8x": len(slow), "slow": [r["key"] for r in slow]}
    # per device: on local-task the bare loop's back-to-back calls find the
    # workers still awake, the loader's (some us of Python apart) may not
    out["overhead_us"] = {}
    for dev in sorted({r["device"] for r in ok}):
        mine = [r for r in ok if r["device"] == dev]
        worst = max(mine, key=lambda r: r["overhead_us"])
        out["overhead_us"][dev] = {"kernels": len(mine), "median": statistics.median(r["overhead_us"] for r in mine),
                                   "max": worst["overhead_us"], "max_kernel": worst["key"]}
    out["errors"] = [r["key"] for r in rows if "error" in r]
    return out


def machine(workers: int) -> dict:
    import torch
    from importlib.metadata import version

    return {"cpu": cpu_model(), "platform": platform.platform(), "logical_cpus": os.cpu_count(),
            "iree_local_task_workers": workers, "torch_threads": torch.get_num_threads(),
            "versions": {d: version(d) for d in ("torch", "iree-base-runtime")},
            "load_average": os.getloadavg()[0]}


def markdown(rec: dict) -> str:
    m, s = rec["machine"], rec["summary"]
    lines = [f"# CPU kernels vs torch eager: `{Path(rec['bundle']).name}` (target {rec['target']})", "",
             f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, {m['platform']}; IREE local-task workers "
             f"{m['iree_local_task_workers']}, torch threads {m['torch_threads']}; "
             + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
             + f"; load average {m['load_average']:.2f}. Median of {rec['samples']} interleaved samples per path.",
             "", "| kernel | shape | shipped | device | loader us | eager us | speed-up | bare invoke us | "
             "overhead us |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rec["kernels"]:
        shape = "x".join(map(str, r.get("shape", [])))
        if "error" in r:
            lines.append(f"| {r['key']} | {shape} | {r['candidate']} | {r['device']} | {r['error']} |||||")
            continue
        flag = " **slow**" if r["speedup"] < SLOW else ""
        lines.append(f"| {r['key']} | {shape} | {r['candidate']} | {r['device']} | {r['loader_us']:.1f} | "
                     f"{r['eager_us']:.1f} | {r['speedup']:.2f}x{flag} | {r['bare_us']:.1f} | "
                     f"{r['overhead_us']:.1f} |")
    lines.append("")
    for op, g in s.items():
        if op in ("overhead_us", "errors"):
            continue
        gm = "n/a" if g["geomean_speedup"] is None else f"{g['geomean_speedup']:.2f}x"
        lines.append(f"* {op}: geomean speed-up over eager **{gm}** over {g['kernels']} kernels; "
                     f"{g['below_0.8x']} below {SLOW}x" + (f" ({', '.join(g['slow'])})" if g["slow"] else ""))
    for dev, o in s["overhead_us"].items():
        lines.append(f"* loader per-call overhead over a bare `VmContext.invoke` (pre-imported arguments, same "
                     f"kernel), {o['kernels']} kernels on {dev}: median **{o['median']:.1f} us**, "
                     f"max {o['max']:.1f} us ({o['max_kernel']})")
    if s["errors"]:
        lines.append(f"* not measured: {', '.join(s['errors'])}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help=f"default {DEFAULT_BUNDLE}")
    ap.add_argument("--samples", type=int, default=40, help="interleaved samples per path (default 40)")
    ap.add_argument("--min-batch-s", type=float, default=2e-4,
                    help="seconds of calls per sample at least (default 2e-4; 0: one call)")
    ap.add_argument("--key", action="append", help="only these kernel keys (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the record here")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-kernel progress on stderr")
    ns = ap.parse_args(argv)
    if not ns.bundle.exists():
        ap.error(f"{ns.bundle} does not exist (make build writes the default manifest's bundle)")
    log = None if ns.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    rec = measure(ns.bundle, ns.samples, ns.min_batch_s, ns.key, log)
    sys.stdout.write(markdown(rec))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return 1 if rec["summary"]["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
