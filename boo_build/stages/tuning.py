"""Tuned lowering configurations of CPU and GPU kernels: dump, edit, compile again.

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
configuration.

GPU targets (``GpuTuning``, ``tune-wg<W>-t<T>``) go through the same three steps:
a dispatch whose reductions are all row reductions, in the pipeline IREE chose
for it (LLVMGPU's ``VectorDistribute`` on HIP and CUDA, SPIR-V's ``SubgroupReduce``
on Vulkan), gets a workgroup of ``W`` threads per row, each loading ``T``
elements a step (the reduction's tile ``W*T``, which must divide the row). Stdlib
only (the compile stage's subprocess).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .compile import DEFAULT_TIMEOUT_S, CompileResult, compile_mlir

__all__ = ["DUMP_FLAG", "GpuTuning", "SUBSTITUTE_FLAG", "TunedCompile", "Tuning", "compile_tuned", "configurations", "edit",
           "edit_gpu"]

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

    def edit(self, text: str) -> str | None:
        return edit(text, self)

    def root(self, text: str) -> str:
        return next((c for c in configurations(text) if "distribution" in c), "")


@dataclass(frozen=True)
class GpuTuning:
    """A tuned GPU configuration: ``wg`` threads per row (the workgroup), each loading ``t``
    elements a step."""

    wg: int
    t: int

    @property
    def name(self) -> str:
        return f"wg{self.wg}-t{self.t}"

    def edit(self, text: str) -> str | None:
        return edit_gpu(text, self)

    def root(self, text: str) -> str:
        """The workgroup size and the row reduction's configuration as compiled."""
        size = _WG_SIZE.search(text)
        red = next((m.group(0) for m in _GPU_LOWERING.finditer(text)
                    if "partial_reduction" in m.group(0) or re.search(r"tile_sizes = \[\[[1, ]+\]", m.group(0))), "")
        return f"{size.group(0) if size else ''}, {red}"


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


# GPU: the translation (pipeline and workgroup size) and each op's configuration
_WG_SIZE = re.compile(r"workgroup_size = \[(\d+), 1, 1\]")
_LLVMGPU = re.compile(r"#iree_gpu\.pipeline<VectorDistribute> workgroup_size = \[\d+, 1, 1\] subgroup_size = (\d+)")
_SPIRV = re.compile(r"#iree_gpu\.spirv_pipeline<SubgroupReduce> workgroup_size = \[\d+, 1, 1\]")
_GPU_LOWERING = re.compile(r"#iree_(?:gpu|codegen)\.lowering_config<(?:\{[^{}]*\}|tile_sizes = \[[^<>]*\])>")
_BASIS = re.compile(r"(\w+_basis) = \[\[([0-9, ]*)\], \[([0-9, ]*)\]\]")
_TILE_SIZES = re.compile(r"tile_sizes = \[\[([0-9, ]*)\], \[([0-9, ]*)\]\]")
# a linalg op with a configuration: its loops' kinds and its first operand's type (the row is its last dim)
_OP = re.compile(r'iterator_types = \[([^\]]*)\]\} ins\([^:]*: tensor<([0-9?x]+)x\w+>.*lowering_config')
_MAX_THREADS = re.compile(r"max_thread_count_per_workgroup = (\d+)")
_SUBGROUPS = re.compile(r"subgroup_size_choices = \[([0-9, ]*)\]")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _only_last(v: list[int]) -> bool:
    return bool(v) and not any(v[:-1])


def _rows(text: str) -> set[int] | None:
    """The row widths of ``text``'s reductions, or None where one reduces another dim
    (a column sum) or the dispatch has none."""
    rows = set()
    for m in _OP.finditer(text):
        kinds = [k.strip().strip('"') for k in m.group(1).split(",")]
        if "reduction" not in kinds:
            continue
        if kinds[-1] != "reduction" or kinds.count("reduction") != 1 or m.group(2).split("x")[-1] == "?":
            return None
        rows.add(int(m.group(2).split("x")[-1]))
    return rows or None


def _set_last(pattern: str, body: str, value: int) -> str:
    """``body`` with the last entry of list ``pattern`` (``thread = [...]``) set to ``value``."""
    return re.sub(rf"\b{pattern} = \[([0-9, ]*)\]",
                  lambda m: f"{pattern} = [{', '.join(str(x) for x in _ints(m.group(1))[:-1] + [value])}]", body)


def _llvmgpu(text: str, tuning: GpuTuning, subgroup: int) -> str | None:
    """A ``VectorDistribute`` row reduction: every op's lanes and subgroups on the row only
    (identity mappings), its partial reduction and serial tiles ``wg*t``, threads ``t``."""
    if tuning.wg % subgroup:
        return None
    bodies = [m.group(0) for m in _GPU_LOWERING.finditer(text)]
    if not bodies or not any("partial_reduction" in b for b in bodies):
        return None
    for b in bodies:
        bases = {k: (_ints(c), _ints(mp)) for k, c, mp in _BASIS.findall(b)}
        if set(bases) != {"lane_basis", "subgroup_basis"}:
            return None  # an elementwise or otherwise distributed op: not this pipeline's row reduction
        for counts, mapping in bases.values():
            if mapping != list(range(len(counts))) or any(x != 1 for x in counts[:-1]):
                return None
        lists = _lists(b)
        if not all(_only_last(v) for k, v in lists.items() if k in ("thread", "partial_reduction", "serial")):
            return None
        if any(x > 1 for x in lists.get("workgroup", [])):  # several rows a workgroup (a backward's column
            return None  # pass beside its row sums): another workgroup size fails to distribute there
    tile = tuning.wg * tuning.t

    def one(m: re.Match) -> str:
        b = _set_last("thread", m.group(0), tuning.t)
        b = _set_last("partial_reduction", _set_last("serial", b, tile), tile)
        return _BASIS.sub(lambda n: n.group(0) if n.group(1) != "subgroup_basis" else
                          f"subgroup_basis = [[{', '.join(str(x) for x in _ints(n.group(2))[:-1] + [tuning.wg // subgroup])}],"
                          f" [{n.group(3)}]]", b)

    return _GPU_LOWERING.sub(one, text)


def _spirv(text: str, tuning: GpuTuning) -> str | None:
    """A ``SubgroupReduce`` row reduction: one row per workgroup, every op's reduction tile ``wg*t``."""
    tiles = [(_ints(a), _ints(b)) for a, b in _TILE_SIZES.findall(text)]
    if not tiles or any(not _only_last(b) or any(x != 1 for x in a) for a, b in tiles):
        return None
    tile = tuning.wg * tuning.t
    return _TILE_SIZES.sub(lambda m: f"tile_sizes = [[{m.group(1)}], "
                                     f"[{', '.join(str(x) for x in _ints(m.group(2))[:-1] + [tile])}]]", text)


def edit_gpu(text: str, tuning: GpuTuning) -> str | None:
    """``text`` (one dispatch's dumped GPU configuration) with ``tuning`` applied, or None
    where it does not apply: a pipeline other than a row reduction's (elementwise, a column
    sum), a tile ``wg*t`` that does not divide the row, a workgroup larger than the target's
    or not a whole number of its subgroups."""
    rows = _rows(text)
    tile = tuning.wg * tuning.t
    limit = _MAX_THREADS.search(text)
    if rows is None or any(n % tile for n in rows) or (limit and tuning.wg > int(limit.group(1))):
        return None
    if (llvm := _LLVMGPU.search(text)) is not None:
        out = _llvmgpu(text, tuning, int(llvm.group(1)))
    elif _SPIRV.search(text) is not None:
        subgroups = _SUBGROUPS.search(text)
        sizes = _ints(subgroups.group(1)) if subgroups else []
        out = _spirv(text, tuning) if not sizes or tuning.wg % min(sizes) == 0 else None
    else:
        return None
    if out is None:
        return None
    out = re.sub(r"(#iree_gpu\.(?:spirv_)?pipeline<\w+> )workgroup_size = \[\d+, 1, 1\]",
                 rf"\g<1>workgroup_size = [{tuning.wg}, 1, 1]", out)
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


def compile_tuned(mlir: str, flags, tuning: Tuning | GpuTuning, *, timeout: float = DEFAULT_TIMEOUT_S,
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
            new = tuning.edit(text)
            name = _EXECUTABLE.search(text)
            if new is None or name is None:
                continue
            rel = f"tuned-{len(subs)}.mlir"
            (Path(tmp) / rel).write_text(new)
            subs.append(f"{SUBSTITUTE_FLAG}={name.group(1)}={rel}")
            applied[name.group(1)] = tuning.root(new)
        if not subs:
            return TunedCompile(None, {}, reason=f"tuning {tuning.name} fits none of the module's dispatches "
                                                 "(no row reduction it fits, or IREE's own configuration there)")
        res = compile_mlir(mlir, flags + tuple(subs) + tuple(extra), timeout=timeout, compiler=compiler, cwd=tmp)
    # the command shown without the temporary files: the record names the configuration instead
    shown = " ".join(w for w in res.command.split(" ") if SUBSTITUTE_FLAG not in w)
    return TunedCompile(CompileResult(res.ok, shown, res.seconds + dump.seconds, res.vmfb, res.error), applied)
