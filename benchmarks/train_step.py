"""Training step: torch's norms against the bundle's, eager and under torch.compile.

Model: the README example's, one layer deeper: x (8x128x768, float32) ->
[Linear(768, 768) -> LayerNorm(768) -> GELU] x 2 -> Linear(768, 768), MSE
loss, SGD. A step is zero_grad + forward + backward + optimizer step. Four
copies of the model (same initial weights), in one process:

* torch's norms, eager: the baseline;
* the bundle's norms (``replace_norms``), eager: forward kernel and the
  combined backward kernel (mask 14) per norm and step;
* the bundle's norms under ``torch.compile(fullgraph=True)`` (Inductor):
  the same kernels, the rest of the step compiled;
* torch's norms under ``torch.compile(fullgraph=True)``, for comparison.

Each variant is warmed up (its compile included) and then timed in rounds
of steps, the variants interleaved round-robin so that other load on the
machine hits all alike; the table gives the median and best step time and
the ratio of medians against the baseline, all from the same run. One
thread by default (torch's, and IREE's ``local-sync`` on the calling
thread): on a shared 2-core box two-thread timings jump by scheduler quanta.
Inductor compiles into a fresh cache, so the first step's time includes
the whole compile. The script builds the two kernels it needs (export + compile + pack into a
temporary folder) unless given ``--bundle`` (e.g. the default manifest's,
which holds them), prints the table and writes
benchmarks/results/train_step.md.

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/train_step.py [--rounds 7] [--steps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE, WIDTH = (8, 128, 768), 768


def build_bundle(folder: Path) -> Path:
    """layer_norm float32 8x128x768, forward and combined backward (masks 1 and 14), for the CPU."""
    from boo_build.loader.format import TargetRecord
    from boo_build.signature import KernelSignature, ModuleId
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir
    from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
    from boo_build.targets import catalogue

    cpu = catalogue()["cpu"]
    entries, vmfbs = [], {}
    for mask in (1, 14):
        mid = ModuleId(KernelSignature("layer_norm", SHAPE, (WIDTH,), "float32", mask), "manual")
        res = compile_mlir(export_mlir(mid), cpu.flags)
        if not res.ok:
            raise SystemExit(f"compile of {mid.key} failed: {res.error}")
        vmfb = folder / f"{mid.key}.vmfb"
        vmfb.write_bytes(res.vmfb)
        impls = {"manual": packed_impl(vmfbs, "cpu", mid.signature, "manual", vmfb)}
        entries.append(kernel_record(mid.signature, {"cpu": TargetRecord.available("manual", impls, "only one")}))
    return pack_bundle(folder, name="train-step", version="0.0.1", targets=[cpu], kernels=entries, vmfbs=vmfbs,
                       provenance={"purpose": "benchmarks/train_step.py"})


def make_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.LayerNorm(WIDTH), torch.nn.GELU(),
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.LayerNorm(WIDTH), torch.nn.GELU(),
        torch.nn.Linear(WIDTH, WIDTH))


def variants(bundle):
    """name -> a step function, each on its own copy of the model and optimizer."""
    import torch

    from boo_build.loader.nn import replace_norms

    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(*SHAPE, generator=g), torch.randn(*SHAPE, generator=g)
    base = make_model()
    swapped = copy.deepcopy(base)
    report = replace_norms(swapped, bundle)
    if len(report.replaced) != 2:
        raise SystemExit(f"expected both norms replaced:\n{report}")
    compiled_swapped = copy.deepcopy(swapped)
    models = {
        "torch norms, eager (baseline)": copy.deepcopy(base),
        "bundle norms, eager": swapped,
        "bundle norms, torch.compile": torch.compile(compiled_swapped, fullgraph=True),
        "torch norms, torch.compile": torch.compile(copy.deepcopy(base), fullgraph=True),
    }
    steps = {}
    for name, model in models.items():
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(model=model, opt=opt):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            return loss.detach()

        steps[name] = step
    return steps


def measure(steps: dict, rounds: int, per_round: int, warmup: int) -> tuple[dict, dict]:
    """Warm-up seconds (the first step, compile included) and per-step times, interleaved round-robin."""
    first, times = {}, {n: [] for n in steps}
    for name, step in steps.items():
        t = time.perf_counter()
        step()
        first[name] = time.perf_counter() - t
        for _ in range(warmup):
            step()
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(per_round):
                t = time.perf_counter()
                step().item()  # the loss, read back as a training loop would
                times[name].append(time.perf_counter() - t)
    return first, times


def report(first, times, bundle, rounds, per_round, load, versions, threads) -> str:
    import torch

    base = statistics.median(next(iter(times.values())))
    lines = ["# Training step: torch's norms vs the bundle's, eager and torch.compile", ""]
    lines.append(f"Model: x {'x'.join(map(str, SHAPE))} float32 -> [Linear({WIDTH}, {WIDTH}) -> LayerNorm({WIDTH}) "
                 f"-> GELU] x 2 -> Linear({WIDTH}, {WIDTH}); MSE loss; SGD. A step: zero_grad, forward, backward, "
                 "optimizer step.")
    lines.append(f"Bundle: {bundle!r} (layer_norm-f32-8x128x768-n768-wb, masks 1 and 14, `manual`).")
    lines.append("")
    iree = "`local-sync` (on the calling thread)" if threads == 1 else f"`local-task` ({threads} workers)"
    lines.append(f"Machine: {platform.platform()}; CPU {cpu_model()}; {os.cpu_count()} logical CPUs; torch threads "
                 f"{torch.get_num_threads()}; IREE {iree}.")
    lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    lines.append("")
    lines.append(f"{rounds} rounds of {per_round} steps per variant, variants interleaved round-robin, after "
                 "warm-up; one run, one process.")
    lines.append("")
    lines.append("| variant | median ms/step | best ms/step | vs baseline (median) | first step s (compile) |")
    lines.append("|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        med = statistics.median(ts)
        lines.append(f"| {name} | {med * 1e3:.1f} | {min(ts) * 1e3:.1f} | {med / base:.2f}x | {first[name]:.2f} |")
    lines.append("")
    lines.append("First step: the compiled variants' includes the Inductor compile (fresh cache) of forward and "
                 "backward; the first one compiled (the bundle's) also pays Inductor's one-off start-up.")
    lines.append(f"Load average (1 min): {load[0]:.2f} at start, {load[1]:.2f} at the end, on {os.cpu_count()} CPUs.")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, help="a bundle holding layer_norm-f32-8x128x768-n768-wb-m1 and -m14")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="steps per round")
    ap.add_argument("--threads", type=int, default=1, help="torch threads and IREE workers (1: local-sync)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "train_step.md")
    ns = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="train-step-") as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")  # cold: the compile is timed
        path = ns.bundle or build_bundle(Path(tmp))
        import torch

        from boo_build.loader import open_bundle
        from boo_build.loader.hal import set_cpu_threads

        torch.set_num_threads(ns.threads)
        if ns.threads > 1:
            set_cpu_threads(ns.threads)
        bundle = open_bundle(path, device="local-sync" if ns.threads == 1 else "local-task")
        first, times = measure(variants(bundle), ns.rounds, ns.steps, ns.warmup)
        stats = bundle.stats(totals=True)
        if stats["misses"] or not stats["static_hits"]:
            raise SystemExit(f"the bundle's kernels did not serve every call: {stats}")
    from importlib.metadata import version

    versions = {"torch": torch.__version__, "iree-base-runtime": version("iree-base-runtime"),
                "iree-base-compiler": version("iree-base-compiler")}
    text = report(first, times, bundle, ns.rounds, ns.steps, (load0, os.getloadavg()[0]), versions, ns.threads)
    print(text)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
