"""The benchmark table (``bench.csv``): one row per signature x target, each
implementation's median, torch eager's, the speed-up over torch eager (the paired
rounds' figure the selection compared, ``compared.VsEager``, with its interval and
verdict; means per call in records without rounds), validation, the
selection and, where candidates were tried, every candidate's timing and where
the loader sends torch tensors. Written by the build's report task and by
``boo-build measure``."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..candidates import split_module_file
from ..ops.base import IMPLS
from ..reasons import Kind
from ..records import EAGER
from ..signature import KernelSignature, ModuleId, shape_text
from ..stages.comparison import NOT_ASKED
from ..targets import Target

if TYPE_CHECKING:
    from ..stages.selection import Decision

# ----------------------------------------------------------------- table
COLUMNS = ("key", "op", "shape", "dtype", "mask", "target", "aten_median_us", "manual_median_us",
           "eager_median_us", "speedup_vs_eager", "aten_max_err", "manual_max_err", "validation", "selected")
# Written only when some row tried candidates (a build that explores nothing
# writes the table it always did): each candidate's time (mean per call) and status
# (e.g. "manual+nosd@local-sync 15.2 us selected; ..."), fastest first. The row's
# ``selected`` is then the winning candidate, its speed-up the winner's (``speedup_vs_eager``).
CANDIDATE_COLUMN = "candidates"
# With it, where the loader sends torch tensors (``routing.torch_calls_text``).
TORCH_CALLS_COLUMN = "torch_calls"
# Written only when some row has GPU traffic models (``stages/traffic.py``): per
# implementation, its dispatches per call and modelled bytes over the minimal
# bytes, e.g. "aten 6 dispatches 2.74x; manual 9 dispatches 4.08x" (modelled, not measured).
TRAFFIC_COLUMN = "traffic_modelled"
# Written only when some row was timed in paired rounds: ``speedup_vs_eager``'s interval and
# rounds ("0.78-1.07, 24 rounds") and the verdict ("tie"): the figure as ``compared.VsEager`` has it.
INTERVAL_COLUMN = "speedup_interval"
VERDICT_COLUMN = "speedup_verdict"
# Written only when some row was timed against torch.compile of the op in the same rounds (what
# torch.compile(backend="boo") decides on): the speed-up over it, its interval and rounds, and the
# verdict, or, in a row not timed against it, why (the build's compile budget, a failed compile)
COMPILE_COLUMN = "speedup_vs_compile"
COMPILE_INTERVAL_COLUMN = "compile_interval"
COMPILE_VERDICT_COLUMN = "compile_verdict"
OPTIONAL_COLUMNS = (CANDIDATE_COLUMN, TORCH_CALLS_COLUMN, TRAFFIC_COLUMN, INTERVAL_COLUMN, VERDICT_COLUMN,
                    COMPILE_COLUMN, COMPILE_INTERVAL_COLUMN, COMPILE_VERDICT_COLUMN)
_COMPILE_COLUMNS = (COMPILE_COLUMN, COMPILE_INTERVAL_COLUMN, COMPILE_VERDICT_COLUMN)
_COMPILED_TIMED = "_compiled_timed"  # a row's mark: timed against torch.compile (its columns are written)


def eager_key(sig_key: str, target: str) -> tuple[str, str]:
    """Where ``table_rows`` finds torch eager's result for a signature on a
    target (the one spelling; the graph's task subject is ``layout.eager_subject``)."""
    return (f"{EAGER}:{sig_key}", target)


def _us(x: float | None) -> str:
    return "" if x is None else f"{x * 1e6:.1f}"


def _err(v) -> str:
    if v is None or not v.outputs:
        return ""
    m = v.max_error()
    return "" if m is None else f"{m:.3g}"


def table_rows(signatures: Iterable[KernelSignature], targets: Iterable, validations: Mapping,
               benches: Mapping, decisions: Mapping[tuple[str, str], Decision],
               traffic: Mapping | None = None) -> list[dict[str, str]]:
    """One row per signature x target.

    ``traffic[(module key, target)]`` -> a GPU module's ``traffic.Traffic``, where modelled.

    ``validations[(module key, target)]`` -> ValidationResult;
    ``benches[(module key, target)]`` -> BenchResult, and eager under
    ``eager_key(signature key, target)``;
    ``decisions[(signature key, target)]`` -> ``selection.Decision`` (its
    candidates where they were tried, where torch tensors go).
    """
    rows = []
    target_names = [t.name if isinstance(t, Target) else str(t) for t in targets]
    modelled: dict[tuple[str, str], list] = {}  # (module key, target) -> [(variant, Traffic)], baseline first
    for (mfile, t), m in sorted((traffic or {}).items(), key=lambda p: p[0]):
        if m is not None:
            key, variant = split_module_file(mfile)
            modelled.setdefault((key, t), []).append((variant, m))
    for sig in signatures:
        for t in target_names:
            row: dict[str, str] = {
                "key": sig.key, "op": sig.op, "shape": shape_text(sig.input_shape),
                "dtype": sig.dtype, "mask": str(sig.mask), "target": t,
            }
            statuses = []
            best = None
            for impl in IMPLS:
                mkey = ModuleId(sig, impl).key
                v = validations.get((mkey, t))
                b = benches.get((mkey, t))
                row[f"{impl}_median_us"] = _us(b.median_s) if b is not None and b.ok else ""
                row[f"{impl}_max_err"] = _err(v)
                if v is not None:
                    statuses.append(f"{impl} {v.status}" if v.status != "not run" else f"{impl} {v.reason or 'not run'}")
                if v is not None and v.passed and b is not None and b.ok:
                    t_b = b.compared_s
                    if best is None or t_b < best:
                        best = t_b
            eager = benches.get(eager_key(sig.key, t))
            decision = decisions.get((sig.key, t))
            timing = decision.timing if decision is not None else None
            # a speed-up the paired rounds did not confirm is not a figure (comparison.eager_call)
            unconfirmed = timing is not None and timing.eager is not None and timing.eager_figure is None
            row["eager_median_us"] = _us(eager.median_s) if eager is not None and eager.ok and not unconfirmed else ""
            tried = decision.candidates if decision is not None else None
            # speed-ups in the times the selection compares (``compared_seconds``: means per call)
            eager_s = eager.compared_s if eager is not None and not unconfirmed else None
            if tried:
                won = [c.compared_s for c in tried.values() if c.status == "selected"]
                best = won[0] if won else None
                row[CANDIDATE_COLUMN] = "; ".join(
                    f"{name} " + (f"{t * 1e6:.1f} us" if t is not None else "-") + f" {c.status}"
                    for name, c, t in sorted(((n, c, c.compared_s) for n, c in tried.items()),
                                             key=lambda p: (p[2] is None, p[2] or 0, p[0])))
                if eager_s and won and decision is not None:
                    row[TORCH_CALLS_COLUMN] = decision.torch_calls
            vs = timing.vs_eager if timing is not None else None
            if vs is not None:  # paired rounds: eager / kernel, as they compared (the figure every view shows)
                row["speedup_vs_eager"] = f"{vs.speedup:.2f}" if vs.recorded else ""
                row[INTERVAL_COLUMN] = f"{vs.low:.2f}-{vs.high:.2f}, {vs.rounds} rounds" if vs.recorded else ""
                row[VERDICT_COLUMN] = vs.verdict
            else:
                row["speedup_vs_eager"] = f"{eager_s / best:.2f}" if best and eager_s else ""
            vc = timing.vs_compiled if timing is not None else None
            if vc is not None:  # the same figure over torch.compile's code
                row[_COMPILED_TIMED] = "yes"
                row[COMPILE_COLUMN] = f"{vc.speedup:.2f}" if vc.recorded else ""
                row[COMPILE_INTERVAL_COLUMN] = f"{vc.low:.2f}-{vc.high:.2f}, {vc.rounds} rounds" if vc.recorded else ""
                row[COMPILE_VERDICT_COLUMN] = vc.verdict
            elif timing is not None and timing.compiled_untimed and timing.compiled_untimed != NOT_ASKED:
                row[COMPILE_VERDICT_COLUMN] = timing.compiled_untimed
            row["validation"] = "; ".join(statuses)
            # each modelled module of the kernel: each implementation, then its GPU variants
            models = [(f"{impl}+{variant}" if variant else impl, m) for impl in IMPLS
                      for variant, m in modelled.get((ModuleId(sig, impl).key, t), ())]
            if models:
                row[TRAFFIC_COLUMN] = "; ".join(
                    f"{impl} {m.dispatches} dispatch{'es' if m.dispatches != 1 else ''} {m.ratio:.2f}x"
                    for impl, m in models)
            sel = decision.selection if decision is not None else None
            if sel is None or sel.impl is None:
                row["selected"] = "" if sel is None else "none"
            else:
                how = "modelled" if sel.reason.kind is Kind.MODELLED else "default"
                row["selected"] = sel.impl if sel.measured else f"{sel.impl} ({how})"
            rows.append({c: row.get(c, "") for c in COLUMNS + OPTIONAL_COLUMNS + (_COMPILED_TIMED,)
                         if c in COLUMNS or c in row})
    return rows


def table_text(rows: Iterable[Mapping[str, Any]]) -> str:
    rows = list(rows)
    compiled = any(r.get(_COMPILED_TIMED) for r in rows)
    columns = COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if any(r.get(c) for r in rows)
                              and (compiled or c not in _COMPILE_COLUMNS))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c, "") for c in columns})
    return buf.getvalue()


def write_table(rows: Iterable[Mapping[str, Any]], path) -> None:
    """Write the benchmark CSV (header ``COLUMNS``) atomically; unchanged content is not rewritten."""
    from ..files import write_atomic

    data = table_text(rows).encode()
    path = Path(path)
    if path.exists() and path.read_bytes() == data:
        return
    write_atomic(path, data)
