"""Build-graph timings on a manifest (default: manifests/default.toml).

Measures, each in a fresh output folder where it says so:
  1. cold build at -j 1
  2. cold build at -j N (N = cores)
  3. no-op rebuild (nothing to do)
  4. rebuild after changing one manifest entry (one dtype list shrinks by one
     element's worth: a new eps on the last [[kernels]] entry)
  5. with --traffic-cost: a cold build at -j N with --no-traffic, before the one
     of step 2: what the GPU traffic model and the variants it ranks add

Runs `boo-build build ... --no-validate` (export, compile, pack: the graph
itself; validation and benchmarks are timed by their own scripts) and writes
benchmarks/results/build_times.md. Usage:

    .venv/bin/python benchmarks/build_times.py [--manifest PATH] [--skip-j1] [--full-out artifacts]
        [--traffic-cost] [--keep-out DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def build(manifest: Path, out: Path, jobs: int, *extra: str) -> float:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    t0 = time.perf_counter()
    subprocess.run([str(BIN / "boo-build"), "build", str(manifest), "--out", str(out),
                    "-j", str(jobs), "-q", *(extra or ("--no-validate",))], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def full_noop(manifest: Path, out: Path, jobs: int, runs: int = 3) -> tuple[float, float]:
    """(first pass, median no-op) of the whole graph (validate, bench, report,
    pack) in an existing output folder such as the one `make build` fills.
    The first pass brings it up to date and is reported, not counted."""
    first = build(manifest, out, jobs, "--allow-missing")
    times = sorted(build(manifest, out, jobs, "--allow-missing") for _ in range(runs))
    return first, times[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", type=Path, default=ROOT / "manifests" / "default.toml")
    ap.add_argument("--skip-j1", action="store_true", help="skip the -j 1 cold build")
    ap.add_argument("--full-out", type=Path,
                    help="also time a no-op of the whole graph in this existing output folder (e.g. artifacts)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "build_times.md")
    ap.add_argument("--traffic-cost", action="store_true",
                    help="also a cold -j N build with --no-traffic, just before the one with it")
    ap.add_argument("--keep-out", type=Path, help="keep the cold -j N build's output in this folder")
    ns = ap.parse_args()
    cores = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="boo-build-times-"))
    manifest = work / ns.manifest.name
    shutil.copy(ns.manifest, manifest)
    rows = []
    try:
        if not ns.skip_j1:
            rows.append(("cold build, -j 1", build(manifest, work / "j1", 1)))
        if ns.traffic_cost:
            rows.append((f"cold build, -j {cores}, --no-traffic", build(manifest, work / "plain", cores,
                                                                       "--no-validate", "--no-traffic")))
        jn_out = work / "jn"
        rows.append((f"cold build, -j {cores}", build(manifest, jn_out, cores)))
        rows.append(("no-op rebuild", build(manifest, jn_out, cores)))
        if ns.keep_out:  # before the edit below changes it
            shutil.rmtree(ns.keep_out, ignore_errors=True)
            shutil.copytree(jn_out, ns.keep_out, symlinks=True)
        text = manifest.read_text()
        # one entry changes: the last [[kernels]] table gets a different eps
        idx = text.rfind("[[kernels]]")
        edited = text[:idx] + re.sub(r"eps = [0-9.e-]+", "eps = 2e-6", text[idx:], count=1) \
            if "eps =" in text[idx:] else text + "eps = 2e-6\n"
        manifest.write_text(edited)
        rows.append(("rebuild after editing one entry", build(manifest, jn_out, cores)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    full = full_noop(ns.manifest, ns.full_out, cores) if ns.full_out else None
    base = dict(rows)
    lines = [
        "# Build times",
        "",
        f"Manifest: `{ns.manifest.relative_to(ROOT) if ns.manifest.is_relative_to(ROOT) else ns.manifest}`; "
        f"`boo-build build --no-validate` (export, compile, pack).",
        f"Machine: {cpu_model()}, {cores} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}. Shared machine: expect noise; compare ratios.",
        "",
        "| step | seconds |",
        "|---|---|",
    ]
    lines += [f"| {name} | {secs:.2f} |" for name, secs in rows]
    j1 = base.get("cold build, -j 1")
    jn = base.get(f"cold build, -j {cores}")
    if j1 and jn:
        lines += ["", f"Speed-up of -j {cores} over -j 1: **{j1 / jn:.2f}x**."]
    plain = base.get(f"cold build, -j {cores}, --no-traffic")
    if plain and jn:
        lines += ["", f"The GPU traffic model and the variants it ranks (`--no-traffic` leaves both out): "
                  f"**{(jn / plain - 1) * 100:+.1f}%** on a cold build at -j {cores} ({plain:.0f} s -> {jn:.0f} s, "
                  "one after the other in this run)."]
    lines += ["", f"No-op rebuild: **{base['no-op rebuild']:.2f} s** "
              "(process start, manifest load, doit's up-to-date checks)."]
    if full:
        lines += ["", f"No-op rebuild of the whole graph (validation, benchmarks, report, pack) in "
                  f"`{ns.full_out}`: **{full[1]:.2f} s** (median of 3; the pass before them took {full[0]:.2f} s)."]
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
