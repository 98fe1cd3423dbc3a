"""CPU: every kernel of a bundle, as shipped, against torch eager, in one process.

For each kernel of the bundle's CPU target (the candidate the build shipped:
its module, run in its mode through the loader's ATen-style entry points with
torch tensors, as an application calls it) these paths are timed, each
alternating call by call with torch eager (as an application runs a norm
between torch ops, whose OpenMP threads are then awake), a sample the mean per
call over a round of about ``--min-batch-s`` (a stall now and then counts, as
in an application's throughput), median of ``--samples`` rounds each; eager's
time is the one measured alternating with the loader:

* loader: ``bundle.native_layer_norm(...)`` / ``native_layer_norm_backward`` /
  ``fused_rms_norm`` / ``fused_rms_norm_backward`` with the kernel's output mask,
  on the bundle as opened by default: where the build found torch eager faster
  (the entry's ``prefer_eager``, per size for a dynamic kernel) this is torch's
  op behind the loader's route lookup (route "eager"), else the kernel (route "kernel");
* kernel: the same entry point on the bundle opened with ``prefer_eager=False``,
  i.e. the compiled kernel, timed where the route is "eager" (elsewhere it is
  the loader path): "kernel speed-up" says what the compiled kernels alone do;
* torch eager: the op's ``eager_call`` (``boo_build.stages.benchmark.eager_fn``):
  ``aten.native_layer_norm``, ``native_layer_norm_backward`` with the output
  mask, ``aten._fused_rms_norm``, and for the RMS backward autograd of
  ``F.rms_norm`` (torch 2.13 has no CPU ``_fused_rms_norm_backward``: a weak
  baseline, so RMS kernels get their own geomean);
* bare: ``VmContext.invoke`` of the same vmfb on the same device, arguments
  imported once (no conversion, no checks): loader minus bare is the table's
  "overhead us" column.

The per-call overhead (the summary's number, section "Loader overhead") is
measured apart, where it is visible: per kernel, the loader's entry point and
the bare ``VmContext.invoke`` of the same vmfb on the same device, at the
smallest shape the kernel serves (a dynamic kernel at its first validation
shape, every dynamic dim 1; a static kernel at its fixed shape, so a big
static kernel's number carries its run time's noise: small kernels say more),
batches of both taken alternately (``--overhead-samples`` pairs), and the
median of the per-pair differences reported, in CPU time of the calling
thread (``time.thread_time_ns``: on local-sync the kernel runs inline on it,
so only the loader's own work differs; on local-task the
workers' time is not counted) and in wall time. Summarized per device and per
entry-point kind (forward, backward), over the kernels run at no more than
``SMALL`` elements (the default bundle's dynamic ones at one row; its static
kernels are all big, their differences grow with size: memory effects, not
Python), over all where none is that small. The small kernels shipped on
local-task are measured on local-sync as well (the bundle opened there): the
loader's own cost, comparable from build to build whatever modes a build
picked. The table's "overhead us" column
(loader minus bare at the table's shape) is kept, but is noise for kernels
that run ~1 ms.

torch runs as many intra-op threads as IREE's local-task driver runs workers
(``cpu_threads``); a kernel the build chose to run on ``local-sync`` runs on
the calling thread. A dynamic kernel runs at the first of its validation
shapes (``validate.validation_shapes``: each dynamic dim alone at 37 rows,
then the large case) that the loader serves with it, stated per row.

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/cpu_vs_eager.py \\
        [--bundle artifacts/boo-norms-0.1.0.tar.zst] [--samples 40] [--json out.json] \\
        [--key KEY ...] [--overhead-samples 400] [--overhead-only]

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

from boo_build.stages.benchmark import CPU_ROUND_S  # noqa: E402 - the repository on sys.path (imports no torch)

DEFAULT_BUNDLE = ROOT / "artifacts" / "boo-norms-0.1.0.tar.zst"
SMALL = 1 << 16  # elements: the overhead summary's problems (summary())
SLOW = 0.8  # a kernel below this speed-up is counted (and must be explained in docs/cpu-performance.md)


# ------------------------------------------------------------------ the calls
def concrete(bundle, sig):
    """(static signature to call with, the kernel the loader serves it with, the
    signature that kernel runs as): a static kernel as is; a dynamic one at the
    first validation shape the loader serves with it (None when none is)."""
    if not sig.is_dynamic:
        k, ks = bundle._table.resolve(sig)
        return sig, k, ks
    from boo_build.stages.validate import validation_shapes

    shapes = validation_shapes(sig)
    for shape in shapes[1:-1] + shapes[-1:] + shapes[:1]:
        call = sig.bind(shape)
        found = bundle._table.resolve(call)
        if found is not None and found[0].key == sig.key:
            return call, found[0], found[1]
    return None, None, None


def call_args(sig, seed: int = 0) -> dict:
    """The torch tensors of a call of ``sig`` (static): x, weight, bias, and for a
    backward grad_out, the statistics as eager's forward saves them and the mask."""
    import torch

    from boo_build import ops
    from boo_build.stages.torch_modules import sample_args

    if sig.op not in ("layer_norm", "rms_norm", "group_norm"):
        raise NotImplementedError(f"no entry-point call for op {sig.op}")
    fwd = sample_args(sig.replace(mask=1), seed)
    x, w = fwd[0], (fwd[1] if sig.affine else None)
    a = {"x": x, "w": w, "b": fwd[2] if sig.bias else None, "ns": tuple(sig.normalized_shape)}
    if sig.op == "group_norm":  # ATen's (N, C, HxW, group) in place of a normalized shape
        a["ns"] = (x.shape[0], x.shape[1], math.prod(x.shape[2:]), sig.groups)
    if not sig.is_forward:
        a["gy"] = torch.randn(sig.input_shape, generator=torch.Generator().manual_seed(seed + 1)).to(x.dtype)
        a["mask"] = tuple(bool(sig.mask & bit) for bit in ops.get(sig.op).grads)
        if sig.op == "layer_norm":
            a["stats"] = tuple(torch.ops.aten.native_layer_norm(x, list(a["ns"]), a["w"], a["b"], sig.eps)[1:])
        elif sig.op == "group_norm":
            a["stats"] = tuple(torch.ops.aten.native_group_norm(x, a["w"], a["b"], *a["ns"], sig.eps)[1:])
        else:
            a["stats"] = (torch.ops.aten._fused_rms_norm(x, list(a["ns"]), w, sig.eps)[1],)
    return a


def loader_call(bundle, sig, seed: int = 0, args: dict | None = None):
    """A no-argument callable: the loader's entry point for ``sig`` (static) on
    prepared torch tensors (``call_args``), as an application calls it."""
    a = args or call_args(sig, seed)
    x, w, b, ns = a["x"], a["w"], a["b"], a["ns"]
    if sig.is_forward:
        if sig.op == "layer_norm":
            return lambda: bundle.native_layer_norm(x, ns, w, b, sig.eps)
        if sig.op == "group_norm":
            return lambda: bundle.native_group_norm(x, w, b, *ns, sig.eps)
        return lambda: bundle.fused_rms_norm(x, ns, w, sig.eps)
    gy, mask, stats = a["gy"], a["mask"], a["stats"]
    if sig.op == "group_norm":
        mean, rstd = stats
        return lambda: bundle.native_group_norm_backward(gy, x, mean, rstd, w, *ns, mask, eps=sig.eps)
    if sig.op == "layer_norm":
        mean, rstd = stats
        return lambda: bundle.native_layer_norm_backward(gy, x, ns, mean, rstd, w, b, mask, eps=sig.eps)
    (rstd,) = stats
    return lambda: bundle.fused_rms_norm_backward(gy, x, ns, rstd, w, mask, eps=sig.eps)


def direct_call(sig, args: dict):
    """torch's op called directly on the same tensors, the baseline of a routed call:
    ATen's ``.default`` overloads (``native_layer_norm``, ``native_layer_norm_backward``
    with the mask, ``native_group_norm`` and its backward, ``_fused_rms_norm``); for the RMS backward, which has no ATen CPU
    kernel, the torch function the loader's route itself calls (``Op.eager_route``)."""
    import torch

    from boo_build import ops

    aten, a = torch.ops.aten, args
    x, w, b, ns = a["x"], a["w"], a["b"], list(a["ns"])
    if sig.op == "group_norm":  # ns: (N, C, HxW, group)
        if sig.is_forward:
            return lambda: aten.native_group_norm.default(x, w, b, *ns, sig.eps)
        gy, (mean, rstd), mask = a["gy"], a["stats"], list(a["mask"])
        return lambda: aten.native_group_norm_backward.default(gy, x, mean, rstd, w, *ns, mask)
    if sig.op == "layer_norm":
        if sig.is_forward:
            return lambda: aten.native_layer_norm.default(x, ns, w, b, sig.eps)
        gy, (mean, rstd), mask = a["gy"], a["stats"], list(a["mask"])
        return lambda: aten.native_layer_norm_backward.default(gy, x, ns, mean, rstd, w, b, mask)
    if sig.is_forward:
        return lambda: aten._fused_rms_norm.default(x, ns, w, sig.eps)
    gy, stats = a["gy"], a["stats"]
    run = ops.get(sig.op).eager_route(sig, stats)
    return lambda: run(gy, x, stats, w, None)


def bare_call(bundle, k, ks, seed: int = 0):
    """``VmContext.invoke`` of kernel ``k``'s vmfb on the device the loader runs it
    on, arguments (in the calling convention of ``ks``) imported once."""
    import torch

    from boo_build.loader.native import runtime
    from boo_build.stages.torch_modules import sample_args

    rt = runtime()
    dev = bundle.load(k.key).device
    module = rt.VmModule.copy_buffer(dev.vm_instance, bundle._source.module(k.member, k.frame, k.size))
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


def smallest(bundle, sig):
    """Like ``concrete``, at the smallest shape the loader serves with the kernel:
    a dynamic kernel's validation shapes in order (the first: every dynamic dim 1)."""
    if not sig.is_dynamic:
        return concrete(bundle, sig)
    from boo_build.stages.validate import validation_shapes

    for shape in validation_shapes(sig):
        call = sig.bind(shape)
        found = bundle._table.resolve(call)
        if found is not None and found[0].key == sig.key:
            return call, found[0], found[1]
    return None, None, None


# ------------------------------------------------------------------ timing
def per_call(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n * 1e-9


def alternating(path, eager, samples: int, min_batch_s: float, warmup: int = 5) -> tuple[float, float]:
    """(seconds per call of ``path``, of ``eager``): the two called in turn, call
    by call, each call timed on its own, as an application runs a norm between
    torch ops. A sample is the mean per call over a round of calls of ``path``
    taking ``min_batch_s`` (at least one), so that a stall of a few
    milliseconds now and then (a local-task hand-off) counts, as it does in an
    application's throughput; the median of ``samples`` rounds each."""
    for _ in range(warmup):
        eager()
        path()
    one = min(per_call(path, 1) for _ in range(3))
    n = max(1, math.ceil(min_batch_s / one)) if one > 0 else 1
    clock = time.perf_counter_ns
    ps, es = [], []
    for _ in range(samples):
        tp = te = 0
        for _ in range(n):
            t0 = clock()
            eager()
            t1 = clock()
            path()
            t2 = clock()
            te += t1 - t0
            tp += t2 - t1
        ps.append(tp / n * 1e-9)
        es.append(te / n * 1e-9)
    return statistics.median(ps), statistics.median(es)


def paired(loader, bare, pairs: int, min_batch_s: float, warmup: int = 20) -> dict[str, float]:
    """The loader's per-call overhead over ``bare``: ``pairs`` batches of each,
    taken alternately (which goes first alternates too), the median of the
    per-pair differences per call, in the calling thread's CPU time and in wall
    time (us), and the bare call's median (us)."""
    for _ in range(warmup):
        loader()
        bare()
    one = min(per_call(bare, 1) for _ in range(5))
    n = max(1, math.ceil(min_batch_s / one)) if one > 0 else 1
    cpu, wall, base = [], [], []
    clock, thread = time.perf_counter_ns, time.thread_time_ns
    for i in range(pairs):
        got = {}
        for name, fn in ((("loader", loader), ("bare", bare)) if i % 2 else (("bare", bare), ("loader", loader))):
            c0, w0 = thread(), clock()
            for _ in range(n):
                fn()
            got[name] = (thread() - c0, clock() - w0)
        cpu.append((got["loader"][0] - got["bare"][0]) / n * 1e-3)
        wall.append((got["loader"][1] - got["bare"][1]) / n * 1e-3)
        base.append(got["bare"][1] / n * 1e-3)
    return {"cpu_us": statistics.median(cpu), "wall_us": statistics.median(wall), "bare_us": statistics.median(base),
            "batch": n}


def overhead(bundle, key: str, pairs: int, min_batch_s: float) -> dict:
    """``paired`` for kernel ``key`` at its smallest shape (``smallest``), on the device it runs on."""
    k0 = bundle._kernels[key]
    call, k, ks = smallest(bundle, k0.sig)
    row = {"key": key, "kind": "forward" if k0.sig.is_forward else "backward", "device": bundle.device_of(key),
           "dynamic": k0.sig.is_dynamic}
    if call is None:
        return {**row, "error": "no validation shape is served by this dynamic kernel"}
    row["shape"] = list(call.input_shape)
    try:
        return {**row, **paired(loader_call(bundle, call), bare_call(bundle, k, ks), pairs, min_batch_s)}
    except Exception as e:  # noqa: BLE001 - one kernel's failure is reported, the rest still run
        return {**row, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}


def routed_overhead(shipped, key: str, pairs: int, min_batch_s: float) -> dict | None:
    """A torch call the shipped bundle routes to torch eager, at the kernel's smallest
    shape: the entry point against torch's op called directly (``direct_call``) on the
    same tensors, ``paired`` with torch on one thread (the median per-pair difference
    is the loader's cost of routing: key, lookup, count). None where that call is not routed."""
    k0 = shipped._kernels[key]
    call, _, _ = smallest(shipped, k0.sig)
    if call is None or not k0.eager_for(call):
        return None
    row = {"key": key, "kind": "forward" if k0.sig.is_forward else "backward", "dtype": k0.sig.dtype,
           "shape": list(call.input_shape), "dynamic": k0.sig.is_dynamic}
    import torch

    # torch's op on one thread: the calling thread then does all of its work in both
    # paths, so the difference of its CPU time is the loader's own (with intra-op
    # threads, how the work splits moves it by more than the loader costs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        args = call_args(call)
        got = paired(loader_call(shipped, call, args=args), direct_call(call, args), pairs, min_batch_s)
    except Exception as e:  # noqa: BLE001 - one kernel's failure is reported, the rest still run
        return {**row, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    finally:
        torch.set_num_threads(threads)
    return {**row, "cpu_us": got["cpu_us"], "wall_us": got["wall_us"], "direct_us": got["bare_us"],
            "batch": got["batch"]}


def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


# ------------------------------------------------------------------ the run
def open_for_kernels(path, device: str):
    """The bundle with every kernel run (no eager route where the build preferred eager)."""
    from boo_build.loader import open_bundle

    return open_bundle(path, device=device, prefer_eager=False)


def measure(bundle_path, samples: int = 40, min_batch_s: float = CPU_ROUND_S, keys=None, log=None,
            overhead_samples: int | None = None, table: bool = True) -> dict:
    import torch

    from boo_build.loader import open_bundle
    from boo_build.loader.hal import cpu_threads, open_device
    from boo_build.stages.benchmark import eager_fn

    bundle = open_for_kernels(bundle_path, "local-task")
    shipped = open_bundle(bundle_path, device="local-task")  # as an application opens it
    open_device("local-task")
    workers = cpu_threads()
    previous = torch.get_num_threads()
    torch.set_num_threads(workers or previous)
    rows, over, routes = [], [], []
    pairs = overhead_samples or max(20, 10 * samples)
    keys = keys or bundle.keys()
    for key in keys:
        if key not in bundle._kernels:
            raise SystemExit(f"{key}: no such kernel on target {bundle.target.name}")
    try:
        host = machine(workers)  # while torch runs the threads it is measured with
        for key in keys if table else ():
            k0 = bundle._kernels[key]
            call, k, ks = concrete(bundle, k0.sig)
            # where this call goes: a dynamic kernel's decision is per size (eager_for)
            routed = call is not None and shipped._kernels[key].eager_for(call)
            row = {"key": key, "op": k0.sig.op, "dtype": k0.sig.dtype, "mask": k0.sig.mask,
                   "candidate": k0.impl + (f"@{k0.mode}" if k0.mode else ""), "device": bundle.device_of(key),
                   "route": "eager" if routed else "kernel"}
            if call is None:
                rows.append({**row, "error": "no validation shape is served by this dynamic kernel"})
                continue
            row["shape"] = list(call.input_shape)
            try:
                paths = {"loader": loader_call(shipped, call), "eager": eager_fn(call), "bare": bare_call(bundle, k, ks)}
                if routed:
                    paths["kernel"] = loader_call(bundle, call)
                # each path alternating with eager; eager's time is the loader pair's
                times = dict(zip(("loader", "eager"), alternating(paths["loader"], paths["eager"], samples,
                                                                  min_batch_s)))
                for name in ("bare", "kernel") if routed else ("bare",):
                    times[name] = alternating(paths[name], paths["eager"], samples, min_batch_s)[0]
                times.setdefault("kernel", times["loader"])
            except Exception as e:  # noqa: BLE001 - one kernel's failure is reported, the rest still run
                rows.append({**row, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
                continue
            row.update({f"{n}_us": t * 1e6 for n, t in times.items()})
            row["speedup"] = times["eager"] / times["loader"]
            row["kernel_speedup"] = times["eager"] / times["kernel"]
            row["overhead_us"] = (times["kernel"] - times["bare"]) * 1e6
            rows.append(row)
            if log:
                log(f"{key}: loader ({row['route']}) {row['loader_us']:.1f} us, eager {row['eager_us']:.1f} us, "
                    f"{row['speedup']:.2f}x; kernel {row['kernel_us']:.1f} us, {row['kernel_speedup']:.2f}x")
        for key in keys:  # the overhead, at the smallest shapes (module docstring)
            o = overhead(bundle, key, pairs, min_batch_s)
            over.append(o)
            if log and "error" not in o:
                log(f"{key} at {'x'.join(map(str, o['shape']))} on {o['device']}: overhead {o['cpu_us']:.1f} us "
                    f"CPU, {o['wall_us']:.1f} us wall (bare {o['bare_us']:.1f} us)")
        for key in keys:  # routed torch calls against torch's op called directly
            r = routed_overhead(shipped, key, pairs, min_batch_s)
            if r is not None:
                routes.append(r)
                if log and "error" not in r:
                    log(f"{key} at {'x'.join(map(str, r['shape']))}, routed: {r['cpu_us']:.2f} us CPU over torch's op "
                        f"({r['direct_us']:.1f} us)")
        # The small kernels shipped on local-task, on local-sync too: there the loader's own
        # cost is what differs from the bare call (on local-task both pay the hand-off to
        # the workers, which moves by tens of us), and the number compares across builds.
        inline = None
        for o in list(over):
            if "shape" in o and o["device"] != "local-sync" and math.prod(o["shape"]) <= SMALL:
                inline = inline or open_for_kernels(bundle_path, "local-sync")
                over.append(overhead(inline, o["key"], pairs, min_batch_s))
    finally:
        torch.set_num_threads(previous)
    return {"bundle": str(bundle.path), "target": bundle.target.name, "samples": samples,
            "overhead_samples": pairs, "min_batch_s": min_batch_s, "machine": host, "kernels": rows,
            "overhead": over, "routed": routes, "summary": summary(rows, over, routes)}


def summary(rows, over=(), routes=()) -> dict:
    ok = [r for r in rows if "speedup" in r]
    out = {}
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in ok if r["op"] == op]
        slow = sorted((r for r in mine if r["speedup"] < SLOW), key=lambda r: r["speedup"])
        out[op] = {"kernels": len(mine), "geomean_speedup": geomean(r["speedup"] for r in mine),
                   "below_0.8x": len(slow), "slow": [r["key"] for r in slow],
                   "to_eager": sum(1 for r in mine if r["route"] == "eager"),
                   "kernel_geomean_speedup": geomean(r["kernel_speedup"] for r in mine),
                   "kernels_below_0.8x": sum(1 for r in mine if r["kernel_speedup"] < SLOW)}
    # the paired measurement (CPU time of the calling thread), per device and per
    # entry-point kind, over the small problems: a big kernel's difference carries
    # memory effects that grow with its size (page faults, caches); all if none is
    done = [o for o in over if "cpu_us" in o]
    out["overhead_us"] = {}
    for dev in sorted({o["device"] for o in done}):
        mine = [o for o in done if o["device"] == dev]
        small = [o for o in mine if math.prod(o["shape"]) <= SMALL]
        basis = f"the {len(small)} of at most {SMALL} elements" if small else "all (none is small)"
        mine = small or mine
        out["overhead_us"][dev] = dict(_spread(mine), basis=basis, kinds={
            kind: _spread([o for o in mine if o["kind"] == kind]) for kind in ("forward", "backward")
            if any(o["kind"] == kind for o in mine)})
    # routed calls: float32 (the route calls ATen's op as the direct call does; a half-precision
    # route also casts the weight and statistics to float32, ``LayerNorm.eager_route``)
    done = [r for r in routes if "cpu_us" in r and r["dtype"] == "float32" and math.prod(r["shape"]) <= SMALL]
    out["routed_us"] = {kind: _spread([r for r in done if r["kind"] == kind]) for kind in ("forward", "backward")
                        if any(r["kind"] == kind for r in done)}
    out["errors"] = ([r["key"] for r in rows if "error" in r] + [o["key"] for o in over if "error" in o]
                     + [r["key"] for r in routes if "error" in r])
    return out


def _spread(over) -> dict:
    worst = max(over, key=lambda o: o["cpu_us"])
    return {"kernels": len(over), "median": statistics.median(o["cpu_us"] for o in over), "max": worst["cpu_us"],
            "max_kernel": worst["key"], "median_wall": statistics.median(o["wall_us"] for o in over)}


def machine(workers: int) -> dict:
    from importlib.metadata import version

    import torch

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
             + f"; load average {m['load_average']:.2f}. Median of {rec['samples']} rounds per path, each path alternating call by call with torch eager.",
             "", "| kernel | shape | shipped | device | route | loader us | eager us | speed-up | kernel us | "
             "kernel speed-up | bare invoke us | overhead us |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rec["kernels"]:
        shape = "x".join(map(str, r.get("shape", [])))
        if "error" in r:
            lines.append(f"| {r['key']} | {shape} | {r['candidate']} | {r['device']} | {r['route']} | {r['error']} "
                         "|||||||")
            continue
        flag = " **slow**" if r["speedup"] < SLOW else ""
        kflag = " **slow**" if r["kernel_speedup"] < SLOW else ""
        lines.append(f"| {r['key']} | {shape} | {r['candidate']} | {r['device']} | {r['route']} | "
                     f"{r['loader_us']:.1f} | {r['eager_us']:.1f} | {r['speedup']:.2f}x{flag} | {r['kernel_us']:.1f} | "
                     f"{r['kernel_speedup']:.2f}x{kflag} | {r['bare_us']:.1f} | {r['overhead_us']:.1f} |")
    lines += ["", f"## Loader overhead (smallest shapes, {rec['overhead_samples']} pairs with bare invoke)", "",
              "| kernel | shape | device | kind | bare us | overhead us (CPU) | overhead us (wall) |",
              "|---|---|---|---|---:|---:|---:|"]
    for o in rec["overhead"]:
        shape = "x".join(map(str, o.get("shape", [])))
        if "error" in o:
            lines.append(f"| {o['key']} | {shape} | {o['device']} | {o['kind']} | {o['error']} |||")
            continue
        static = "" if o["dynamic"] else " (static)"
        lines.append(f"| {o['key']} | {shape}{static} | {o['device']} | {o['kind']} | {o['bare_us']:.1f} | "
                     f"{o['cpu_us']:.1f} | {o['wall_us']:.1f} |")
    lines += ["", f"## Routed calls (torch tensors the bundle sends to torch eager; smallest shapes, {rec['overhead_samples']} "
              "pairs with torch's op called directly)", "",
              "| kernel | shape | kind | torch's op us | routed overhead us (CPU) | (wall) |", "|---|---|---|---:|---:|---:|"]
    for r in rec.get("routed", []):
        shape = "x".join(map(str, r["shape"]))
        if "error" in r:
            lines.append(f"| {r['key']} | {shape} | {r['kind']} | {r['error']} |||")
            continue
        lines.append(f"| {r['key']} | {shape} | {r['kind']} | {r['direct_us']:.1f} | {r['cpu_us']:.2f} | "
                     f"{r['wall_us']:.2f} |")
    lines.append("")
    for op, g in s.items():
        if op in ("overhead_us", "routed_us", "errors"):
            continue
        gm = "n/a" if g["geomean_speedup"] is None else f"{g['geomean_speedup']:.2f}x"
        km = "n/a" if g["kernel_geomean_speedup"] is None else f"{g['kernel_geomean_speedup']:.2f}x"
        lines.append(f"* {op}: geomean speed-up over eager **{gm}** over {g['kernels']} kernels as shipped "
                     f"({g['to_eager']} routed to torch eager); {g['below_0.8x']} below {SLOW}x"
                     + (f" ({', '.join(g['slow'])})" if g["slow"] else "")
                     + f"; the compiled kernels alone: {km}, {g['kernels_below_0.8x']} below {SLOW}x")
    for dev, o in s["overhead_us"].items():
        kinds = "; ".join(f"{kind} {k['median']:.1f} us (max {k['max']:.1f}, {k['kernels']} kernels)"
                          for kind, k in o["kinds"].items())
        lines.append(f"* loader per-call overhead over a bare `VmContext.invoke` (pre-imported arguments, same "
                     f"kernel, smallest shape, CPU time of the calling thread) on {dev}, over {o['basis']} kernels: "
                     f"median **{o['median']:.1f} us**, max {o['max']:.1f} us ({o['max_kernel']}); wall median "
                     f"{o['median_wall']:.1f} us; {kinds}")
    for kind, o in s.get("routed_us", {}).items():
        lines.append(f"* a routed float32 {kind} call (at most {SMALL} elements, {o['kernels']} kernels) costs "
                     f"**{o['median']:.2f} us** (median; max {o['max']:.2f} us, {o['max_kernel']}) of the calling "
                     f"thread's CPU time more than torch's op called directly; wall median {o['median_wall']:.2f} us")
    if s["errors"]:
        lines.append(f"* not measured: {', '.join(s['errors'])}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help=f"default {DEFAULT_BUNDLE}")
    ap.add_argument("--samples", type=int, default=40, help="rounds per path (default 40)")
    ap.add_argument("--min-batch-s", type=float, default=CPU_ROUND_S,
                    help=f"seconds of calls per sample at least (default {CPU_ROUND_S:g}, the build's CPU rounds; "
                         "0: one call)")
    ap.add_argument("--key", action="append", help="only these kernel keys (repeatable)")
    ap.add_argument("--overhead-samples", type=int, help="pairs of batches in the overhead measurement "
                    "(default 10 x --samples, at least 20)")
    ap.add_argument("--overhead-only", action="store_true", help="only the overhead section (no eager table)")
    ap.add_argument("--json", type=Path, help="also write the record here")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-kernel progress on stderr")
    ns = ap.parse_args(argv)
    if not ns.bundle.exists():
        ap.error(f"{ns.bundle} does not exist (make build writes the default manifest's bundle)")
    log = None if ns.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    rec = measure(ns.bundle, ns.samples, ns.min_batch_s, ns.key, log, ns.overhead_samples, not ns.overhead_only)
    sys.stdout.write(markdown(rec))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return 1 if rec["summary"]["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
