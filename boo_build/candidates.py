"""Candidates: the ways one kernel can run on one target, and their names.

A candidate is (implementation, compile variant, execution mode):

* ``impl``: ``aten`` / ``manual`` (``ops.base.IMPLS``);
* ``variant``: ``""`` = the target's own flags and the exported MLIR as is
  (the baseline); on CPU targets also ``"nosd"``: a forward module compiled
  without the single-dispatch preprocessing attribute the export puts on it
  (written for GPUs; on llvm-cpu it can make a small forward several times
  slower); and ``"lanes"``, an *export* variant of
  the manual forward whose row sums keep 8 lanes apart (``norm_math.row_sum``:
  llvm-cpu then accumulates whole vectors instead of reducing each vector to a
  scalar on every step), exported on its own (``EXPORT_VARIANTS``) because it is other torch code.
  On GPU targets: ``"fused"``, an export variant of the manual combined
  backward in which every full-size value is computed in the op that uses it
  (``norm_math.fused_backward``: iree-compile then forms no dispatch only to
  write an intermediate and read it back), and of the manual layer-norm forward
  where no single-dispatch pass applies (dynamic: one dispatch instead of two), and ``"nosplit"``, a compile variant
  without split reduction on the targets whose flags have it (its partial sums
  are one more dispatch, and they cut the row pass of ``fused`` in two), offered
  with fused: variants combine with ``.`` (``fused.nosplit``). GPU variants are ranked by
  the traffic model (``stages/traffic.py``) before anything compiles: without a
  device only the best-modelled one compiles and ships (``selection.modelled_gate``),
  or with ``--all-variants`` (``BuildConfig.all_variants``) every one modelled, for
  ``boo-build measure`` to time on the device.
  On a target without 16-bit types (the portable ``vulkan``), every module of a bfloat16
  kernel is also ``"words"`` (``words_base``): an export variant that passes its bfloat16 tensors
  to the dispatches as 32-bit words (``stages/torch_modules.WordsModule``), joined to the others
  (``manual+words``, ``manual+lanes.nosd.words``) and counted as the implementation's baseline.
  *Fallbacks* (``fallbacks``): the variants that change what iree-compile is given,
  tried only for a kernel none of whose candidates compiled on a target (the
  build's fallback step, ``build/creators.py``): ``nosd`` on every target, ``nosplit``
  where the target splits reductions, ``novd`` on HIP and CUDA targets (no vector
  distribution of reductions: its "failed to distribute" errors) and ``stack`` on
  CPU targets (a 128 KiB stack bound, as dynamic kernels have: "exceeded stack
  allocation limit"). One that compiles is a candidate like any other.
  *Tuned* (CPU targets, where explored, ``--tune N``): ``tune-r<R>-d<D>``, the baseline's MLIR
  compiled with another lowering configuration on its row reductions (reduction vector
  ``R``, ``D`` rows per workgroup tile: ``stages/tuning.py``), the first N of a fixed set per
  direction (``tune_variants``); ranked after every other candidate (``selection``), so one
  ships only where it is faster beyond the noise. On GPU targets, with ``--all-variants``
  (where the traffic model ranks them, or a device explores them): ``tune-wg<W>-t<T>``, a
  workgroup of ``W`` threads per row, each loading ``T`` elements a step, on every row
  reduction IREE's LLVMGPU (HIP, CUDA) or SPIR-V (Vulkan) pipeline distributes; they model
  the baseline's traffic (the same dispatches), so only a device's timings choose them
  (``boo-build measure``). docs/tuning.md;
* ``mode``: the runtime driver that runs it; ``""`` = the target's driver. CPU
  targets also offer the other CPU driver (``local-sync`` next to
  ``local-task``: the same vmfb run inline on the calling thread; a small
  kernel costs several times its run time through local-task's fork/join).
  The figures: docs/cpu-performance.md, "Measurements behind the code".

Text form: ``<impl>[+<variant>][@<mode>]`` with the baseline parts left out, so
a build that explores nothing names its modules, files and bundle entries as
before candidates existed. A compiled *module* is ``<impl>[+<variant>]`` (one
vmfb, runnable in every mode). Pure Python: the graph and the loader import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import ops
from .ops.base import FUSED, IMPLS, LANES, WORDS, lanes_apply, words_apply
from .signature import ModuleId
from .targets import CPU_DRIVERS, STACK_LIMIT, Target, dtype_problem

__all__ = ["Candidate", "EXPORT_VARIANTS", "LANES_NOSD", "NOSD", "NOSPLIT", "NOVD", "SINGLE_DISPATCH", "SPLIT_REDUCTION", "STACK", "TUNE_BACKWARD", "TUNE_DEFAULT", "TUNE_FORWARD", "TUNE_LLVMGPU", "TUNE_SPIRV", "WORDS", "applies", "apply_variant", "candidates", "explores", "export_variant", "fallback_variants", "fallbacks", "gpu_tune_params", "gpu_tune_variant", "is_base", "modelled", "modes", "module_file", "single_dispatch", "split_module_file", "tune_params", "tune_variant", "tune_variants", "tuned_base", "tuned_part", "variant_flags", "variants", "with_base", "words_base"]

SINGLE_DISPATCH = '#util.preprocessing_pipeline<"iree-preprocessing-make-single-dispatch">'
_SD_ATTR = f"preprocessing_pipeline = {SINGLE_DISPATCH}"
NOSD = "nosd"
NOSPLIT = "nosplit"
NOVD = "novd"
STACK = "stack"
SPLIT_REDUCTION = "--iree-dispatch-creation-enable-split-reduction"
# flags a variant adds to its target's: novd puts reductions on IREE's GPU pipeline without
# vector distribution (it avoids "failed to distribute"); stack the bound dynamic kernels
# have on CPU targets (targets.DYNAMIC_CPU_FLAGS; it avoids "exceeded stack allocation limit")
_ADDED_FLAGS = {NOVD: ("--iree-codegen-llvmgpu-use-reduction-vector-distribution=false",),
                STACK: (STACK_LIMIT,)}
VARIANTS = (NOSD, LANES, FUSED, NOSPLIT, NOVD, STACK, WORDS)
LANES_NOSD = f"{LANES}.{NOSD}"  # a fallback: the lanes export without the single-dispatch attribute
# exported from their own torch code, not derived from the baseline's MLIR (words with one of the others)
EXPORT_VARIANTS = (LANES, FUSED, WORDS)
_JOIN = "."  # parts of a combined variant: fused.nosplit
# Tuned configurations (reduction vector, rows per workgroup tile), most promising first, per direction:
# a forward's one dispatch gained most from a long reduction vector on 8 rows (0.49x the default's CPU
# time at 8x128x768), a backward's row reductions from one row per tile and a vector of 16-32 (0.80x).
# IREE's default is a vector of 8: docs/tuning.md, "Measurements".
TUNE_FORWARD = ((64, 8), (32, 8), (16, 8), (64, 32))
TUNE_BACKWARD = ((32, 1), (16, 1), (64, 8), (32, 8))
TUNE_DEFAULT = 1  # configurations per kernel and implementation a build tries (--tune)
_TUNE = re.compile(r"tune-r([1-9][0-9]*)-d([1-9][0-9]*)")
# GPU configurations (threads per row, elements per thread a step), the first that fit a row
# (W*T divides it) most promising first: one 64-thread workgroup per row (a single wave on
# gfx942: no reduction across subgroups), 256 threads for wide rows, 128 threads of 2-wide
# loads; IREE's default for a float32 row of 768 is 192 threads on gfx942, 96 on sm_80, 48 on
# llvmpipe, 4 elements each (64 from rows of 256 to 512 on all three). SPIR-V: 32 threads, 128 of
# 2-wide loads, 16 threads (lavapipe's subgroups are 8 wide; other Vulkan GPUs' 32 or 64 refuse 16).
TUNE_LLVMGPU = ((64, 4), (256, 4), (128, 2))
TUNE_SPIRV = ((32, 4), (128, 2), (16, 4))
_TUNE_GPU = re.compile(r"tune-wg([1-9][0-9]*)-t([1-9][0-9]*)")


def _parts(variant: str) -> tuple[str, ...]:
    return tuple(variant.split(_JOIN)) if variant else ()


@dataclass(frozen=True)
class Candidate:
    impl: str
    variant: str = ""
    mode: str = ""

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ValueError(f"unknown implementation {self.impl!r}: use one of {', '.join(IMPLS)}")
        if any(v not in VARIANTS and not _is_tuned(v) for v in _parts(self.variant)):
            raise ValueError(f"unknown variant {self.variant!r}: use one of {', '.join(VARIANTS)}, tune-r<R>-d<D>, "
                             "tune-wg<W>-t<T>"
                             f" (or several joined by {_JOIN!r})")
        if self.mode and self.mode not in CPU_DRIVERS:
            raise ValueError(f"unknown execution mode {self.mode!r}: use one of {', '.join(CPU_DRIVERS)}")

    @property
    def module(self) -> str:
        """The compiled module's name: ``<impl>[+<variant>]``."""
        return f"{self.impl}+{self.variant}" if self.variant else self.impl

    @property
    def key(self) -> str:
        """The text form ``<impl>[+<variant>][@<mode>]``."""
        return f"{self.module}@{self.mode}" if self.mode else self.module

    @property
    def is_baseline(self) -> bool:
        """The implementation's own module in the target's driver (a ``words`` one where the kernel
        is built as words there: ``words_base``)."""
        return is_base(self.variant) and not self.mode

    @property
    def tuned(self) -> bool:
        """Whether a tuned lowering configuration compiled it (``tune_params``, ``gpu_tune_params``)."""
        return any(_is_tuned(v) for v in _parts(self.variant))

    @classmethod
    def parse(cls, text: str) -> "Candidate":
        module, _, mode = text.partition("@")
        impl, _, variant = module.partition("+")
        return cls(impl, variant, mode)

    def __str__(self) -> str:
        return self.key


def variants(target: Target) -> tuple[str, ...]:
    """Variants ``target`` offers besides its baseline: nosd and lanes on CPU targets
    (the attribute matters for llvm-cpu only); fused on GPU targets, and where
    their flags split reductions, fused.nosplit (nosplit alone never modelled
    better than fused.nosplit on the default manifest, and costs a model per module)."""
    if target.is_cpu:
        return (NOSD, LANES)
    if SPLIT_REDUCTION in target.flags:
        return (FUSED, f"{FUSED}{_JOIN}{NOSPLIT}")
    return (FUSED,)


def fallback_variants(target: Target) -> tuple[str, ...]:
    """Variants ``target`` tries, in this order, for a kernel none of whose candidates
    compiled (``fallbacks``): those that change what iree-compile is given. First
    ``lanes.nosd``: without the single dispatch, IREE's GPU code sums a row serially
    (Vulkan: a 768-wide float32 forward misses the mean by 1e-4 at a mean offset of
    100, beyond the validation's bound), and the lanes' 8 partial sums cut that 6x."""
    out = [LANES_NOSD, NOSD]
    if SPLIT_REDUCTION in target.flags:
        out.append(NOSPLIT)
    if target.driver in ("hip", "cuda"):  # IREE's LLVMGPU pipelines (a flag of theirs)
        out.append(NOVD)
    if target.is_cpu:
        out.append(STACK)
    return tuple(out)


def tune_variant(r: int, d: int) -> str:
    return f"tune-r{r}-d{d}"


def tune_params(variant: str) -> tuple[int, int] | None:
    """(reduction vector, rows per tile) of a tuned variant ``tune-r<R>-d<D>``; None for any other."""
    m = _TUNE.fullmatch(variant)
    return (int(m.group(1)), int(m.group(2))) if m else None


def gpu_tune_variant(wg: int, t: int) -> str:
    return f"tune-wg{wg}-t{t}"


def gpu_tune_params(variant: str) -> tuple[int, int] | None:
    """(threads per row, elements per thread a step) of a tuned GPU variant ``tune-wg<W>-t<T>``."""
    m = _TUNE_GPU.fullmatch(variant)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _is_tuned(variant: str) -> bool:
    return tune_params(variant) is not None or gpu_tune_params(variant) is not None


def tuned_part(variant: str) -> str:
    """The tuned part of ``variant`` (``tune-wg32-t4`` of ``tune-wg32-t4.words``), or ""."""
    return next((v for v in _parts(variant) if _is_tuned(v)), "")


def tuned_base(variant: str) -> str:
    """``variant`` without its tuned part: the module whose dispatches (and traffic) it has."""
    return _JOIN.join(v for v in _parts(variant) if not _is_tuned(v))


def _gpu_set(target: Target) -> tuple[tuple[int, int], ...]:
    return TUNE_SPIRV if target.driver == "vulkan" else TUNE_LLVMGPU


def tune_variants(sig, n: int, target: Target | None = None) -> tuple[str, ...]:
    """The first ``n`` tuned variants that fit ``sig``'s rows: on a CPU target (the default)
    of its direction's set, whose reduction vector is no wider than a row; on a GPU target of
    its family's (``TUNE_LLVMGPU``, ``TUNE_SPIRV``), whose tile (threads x elements) divides a row."""
    if target is None or target.is_cpu:
        fitting = [(r, d) for r, d in (TUNE_FORWARD if sig.is_forward else TUNE_BACKWARD) if r <= sig.width]
        return tuple(tune_variant(r, d) for r, d in fitting[:max(n, 0)])
    gpu = [(w, t) for w, t in _gpu_set(target) if sig.width % (w * t) == 0]
    return tuple(gpu_tune_variant(w, t) for w, t in gpu[:max(n, 0)])


def modelled(target: Target, traffic: bool) -> bool:
    """Whether ``target``'s variants are ranked by the traffic model (GPU targets,
    where the build runs the model) when no device measures them."""
    return traffic and not target.is_cpu


def export_variant(variant: str) -> str:
    """The export ``variant``'s module comes from: its export parts (``lanes.words``), or "" (the
    baseline's MLIR)."""
    return _JOIN.join(v for v in _parts(variant) if v in EXPORT_VARIANTS)


def words_base(target: Target, mid: ModuleId) -> str:
    """``WORDS`` where ``mid``'s kernel is built as 32-bit words on ``target`` (bfloat16, for a
    target without 16-bit types: ``targets.dtype_problem``), else "": every module of the kernel
    there carries it, the baseline's included (``with_base``)."""
    return WORDS if dtype_problem(target, mid.signature.dtype) and words_apply(mid.signature) else ""


def is_base(variant: str) -> bool:
    """Whether ``variant`` is an implementation's own module: "", or ``words`` alone."""
    return variant in ("", WORDS)


def with_base(variant: str, base: str) -> str:
    """``variant`` joined with a kernel's base variant (``words_base``): ``lanes.nosd.words``."""
    return _JOIN.join(v for v in (variant, base) if v)


def variant_flags(variant: str, flags) -> tuple[str, ...]:
    """iree-compile flags of ``variant`` from the target's ``flags``: nosplit drops split
    reduction; novd and stack add their flag."""
    parts = _parts(variant)
    kept = tuple(f for f in flags if not (NOSPLIT in parts and f == SPLIT_REDUCTION))
    return kept + tuple(f for v in parts for f in _ADDED_FLAGS.get(v, ()) if f not in kept)


def modes(target: Target) -> tuple[str, ...]:
    """Execution modes of ``target``: ``""`` (its driver) and, on CPU targets, the other CPU driver."""
    return ("",) + (tuple(d for d in CPU_DRIVERS if d != target.driver) if target.is_cpu else ())


def single_dispatch(mid: ModuleId) -> bool:
    """Whether the export puts the single-dispatch attribute on ``mid``: its op's
    rule (``Op.single_dispatch``: static forward kernels, by default)."""
    return ops.get(mid.signature.op).single_dispatch(mid.signature)


def applies(variant: str, mid: ModuleId) -> bool:
    """Whether ``variant`` changes ``mid``'s module (decided before export: the graph's shape)."""
    return bool(variant) and all(_applies(v, mid) for v in _parts(variant))


def _applies(variant: str, mid: ModuleId) -> bool:
    sig = mid.signature
    if variant == LANES:
        return mid.impl == "manual" and lanes_apply(sig)
    if variant == FUSED:
        op = ops.get(sig.op)
        return mid.impl == "manual" and (op.fused_forward and not single_dispatch(mid) if sig.is_forward
                                         else op.fused_backward)
    if variant == NOSPLIT:  # forwards have no column sums to split
        return not sig.is_forward
    if variant == STACK:  # dynamic kernels have the bound already (targets.dynamic_flags)
        return not sig.is_dynamic
    if (tuned := tune_params(variant)) is not None:
        return tuned[0] <= sig.width
    if (gpu := gpu_tune_params(variant)) is not None:
        return sig.width % (gpu[0] * gpu[1]) == 0
    if variant == WORDS:
        return words_apply(sig)
    return variant == NOVD or (variant == NOSD and single_dispatch(mid))


def apply_variant(variant: str, mlir: str) -> str | None:
    """The MLIR text of ``variant`` from its export's (``export_variant``); None when the
    variant changes nothing in it. nosd takes the single-dispatch attribute out (of the
    baseline's export, or of lanes' in ``lanes.nosd``); an export variant's MLIR is its own
    export's, as is; nosplit's, novd's and stack's are the baseline's (their flags differ:
    ``variant_flags``)."""
    if NOSD in _parts(variant):
        return _without_single_dispatch(mlir)
    return mlir if variant else None


def _without_single_dispatch(mlir: str) -> str | None:
    if _SD_ATTR not in mlir:
        return None
    text = mlir.replace(f" attributes {{{_SD_ATTR}}}", "")
    return text.replace(f", {_SD_ATTR}", "").replace(f"{_SD_ATTR}, ", "")


def explores(target: Target, *, bench: bool, distributed: bool, device) -> bool:
    """Whether a build tries ``target``'s candidates beyond the baselines: only
    where they can be told apart, i.e. benchmarks run and the device is here.
    Not through a Dask scheduler (its workers time the baselines only), not
    with --no-bench: those builds name, write and pack what they always did."""
    return bool(bench and not distributed and device is not None)


def candidates(impls, target: Target, mid_of, explore: bool, model: bool = False, tune: int = 0) -> list[Candidate]:
    """Every candidate of ``impls`` on ``target`` (``mid_of(impl)`` -> its
    ``ModuleId``); only the baselines when neither ``explore`` nor ``model``
    (the traffic model ranks a GPU target's variants: ``modelled``); and there ``tune``
    tuned variants of each (``tune_variants``: a GPU target's count is 0 but with
    ``--all-variants``, ``BuildConfig.tune_for``)."""
    out = []
    for impl in impls:
        vs = ("",) + (tuple(v for v in variants(target) if applies(v, mid_of(impl)))
                      if explore or model else ())
        base = words_base(target, mid_of(impl))
        if tune and (explore or model):
            vs += tune_variants(mid_of(impl).signature, tune, target)
        for v in vs:
            out += [Candidate(impl, with_base(v, base), m) for m in (modes(target) if explore else ("",))]
    return out


def fallbacks(impls, target: Target, mid_of, explore: bool, model: bool = False, tune: int = 0) -> list[Candidate]:
    """The candidates of ``impls`` on ``target`` tried only where none of ``candidates``
    compiled, in the order tried: each fallback variant (``fallback_variants``) that
    changes an implementation's module and is not a candidate already, in each mode
    where explored."""
    have = {c.module for c in candidates(impls, target, mid_of, explore, model, tune)}
    out = []
    for v in fallback_variants(target):
        for impl in impls:
            fv = with_base(v, words_base(target, mid_of(impl)))
            if applies(v, mid_of(impl)) and Candidate(impl, fv).module not in have:
                out += [Candidate(impl, fv, m) for m in (modes(target) if explore else ("",))]
    return out


def module_file(mid_key: str, variant: str = "") -> str:
    """A module's file stem (and graph subject): ``<module key>[+<variant>]``."""
    return f"{mid_key}+{variant}" if variant else mid_key


def split_module_file(stem: str) -> tuple[str, str]:
    """``<module key>[+<variant>]`` -> (module key, variant)."""
    key, _, variant = stem.partition("+")
    return key, variant
