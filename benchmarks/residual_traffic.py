"""The traffic model's figures for the fused residual kernels (``residual = true``) against
the add and the norm run apart, on a GPU target (default ``sm_80``, the GPU manifest's).

Per kernel: each candidate of the fused form (``aten``, ``manual``, ``manual+fused``) and of
the plain norm, modelled from its export (``boo_build/stages/traffic.py``, iree-compile up to
executable sources: nothing runs); the best of each, and the unfused sequence: the plain norm's
best plus the add as a kernel of its own (forward: ``h = x + residual``, reading two tensors and
writing one; backward: autograd's accumulation ``dx + grad_h``, the same). All figures are
modelled, not measured. Writes Markdown to stdout, and to ``--out`` when given.

    .venv/bin/python benchmarks/residual_traffic.py [--target sm_80] [--out benchmarks/results/residual_traffic.md]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from boo_build.candidates import variant_flags  # noqa: E402
from boo_build.dtypes import ITEMSIZE  # noqa: E402
from boo_build.signature import KernelSignature, ModuleId  # noqa: E402
from boo_build.stages.export import export_mlir  # noqa: E402
from boo_build.stages.traffic import Traffic, TrafficError, kernel_traffic, minimal_bytes  # noqa: E402
from boo_build.targets import catalogue  # noqa: E402

KERNELS = (  # (op, dtype, input shape, rows to model a dynamic kernel at, masks)
    ("layer_norm", "float32", (8, 128, 768), None, (1, 14)),
    ("layer_norm", "bfloat16", ("rows", 768), (1024, 768), (1, 14)),
    ("rms_norm", "bfloat16", (8, 128, 4096), None, (1, 6)),
    ("rms_norm", "bfloat16", ("rows", 4096), (1024, 4096), (1, 6)),
)
CANDIDATES = (("aten", ""), ("manual", ""), ("manual", "fused"))
NOTES = (
    "Notes (iree-compile 3.13):",
    "",
    "* Static forwards are one dispatch (single-dispatch preprocessing) that recomputes `x + residual` in each of",
    "  the norm's passes: it reads both inputs per pass, so the model counts more bytes than the add and the norm",
    "  apart (which read `h` per pass); a GPU keeping the row on chip between passes reads each once.",
    "* Dynamic forwards: without single-dispatch preprocessing, iree-compile gives the add a dispatch of its own",
    "  (it writes `h`, which the norm's dispatch reads back), flattened to one `?` dimension, which the model",
    "  counts at the row count alone: those rows understate the fused kernel's bytes by about the add's three",
    "  tensors: the fused dynamic forward is the two apart's dispatches and bytes, in one module call.",
    "* Backwards: `grad_h` costs one read (the add is fused into the row pass that writes the input gradient),",
    "  against the add apart's three tensors and a launch.",
)


def best(sig: KernelSignature, at: KernelSignature, flags) -> tuple[str, Traffic | None, list[str]]:
    """The candidate of least modelled bytes (then dispatches), and each candidate's figure or failure."""
    found, notes = [], []
    for impl, variant in CANDIDATES:
        if variant and sig.is_forward and not sig.is_dynamic:
            continue  # a static forward is one dispatch already: no fused variant
        name = impl + (f"+{variant}" if variant else "")
        try:
            t = kernel_traffic(export_mlir(ModuleId(sig, impl), variant), variant_flags(variant, flags), at, sig)
        except (TrafficError, Exception) as e:  # noqa: BLE001 - a candidate iree-compile refuses is a row, not a crash
            notes.append(f"{name}: {type(e).__name__}")
            continue
        found.append((t.modelled_bytes, t.dispatches, name, t))
        notes.append(f"{name} {t.dispatches}d {t.ratio:.2f}x")
    if not found:
        return "", None, notes
    _, _, name, t = min(found, key=lambda f: f[:3])
    return name, t, notes


def rows(target: str) -> list[str]:
    flags = catalogue()[target].flags
    out = []
    for op, dt, shape, at_shape, masks in KERNELS:
        for mask in masks:
            sig = KernelSignature(op, shape, (shape[-1],), dt, mask, bias=op == "layer_norm", residual=True)
            at = sig.bind(at_shape) if sig.is_dynamic else sig
            f_name, fused, f_notes = best(sig, at, flags)
            p_name, plain, p_notes = best(sig.replace(residual=False), at.replace(residual=False), flags)
            tensor = math.prod(at.input_shape) * ITEMSIZE[dt]  # type: ignore[arg-type]
            add = 3 * tensor  # the add as a kernel of its own: two tensors read, one written
            if fused is None or plain is None:
                out.append(f"| `{sig.key}` | {f_name or 'none'} | {p_name or 'none'} | | | | {'; '.join(f_notes)} |")
                continue
            apart = plain.modelled_bytes + add
            apart_min = minimal_bytes(at.replace(residual=False)) + add
            out.append(
                f"| `{sig.key}`{' at ' + 'x'.join(map(str, at_shape)) if at_shape else ''} "
                f"| {f_name}: {fused.dispatches} dispatches, {fused.modelled_bytes / 1e6:.1f} MB "
                f"({fused.ratio:.2f}x its minimal {minimal_bytes(at) / 1e6:.1f} MB) "
                f"| {p_name} + add: {plain.dispatches + 1} dispatches, {apart / 1e6:.1f} MB "
                f"(minimal {apart_min / 1e6:.1f} MB) "
                f"| {fused.modelled_bytes / apart:.2f}x | {minimal_bytes(at) / apart_min:.2f}x "
                f"| {'; '.join(f_notes)} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="sm_80")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = "\n".join([
        f"# Fused residual kernels: modelled traffic ({args.target})",
        "",
        "`benchmarks/residual_traffic.py`: the traffic model (modelled, not measured) of each fused residual",
        "kernel's best candidate against the plain norm's best plus the add as a kernel of its own (forward:",
        "`h = x + residual`; backward: autograd's accumulation `dx + grad_h`), per call. Machine: "
        f"{platform.machine()}, {platform.python_version()}; iree-compile up to executable sources only.",
        "",
        "| kernel | fused, best candidate | apart: plain norm's best + the add | fused / apart, modelled "
        "| fused / apart, minimal | fused candidates |",
        "|---|---|---|---:|---:|---|",
        *rows(args.target),
        "",
        *NOTES,
        "",
    ])
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
