"""The README's build times, measured: the quick start's build and `make build`'s, quiet and loaded.

Each build runs in a fresh output folder, cold (nothing built before), as the
README tells a new user to run it, and is timed from start to end:

* ``quickstart``: the README's quick-start manifest (``quickstart.manifest()``),
  ``boo-build build quickstart.toml --out OUT`` at its default ``-j``;
* ``default``: ``boo-build build manifests/default.toml --out OUT``, what
  ``make build`` runs after installing (``doit build``: every manifest in
  ``manifests/``).

"quiet" is the machine otherwise idle; "loaded" is the same build beside
``--hogs`` processes spinning on the CPU (one per CPU by default), as a shared
build machine or a laptop doing other work. Each build's output is kept as a
log whose every line is prefixed by the unix time it was printed (``START``
first, ``END`` last): ``benchmarks/build_progress.py`` makes replay fixtures
of them (``fixture OUT LOG``) and says how well the time-left estimate did
(``evaluate LOG``).

    .venv/bin/python benchmarks/readme_figures.py quickstart [--loaded-only | --quiet-only] [--keep DIR]
    .venv/bin/python benchmarks/readme_figures.py default [--loaded-only | --quiet-only] [--keep DIR]

Results accumulate in ``benchmarks/results/readme_figures.json`` (one entry per
build and condition, the latest run's) and are written out as
``benchmarks/results/readme_figures.md``, the machine described.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import quickstart  # noqa: E402 - benchmarks/ on sys.path
from machine import Hogs, cpu_model  # noqa: E402 - benchmarks/ on sys.path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STATE = RESULTS / "readme_figures.json"
BIN = Path(sys.executable).parent
WHAT = {"quickstart": "the README's quick start (`boo-build build quickstart.toml`)",
        "default": "`make build`'s build (`boo-build build manifests/default.toml`)"}


def timed_build(which: str, folder: Path, log: Path) -> dict:
    """One cold build of ``which`` in ``folder``, its output timestamped into ``log``; its figures."""
    folder.mkdir(parents=True, exist_ok=True)
    if which == "quickstart":
        (folder / "quickstart.toml").write_text(quickstart.manifest())
        manifest = "quickstart.toml"
    else:
        manifest = str(ROOT / "manifests" / "default.toml")
    cmd = [str(BIN / "boo-build"), "build", manifest, "--out", str(folder / "out")]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
    before, t0 = os.times(), time.time()
    lines = [f"START {t0:.6f}"]
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(f"{time.time():.6f} {line.rstrip()}")
    rc = proc.wait()
    t1 = time.time()
    lines.append(f"END {t1:.6f}")
    log.write_text("\n".join(lines) + "\n")
    if rc != 0:
        raise SystemExit(f"{which} build failed ({rc}); its output: {log}")
    after = os.times()
    cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    return {"seconds": round(t1 - t0, 1), "when": datetime.date.today().isoformat(), "cpu_s": round(cpu, 1)}


def minutes(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def write_markdown(state: dict) -> str:
    lines = ["# README figures: build times, quiet and loaded", "",
             "Measured by `benchmarks/readme_figures.py`: each build cold, in a fresh output folder, at its default "
             "`-j`, timed from start to end; \"loaded\": beside one process spinning on each CPU (as other work on a "
             "shared machine or a laptop). The README quotes these.", "",
             f"Machine: {state.get('machine', '?')}.", "",
             "| build | quiet | loaded | loaded / quiet | CPU time (quiet / loaded) | measured |",
             "|---|---:|---:|---:|---|---|"]
    for which in ("quickstart", "default"):
        q, ld = state.get(which, {}).get("quiet"), state.get(which, {}).get("loaded")
        if not q and not ld:
            continue
        ratio = f"{ld['seconds'] / q['seconds']:.1f}x" if q and ld else "-"
        when = ", ".join(sorted({x["when"] for x in (q, ld) if x}))
        cpu = " / ".join(minutes(x["cpu_s"]) if x and "cpu_s" in x else "-" for x in (q, ld))
        lines.append(f"| {WHAT[which]} | {minutes(q['seconds']) if q else '-'} | "
                     f"{minutes(ld['seconds']) if ld else '-'} | {ratio} | {cpu} | {when} |")
    lines += ["", "CPU time: the build's processes' (the build, its compilers, its benchmark process), user and "
              "system. Loaded, the build waits for the CPUs the hogs hold, but for its benchmarks, which run at a "
              "raised priority."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("which", choices=("quickstart", "default"))
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--quiet-only", action="store_true")
    only.add_argument("--loaded-only", action="store_true")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="CPU hogs for the loaded build")
    ap.add_argument("--keep", type=Path, help="where the builds and their logs go (default: a temporary folder)")
    ns = ap.parse_args()
    base = ns.keep or Path(tempfile.mkdtemp(prefix="readme-figures-"))
    state = json.loads(STATE.read_text()) if STATE.is_file() else {}
    state["machine"] = f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.platform()}"
    conditions = ["quiet"] * (not ns.loaded_only) + ["loaded"] * (not ns.quiet_only)
    for cond in conditions:
        folder = base / f"{ns.which}-{cond}"
        log = base / f"{ns.which}-{cond}.log"
        if cond == "loaded":
            with Hogs(ns.hogs):
                got = timed_build(ns.which, folder, log)
            got["hogs"] = ns.hogs
        else:
            got = timed_build(ns.which, folder, log)
        state.setdefault(ns.which, {})[cond] = got
        print(f"{ns.which} {cond}: {got['seconds']} s ({log})", flush=True)
        STATE.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    md = write_markdown(state)
    (RESULTS / "readme_figures.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
