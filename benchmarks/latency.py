"""Latency: a prebuilt bundle against iree-turbine's BOO JIT path.

Signature: layer_norm float32 8x128x768, normalized 768, weight and bias,
mask 1 (forward).

1. Cold start, process start -> first result, each in a fresh subprocess
   (median of --loader-repeats and --repeats), torch imported first on both sides so both pay it, boo_build's
   bytecode compiled (as a pip install leaves it):
   * loader: ``open_bundle`` + first ``native_layer_norm`` call (the kernel: ``prefer_eager=False``), for
     three bundles, their processes taken in turn: the one-kernel bundle built here; the default
     manifest's (``--default-bundle``, ``make build``'s); and a synthetic one of 500 kernels x 8 targets
     made here from the one kernel's module (each kernel and target its own member, the module repeated;
     its records those of the default bundle's kernel on each target where it has them), of which the
     call runs the one real kernel;
   * BOO JIT: ``iree.turbine.kernel.boo`` ``get_launchable`` + first call,
     with the BOO file cache off (``BOO_CACHE_ON=0``; ``BOO_CACHE_DIR`` an
     empty temporary folder besides), so it exports and runs iree-compile.
2. Steady state per call, every path in this process, batches interleaved
   round-robin (other load hits all alike): the loader's ``native_layer_norm``,
   its ``KernelRunner`` alone, a bare iree.runtime invoke of pre-imported
   arguments (the floor), the BOO launchable, torch eager.

The script builds the bundle it needs (export + compile + pack into a
temporary folder), prints a table and writes benchmarks/results/latency.md.

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/latency.py [--repeats 3] [--loader-repeats 15]
        [--rounds 15] [--default-bundle artifacts/boo-norms-0.1.0.tar.zst]
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
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

SHAPE, NORM, EPS = (8, 128, 768), (768,), 1e-5
# issue 31's start-up goals on the CI kind of machine (docs/loader.md, "Start-up")
STARTUP_TARGETS_MS = {"import loader": 20, "open_bundle": 10, "first call": 15}


def env() -> dict[str, str]:
    # iree-turbine shells out to iree-compile by name. Children read cached bytecode, as
    # from an installed package (pip compiles it at install; ``compile_bytecode``): a
    # PYTHONDONTWRITEBYTECODE environment would otherwise compile every module each start.
    e = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(ROOT))
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def compile_bytecode() -> None:
    """boo_build's ``__pycache__``, as ``pip install`` writes it for a wheel."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "boo_build")], check=True,
                   capture_output=True, env=env())


# ------------------------------------------------------------------ bundle
def build_bundle(folder: Path) -> tuple[Path, str]:
    from boo_build.loader.format import TargetRecord
    from boo_build.signature import KernelSignature, ModuleId
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir
    from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
    from boo_build.targets import catalogue

    sig = KernelSignature("layer_norm", SHAPE, NORM, "float32", 1, eps=EPS)
    mid = ModuleId(sig, "aten")
    cpu = catalogue()["cpu"]
    res = compile_mlir(export_mlir(mid), cpu.flags)
    if not res.ok:
        raise SystemExit(f"compile failed: {res.error}")
    vmfb = folder / f"{mid.key}.vmfb"
    vmfb.write_bytes(res.vmfb)
    vmfbs: dict[str, bytes] = {}
    impls = {"aten": packed_impl(vmfbs, "cpu", sig, "aten", vmfb)}
    entry = kernel_record(sig, {"cpu": TargetRecord.available("aten", impls, "only one")})
    path = pack_bundle(folder, name="latency", version="0.0.1", targets=[cpu], kernels=[entry], vmfbs=vmfbs,
                       provenance={"purpose": "benchmarks/latency.py"})
    return path, sig.key


SYNTHETIC_TARGETS = ("cpu", "cpu-x86-64-v4", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201", "sm_80")


def synthetic_bundle(folder: Path, one: Path, default: Path | None, kernels: int = 500) -> Path:
    """``kernels`` kernels x the 8 ``SYNTHETIC_TARGETS``: the one-kernel bundle's kernel and
    ``kernels - 1`` more of other batch sizes, each on each target its own member holding the
    same module (their calls are not run: the module takes 8x128x768). Each target entry
    carries the records of the default bundle's entry for the same call on that target, where
    it has one (validation, benchmark, candidates, timing, traffic): an index of a production
    bundle's size."""
    import dataclasses

    from boo_build.loader import read_archive
    from boo_build.loader.format import ImplRecord, TargetRecord
    from boo_build.signature import KernelSignature
    from boo_build.stages.pack import kernel_record, member_path, pack_bundle
    from boo_build.targets import catalogue

    a = read_archive(one)
    (key, k), = a.bundle_index.kernels.items()
    base = k.targets["cpu"]
    m = base.selected_impl
    vmfb = a.members[m.member]
    records: dict[str, TargetRecord] = {}
    if default is not None:
        d = read_archive(default).bundle_index
        records = {t: te for t, te in (d.kernels[key].targets.items() if key in d.kernels else ())
                   if te.is_available}
    cat = catalogue()
    entries, vmfbs = [], {}
    sigs = [k.signature] + [KernelSignature("layer_norm", (n, 128, 768), (768,), "float32", 1, eps=EPS)
                            for n in range(9, 9 + kernels - 1)]
    for sig in sigs:
        targets = {}
        for t in SYNTHETIC_TARGETS:
            rec = records.get(t) or records.get("gfx942" if t.startswith(("gfx", "sm_")) else "cpu") or base
            impl = rec.selected or "aten"
            old = (rec.impls or {}).get(impl)
            member = member_path(t, f"{sig.key}-{impl}")
            vmfbs[member] = vmfb
            impls = {impl: ImplRecord(member, m.function, m.sha256, m.size,
                                      old.validation if old else None, old.benchmark if old else None,
                                      old.traffic if old else None)}
            targets[t] = dataclasses.replace(rec, impls=impls, prefer_eager=None)
        entries.append(kernel_record(sig, targets))
    return pack_bundle(folder / "synthetic-0.0.1.tar.zst", name="synthetic", version="0.0.1",
                       targets=[cat[t] for t in SYNTHETIC_TARGETS], kernels=entries, vmfbs=vmfbs,
                       provenance={"purpose": "benchmarks/latency.py: 500 kernels x 8 targets"})


# -------------------------------------------------------------- cold start
_COMMON = '''
import json, sys, time
t_start = float(sys.argv[1])
t = {}
import torch
t["import torch"] = time.time()
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 128, 768, generator=g)
w = torch.randn(768, generator=g)
b = torch.randn(768, generator=g)
'''

LOADER_CHILD = _COMMON + '''
from boo_build.loader import open_bundle
t["import loader"] = time.time()
bundle = open_bundle(sys.argv[2], prefer_eager=False)  # the kernel, whatever the build found of torch eager
t["open_bundle"] = time.time()
y = bundle.native_layer_norm(x, (768,), w, b, 1e-5)[0]
float(y[0, 0, 0])
t["first call"] = time.time()
ref = torch.nn.functional.layer_norm(x, (768,), w, b, 1e-5)
heavy = [m for m in ("ml_dtypes", "iree.runtime", "iree.compiler", "iree.turbine") if m in sys.modules]
print(json.dumps({"start": t_start, "marks": t, "err": float((y - ref).abs().max()), "heavy": heavy}))
'''

JIT_CHILD = _COMMON + '''
import warnings; warnings.simplefilter("ignore")
from iree.turbine.kernel.boo.op_exports.layer_norm import LayerNormSignature
from iree.turbine.kernel.boo.driver.launch import get_launchable
from iree.turbine.kernel.boo.runtime import is_cache_enabled
assert not is_cache_enabled(), "BOO file cache is on"
t["import turbine"] = time.time()
sig = LayerNormSignature(input_shape=[8, 128, 768], normalized_shape=[768], eps=1e-5,
                         elementwise_affine=True, bias=True, dtype=torch.float32)
launch = get_launchable(sig)
t["get_launchable (export)"] = time.time()
y = launch(x, w, b)[0]
float(y[0, 0, 0])
t["first call (compile + run)"] = time.time()
ref = torch.nn.functional.layer_norm(x, (768,), w, b, 1e-5)
print(json.dumps({"start": t_start, "marks": t, "err": float((y - ref).abs().max())}))
'''


def cold(script: str, args: list[str], extra_env: dict[str, str] | None = None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
    try:
        t0 = time.time()
        proc = subprocess.run([sys.executable, f.name, repr(t0), *args], capture_output=True, text=True,
                              env={**env(), **(extra_env or {})}, cwd=tempfile.gettempdir(), timeout=600)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    marks, prev, steps = rec["marks"], t0, {}
    for name, at in marks.items():
        steps[name] = at - prev
        prev = at
    return {"total": prev - t0, "steps": steps, "err": rec["err"], "heavy": rec.get("heavy", [])}


def runtime_import_cost(n: int = 3) -> tuple[float, float]:
    """(import ml_dtypes, the rest of import iree.runtime) in seconds, fresh
    processes after import torch: what the loader's first call pays first."""
    code = ("import time, torch; t0 = time.perf_counter(); import ml_dtypes; t1 = time.perf_counter(); "
            "import iree.runtime; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)")
    runs = []
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=True)
        runs.append(tuple(map(float, out.stdout.split())))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def cold_runs(n: int, bundles: dict[str, Path], loader_n: int) -> tuple[dict[str, list[dict]], list[dict]]:
    """Fresh processes: each bundle's in turn, ``loader_n`` of each, and ``n`` of the JIT among them."""
    loader: dict[str, list[dict]] = {name: [] for name in bundles}
    jit = []
    for i in range(max(n, loader_n)):
        if i < loader_n:
            for name, path in bundles.items():
                loader[name].append(cold(LOADER_CHILD, [str(path)]))
        if i >= n:
            continue
        with tempfile.TemporaryDirectory(prefix="boo-cache-") as cache:
            jit.append(cold(JIT_CHILD, [], {"BOO_CACHE_ON": "0", "BOO_CACHE_DIR": cache}))
            leftover = list(Path(cache).iterdir())
            assert not leftover, f"BOO cache written: {leftover}"
    return loader, jit


# ------------------------------------------------------------ steady state
def interleaved_us(paths: dict, rounds: int = 15, batch: int = 100, warmup: int = 30) -> dict[str, dict]:
    """Per-call microseconds of each path: batches taken round-robin (order
    rotated every round) so that load from other processes hits every path
    alike; median and best batch per path."""
    for fn in paths.values():
        for _ in range(warmup):
            fn()
    names = list(paths)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            fn = paths[n]
            t0 = time.perf_counter_ns()
            for _ in range(batch):
                fn()
            samples[n].append((time.perf_counter_ns() - t0) / batch / 1e3)
    return {n: {"median": statistics.median(v), "min": min(v)} for n, v in samples.items()}


def boo_launchable(x, w, b):
    """iree-turbine's BOO launchable for the kernel (JIT-compiled here, file cache off)."""
    import warnings

    warnings.simplefilter("ignore")
    import torch
    from iree.turbine.kernel.boo.driver.launch import get_launchable
    from iree.turbine.kernel.boo.op_exports.layer_norm import LayerNormSignature
    from iree.turbine.kernel.boo.runtime import is_cache_enabled, set_cache_dir, toggle_cache_on

    toggle_cache_on(0)
    set_cache_dir(tempfile.mkdtemp(prefix="boo-cache-"))
    if is_cache_enabled():
        return None
    sig = LayerNormSignature(input_shape=list(SHAPE), normalized_shape=list(NORM), eps=EPS,
                             elementwise_affine=True, bias=True, dtype=torch.float32)
    launch = get_launchable(sig)
    launch(x, w, b)
    return lambda: launch(x, w, b)


def steady(bundle_path: Path, key: str, rounds: int) -> dict[str, dict]:
    import torch

    from boo_build.loader import open_bundle

    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(*SHAPE, generator=g), torch.randn(*NORM, generator=g), torch.randn(*NORM, generator=g)
    bundle = open_bundle(bundle_path, device="local-task")
    runner = bundle.load(key)

    # bare iree.runtime: same vmfb and device, arguments imported once, invoke only
    import iree.runtime as rt

    k = bundle._kernels[key]
    dev = bundle._device_handle()
    module = rt.VmModule.copy_buffer(dev.vm_instance, bundle._source.module(k.member, k.frame, k.size))
    ctx = rt.VmContext(dev.vm_instance, modules=[dev.hal_module, module])
    fn = module.lookup_function(k.function)
    args = rt.VmVariantList(3)
    for t in (x, w, b):
        args.push_ref(dev.hal_device.from_dlpack_capsule(torch.utils.dlpack.to_dlpack(t)))

    def bare():
        rets = rt.VmVariantList(3)
        ctx.invoke(fn, args, rets)
        return rets

    paths = {
        "loader: Bundle.native_layer_norm": lambda: bundle.native_layer_norm(x, NORM, w, b, EPS),
        "loader: KernelRunner (invoke.py)": lambda: runner(x, w, b),
        "bare iree.runtime invoke (pre-imported args)": bare,
        "torch eager: aten.native_layer_norm": lambda: torch.ops.aten.native_layer_norm(x, list(NORM), w, b, EPS),
        "torch eager: F.layer_norm": lambda: torch.nn.functional.layer_norm(x, NORM, w, b, EPS),
    }
    boo = boo_launchable(x, w, b)
    if boo is not None:
        paths["iree-turbine BOO launchable call"] = boo
    return interleaved_us(paths, rounds=rounds)


# ------------------------------------------------------------------ report
def med(runs: list[dict], step: str | None = None) -> float:
    return statistics.median(r["total"] if step is None else r["steps"][step] for r in runs)


def report(loader: dict[str, list[dict]], sizes: dict[str, str], jit, steady_us, versions, load, steady_rounds,
           imports, nice: int | None = None) -> str:
    import torch

    one = loader[ONE]
    lines = ["# Latency: prebuilt bundle vs iree-turbine BOO JIT", ""]
    lines.append(f"Kernel: layer_norm float32 {'x'.join(map(str, SHAPE))}, normalized {NORM[0]}, weight + bias, "
                 "mask 1 (forward), CPU (the best CPU target of each bundle; local-task).")
    lines.append("")
    lines.append(f"Machine: {platform.platform()}; CPU {cpu_model()}; {os.cpu_count()} logical CPUs "
                 f"(nproc); torch threads {torch.get_num_threads()}; this process and those it starts at nice "
                 f"{nice} (other sessions' work waits).")
    lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    lines.append("")
    lines.append(f"## Cold start: process start -> first result (median of {len(one)} fresh processes per bundle, "
                 f"{len(jit)} of the JIT, taken in turn)")
    lines.append("")
    lines.append("| path | total (s) | steps (median s) | max abs error vs torch |")
    lines.append("|---|---:|---|---:|")
    for name, runs in [*((f"loader, {b}: open_bundle + first call", r) for b, r in loader.items()),
                       ("BOO JIT: get_launchable + first call (file cache off)", jit)]:
        steps = "; ".join(f"{s} {med(runs, s):.3f}" for s in runs[0]["steps"])
        lines.append(f"| {name} | {med(runs):.3f} | {steps} | {max(r['err'] for r in runs):.2g} |")
    jt = med(jit)
    jp = jt - med(jit, "import torch")
    lines.append("")
    lines.append("Per bundle (medians, ms; after `import torch`: import of the loader, `open_bundle`, first call):")
    lines.append("")
    lines.append("| bundle | file | open_bundle | first call | open + first call | vs the one-kernel bundle's | "
                 "after import torch | JIT / loader after import torch |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = med(one, "open_bundle") + med(one, "first call")
    for b, runs in loader.items():
        o, f = med(runs, "open_bundle"), med(runs, "first call")
        after = med(runs) - med(runs, "import torch")
        lines.append(f"| {b} | {sizes[b]} | {o * 1e3:.1f} | {f * 1e3:.1f} | {(o + f) * 1e3:.1f} | "
                     f"{(o + f) / base:.2f}x | {after * 1e3:.1f} | **{jp / after:.0f}x** |")
    lines.append("")
    syn, dflt = loader.get(SYNTHETIC), loader.get(DEFAULT)
    if syn is not None:
        r = (med(syn, "open_bundle") + med(syn, "first call")) / base
        lines.append(f"* `open_bundle` + first call of the 500 x 8 bundle: {r:.2f}x the one-kernel bundle's "
                     f"(goal: at most 2x): **{'met' if r <= 2 else 'not met'}**.")
    if dflt is not None:
        r = jp / (med(dflt) - med(dflt, "import torch"))
        lines.append(f"* The default bundle against the BOO JIT's first call after `import torch` ({jp:.3f} s): "
                     f"{r:.0f}x faster (goal: at least 50x): **{'met' if r >= 50 else 'not met'}**.")
    lines.append(f"* Python start-up and `import torch` ({med(one, 'import torch'):.2f} s) are in every total; "
                 f"end to end, the JIT takes {jt / med(one):.1f}x the one-kernel bundle's time.")
    lines.append("")
    lines.append(f"Start-up of the loader (median of {len(one)} fresh processes, after `import torch`, bytecode "
                 "compiled as a pip install leaves it), per bundle:")
    lines.append("")
    lines.append("| step | target ms | " + " | ".join(f"{b} ms" for b in loader) + " |")
    lines.append("|---|---:|" + "---:|" * len(loader))
    for step, target in STARTUP_TARGETS_MS.items():
        got = [med(runs, step) * 1e3 for runs in loader.values()]
        lines.append(f"| {step} | {target} | " + " | ".join(f"{g:.1f}" + ("" if g <= target else " (**over**)")
                                                             for g in got) + " |")
    lines.append("")
    ml, rest = imports
    heavy = sorted({m for runs in loader.values() for r in runs for m in r["heavy"]})
    lines.append(f"The loader never runs `import iree.runtime`: in a fresh process after torch that import costs "
                 f"{ml + rest:.2f} s, of which {ml:.2f} s is `import ml_dtypes` (iree/runtime/dtypes.py imports it "
                 "unconditionally). The loader reaches the native extension directly "
                 "(`boo_build/loader/native.py`), so its first call is device creation, checksum, module load "
                 "and the call itself. Modules present in the loader's process after its first call, of "
                 f"ml_dtypes, iree.runtime, iree.compiler, iree.turbine: {', '.join(heavy) if heavy else 'none'}.")
    lines.append("")
    lines.append(f"## Steady state: one call ({steady_rounds} rounds of 100 calls per path, paths interleaved "
                 "round-robin, after 30 warm-up calls)")
    lines.append("")
    floor = steady_us["bare iree.runtime invoke (pre-imported args)"]
    lines.append("| path | median us/call | best us/call | median vs bare iree.runtime | median vs torch F.layer_norm |")
    lines.append("|---|---:|---:|---:|---:|")
    eager = steady_us["torch eager: F.layer_norm"]
    for name, r in steady_us.items():
        lines.append(f"| {name} | {r['median']:.1f} | {r['min']:.1f} | {r['median'] / floor['median']:.2f}x | "
                     f"{r['median'] / eager['median']:.2f}x |")
    lines.append("")
    lines.append(f"Load average (1 min) during the run: {load[0]:.2f} at start, {load[1]:.2f} at the end, on "
                 f"{os.cpu_count()} CPUs: other processes shared the machine, so absolute numbers are noisy; "
                 "the interleaving keeps the ratios comparable.")
    lines.append("")
    lines.append("The bare invoke re-uses one argument list and never converts outputs (the floor of any "
                 "Python caller). KernelRunner adds DLPack import of the three inputs and export of the three "
                 "outputs; Bundle.native_layer_norm adds argument checks and the signature-key lookup.")
    lines.append("")
    return "\n".join(lines)


ONE, DEFAULT, SYNTHETIC = "one kernel x 1 target", "the default manifest's", "500 kernels x 8 targets"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes of the BOO JIT path (default 3)")
    ap.add_argument("--loader-repeats", type=int, default=15, help="fresh processes per bundle (default 15)")
    ap.add_argument("--rounds", type=int, default=15, help="steady-state rounds (default 15)")
    ap.add_argument("--default-bundle", type=Path, default=ROOT / "artifacts" / "boo-norms-0.1.0.tar.zst",
                    help="the default manifest's bundle (make build's)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "latency.md")
    ns = ap.parse_args()
    from importlib.metadata import version

    if not ns.default_bundle.exists():
        raise SystemExit(f"{ns.default_bundle} not found: run make build first (or name it: --default-bundle)")
    from boo_build.stages.bench_process import raise_priority

    versions = {d: version(d) for d in ("torch", "iree-turbine", "iree-base-compiler", "iree-base-runtime")}
    load0 = os.getloadavg()[0]
    nice = raise_priority()  # this process and the fresh ones it starts (as a build's benchmarks): other work waits
    with tempfile.TemporaryDirectory(prefix="boo-latency-") as tmp:
        print("building the bundles ...", flush=True)
        bundle, key = build_bundle(Path(tmp))
        bundles = {ONE: bundle, DEFAULT: ns.default_bundle,
                   SYNTHETIC: synthetic_bundle(Path(tmp), bundle, ns.default_bundle)}
        sizes = {name: f"{p.stat().st_size / 2**20:.1f} MiB" if p.stat().st_size > 2**20
                 else f"{p.stat().st_size / 1024:.0f} KiB" for name, p in bundles.items()}
        compile_bytecode()
        print(f"cold start x{ns.loader_repeats} per bundle (loader), x{ns.repeats} (JIT) ...", flush=True)
        loader, jit = cold_runs(ns.repeats, bundles, ns.loader_repeats)
        imports = runtime_import_cost()
        print("steady state ...", flush=True)
        steady_us = steady(bundle, key, ns.rounds)
    text = report(loader, sizes, jit, steady_us, versions, (load0, os.getloadavg()[0]), ns.rounds, imports, nice)
    print(text)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(text)
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
