"""Selection stability on a busy machine: what a build ships, quiet and beside a CPU hog.

For each code version (this checkout, and ``--baseline``, another checkout of
boo-build: ``git worktree add /tmp/base HEAD~1``) and each manifest (the
README's quick start, and ``CPU_KERNELS``: 16 CPU kernels), the manifest is
built with benchmarks on a quiet machine, then its benchmarks are run again
(the same compiled kernels: the bench, select, report and pack tasks) beside
``--hogs`` processes that spin on the CPU: a rebuild in the same folder, which
keeps the previous build's decisions where the timings cannot tell otherwise
(``comparison.Previous``; a version before that decides afresh). The two
bundles are compared as ``boo-build diff`` compares them:

* selection changes: a kernel shipping another candidate, or its torch calls
  going elsewhere (torch eager, the kernel, or another set of sizes);
* recorded speed-ups over torch eager beyond ``FACTOR`` either way (the
  bundle's ``bench.csv``), and of those, how many were confirmed by a second
  pass of paired rounds (the target entry's ``timing``; a version without it
  confirmed none).

Builds run one at a time, each version's with its own code (``python -c`` with
its checkout first on ``sys.path``), in ``--out`` (default a temporary folder).

    .venv/bin/python benchmarks/selection_stability.py --baseline /tmp/base [--hogs 2] [--out DIR]

Markdown to stdout; ``--json PATH`` writes the numbers too.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quickstart  # noqa: E402 - benchmarks/ on sys.path
from machine import Hogs, cpu_model  # noqa: E402 - benchmarks/ on sys.path

FACTOR = 5.0

QUICKSTART = quickstart.manifest()

CPU_KERNELS = """\
[bundle]
name = "cpu16"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shapes = [[8, 128, 768], [4, 32, 96], [2, 16, 96]]
dtype = "float32"
masks = [1, 14]

[[kernels]]
op = "layer_norm"
input_shape = [2, 16, 96]
dtype = "float16"
masks = [1, 6]

[[kernels]]
op = "rms_norm"
input_shapes = [[4, 32, 96], [2, 128, 512]]
dtype = "float32"
masks = [1, 6]

[[kernels]]
op = "group_norm"
input_shape = [2, 64, 8, 8]
groups = 8
masks = [1, 14]
"""

MANIFESTS = {"quickstart": QUICKSTART, "cpu16": CPU_KERNELS}


def build(tree: Path, manifest: Path, out: Path) -> float:
    """``boo-build build MANIFEST --out OUT`` with ``tree``'s boo_build; its seconds."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from boo_build.cli import main; "
            "sys.exit(main(['build', sys.argv[2], '--out', sys.argv[3], '-q']))")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(tree), str(manifest), str(out)], env=env,
                          capture_output=True, text=True, cwd=manifest.parent)
    if proc.returncode != 0:
        raise SystemExit(f"build of {manifest} with {tree} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - t0


def bundle_of(out: Path, name: str) -> Path:
    return out / f"{name}-0.1.0.tar.zst"


def index_and_csv(path: Path) -> tuple[dict, list[dict]]:
    from boo_build.loader import read_archive

    a = read_archive(path)
    rows = list(csv.DictReader(io.StringIO(a.members["bench.csv"].decode()))) if "bench.csv" in a.members else []
    return a.index, rows


def changes(a: Path, b: Path) -> list[str]:
    """Selection changes between two bundles: ``boo-build diff``'s, and routing per size."""
    from boo_build.cli.diff import diff_indexes

    ia, _ = index_and_csv(a)
    ib, _ = index_and_csv(b)
    out = [c for c in diff_indexes(ia, ib)["changed"] if ": selection " in c or "torch tensors now run" in c]
    for key, k in ia["kernels"].items():
        for t, te in k["targets"].items():
            other = ib["kernels"].get(key, {}).get("targets", {}).get(t, {})
            ra, rb = (te.get("prefer_eager") or {}).get("by_rows"), (other.get("prefer_eager") or {}).get("by_rows")
            if ra and rb and ra != rb:
                out.append(f"{key} on {t}: torch calls per size {ra} -> {rb}")
    return out


def extremes(path: Path) -> tuple[int, int]:
    """(recorded speed-ups over eager beyond FACTOR either way, of them confirmed by a second pass)."""
    ix, rows = index_and_csv(path)
    n = confirmed = 0
    for r in rows:
        try:
            s = float(r.get("speedup_vs_eager") or "")
        except ValueError:
            continue
        if s > FACTOR or s < 1 / FACTOR:
            n += 1
            te = ix["kernels"][r["key"]]["targets"][r["target"]]
            if ((te.get("timing") or {}).get("eager") or {}).get("confirmed"):
                confirmed += 1
    return n, confirmed


def busy(path: Path) -> int | None:
    """Kernels whose timing says the machine was busy (None: a version that does not say)."""
    ix, _ = index_and_csv(path)
    flags = [te["timing"].get("busy") for k in ix["kernels"].values() for te in k["targets"].values()
             if te.get("timing")]
    return sum(1 for f in flags if f) if flags else None


def run_version(label: str, tree: Path, out: Path, hogs: int) -> dict:
    res = {}
    for name, text in MANIFESTS.items():
        d = out / label / name
        d.mkdir(parents=True, exist_ok=True)
        manifest = d / f"{name}.toml"
        manifest.write_text(text)
        quiet_s = build(tree, manifest, d / "out")
        quiet = d / f"{name}-quiet.tar.zst"
        shutil.copy(bundle_of(d / "out", name), quiet)
        # the same kernels benchmarked again (bench, select, report, pack), as a rebuild in the folder: the
        # select records stay (the previous decisions), the bench records go (so every benchmark runs again)
        shutil.rmtree(d / "out" / name / "bench", ignore_errors=True)
        with Hogs(hogs):
            load = os.getloadavg()[0]
            loaded_s = build(tree, manifest, d / "out")
        loaded = d / f"{name}-loaded.tar.zst"
        shutil.copy(bundle_of(d / "out", name), loaded)
        ch = changes(quiet, loaded)
        res[name] = {"changes": ch, "quiet_s": quiet_s, "loaded_s": loaded_s, "load": load,
                     "extremes_quiet": extremes(quiet), "extremes_loaded": extremes(loaded),
                     "busy_quiet": busy(quiet), "busy_loaded": busy(loaded),
                     "kernels": len(index_and_csv(quiet)[0]["kernels"])}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the version to compare with")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="CPU hog processes (default: one per CPU)")
    ap.add_argument("--out", type=Path, help="where the builds go (default: a temporary folder)")
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()
    out = ns.out or Path(tempfile.mkdtemp(prefix="stability-"))
    results = {"before": run_version("before", ns.baseline.resolve(), out, ns.hogs),
               "after": run_version("after", ROOT, out, ns.hogs)}
    print("# Selection stability: a quiet build and a build beside a CPU hog\n")
    print(f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {platform.platform()}; {ns.hogs} hog process(es) "
          f"during the loaded builds. Before: {ns.baseline}; after: this checkout.\n")
    print("| version | manifest | kernels | selection changes | speed-ups beyond 5x (quiet / loaded), confirmed | "
          "timed busy (quiet / loaded) | load average (loaded) | build s (quiet / loaded) |")
    print("|---|---|---:|---:|---|---|---:|---|")
    for version, res in results.items():
        for name, r in res.items():
            (eq, cq), (el, cl) = r["extremes_quiet"], r["extremes_loaded"]
            bq, bl = ("-" if b is None else b for b in (r["busy_quiet"], r["busy_loaded"]))
            print(f"| {version} | {name} | {r['kernels']} | {len(r['changes'])} | {eq} ({cq}) / {el} ({cl}) | "
                  f"{bq} / {bl} | {r['load']:.1f} | {r['quiet_s']:.0f} / {r['loaded_s']:.0f} |")
    for version, res in results.items():
        for name, r in res.items():
            if r["changes"]:
                print(f"\n{version}, {name}:\n" + "\n".join(f"* {c}" for c in r["changes"]))
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
