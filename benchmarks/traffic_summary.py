"""The traffic model's figures for a build's GPU kernels, per target, against the goals.

Reads a build's folder (``artifacts/boo-norms`` after ``make build``): the report's
shipped implementation per kernel and target, and every module's traffic record
(``traffic/<target>/<module>.json``, ``boo_build/stages/traffic.py``). Per target:
how many shipped forwards are one dispatch at most ``FORWARD_GOAL`` x the minimal
traffic, how many shipped combined backwards at most ``BACKWARD_GOAL`` x, and every
kernel that misses, with its dispatches and ratio. All figures are modelled, not
measured. Writes Markdown to stdout, and to ``--out`` when given.

    .venv/bin/python benchmarks/traffic_summary.py [artifacts/boo-norms] [--out benchmarks/results/gpu_traffic.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from boo_build.ops.base import IMPLS  # noqa: E402
from boo_build.signature import KernelSignature, ModuleId  # noqa: E402
from boo_build.stages.traffic import Traffic, TrafficRecord  # noqa: E402

FORWARD_GOAL = 1.1  # issue 27: every forward in one dispatch at most 1.1x the minimal traffic
BACKWARD_GOAL = 2.0  # every combined backward at most 2.0x


def _record(path: Path) -> TrafficRecord | None:
    return TrafficRecord.from_json(json.loads(path.read_text())) if path.exists() else None


def shipped(build: Path) -> list[tuple[KernelSignature, str, str, TrafficRecord | None, Traffic | None]]:
    """(signature, target, shipped candidate, its traffic record, the least modelled traffic of the
    implementations alone: what shipped before the GPU variants) per GPU kernel."""
    report = json.loads((build / "build-report.json").read_text())
    out = []
    for k in report["kernels"]:
        sig = KernelSignature.from_json(k["signature"])
        for t, te in sorted(k["targets"].items()):
            rec_path = build / "traffic" / t
            if not rec_path.is_dir() or te.get("status") != "available":
                continue
            impl = te["selected"]
            module, _, variant = impl.partition("+")
            stem = ModuleId(sig, module).key + (f"+{variant}" if variant else "")
            impls = [r.traffic for i in IMPLS if (r := _record(rec_path / f"{ModuleId(sig, i).key}.json"))
                     and r.traffic]
            best = min(impls, key=lambda m: (m.modelled_bytes, m.dispatches), default=None)
            out.append((sig, t, impl, _record(rec_path / f"{stem}.json"), best))
    return out


def summarize(rows) -> str:
    by_target: dict[str, list] = defaultdict(list)
    for r in rows:
        by_target[r[1]].append(r)
    lines = ["# GPU kernels: modelled traffic per call (not measured)", "",
             "From `boo_build/stages/traffic.py` on iree-compile's executable sources: dispatches per call, and "
             "bytes read (each binding once per pass over it, a loop's loads once per iteration) and written, over the minimal bytes (each input "
             "read once, each output written once). Dynamic kernels at their largest benchmark shape. Goals: "
             f"a forward in one dispatch at most {FORWARD_GOAL}x, a combined backward at most {BACKWARD_GOAL}x.",
             "", "The shipped candidate's figures; \"implementations only\": the least modelled of `aten` and "
             "`manual`, what ships without the GPU variants (`--no-traffic` ships those in the fixed order).",
             "", "| target | forwards | one dispatch, <= 1.1x | median ratio | backwards | <= 2.0x | median ratio "
             "| median dispatches (backward) | backwards, implementations only: <= 2.0x, median ratio, dispatches |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    misses: list[str] = []
    for t in sorted(by_target):
        fw = [(s, i, r.traffic) for s, _, i, r, _ in by_target[t] if s.is_forward and r and r.traffic]
        bw = [(s, i, r.traffic) for s, _, i, r, _ in by_target[t] if not s.is_forward and r and r.traffic]
        base = [(s, "", b) for s, _, _, r, b in by_target[t] if not s.is_forward and b]
        fw_ok = [x for x in fw if x[2].dispatches == 1 and x[2].ratio <= FORWARD_GOAL]
        bw_ok = [x for x in bw if x[2].ratio <= BACKWARD_GOAL]
        med = (lambda xs: f"{statistics.median(x[2].ratio for x in xs):.2f}x" if xs else "-")
        dmed = f"{statistics.median(x[2].dispatches for x in bw):g}" if bw else "-"
        base_ok = sum(b.ratio <= BACKWARD_GOAL for _, _, b in base)
        bmed = f"{statistics.median(b.dispatches for _, _, b in base):g}" if base else "-"
        lines.append(f"| {t} | {len(fw)} | {len(fw_ok)} | {med(fw)} | {len(bw)} | {len(bw_ok)} | {med(bw)} | {dmed} "
                     f"| {base_ok}, {med(base)}, {bmed} |")
        for s, i, m in sorted(fw + bw, key=lambda x: x[0].key):
            if (s.is_forward and (m.dispatches != 1 or m.ratio > FORWARD_GOAL)) or (
                    not s.is_forward and m.ratio > BACKWARD_GOAL):
                misses.append(f"| {t} | {s.key} | {i} | {m.dispatches} | {m.ratio:.2f}x |")
        unmodelled = [f"{s.key} ({r.reason if r else 'no record'})" for s, _, i, r, _ in by_target[t]
                      if not (r and r.traffic)]
        if unmodelled:
            misses.append(f"| {t} | not modelled: {'; '.join(unmodelled)} ||||")
    lines += ["", "## Kernels that miss the goal", "", "| target | kernel | shipped | dispatches | ratio |",
              "|---|---|---|---:|---:|"] + misses
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", type=Path, default=ROOT / "artifacts" / "boo-norms")
    ap.add_argument("--out", type=Path)
    ns = ap.parse_args(argv)
    if not (ns.build / "build-report.json").exists():
        ap.error(f"{ns.build}/build-report.json does not exist: build first (make build)")
    text = summarize(shipped(ns.build))
    sys.stdout.write(text)
    if ns.out:
        ns.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
