"""The loader, this checkout against another: start-up and per-call overhead, in one run.

For a restructuring of the loader (issue 42: the runtime moved into ``loader/``),
what an application pays must be no worse. Two measures, each taken with each
checkout's ``boo_build`` first on ``PYTHONPATH``, the checkouts alternating run by
run (A, B, A, B, ...) so that the machine's drift hits both alike:

1. **Start-up**: a fresh process imports torch, then ``boo_build.loader``, opens
   ``--bundle`` and makes a first call (a float32 layer norm forward whose kernel the
   bundle holds); the seconds of each step (bytecode compiled first, as a pip install
   leaves it). Medians over ``--starts`` processes per checkout.
2. **Per-call overhead**: ``benchmarks/cpu_vs_eager.py --overhead-only`` of each
   checkout on the same bundle: the loader's entry point over a bare
   ``VmContext.invoke`` of the same vmfb, and a routed call (torch tensors the bundle
   sends to torch eager) over torch's op called directly, CPU time of the calling
   thread (medians over the small kernels; its own pairs of batches). ``--runs`` runs
   per checkout.

    .venv/bin/python benchmarks/loader_ab.py --baseline /tmp/base --bundle BUNDLE [--starts 15] [--runs 3]

Markdown to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model  # noqa: E402 - benchmarks/ on sys.path

START = '''
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import boo_build.loader as L
t2 = time.perf_counter()
b = L.open_bundle(sys.argv[1])
t3 = time.perf_counter()
key = sys.argv[2]
from boo_build.signature import KernelSignature
sig = KernelSignature.parse(key)
g = torch.Generator().manual_seed(0)
x = torch.randn(*sig.input_shape, generator=g)
w = torch.randn(*sig.normalized_shape, generator=g)
y = b.native_layer_norm(x, sig.normalized_shape, w, torch.zeros_like(w), sig.eps)[0]
float(y.flatten()[0])
t4 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "import loader": t2 - t1, "open": t3 - t2, "first call": t4 - t3}))
'''


def env(tree: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    e["PYTHONPATH"] = str(tree)
    return e


def start_once(tree: Path, bundle: Path, key: str) -> dict:
    with tempfile.TemporaryDirectory() as d:  # not the checkout's folder: PYTHONPATH decides which loader
        proc = subprocess.run([sys.executable, "-c", START, str(bundle), key], capture_output=True, text=True,
                              env=env(tree), cwd=d, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def overhead_once(tree: Path, bundle: Path) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rec.json"
        subprocess.run([sys.executable, str(tree / "benchmarks" / "cpu_vs_eager.py"), "--bundle", str(bundle),
                        "--overhead-only", "--json", str(out), "-q"], capture_output=True, text=True, env=env(tree),
                       cwd=d, check=True)
        return json.loads(out.read_text())


def forward_key(bundle: Path) -> str:
    from boo_build.loader import read_archive

    keys = [k for k in read_archive(bundle).index["kernels"]
            if k.startswith("layer_norm-f32-") and k.endswith("-wb-m1") and "BATCH" not in k]
    if not keys:
        raise SystemExit(f"{bundle} holds no static float32 layer-norm forward with weight and bias")
    return min(keys, key=len)


def overhead_figures(rec: dict) -> dict[str, float]:
    """The medians one cpu_vs_eager record sums up (``summary``): the loader's overhead over a
    bare invoke per device and call kind, and a routed call's over torch's op per kind."""
    s = rec["summary"]
    out = {}
    for dev, o in s.get("overhead_us", {}).items():
        for kind, k in o["kinds"].items():
            out[f"{dev} {kind}"] = float(k["median"])
    for kind, o in s.get("routed_us", {}).items():
        out[f"routed {kind}"] = float(o["median"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout of boo-build (B)")
    ap.add_argument("--bundle", type=Path, required=True, help="a CPU bundle (the default manifest's, benchmarked)")
    ap.add_argument("--starts", type=int, default=15)
    ap.add_argument("--runs", type=int, default=3)
    ns = ap.parse_args()
    trees = {"after (this checkout)": ROOT, f"before ({ns.baseline})": ns.baseline.resolve()}
    for t in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(t / "boo_build")], check=True,
                       capture_output=True)
    key = forward_key(ns.bundle)
    starts: dict[str, list[dict]] = {n: [] for n in trees}
    for _ in range(ns.starts):
        for n, t in trees.items():
            starts[n].append(start_once(t, ns.bundle, key))
    over: dict[str, list[dict]] = {n: [] for n in trees}
    for _ in range(ns.runs):
        for n, t in trees.items():
            over[n].append(overhead_figures(overhead_once(t, ns.bundle)))
    print("# The loader before and after: start-up and per-call overhead\n")
    print(f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {platform.platform()}; bundle {ns.bundle.name}; "
          f"first call: `{key}`. Checkouts alternating, run by run.\n")
    steps = list(next(iter(starts.values()))[0])
    print(f"## Start-up (fresh processes, median of {ns.starts} each, ms)\n")
    print("| checkout | " + " | ".join(steps) + " | loader: import + open + first call |")
    print("|---|" + "---:|" * (len(steps) + 1))
    for n, rs in starts.items():
        med = {s: statistics.median(r[s] for r in rs) * 1e3 for s in steps}
        total = statistics.median((r["import loader"] + r["open"] + r["first call"]) for r in rs) * 1e3
        print(f"| {n} | " + " | ".join(f"{med[s]:.1f}" for s in steps) + f" | **{total:.1f}** |")
    names = sorted({k for rs in over.values() for r in rs for k in r})
    print(f"\n## Per-call overhead (`cpu_vs_eager.py --overhead-only`, {ns.runs} runs each, median of the runs, us)\n")
    print("| checkout | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for n, rs in over.items():
        print(f"| {n} | " + " | ".join(f"{statistics.median(r[k] for r in rs if k in r):.2f}"
                                       if any(k in r for r in rs) else "-" for k in names) + " |")
    print("\n" + json.dumps({"starts": starts, "overhead": over}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
