"""Calls routed to torch eager, at module level: a swapped norm against torch's own.

A swapped ``boo_build.loader.nn.LayerNorm`` whose bundle sends a call's size to
torch eager calls torch's function itself (``loader/torch_path.py``). This script
measures what that costs over torch's ``nn.LayerNorm`` with the same parameters,
on float32 layer norms over 768 of sizes that a dynamic kernel hands to torch:

* a bundle is built here (export + compile for the ``cpu`` target) of the dynamic
  float32 layer norm ``BATCHxSEQx768``, forward and full backward (mask 14), whose
  torch calls are decided per size (``prefer_eager.by_rows``): torch eager up to
  512 rows, the kernel from 65536 (so ``replace_norms`` swaps it: some sizes run the
  kernel);
* per shape, in one process, torch on one thread, paths alternating batch by batch
  (the order rotated every round, and reversed every other one): torch's module, the swapped module, and the loader's
  entry point ``Bundle.native_layer_norm`` (what the swapped module called for such a
  call before issue 58); inference (``no_grad``) and a training step (forward and
  backward, input and parameters requiring grad);
* each path's cost is the median over rounds of its batch time over torch's module's
  batch time in the same round (CPU time of the calling thread), with the median
  difference per call in microseconds; a second torch module, the control, shows the
  noise of two identical paths.

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/routed_modules.py [--rounds 40]

Writes benchmarks/results/routed_modules.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model  # noqa: E402 - benchmarks/ on sys.path

SHAPES = ((1, 8, 768), (1, 16, 768), (1, 64, 768), (2, 128, 768), (4, 128, 768))
BY_ROWS = ((1, True), (512, True), (65536, False))  # torch eager up to 512 rows, the kernel from 65536
# the goals: (per-call time of torch's module about this many us, most cost over it)
GOALS = ((10e-6, 1.10), (150e-6, 1.02))


def build_bundle(folder: Path) -> Path:
    """The dynamic float32 BATCHxSEQx768 layer norm, forward and mask 14, cpu, routed per size."""
    from boo_build.loader.format import EagerPreference, TargetRecord
    from boo_build.signature import KernelSignature, ModuleId
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir
    from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
    from boo_build.targets import catalogue

    cpu = catalogue()["cpu"]
    kernels, vmfbs = [], {}
    for mask in (1, 14):
        sig = KernelSignature("layer_norm", ("batch", "seq", 768), (768,), "float32", mask)
        res = compile_mlir(export_mlir(ModuleId(sig, "aten")), cpu.flags)
        if not res.ok:
            raise SystemExit(f"compile failed: {res.error}")
        impls = {"aten": packed_impl(vmfbs, "cpu", sig, "aten", res.vmfb)}
        pref = EagerPreference(1e-5, 2e-5, "torch eager faster at these sizes (benchmarks/routed_modules.py)",
                               by_rows=BY_ROWS)
        kernels.append(kernel_record(sig, {"cpu": TargetRecord.available("aten", impls, "only one",
                                                                        prefer_eager=pref)}))
    return pack_bundle(folder, name="routed", version="0.0.1", targets=[cpu], kernels=kernels, vmfbs=vmfbs,
                       provenance={"purpose": "benchmarks/routed_modules.py"})


def measure(bundle_path: Path, rounds: int) -> tuple[list[dict], dict]:
    import torch

    from boo_build.loader import open_bundle
    from boo_build.loader.nn import replace_norms
    from boo_build.stages.bench_process import timing_priority

    torch.set_num_threads(1)
    bundle = open_bundle(bundle_path, device="local-task")
    model = torch.nn.Sequential(torch.nn.LayerNorm(768))
    report = replace_norms(model, bundle)
    assert len(report.replaced) == 1, report
    ours = model[0]
    ref, again = torch.nn.LayerNorm(768), torch.nn.LayerNorm(768)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(768, generator=g))
        ours.bias.copy_(torch.randn(768, generator=g))
        ref.load_state_dict(ours.state_dict())
        again.load_state_dict(ours.state_dict())
    rows = []
    for shape in SHAPES:
        x = torch.randn(*shape, generator=g)
        xg = x.clone().requires_grad_()
        gy = torch.randn(*shape, generator=g)

        def entry(x=x):
            return bundle.native_layer_norm(x, (768,), ours.weight, ours.bias, 1e-5)[0]

        def step(m, xg=xg, gy=gy):
            def run():
                m(xg).backward(gy)
            return run

        def entry_step(xg=xg, gy=gy):
            bundle.native_layer_norm(xg, (768,), ours.weight, ours.bias, 1e-5)[0].backward(gy)

        for mode, paths in (
                ("inference", {"torch": lambda x=x: ref(x), "swapped": lambda x=x: ours(x), "entry": entry,
                               "again": lambda x=x: again(x)}),
                ("training step", {"torch": step(ref), "swapped": step(ours), "entry": entry_step,
                                   "again": step(again)})):
            grad = torch.enable_grad() if mode == "training step" else torch.no_grad()
            with grad:
                assert torch.equal(paths["swapped"]() if mode == "inference" else ours(x), ref(x))
                with timing_priority() as realtime:  # as a build's benchmarks: other work waits
                    rows.append({"shape": shape, "mode": mode, "realtime": realtime, **pair_rounds(paths, rounds)})
    stats = bundle.stats()
    return rows, stats


def pair_rounds(paths: dict, rounds: int, target_s: float = 4e-3) -> dict:
    """Per path: the median over rounds of its batch's CPU time over torch's in the same
    round, the median difference per call (us), and torch's median time per call (s)."""
    for fn in paths.values():  # warm up, and size the batch to about target_s of torch's
        for _ in range(50):
            fn()
    t0 = time.thread_time_ns()
    for _ in range(50):
        paths["torch"]()
    per = (time.thread_time_ns() - t0) / 50 / 1e9
    n = max(10, int(target_s / max(per, 1e-7)))
    names = list(paths)
    ratios: dict[str, list[float]] = {k: [] for k in names}
    diffs: dict[str, list[float]] = {k: [] for k in names}
    base: list[float] = []
    for r in range(rounds):
        took = {}
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order if r % 2 else order[::-1]:  # every path before and after every other
            fn = paths[name]
            t0 = time.thread_time_ns()
            for _ in range(n):
                fn()
            took[name] = (time.thread_time_ns() - t0) / n / 1e9
        base.append(took["torch"])
        for name in names:
            ratios[name].append(took[name] / took["torch"])
            diffs[name].append((took[name] - took["torch"]) * 1e6)
    return {"torch_s": statistics.median(base), "calls": n,
            **{f"{k}_ratio": statistics.median(v) for k, v in ratios.items() if k != "torch"},
            **{f"{k}_us": statistics.median(v) for k, v in diffs.items() if k != "torch"}}


def report(rows: list[dict], stats: dict, rounds: int, load: tuple[float, float], nice: int | None) -> str:
    import torch

    lines = ["# Calls routed to torch eager, at module level: a swapped norm against torch's own", ""]
    lines.append("`benchmarks/routed_modules.py`: float32 layer norms over 768, a swapped "
                 "`boo_build.loader.nn.LayerNorm` (by `replace_norms`) whose bundle's dynamic kernel sends these "
                 f"sizes to torch eager (`by_rows` {[list(p) for p in BY_ROWS]}), against `torch.nn.LayerNorm` with "
                 f"the same parameters; torch on one thread, {rounds} rounds, paths alternating batch by batch, "
                 "CPU time of the calling thread.")
    lines.append("")
    lines.append(f"Machine: {platform.platform()}; CPU {cpu_model()}; {os.cpu_count()} logical CPUs; torch "
                 f"{torch.__version__}; load average {load[0]:.2f} at start, {load[1]:.2f} at the end (other "
                 f"sessions' builds); this process at nice {nice}, its rounds in the real-time class: "
                 f"{'yes' if all(r['realtime'] for r in rows) else 'no'} (as a build's benchmarks, "
                 "`stages/bench_process.py`: other work waits).")
    lines.append("")
    lines.append("| shape | mode | torch's module us/call | swapped module | over torch's, us | "
                 "the loader's entry point (the module's path before) | over torch's, us | "
                 "control: torch's module again |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['mode']} | {r['torch_s'] * 1e6:.1f} | "
                     f"{r['swapped_ratio']:.3f}x | {r['swapped_us']:+.2f} | {r['entry_ratio']:.3f}x | "
                     f"{r['entry_us']:+.2f} | {r['again_ratio']:.3f}x ({r['again_us']:+.2f} us) |")
    lines.append("")
    for about, most in GOALS:
        r = min((r for r in rows if r["mode"] == "inference"), key=lambda r: abs(r["torch_s"] / about - 1))
        lines.append(f"* About {about * 1e6:.0f} us per call (inference, {'x'.join(map(str, r['shape']))}, "
                     f"{r['torch_s'] * 1e6:.1f} us): the swapped module costs {r['swapped_ratio']:.3f}x torch's "
                     f"(goal: at most {most:.2f}x): **{'met' if r['swapped_ratio'] <= most else 'not met'}**.")
    lines.append("")
    lines.append("The control (a second `torch.nn.LayerNorm`, the same calls) shows what the machine's noise "
                 "alone makes of two identical paths in these rounds.")
    lines.append("")
    lines.append("The swapped module's calls at these sizes never enter the loader: its first call of a shape "
                 "checks and routes it as the loader does (`Bundle.torch_counter`), later ones look the decision "
                 "up by (shape, dtype, gradients wanted) and call `torch.nn.functional.layer_norm` themselves, "
                 "counted in `stats()` as eager; a training step's backward is torch's autograd. Counted: "
                 + ", ".join(f"{k} {v}" for k, v in stats.items()) + ".")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "routed_modules.md")
    ns = ap.parse_args()
    from boo_build.stages.bench_process import raise_priority

    load0 = os.getloadavg()[0]
    nice = raise_priority()
    with tempfile.TemporaryDirectory(prefix="boo-routed-") as tmp:
        print("building the bundle ...", flush=True)
        path = build_bundle(Path(tmp))
        print("measuring ...", flush=True)
        rows, stats = measure(path, ns.rounds)
    text = report(rows, stats, ns.rounds, (load0, os.getloadavg()[0]), nice)
    print(text)
    ns.out.write_text(text)
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
