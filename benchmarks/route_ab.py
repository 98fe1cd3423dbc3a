"""A/B of the ops' torch routes (``Op.eager_route``) between this checkout and another.

The loader sends a torch call whose key the build found torch eager faster to
the op's route: a function built once per call key that hands the call's
tensors to ATen. This script times that function as this checkout builds it
(A) and as another checkout of boo-build builds it (B, ``--baseline``: a
folder holding its ``boo_build`` package, e.g. ``git worktree add /tmp/base
HEAD~1``), in one process, on the same tensors, calls of A and B alternating
batch by batch, the median of the per-pair differences in the calling
thread's CPU time (torch on one thread: the thread does all of the work). The
loader around the route is the same in both; only the route differs. What
each route costs over ATen's op called directly is given too (the routed-call
overhead of ``cpu_vs_eager.py``, which needs a built bundle).

    .venv/bin/python benchmarks/route_ab.py --baseline /tmp/base [--pairs 400]

Markdown to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
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


def load_tree(folder: Path, name: str):
    """``folder/boo_build`` imported as the package ``name`` (its imports are relative)."""
    init = folder / "boo_build" / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    assert spec is not None and spec.loader is not None
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[name] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module(f"{name}.ops")


# (op, input shape, normalized shape, groups, mask): the smallest shapes, where the route's own cost shows
CASES = [
    ("layer_norm", (1, 1, 768), (768,), None, 1),
    ("layer_norm", (1, 1, 768), (768,), None, 14),
    ("rms_norm", (1, 1, 4096), (4096,), None, 1),
    ("rms_norm", (1, 1, 4096), (4096,), None, 6),
    ("group_norm", (1, 32, 8, 8), (), 8, 1),
    ("group_norm", (1, 32, 8, 8), (), 8, 14),
]


def tensors(torch, op: str, shape, ns, groups, mask: int, eps: float):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    c = shape[1] if op == "group_norm" else None
    pshape = (c,) if c else ns
    w = 1 + 0.1 * torch.randn(pshape, generator=g)
    b = 0.1 * torch.randn(pshape, generator=g) if op != "rms_norm" else None
    aten = torch.ops.aten
    if op == "layer_norm":
        _, *stats = aten.native_layer_norm(x, list(ns), w, b, eps)
    elif op == "rms_norm":
        stats = [aten._fused_rms_norm(x, list(ns), w, eps)[1]]
    else:
        _, *stats = aten.native_group_norm(x, w, b, shape[0], c, math.prod(shape[2:]), groups, eps)
    gy = torch.randn(shape, generator=g)
    return x, w, b, tuple(stats), gy


def direct(torch, op, shape, ns, groups, mask, eps, args):
    """ATen's op called directly: the floor under any route."""
    aten = torch.ops.aten
    x, w, b, stats, gy = args
    want = [bool(mask & bit) for bit in (2, 4, 8)]
    if op == "layer_norm":
        if mask == 1:
            return lambda: aten.native_layer_norm.default(x, list(ns), w, b, eps)
        return lambda: aten.native_layer_norm_backward.default(gy, x, list(ns), *stats, w, b, want)
    if op == "group_norm":
        sizes = (shape[0], shape[1], math.prod(shape[2:]), groups)
        if mask == 1:
            return lambda: aten.native_group_norm.default(x, w, b, *sizes, eps)
        return lambda: aten.native_group_norm_backward.default(gy, x, *stats, w, *sizes, want)
    if mask == 1:
        return lambda: aten._fused_rms_norm.default(x, list(ns), w, eps)
    return None  # no ATen CPU kernel for the RMS backward: the routes call torch's decomposition


def route(ops_pkg, sig_mod, op, shape, ns, groups, mask, eps, args):
    x, w, b, stats, gy = args
    sig = sig_mod.KernelSignature(op, shape, ns, "float32", mask, eps=eps, groups=groups, bias=op != "rms_norm")
    fn = ops_pkg.get(op).eager_route(sig, None if mask == 1 else stats)
    if mask == 1:
        return lambda: fn(x, w, b)
    return lambda: fn(gy, x, stats, w, b)


def paired(a, b, pairs: int, batch_s: float = 2e-3) -> tuple[float, float, float]:
    """(median of per-pair CPU-time differences a - b per call, a's median, b's median), us."""
    for _ in range(50):
        a()
        b()
    t0 = time.thread_time_ns()
    for _ in range(20):
        b()
    one = max((time.thread_time_ns() - t0) / 20e9, 1e-7)
    n = max(1, math.ceil(batch_s / one))
    diffs, ta, tb = [], [], []
    for i in range(pairs):
        got = {}
        for name, fn in ((("a", a), ("b", b)) if i % 2 else (("b", b), ("a", a))):
            c0 = time.thread_time_ns()
            for _ in range(n):
                fn()
            got[name] = (time.thread_time_ns() - c0) / n * 1e-3
        diffs.append(got["a"] - got["b"])
        ta.append(got["a"])
        tb.append(got["b"])
    return statistics.median(diffs), statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a folder holding another checkout's boo_build")
    ap.add_argument("--pairs", type=int, default=400)
    ns = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    new_ops = importlib.import_module("boo_build.ops")
    new_sig = importlib.import_module("boo_build.signature")
    old_ops = load_tree(ns.baseline, "boo_build_baseline")
    old_sig = importlib.import_module("boo_build_baseline.signature")
    print("# Route A/B: this checkout (A) against", ns.baseline, "(B)\n")
    print(f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {platform.platform()}; torch {torch.__version__}, "
          f"1 thread; load average {os.getloadavg()[0]:.2f}. Median of {ns.pairs} pairs of batches, A and B "
          "alternating; CPU time of the calling thread.\n")
    print("| op | shape | mask | ATen direct us | A route us | B route us | A - B us | A over ATen us |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for op, shape, nshape, groups, mask in CASES:
        eps = 1e-5
        args = tensors(torch, op, shape, nshape, groups, mask, eps)
        a = route(new_ops, new_sig, op, shape, nshape, groups, mask, eps, args)
        b = route(old_ops, old_sig, op, shape, nshape, groups, mask, eps, args)
        diff, ta, tb = paired(a, b, ns.pairs)
        d = direct(torch, op, shape, nshape, groups, mask, eps, args)
        over, _, td = paired(a, d, ns.pairs) if d is not None else (float("nan"), 0.0, float("nan"))
        print(f"| {op} | {'x'.join(map(str, shape))} | {mask} | {td:.2f} | {ta:.2f} | {tb:.2f} | {diff:+.2f} | "
              f"{over:.2f} |")


if __name__ == "__main__":
    main()
