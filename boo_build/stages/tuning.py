"""Tuned lowering configurations of CPU kernels: dump, edit, compile again.

IREE picks each dispatch's lowering configuration (its tile sizes) by a fixed
heuristic; on llvm-cpu a row reduction gets a reduction vector of 8 whatever
its width, and a larger one, with fewer rows per workgroup, runs several
tenths faster (docs/tuning.md). A tuned variant (``candidates``:
``tune-r<R>-d<D>``) is compiled here in three steps, all inside one compile
task, because the configuration exists only once iree-compile has formed the
dispatches (after export, which the graph's candidates must not wait for):

1. ``--compile-to=executable-configurations`` with
   ``--iree-hal-dump-executable-configurations-to``: each dispatch's
   configuration as IREE chose it (a fraction of a compile);
2. ``edit``: in each dispatch whose reductions are all row reductions (over
   the innermost dim), every reduction's vector becomes ``R`` and the root's
   workgroup tile ``D`` rows (its outer parallel dims 1), the other ops'
   parallel vector and cache tiles no larger than that;
3. the full compile with ``--iree-hal-substitute-executable-configuration``
   for each edited dispatch: the same flags, so the dumped file's target
   attributes hold.

Dispatches of other shapes (column sums, elementwise ones) keep IREE's
configuration. Stdlib only (the compile stage's subprocess).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .compile import DEFAULT_TIMEOUT_S, CompileResult, compile_mlir

__all__ = ["DUMP_FLAG", "SUBSTITUTE_FLAG", "TunedCompile", "Tuning", "compile_tuned", "configurations", "edit"]

DUMP_FLAG = "--iree-hal-dump-executable-configurations-to"
SUBSTITUTE_FLAG = "--iree-hal-substitute-executable-configuration"
_CONFIGURE_ONLY = "--compile-to=executable-configurations"

_LOWERING = re.compile(r"#iree_cpu\.lowering_config<([^<>]*)>")
_LIST = re.compile(r"(\w+) = \[([0-9, ]*)\]")
_EXECUTABLE = re.compile(r"hal\.executable (?:public |private )?@(\S+) \{")


@dataclass(frozen=True)
class Tuning:
    """A tuned configuration: the reduction vector ``r`` and the rows ``d`` of a workgroup's tile."""

    r: int
    d: int

    @property
    def name(self) -> str:
        return f"r{self.r}-d{self.d}"


def _lists(body: str) -> dict[str, list[int]]:
    return {k: [int(x) for x in v.split(",") if x.strip()] for k, v in _LIST.findall(body)}


def _text(lists: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} = [{', '.join(str(x) for x in v)}]" for k, v in lists.items())


def _row_reduction(v: list[int]) -> bool:
    return bool(v) and v[-1] != 0 and not any(v[:-1])


def edit(text: str, tuning: Tuning) -> str | None:
    """``text`` (one dispatch's dumped configuration) with ``tuning`` applied, or None
    where it does not apply: no root with a workgroup tile, or a reduction that is not
    over the innermost dim (a column sum keeps IREE's choice)."""
    configs = [_lists(m.group(1)) for m in _LOWERING.finditer(text)]
    roots = [c for c in configs if "distribution" in c]
    reductions = [c["vector_reduction"] for c in configs if "vector_reduction" in c]
    if len(roots) != 1 or "vector_reduction" not in roots[0] or not all(map(_row_reduction, reductions)):
        return None
    dist = roots[0]["distribution"]
    inner = max(i for i, x in enumerate(dist) if x) if any(dist) else None
    if inner is None:
        return None
    new_dist = [0 if not x else tuning.d if i == inner else 1 for i, x in enumerate(dist)]

    def one(m: re.Match) -> str:
        lists = _lists(m.group(1))
        if "vector_reduction" in lists:
            lists["vector_reduction"] = lists["vector_reduction"][:-1] + [tuning.r]
        if "distribution" in lists:
            lists["distribution"] = new_dist
        for key in ("vector_common_parallel", "cache_parallel"):
            if key in lists:  # no vector or cache tile larger than the workgroup's
                lists[key] = [min(x, new_dist[i]) if x and i < len(new_dist) and new_dist[i] else x
                              for i, x in enumerate(lists[key])]
        return f"#iree_cpu.lowering_config<{_text(lists)}>"

    out = _LOWERING.sub(one, text)
    return out if out != text else None


def configurations(text: str) -> list[str]:
    """The lowering configurations in a dispatch's configuration text (what a record shows)."""
    return [m.group(1) for m in _LOWERING.finditer(text)]


@dataclass(frozen=True)
class TunedCompile:
    """A tuned compile: the compile's result and, per edited dispatch, its root's
    configuration as compiled (``{dispatch: "distribution = [...], ..."}``), or
    ``reason`` where the tuning applied to no dispatch (nothing compiled then)."""

    result: CompileResult | None
    applied: dict[str, str]
    reason: str = ""


def _root(text: str) -> str:
    return next((c for c in configurations(text) if "distribution" in c), "")


def compile_tuned(mlir: str, flags, tuning: Tuning, *, timeout: float = DEFAULT_TIMEOUT_S,
                  compiler: str | None = None, extra: tuple[str, ...] = ()) -> TunedCompile:
    """Compile ``mlir`` with ``flags`` and ``tuning`` applied to each dispatch it fits (above).
    The edited files are named relative to the compiler's working directory (a temporary
    one): iree-compile embeds their path in the vmfb, so a fixed name keeps it byte-identical.
    ``extra``: flags of the final compile alone (a test's dump of what it compiled)."""
    flags = tuple(flags)
    with tempfile.TemporaryDirectory(prefix="boo-tune-") as tmp:
        dumped = Path(tmp) / "dumped"
        dump = compile_mlir(mlir, flags + (_CONFIGURE_ONLY, f"{DUMP_FLAG}={dumped}"), timeout=timeout,
                            compiler=compiler, cwd=tmp)
        if not dump.ok:
            return TunedCompile(dump, {})
        subs: list[str] = []
        applied: dict[str, str] = {}
        for path in sorted(dumped.glob("*.mlir")):
            text = path.read_text()
            new = edit(text, tuning)
            name = _EXECUTABLE.search(text)
            if new is None or name is None:
                continue
            rel = f"tuned-{len(subs)}.mlir"
            (Path(tmp) / rel).write_text(new)
            subs.append(f"{SUBSTITUTE_FLAG}={name.group(1)}={rel}")
            applied[name.group(1)] = _root(new)
        if not subs:
            return TunedCompile(None, {}, reason=f"tuning {tuning.name} fits none of the module's dispatches "
                                                 "(no row reduction)")
        res = compile_mlir(mlir, flags + tuple(subs) + tuple(extra), timeout=timeout, compiler=compiler, cwd=tmp)
    # the command shown without the temporary files: the record names the configuration instead
    shown = " ".join(w for w in res.command.split(" ") if SUBSTITUTE_FLAG not in w)
    return TunedCompile(CompileResult(res.ok, shown, res.seconds + dump.seconds, res.vmfb, res.error), applied)
