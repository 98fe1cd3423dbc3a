"""``boo-build measure BUNDLE --out NEW``: validate, time and select a bundle's
kernels on this machine's devices and write a new bundle (``measure.runner``).

Needs the loader's dependencies and torch, not the build side. Exit status 0
all measured and validated, 1 a validation failed or kernels were not reached
(the bundle is still written), 2 nothing could be measured (``MeasureError``,
nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "EXIT_UNUSABLE", "add_arguments", "run"]
EXIT_OK, EXIT_PROBLEM, EXIT_UNUSABLE = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, metavar="BUNDLE", help="the bundle to measure")
    p.add_argument("--out", type=Path, required=True,
                   help="the new bundle: a .tar.zst path, or a folder for <name>-<version>.tar.zst")
    p.add_argument("--targets", help="comma-separated bundle targets to measure (default: every one a device "
                                     "here runs)")
    p.add_argument("--report", type=Path, help="also write the results as a markdown table here")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    p.add_argument("--compile-budget", type=float, default=300.0,
                   help="seconds of torch.compile baselines (compiles included) before the rest are skipped")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run; kernels not reached keep their old records")
    p.add_argument("--max-seconds", type=float, default=0.5, help="sampling time per measurement at most")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def run(ns: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from ..measure.results import markdown, to_json
    from ..measure.runner import measure_bundle

    out, err = out or sys.stdout, err or sys.stderr
    only = tuple(t.strip() for t in ns.targets.split(",") if t.strip()) if ns.targets else None
    log = None if ns.quiet else (lambda line: print(line, file=err, flush=True))
    report = measure_bundle(ns.bundle, ns.out, targets=only, compile_baseline=not ns.no_compile,
                            compile_budget_s=ns.compile_budget, budget_s=ns.budget,
                            max_seconds=ns.max_seconds, log=log)
    text = markdown(report)
    out.write(text)
    if ns.report:
        ns.report.parent.mkdir(parents=True, exist_ok=True)
        ns.report.write_text(text)
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(to_json(report), indent=1, sort_keys=True) + "\n")
    return EXIT_PROBLEM if report.problem else EXIT_OK
