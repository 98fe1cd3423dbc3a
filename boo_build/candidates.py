"""Candidates: the ways one kernel can run on one target, and their names.

A candidate is (implementation, compile variant, execution mode):

* ``impl``: ``aten`` / ``manual`` (``signature.IMPLS``);
* ``variant``: ``""`` = the target's own flags and the exported MLIR as is
  (the baseline); on CPU targets also ``"nosd"``: a forward module compiled
  without the single-dispatch preprocessing attribute the export puts on it
  (written for GPUs; on llvm-cpu it can make a small forward several times
  slower); and ``"lanes"``, an *export* variant of
  the manual forward whose row sums keep 8 lanes apart (``norm_math.row_sum``:
  llvm-cpu then accumulates whole vectors instead of reducing each vector to a
  scalar on every step), exported on its own (``EXPORT_VARIANTS``) because it is other torch code;
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

from dataclasses import dataclass

from . import ops
from .ops.base import LANES, lanes_apply
from .signature import IMPLS, ModuleId
from .targets import CPU_DRIVERS, Target

__all__ = ["EXPORT_VARIANTS", "LANES", "NOSD", "SINGLE_DISPATCH", "Candidate", "apply_variant", "applies",
           "candidates", "explores", "lanes_apply", "modes", "module_file", "single_dispatch", "split_module_file",
           "variants"]

SINGLE_DISPATCH = '#util.preprocessing_pipeline<"iree-preprocessing-make-single-dispatch">'
_SD_ATTR = f"preprocessing_pipeline = {SINGLE_DISPATCH}"
NOSD = "nosd"
VARIANTS = (NOSD, LANES)
EXPORT_VARIANTS = (LANES,)  # exported from their own torch code, not derived from the baseline's MLIR


@dataclass(frozen=True)
class Candidate:
    impl: str
    variant: str = ""
    mode: str = ""

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ValueError(f"unknown implementation {self.impl!r}: use one of {', '.join(IMPLS)}")
        if self.variant and self.variant not in VARIANTS:
            raise ValueError(f"unknown compile variant {self.variant!r}: use one of {', '.join(VARIANTS)}")
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
        return not self.variant and not self.mode

    @classmethod
    def parse(cls, text: str) -> "Candidate":
        module, _, mode = text.partition("@")
        impl, _, variant = module.partition("+")
        return cls(impl, variant, mode)

    def __str__(self) -> str:
        return self.key


def variants(target: Target) -> tuple[str, ...]:
    """Compile variants ``target`` offers besides its baseline: nosd on CPU targets
    (the attribute matters for llvm-cpu only; GPU targets keep their flags)."""
    return VARIANTS if target.is_cpu else ()


def modes(target: Target) -> tuple[str, ...]:
    """Execution modes of ``target``: ``""`` (its driver) and, on CPU targets, the other CPU driver."""
    return ("",) + (tuple(d for d in CPU_DRIVERS if d != target.driver) if target.is_cpu else ())


def single_dispatch(mid: ModuleId) -> bool:
    """Whether the export puts the single-dispatch attribute on ``mid``: its op's
    rule (``Op.single_dispatch``: static forward kernels, by default)."""
    return ops.get(mid.signature.op).single_dispatch(mid.signature)


def applies(variant: str, mid: ModuleId) -> bool:
    """Whether ``variant`` changes ``mid``'s module (decided before export: the graph's shape)."""
    if variant == LANES:
        return mid.impl == "manual" and lanes_apply(mid.signature)
    return variant == NOSD and single_dispatch(mid)


def apply_variant(variant: str, mlir: str) -> str | None:
    """The MLIR text of ``variant``; None when the variant changes nothing in it.
    An export variant's MLIR is its own export's, as is."""
    if variant in EXPORT_VARIANTS:
        return mlir
    if variant != NOSD or _SD_ATTR not in mlir:
        return None
    text = mlir.replace(f" attributes {{{_SD_ATTR}}}", "")
    return text.replace(f", {_SD_ATTR}", "").replace(f"{_SD_ATTR}, ", "")


def explores(target: Target, *, bench: bool, distributed: bool, device) -> bool:
    """Whether a build tries ``target``'s candidates beyond the baselines: only
    where they can be told apart, i.e. benchmarks run and the device is here.
    Not through a Dask scheduler (its workers time the baselines only), not
    with --no-bench: those builds name, write and pack what they always did."""
    return bool(bench and not distributed and device is not None)


def candidates(impls, target: Target, mid_of, explore: bool) -> list[Candidate]:
    """Every candidate of ``impls`` on ``target`` (``mid_of(impl)`` -> its
    ``ModuleId``); only the baselines when not ``explore``."""
    out = []
    for impl in impls:
        vs = ("",) + (tuple(v for v in variants(target) if applies(v, mid_of(impl))) if explore else ())
        for v in vs:
            out += [Candidate(impl, v, m) for m in (modes(target) if explore else ("",))]
    return out


def module_file(mid_key: str, variant: str = "") -> str:
    """A module's file stem (and graph subject): ``<module key>[+<variant>]``."""
    return f"{mid_key}+{variant}" if variant else mid_key


def split_module_file(stem: str) -> tuple[str, str]:
    """``<module key>[+<variant>]`` -> (module key, variant)."""
    key, _, variant = stem.partition("+")
    return key, variant
