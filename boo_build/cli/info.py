"""``boo-build info BUNDLE``: what a bundle holds: targets, kernels, selections, candidates, provenance.
Given a lock file, each bundle it pins (through the download cache); given a manifest, it says so.

Light: imports only the loader's archive reader and typed index (stdlib and
zstandard), never torch, iree or doit (the iree-base-runtime version is read
from its package's version file, the runtime is not loaded). Exit status 0,
also for a malformed ``iree_runtime`` field, which it shows (``verify`` fails
on it); an unreadable bundle, or one over ``--max-size``, raises
``BundleFormatError`` (exit 2).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Mapping, TextIO

from ..compared import COMPILED_NAME, VsEager
from ..loader.archive import DEFAULT_MAX_SIZE
from ..loader.format import CandidateRecord, ImplRecord
from ..reasons import Kind
from ..signature import residual_key
from ..stages.selection import Decision
from .text import (
    add_max_size,
    bench_value,
    bundles_named,
    provenance_versions,
    read_bundle,
    runtime_fit,
    size_text,
)

__all__ = ["add_arguments", "candidate_lines", "cmd_info", "run", "traffic_text"]
EXIT_OK = 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, metavar="BUNDLE",
                   help="a bundle (.tar.zst), or a lock file: the bundles it pins (downloaded if need be)")
    add_max_size(p)


def run(ns: argparse.Namespace) -> int:
    named = bundles_named(ns.bundle, ns.max_size)  # a lock file: each bundle it pins
    for i, (what, path) in enumerate(named):
        if len(named) > 1 or what != str(path):
            print(("\n" if i else "") + f"{what}:")
        cmd_info(path, max_size=ns.max_size)
    return EXIT_OK


def cmd_info(path, *, out: TextIO | None = None, max_size: int = DEFAULT_MAX_SIZE) -> int:
    out = out or sys.stdout
    a = read_bundle(path, max_size)  # BundleFormatError: exit 2 (cli.app)
    ix = a.bundle_index
    p = out.write
    p(f"{ix.name} {ix.version}  ({a.path})\n")
    p(f"  format {ix.format} v{ix.format_version}, {size_text(a.compressed_size)} compressed, "
      f"{size_text(a.size)} unpacked, {len(a.members)} members\n")
    versions = provenance_versions(ix.provenance)
    if versions:
        p("  provenance: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "\n")
    p(f"  iree_runtime: {runtime_fit(ix, a.path).text()}\n")
    counts = ix.counts()
    p("  targets:\n")
    for t, d in sorted(ix.targets.items()):
        c = counts[t]
        p(f"    {t:14s} {d.driver:10s} {d.arch:10s} available {c['available']}, "
          f"unavailable {c['unavailable']}\n")
        p(f"      flags: {' '.join(d.flags)}\n")
    p(f"  kernels ({len(ix.kernels)}):\n")
    for key, k in sorted(ix.kernels.items()):
        p(f"    {key}\n")
        if residual_key(key):
            p("      fused residual: " + ("h = x + residual, then the norm of h (returns h too); compared with "
                                         "torch eager's add, then the norm\n" if k.signature.is_forward else
                                         "the norm's backward of h plus grad_h (the gradient of x and residual); "
                                         "compared with torch eager's norm backward, then grad_h added\n"))
        for t, te in sorted(k.targets.items()):
            if te.is_available:
                m = te.selected_impl
                assert m is not None and te.impls is not None  # available
                extra = f" (+{len(te.impls) - 1} more)" if len(te.impls) > 1 else ""
                bench = bench_value(m.benchmark)
                btxt = f", {_named_time(*bench)}" if bench else ""
                mode = f" @{te.mode}" if te.mode else ""
                p(f"      {t:14s} {te.selected}{mode}{extra}  {size_text(m.size)}{btxt}\n")
                if te.reason:
                    p(_wrapped("why", te.reason, 8))
                for dispatch, config in sorted((m.extra.get("tuning") or {}).items()):
                    p(_wrapped(f"tuned configuration of {dispatch.rpartition('$')[2]}", config, 8))
                traffic = traffic_text(te.impls)
                if traffic:
                    p(f"        traffic per call (modelled, not measured): {traffic}\n")
            else:
                p(f"      {t:14s} UNAVAILABLE\n")
                p(_wrapped("why", te.reason or "", 8))
            vs = VsEager.from_timing(te.timing)
            if vs is not None:
                p(_wrapped("speed-up over torch eager", vs.text(), 8))
            vc, untimed = VsEager.from_timing(te.timing, COMPILED_NAME), VsEager.untimed(te.timing)
            if vc is not None or untimed:
                p(_wrapped("speed-up over torch.compile", vc.text() if vc is not None else untimed or "", 8))
            if te.vs_compiled is not None:
                graph = te.vs_compiled.timed and te.vs_compiled.graph  # torch.compile not beaten at some size
                p(_wrapped("torch.compile(backend='boo')", _backend_text(te.vs_compiled) if graph else
                           f"the kernel: {te.vs_compiled.reason}" if te.vs_compiled.timed else
                           f"decides against torch eager ({te.vs_compiled.reason})", 8))
            decision = Decision.from_target_record(te)
            if decision.candidates:
                for line in candidate_lines(decision.candidates):
                    p(f"        {line}\n")
            if decision.prefer_eager is not None:
                p(_wrapped("torch tensors run torch eager", decision.prefer_eager.reason, 8))
            elif decision.eager_rejected:
                p(_wrapped("torch tensors run the kernel", decision.eager_rejected, 8))
    if ix.csv:
        p(f"  benchmark table: {ix.csv}\n")
    return EXIT_OK


def _backend_text(v) -> str:
    """Where ``torch.compile(backend="boo")`` leaves a kernel's norms to the graph's code
    (``format.CompiledVerdict`` with torch.compile not beaten somewhere), in words."""
    rows = v.by_rows
    where = ("the graph's code" if not rows else "the graph's code at " + ", ".join(str(r) for r, g in rows if g)
             + " rows, else the kernel")
    return f"{where}: {v.reason}"


def traffic_text(impls: Mapping[str, ImplRecord]) -> str:
    """Each packed implementation's modelled traffic (a GPU target's: ``stages/traffic.py``),
    ``aten 1 dispatch 1.50x minimal (9.45 MB of 6.31 MB)``; "" where none has one."""
    parts = []
    for name, r in sorted(impls.items()):
        t = r.traffic
        if t:
            n = t.get("dispatches")
            parts.append(f"{name} {n} dispatch{'es' if n != 1 else ''} {float(t['ratio']):.2f}x minimal "
                         f"({t['modelled_bytes'] / 1e6:.3g} MB of {t['minimal_bytes'] / 1e6:.3g} MB"
                         + (f" at {'x'.join(map(str, t['shape']))})" if t.get("shape") else ")"))
    return "; ".join(parts)


def _named_time(value: float, name: str) -> str:
    """A benchmark record's central time with its name, in microseconds: ``median 19.0 us``."""
    base, _, unit = name.rpartition("_") if name.endswith(("_us", "_ms", "_s")) else (name, "", "")
    scale = {"us": 1.0, "ms": 1e3, "s": 1e6}.get(unit)
    return f"{base} {value * scale:.1f} us" if scale is not None else f"{name} {value:.4g}"


def _wrapped(label: str, text: str, indent: int, width: int = 110) -> str:
    """``label: text`` wrapped at ``width`` (continuation lines indented further), never cut."""
    pad = " " * indent
    return textwrap.fill(" ".join(str(text).split()), width, initial_indent=f"{pad}{label}: ",
                         subsequent_indent=pad + "    ", break_on_hyphens=False) + "\n"


def candidate_lines(candidates: Mapping[str, CandidateRecord]) -> list[str]:
    """``info``'s lines for a target entry's candidates: every candidate tried, fastest
    first, with its time (its mean per call, labelled so; the median, else the best
    sample, in records without), then why it lost, wrapped (the paired ratio against
    the selected one that the selection compared is in that reason)."""
    def time_of(c: CandidateRecord) -> float | None:
        v = c.compared_s
        return float(v) if v is not None and v > 0 else None

    def us(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e6:.1f} us"

    basis = "mean per call" if any(c.mean_s is not None for c in candidates.values()) else "median"
    lines = [f"candidates ({len(candidates)}), {basis}:"]
    order = sorted(candidates.items(), key=lambda p: (time_of(p[1]) is None, time_of(p[1]) or 0.0, p[0]))
    for name, c in order:
        status, why = c.status or "?", " ".join(str(c.reason).split())
        # a slower candidate's reason says so itself ("slower: 20.0 us vs 10.0 us")
        text = why if c.reason.kind is Kind.SLOWER else f"{status}: {why}" if why else status
        first, *rest = textwrap.wrap(f"  {name:24s} {us(time_of(c)):>11s}  {text}", 100,
                                     subsequent_indent=" " * 40, break_on_hyphens=False) or [""]
        lines += [first, *rest]
    return lines
