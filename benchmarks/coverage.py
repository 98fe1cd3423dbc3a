"""Which spelling of each kernel compiles for which target: the coverage table.

For every target of the catalogue and a manifest of the shapes users meet (``MANIFEST``
below: hidden sizes 768 to 5120 and two odd widths, layer and RMS norm forwards and
backwards, group norm at Stable Diffusion's shapes; float32 and a half type), each
kernel's spellings are compiled with iree-compile as the build compiles them (the
exported MLIR on stdin, the target's flags, ``candidates.variant_flags``):

* its implementations (``aten``, ``manual``) and the variants the build tries on the
  target (``candidates.variants``: ``fused`` on GPU targets, ``nosd``/``lanes`` on CPU ones);
* where an implementation's own module fails (in iree-compile, not by the time limit), each fallback variant
  (``candidates.fallback_variants``) of that implementation, every one (the build
  stops at the first that works; this table says which of them would).

A kernel "builds" where one of the first compiles, takes a "fallback" where only the
second do (the build's fallback step ships the first of them in its order), and is
"MISSING" where nothing compiles. A dtype the target has no types for (half precision
on the portable ``vulkan`` target: float16, and bfloat16 of an odd width; an even one is built
there as 32-bit words, ``candidates.words_base``) is "n/a", as the build says. Nothing is validated
here: a kernel that compiles may still fail validation (docs/building.md, "Fallbacks").

Writes ``benchmarks/results/coverage.md`` (the table over the whole manifest and
catalogue, each IREE error with where it happens, which variant avoids it and a
reproducer: the smallest module failing with it, in ``benchmarks/results/coverage/``,
and the command line) and ``coverage.json`` (every compile; a rerun with the same
compiler reuses it, so an interrupted run continues, and a run for some targets or
kernels adds to the table). Compiling everything for every target takes hours on two
cores: ``--subsets`` compiles each target's subset (``SUBSETS``), the table says what ran.

    .venv/bin/python benchmarks/coverage.py [--targets T1,T2] [--subsets] [--only REGEX] [--jobs 2] [--timeout 300]
    .venv/bin/python benchmarks/coverage.py --report-only
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

from boo_build.candidates import (
    Candidate,
    applies,
    apply_variant,
    export_variant,
    fallback_variants,
    fallbacks,
    is_base,
    variant_flags,
    variants,
    with_base,
    words_base,
)
from boo_build.manifest.reader import parse_toml
from boo_build.signature import ModuleId
from boo_build.stages.compile import compile_mlir, compiler_path, compiler_version
from boo_build.targets import catalogue, dtype_problem

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REPRO = RESULTS / "coverage"
EXPORTS = Path.home() / ".cache" / "boo-build-coverage"  # exported modules, for reruns (torch's export is slow)

WIDTHS = (768, 1024, 2048, 4096, 5120, 4544, 100)  # BERT..Llama-13B's hidden sizes; Falcon-7B's; an odd one
ROWS = (2, 128)  # batch x sequence: 256 rows (Vulkan's single-dispatch failures start at 16)
MANIFEST = f"""
[bundle]
name = "coverage"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shapes = {[[*ROWS, w] for w in WIDTHS]}
dtype = ["float32", "bfloat16"]
masks = [1, 14]

[[kernels]]
op = "rms_norm"
input_shapes = {[[*ROWS, w] for w in WIDTHS]}
dtype = ["float32", "bfloat16"]
affine = true
eps = 1e-6
masks = [1, 6]

# the default manifest's kernels whose manual implementation fails somewhere (docs/building.md)
[[kernels]]
op = "layer_norm"
input_shape = [8, 128, 768]
dtype = "float32"
masks = [14]

[[kernels]]
op = "layer_norm"
input_shape = [10, 32, 42, 32]
normalized_shape = [42, 32]
dtype = "float32"
masks = [14]

# Stable Diffusion 1.x: the UNet's group norms (32 groups) and the VAE's
[[kernels]]
op = "group_norm"
input_shapes = [[2, 320, 64, 64], [2, 640, 32, 32], [2, 1280, 16, 16], [1, 512, 64, 64]]
groups = 32
dtype = ["float32", "float16"]
masks = [1, 14]
"""


# What the recorded run compiled where it could not compile everything (2 cores shared, about
# 100 minutes): the whole manifest for cpu, cpu-x86-64-v4, gfx90a and part of it for gfx942 first,
# then, with --subsets, these subsets. The widths whose results show the pattern on those:
# on GPU targets 768 (the common one) and 5120 (where manual backwards fail to distribute on
# gfx90a); on Vulkan ones 768, 4096 and the odd 100; the group norms where something failed.
_GPU = r"-2x128x(768|5120)-|-8x128x768-|-10x32x42x32-|-g32-wb-m1$|-f16-1x512x64x64-g32-wb-m14$"
_VULKAN = r"-2x128x(768|4096|100)-|-8x128x768-|-10x32x42x32-|-2x1280x16x16-|-1x512x64x64-"
SUBSETS = {"gfx942": _GPU, "gfx950": _GPU, "gfx1100": _GPU, "gfx1201": _GPU, "sm_80": _GPU,
           "vulkan-llvmpipe": _VULKAN, "vulkan-ampere": _VULKAN, "vulkan-rdna3": _VULKAN}


def _short_error(error: str) -> str:
    """The first error line, without what differs between modules (SSA names, locations, sizes)."""
    line = next((ln for ln in error.splitlines() if "error" in ln), error.splitlines()[0] if error else "")
    line = re.sub(r"^.*?error: ", "", line)
    line = re.sub(r"%\w+", "%_", line)
    line = re.sub(r"'[\w$.]+\$async_dispatch_\d+_[\w]+'", "'<dispatch>'", line)
    line = re.sub(r"\d+ bytes", "N bytes", line)
    line = re.sub(r"vector<[\dx]+x?(\w+)>", r"vector<..x\1>", line)
    return line.strip()[:160]


class Coverage:
    def __init__(self, targets, jobs: int, timeout: float, cache: Path):
        self.targets, self.jobs, self.timeout, self.cache = targets, jobs, timeout, cache
        self.compiler = compiler_version()
        old = json.loads(cache.read_text()) if cache.exists() else {}
        self.results: dict[str, dict] = old.get("compiles", {}) if old.get("compiler") == self.compiler else {}
        self.mlir: dict[tuple[ModuleId, str], str | None] = {}

    # -- exports -------------------------------------------------------------
    def export(self, mid: ModuleId, variant: str) -> str | None:
        """The module's MLIR for ``variant`` (its export variant's, then the variant applied);
        exports are kept in ``EXPORTS`` (an interrupted or later run reuses them)."""
        ev = export_variant(variant)
        if (mid, ev) not in self.mlir:
            from boo_build.stages.export import export_module

            path = EXPORTS / f"{mid.key}{'+' + ev if ev else ''}.mlir"
            if path.exists():
                self.mlir[(mid, ev)] = path.read_text() or None
            else:
                res = export_module(mid, ev)
                self.mlir[(mid, ev)] = res.mlir if res.ok else None
                EXPORTS.mkdir(parents=True, exist_ok=True)
                path.write_text(res.mlir if res.ok else "")
        text = self.mlir[(mid, ev)]
        return None if text is None else (apply_variant(variant, text) if variant else text)

    # -- compiles ------------------------------------------------------------
    @staticmethod
    def key(target: str, mid: ModuleId, variant: str) -> str:
        return f"{target}/{mid.key}" + (f"+{variant}" if variant else "")

    def compile_all(self, work: list[tuple[str, ModuleId, str]]) -> None:
        todo = [w for w in work if self.key(*w) not in self.results]
        print(f"{len(work) - len(todo)} compiles known, {len(todo)} to run", flush=True)
        texts = {w: self.export(w[1], w[2]) for w in todo}  # exports first (one at a time, in torch)
        cat = catalogue()

        def one(w):
            tname, mid, v = w
            text = texts[w]
            if text is None:
                return w, {"ok": False, "error": "export unavailable", "seconds": 0.0}
            flags = variant_flags(v, cat[tname].flags)
            res = compile_mlir(text, flags, timeout=self.timeout)
            return w, {"ok": res.ok, "error": "" if res.ok else _short_error(res.error), "seconds": round(res.seconds, 1)}

        t0, done = time.monotonic(), 0
        with ThreadPoolExecutor(self.jobs) as pool:
            for w, rec in pool.map(one, todo):
                self.results[self.key(*w)] = rec
                done += 1
                if done % 20 == 0 or not rec["ok"]:
                    print(f"[{done}/{len(todo)} {time.monotonic() - t0:.0f}s] {self.key(*w)}: "
                          f"{'ok' if rec['ok'] else rec['error']}", flush=True)
                self.save()  # an interrupted run loses nothing

    def save(self) -> None:
        tmp = self.cache.with_suffix(".tmp")
        tmp.write_text(json.dumps({"compiler": self.compiler, "compiles": self.results}, indent=1, sort_keys=True)
                       + "\n")
        tmp.replace(self.cache)  # whole or not at all, when the run is stopped

    def ok(self, target: str, mid: ModuleId, variant: str) -> bool | None:
        rec = self.results.get(self.key(target, mid, variant))
        return None if rec is None else rec["ok"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", help="comma-separated targets to compile for (default: the whole catalogue)")
    ap.add_argument("--jobs", type=int, default=2, help="compiles at once")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds per compile (the build's default is 900; a few float32 backwards take "
                         "5-10 minutes on gfx targets: recorded as timed out, their fallbacks not compiled)")
    ap.add_argument("--only", help="a regular expression: compile only the kernels whose keys it match (the "
                                   "table still lists every kernel, 'not run' where nothing was compiled)")
    ap.add_argument("--subsets", action="store_true",
                    help="compile each target's subset of the kernels (SUBSETS), where it has one")
    ap.add_argument("--report-only", action="store_true", help="write the table from the recorded compiles")
    ap.add_argument("--out", type=Path, default=RESULTS / "coverage.md")
    args = ap.parse_args()

    cat = catalogue()
    manifest = parse_toml(MANIFEST, Path("coverage.toml"), catalogue=cat)
    kernels = list(manifest.kernels)
    cov = Coverage(list(cat), args.jobs, args.timeout, args.out.with_suffix(".json"))
    tnames = [] if args.report_only else args.targets.split(",") if args.targets else list(cat)
    for t in tnames:  # one target at a time: its table column is complete before the next starts
        only = args.only or (SUBSETS.get(t) if args.subsets else None)
        chosen = [k for k in kernels if not only or re.search(only, k.signature.key)]
        print(f"{t}: {len(chosen)} of {len(kernels)} kernels", flush=True)
        # 1. every kernel's own spellings
        cov.compile_all([(t, mid, v) for req in chosen if usable(t, req) for mid, v in own(t, req)])
        # 2. where an implementation's module failed in iree-compile, each of its fallback variants
        second = []
        for req in chosen:
            if not usable(t, req):
                continue
            have = set(own(t, req))
            for impl in req.impls:
                mid = ModuleId(req.signature, impl)
                base = words_base(cat[t], mid)
                if cov.ok(t, mid, base) is False and not timed_out(cov.results[cov.key(t, mid, base)]):
                    second += [(t, mid, with_base(v, base)) for v in fallback_variants(cat[t])
                               if applies(v, mid) and (mid, with_base(v, base)) not in have]
        cov.compile_all(second)
    write_report(args.out, cov, list(cat), kernels)
    print(f"wrote {args.out}")
    return 0


def own(t: str, req) -> list[tuple[ModuleId, str]]:
    """(module id, variant) the build compiles for the kernel on ``t``, before any fallback."""
    out = []
    for impl in req.impls:
        mid = ModuleId(req.signature, impl)
        base = words_base(catalogue()[t], mid)  # bfloat16 as 32-bit words where the target has no 16-bit types
        out += [(mid, with_base(v, base)) for v in ("",) + tuple(v for v in variants(catalogue()[t]) if applies(v, mid))]
    return out


def usable(t: str, req) -> bool:
    return dtype_problem(catalogue()[t], req.signature.dtype) is None or all(
        words_base(catalogue()[t], ModuleId(req.signature, i)) for i in req.impls)


def timed_out(rec: dict) -> bool:
    return rec["error"].startswith("timed out")


def _numel(mid: ModuleId) -> int:
    n = 1
    for d in mid.signature.input_shape:
        n *= d if isinstance(d, int) else 1
    return n


def write_report(out: Path, cov: Coverage, tnames: list[str], kernels) -> None:
    """The table over the whole manifest and catalogue, from every compile recorded."""
    cat = catalogue()
    errors: dict[str, str] = {}  # error text -> id

    def eid(text: str) -> str:
        return errors.setdefault(text, f"E{len(errors) + 1}")

    def rec(t, mid, v):
        return cov.results.get(cov.key(t, mid, v))

    table, missing = [], []
    counts = dict.fromkeys(("builds", "fallback", "missing", "timed out", "n/a", "not run"), 0)
    run_per_target = dict.fromkeys(tnames, 0)
    avoided: dict[str, dict[str, list[bool]]] = {}  # error id -> fallback variant -> compiled?
    where: dict[str, set] = {}  # error id -> (target, spelling) where it happens
    failing: dict[str, list[tuple[str, ModuleId, str]]] = {}  # error id -> (target, module, variant)
    for req in kernels:
        sig = req.signature
        cells = []
        for t in tnames:
            if not usable(t, req):
                cells.append("n/a")
                counts["n/a"] += 1
                continue
            spellings = own(t, req)
            if any(rec(t, m, v) is None for m, v in spellings):
                cells.append("·")
                counts["not run"] += 1
                continue
            run_per_target[t] += 1
            order = [(ModuleId(sig, c.impl), c.variant)
                     for c in fallbacks(req.impls, cat[t], lambda i: ModuleId(sig, i), False, False)]
            bad: dict[str, str] = {}
            for m, v in spellings + order:
                r = rec(t, m, v)
                if r is not None and not r["ok"]:
                    name, e = Candidate(m.impl, v).module, eid(r["error"])
                    where.setdefault(e, set()).add((t, name))
                    failing.setdefault(e, []).append((t, m, v))
                    if (m, v) in spellings:
                        bad[name] = e
            for m, v in spellings:  # a failed implementation: which of its fallbacks compile
                if is_base(v) and rec(t, m, v)["ok"] is False:
                    for fv in (with_base(f, v) for f in fallback_variants(cat[t])):
                        if (m, fv) not in spellings and (r := rec(t, m, fv)) is not None:
                            avoided.setdefault(bad[Candidate(m.impl, v).module], {}).setdefault(fv, []).append(r["ok"])
            good = [Candidate(m.impl, v).module for m, v in spellings if cov.ok(t, m, v)]
            if good:
                counts["builds"] += 1
                bases = [(ModuleId(sig, i), words_base(cat[t], ModuleId(sig, i))) for i in req.impls]
                text = "all" if all(cov.ok(t, m, b) for m, b in bases) else ", ".join(good)
                if any(b for _, b in bases):
                    text += " (as words)"
                if bad:
                    text += " (" + ", ".join(f"{n} {e}" for n, e in sorted(bad.items())) + ")"
            elif (first := next((Candidate(m.impl, v).module for m, v in order if cov.ok(t, m, v)), None)):
                counts["fallback"] += 1
                text = f"**fallback {first}** (" + ", ".join(sorted(set(bad.values()))) + ")"
            else:
                tried = {Candidate(m.impl, v).module: rec(t, m, v) for m, v in spellings + order}
                errs = sorted({eid(r["error"]) for r in tried.values() if r is not None and not r["ok"]})
                if any(r is not None and timed_out(r) for r in tried.values()):
                    counts["timed out"] += 1
                    text = "**timed out** " + ", ".join(errs)
                else:
                    counts["missing"] += 1
                    text = "**MISSING** " + ", ".join(errs)
                    missing.append((sig, t, {n: eid(r["error"]) for n, r in tried.items() if r is not None},
                                    [n for n, r in tried.items() if r is None]))
            cells.append(text)
        table.append(f"| `{sig.key}` | " + " | ".join(cells) + " |")

    # a reproducer per error: the smallest module failing with it (its MLIR and the command line)
    REPRO.mkdir(parents=True, exist_ok=True)
    for stale in REPRO.glob("*.mlir"):
        stale.unlink()
    repro: dict[str, str] = {}
    for e, cases in failing.items():
        t, mid, v = min(cases, key=lambda c: (_numel(c[1]), bool(c[2]), c[0]))
        mlir = cov.export(mid, v)
        if mlir is None:
            continue
        path = REPRO / f"{e}-{mid.key}{'+' + v if v else ''}.mlir"
        path.write_text(mlir)
        repro[e] = (f"`iree-compile benchmarks/results/coverage/{path.name} "
                    f"{' '.join(variant_flags(v, cat[t].flags))} -o k.vmfb`")

    n = len(cov.results)
    total = sum(r["seconds"] for r in cov.results.values())
    covered = ", ".join(f"{t} {k}" for t, k in run_per_target.items())
    lines = [
        "# Which spelling compiles where (coverage)",
        "",
        f"Made by `benchmarks/coverage.py` (last run {date.today().isoformat()}): {cpu_model()}, "
        f"{compiler_path().split('/')[-1]} ({cov.compiler}); {n} compiles, {total / 60:.0f} min of compile time "
        "in all, one or two at a time.",
        "Each kernel (rows; 256 rows of each hidden size: `2x128xW`, the default manifest's two kernels whose",
        "`manual` fails somewhere, and Stable Diffusion's group norms) on each target (columns): which of its",
        "spellings compile, as the build compiles them (no validation here).",
        "",
        "* `all`: every implementation compiles (aten and manual); otherwise the spellings that do. In",
        "  brackets each spelling that fails, with its error (below). A variant listed is one the build tries",
        "  on that target anyway (`fused`, `fused.nosplit` on GPU targets, `nosd`/`lanes` on the CPU).",
        "* **fallback X**: none of those compile; the build's fallback step ships X, the first fallback",
        "  variant in its order that compiles (docs/building.md, \"Fallbacks\").",
        "* **MISSING**: nothing compiles, fallbacks included; its errors and reproducers are listed below.",
        "* **timed out**: nothing compiled within the time limit (`timed out after N s`), not an IREE error;",
        "  the fallbacks of a timed-out implementation were not compiled.",
        "* `n/a`: a dtype the target has no types for (float16 on the portable `vulkan` target; its bfloat16 "
        "kernels of even widths build as 32-bit words, `(as words)`).",
        "* `·`: not run (not every kernel was compiled for every target: the compile time was bounded;",
        "  kernels run per target below).",
        "",
        f"Kernel x target cells: {counts['builds']} build, {counts['fallback']} by a fallback, {counts['missing']} "
        f"missing, {counts['timed out']} timed out, {counts['n/a']} n/a, {counts['not run']} not run.",
        f"Kernels run per target (of {len(kernels)}): {covered}.",
        "",
        "| kernel | " + " | ".join(tnames) + " |",
        "|---|" + "---|" * len(tnames),
        *table,
        "",
        "## IREE errors, where they happen and what avoids them",
        "",
        "For each error: the spellings that failed with it, and for a failed implementation (not a variant)",
        "its fallback variants and how often each compiled there (`novd`: no vector distribution of",
        "reductions; `nosplit`: no split reduction; `nosd`: no single dispatch; `lanes.nosd`: the lanes",
        "export without it; `stack`: a 128 KiB stack bound). Each reproducer is the smallest module failing",
        "with the error, compiled as the build compiles it.",
        "",
    ]
    for text, e in errors.items():
        places = sorted(where.get(e, ()))
        tgts = sorted({t for t, _ in places})
        names = sorted({n for _, n in places})
        lines.append(f"* **{e}** `{text}`: {len(places)} spelling(s) ({', '.join(names)}) on {', '.join(tgts)}."
                     + (f" Reproducer: {repro[e]}" if e in repro else ""))
        for v, oks in sorted(avoided.get(e, {}).items()):
            lines.append(f"  * {v}: compiles in {sum(oks)} of {len(oks)}")
    lines += ["", "## Missing kernels", ""]
    for sig, t, tried, unrun in missing:
        lines.append(f"* `{sig.key}` on `{t}`: " + "; ".join(f"{n} {e}" for n, e in tried.items())
                     + (f" (not compiled: {', '.join(unrun)})" if unrun else ""))
    if not missing:
        lines.append("None where compiled: every kernel run compiles on its targets, in one spelling or another.")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
