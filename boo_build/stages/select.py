"""The select stage: one kernel on one target, from its candidates' records to its ``Decision``.

A select task (``build/creators.py``) runs per kernel and target once its
candidates are compiled, validated, timed and modelled. It reads their
records (``KernelRecords``: each compiled module's export, compile,
validation and traffic records, each candidate's benchmark, torch eager's),
decides (``selection.decide``, the rules) and writes a ``SelectRecord``,
``select/<target>/<signature key>.json``. The report gathers these records,
the pack task writes the bundle index from them, and the page draws them: the
decision is made here once.

The candidates are ``candidates.candidates``' (the graph enumerates its
modules and benchmark subjects with it too). Reading the records is pure
file access (``layout``); ``select`` is a pure function of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..candidates import Candidate, candidates, explores, export_variant, fallbacks, modelled, module_file
from ..files import read_json
from ..layout import Layout, bench_subject, eager_subject
from ..reasons import Kind, Reason
from ..records import BenchResult, CompileRecord, CompileStatus, FallbackRecord, ValidationResult
from ..signature import KernelSignature, ModuleId
from ..targets import Target
from . import not_run
from .comparison import Previous, RoundsRecord
from .selection import Decision, decide
from .traffic import TrafficRecord

Json = dict[str, Any]

__all__ = ["KernelRecords", "KernelTarget", "ModuleRecords", "SelectRecord", "not_compiled_reason"]


@dataclass(frozen=True)
class KernelTarget:
    """What decides a kernel's candidates on a target and which of their records exist:
    its signature and implementations, the target, whether the build tries the
    target's candidates (``explore``) or ranks its variants by the traffic model
    (``model``), whether benchmarks run, and the device's absence (``no_device``:
    why it did not run; "" where a device ran the kernels)."""

    sig: KernelSignature
    impls: tuple[str, ...]
    target: Target
    explore: bool
    model: bool
    bench: bool
    no_device: str = ""
    tune: int = 0  # tuned configurations per implementation where explored on a CPU target (candidates.tune_variants)

    @classmethod
    def of(cls, sig: KernelSignature, impls, target: Target, *, bench: bool, distributed: bool, device: Any,
           why_no_device: str, traffic: bool, tune: int = 0) -> "KernelTarget":
        """A build's view of ``sig`` on ``target``: ``device`` (None: absent, ``why_no_device``
        says why); candidates tried where they can be told apart (``candidates.explores``),
        variants ranked by the traffic model where it runs (``candidates.modelled``)."""
        return cls(sig, tuple(impls), target, explore=explores(target, bench=bench, distributed=distributed,
                                                               device=device),
                   model=modelled(target, traffic), bench=bench, no_device="" if device is not None else why_no_device,
                   tune=tune)

    def tune_config(self) -> dict[str, int]:
        """The tuned configurations' count where it decides the candidates (a select task's
        configuration: other builds' tasks stay up to date)."""
        return {"tune": self.tune} if (self.explore or self.model) and self.tune else {}

    @property
    def ran(self) -> bool:
        return not self.no_device

    def candidates(self) -> list[Candidate]:
        return candidates(self.impls, self.target, lambda i: ModuleId(self.sig, i), self.explore, self.model,
                          self.tune)

    def fallbacks(self) -> list[Candidate]:
        """The candidates its fallback step tries where none of ``candidates`` compiled
        (``candidates.fallbacks``); which it did, its record says (``KernelRecords.read``)."""
        return fallbacks(self.impls, self.target, lambda i: ModuleId(self.sig, i), self.explore, self.model,
                         self.tune)

    def fallback_modules(self) -> list[tuple[ModuleId, str]]:
        """(module id, variant) of each module the fallback step may compile."""
        return list(dict.fromkeys((ModuleId(self.sig, c.impl), c.variant) for c in self.fallbacks()))

    def _fallback_record(self, lay: Layout) -> list[Path]:
        """The fallback step's record, where the kernel has one: what it tried, and the
        digests of its modules' records (they exist only where it tried them)."""
        return [lay.fallback(self.target.name, self.sig.key)] if self.fallbacks() else []

    def inputs(self, lay: Layout) -> list[Path]:
        """Every record the decision reads (present or not): the select task's inputs."""
        out: list[Path] = []
        seen = set()
        t = self.target.name
        for c in self.candidates():
            mid = ModuleId(self.sig, c.impl)
            if c.module not in seen:
                seen.add(c.module)
                out += [lay.export_record(mid, export_variant(c.variant)), lay.compile_record(t, mid, c.variant)]
                if self.ran:
                    out.append(lay.validation(t, mid, c.variant))
                if self.model:
                    out.append(lay.traffic(t, mid, c.variant))
        return out + self._fallback_record(lay) + (self.bench_outputs(lay) if self.ran and self.bench else [])

    def bench_inputs(self, lay: Layout) -> list[Path]:
        """What the kernel's benchmark reads: each candidate module's compile and validation
        records, and the fallback step's record (those of the modules it tried)."""
        t = self.target.name
        mids = {c.module: (ModuleId(self.sig, c.impl), c.variant) for c in self.candidates()}
        return [p for mid, v in mids.values() for p in (lay.compile_record(t, mid, v), lay.validation(t, mid, v))
                ] + self._fallback_record(lay)

    def bench_outputs(self, lay: Layout, fallbacks: bool = False) -> list[Path]:
        """What the kernel's benchmark writes: each candidate's record, torch eager's, the rounds;
        with ``fallbacks``, also the records it writes for the fallback candidates, where tried."""
        t = self.target.name
        out = [lay.bench(t, bench_subject(module_file(ModuleId(self.sig, c.impl).key, c.variant), c.mode))
               for c in self.candidates() + (self.fallbacks() if fallbacks else [])]
        return out + [lay.bench(t, eager_subject(self.sig.key)), lay.rounds(t, self.sig.key)]


@dataclass(frozen=True)
class ModuleRecords:
    """One compiled module's records as written (JSON; None where missing)."""

    export: Json | None
    compile: Json | None
    validation: Json | None
    traffic: Json | None

    @property
    def compiled(self) -> bool:
        return bool(self.compile) and self.compile.get("status") == CompileStatus.OK  # type: ignore[union-attr]


def not_compiled_reason(export: Json | None, compile: Json | None) -> Reason:
    """Why a module did not compile, from its records: the export was unavailable,
    iree-compile failed (or left no record), or it was left out on purpose (the
    traffic model ranked another first; the variant changes nothing)."""
    if compile is None:
        return Reason(Kind.COMPILE_FAILED, "not compiled: no compile record")
    rec = CompileRecord.from_json(compile)
    if rec.status is CompileStatus.UNAVAILABLE:
        kind = Kind.NOT_COMPILED if export and export.get("status") == "ok" else Kind.EXPORT_UNAVAILABLE
        return Reason(kind, rec.reason or "unavailable")
    first = (rec.error or "").strip().splitlines()[:1]
    return Reason(Kind.COMPILE_FAILED, f"compile failed: {first[0] if first else rec.status}")


@dataclass(frozen=True)
class KernelRecords:
    """The records of a kernel's candidates on one target (``read``), and the decision they make."""

    kt: KernelTarget
    candidates: tuple[Candidate, ...]
    modules: Mapping[str, ModuleRecords]  # by module name (<impl>[+<variant>])
    benches: Mapping[str, Json | None]  # by candidate name
    eager: Json | None
    rounds: Json | None = None  # the benchmark's paired rounds (comparison.RoundsRecord)
    fallback: FallbackRecord | None = None  # the kernel's fallback step, where it has one

    @classmethod
    def read(cls, lay: Layout, kt: KernelTarget) -> "KernelRecords":
        """The records of ``kt``'s candidates, and of the fallback candidates its fallback step tried."""
        t, cands = kt.target.name, kt.candidates()
        fb = FallbackRecord.from_json(rec) if kt.fallbacks() and (rec := read_json(lay.fallback(t, kt.sig.key))) \
            else None
        if fb is not None:
            cands += [c for c in kt.fallbacks() if c.module in fb.tried]
        modules: dict[str, ModuleRecords] = {}
        benches: dict[str, Json | None] = {}
        for c in cands:
            mid = ModuleId(kt.sig, c.impl)
            if c.module not in modules:
                modules[c.module] = ModuleRecords(
                    export=read_json(lay.export_record(mid, export_variant(c.variant))),
                    compile=read_json(lay.compile_record(t, mid, c.variant)),
                    validation=read_json(lay.validation(t, mid, c.variant)) if kt.ran else None,
                    traffic=read_json(lay.traffic(t, mid, c.variant)) if kt.model else None)
            benches[c.key] = (read_json(lay.bench(t, bench_subject(module_file(mid.key, c.variant), c.mode)))
                              if kt.ran and kt.bench else None)
        timed = kt.ran and kt.bench
        eager = read_json(lay.bench(t, eager_subject(kt.sig.key))) if timed else None
        rounds = read_json(lay.rounds(t, kt.sig.key)) if timed else None
        return cls(kt, tuple(cands), modules, benches, eager, rounds, fb)

    def compiled(self) -> list[str]:
        return [c.key for c in self.candidates if self.modules[c.module].compiled]

    def validations(self) -> dict[str, ValidationResult | None]:
        """Per candidate: its module's validation; where nothing ran, the not-run record that says why."""
        kt, compiled = self.kt, set(self.compiled())
        out: dict[str, ValidationResult | None] = {}
        for c in self.candidates:
            if not kt.ran:
                out[c.key] = (not_run.validation(ModuleId(kt.sig, c.impl).key, kt.target.name, kt.no_device)
                              if c.key in compiled else None)
            else:
                v = self.modules[c.module].validation
                out[c.key] = ValidationResult.from_json(v) if v else None
        return out

    def module_validation(self, module: str) -> Json | None:
        """A compiled module's validation record as written; where nothing ran, the
        not-run record that says why (``not_run``), as its candidates' (``validations``)."""
        m = self.modules[module]
        if self.kt.ran or not m.compiled:
            return m.validation
        c = Candidate.parse(module)
        return not_run.validation(ModuleId(self.kt.sig, c.impl).key, self.kt.target.name, self.kt.no_device).to_json()

    def bench_results(self) -> dict[str, BenchResult | None]:
        return {n: BenchResult.from_json(b) if b else None for n, b in self.benches.items()}

    def eager_result(self) -> BenchResult | None:
        return BenchResult.from_json(self.eager) if self.eager else None

    def traffic(self) -> dict[str, Any]:
        out = {}
        for c in self.candidates:
            rec = self.modules[c.module].traffic
            out[c.key] = TrafficRecord.from_json(rec).traffic if rec else None
        return out

    def decide(self) -> Decision:
        """The decision (``selection.decide``): torch calls go to torch only where the
        candidates were explored, eager was faster and its results pass."""
        compiled = self.compiled()
        not_compiled = {c.key: not_compiled_reason(self.modules[c.module].export, self.modules[c.module].compile)
                        for c in self.candidates if c.key not in compiled}
        eager = self.eager_result()
        return decide(self.kt.sig, self.kt.target.name, [c.key for c in self.candidates], compiled,
                      self.validations(), self.bench_results(), not_compiled=not_compiled, explored=self.kt.explore,
                      eager=eager if self.kt.explore else None,
                      eager_validation=eager.validation if eager is not None else None, traffic=self.traffic(),
                      rounds=RoundsRecord.from_json(self.rounds) if self.rounds else None)


@dataclass(frozen=True)
class SelectRecord:
    """The select stage's record: the decision for ``key`` on ``target``."""

    key: str  # signature key
    target: str
    decision: Decision
    run_id: str | None = field(default=None, compare=False)

    def to_json(self) -> Json:
        return {"key": self.key, "target": self.target, "status": "available" if self.decision.available
                else "unavailable", "decision": self.decision.to_json(), "run_id": self.run_id}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SelectRecord":
        return cls(key=d["key"], target=d["target"], decision=Decision.from_json(d["decision"]),
                   run_id=d.get("run_id"))

    @classmethod
    def read(cls, path: Path) -> "SelectRecord | None":
        d = read_json(path)
        return cls.from_json(d) if d else None

    def previous(self) -> Previous | None:
        """This decision as the next build of the same folder keeps it (``comparison.Previous``):
        a candidate chosen by paired rounds on a known machine, and where torch calls ran it;
        None for any other decision (by the model, by default, nothing available)."""
        d = self.decision
        timing, impl = d.timing, d.selection.impl
        if impl is None or not d.selection.measured or timing is None or not timing.machine:
            return None
        pref, vs = d.prefer_eager, d.vs_compiled
        by_rows = None if pref is None or not pref.by_rows else tuple((r, not e) for r, e in pref.by_rows)
        vs = vs if vs is not None and vs.timed else None  # a verdict against torch.compile, timed
        return Previous(candidate=impl, machine=timing.machine, kernel=pref is None, by_rows=by_rows,
                        run_id=self.run_id, busy=timing.busy, compiled=None if vs is None else not vs.graph,
                        compiled_rows=None if vs is None or not vs.by_rows else tuple((r, not g) for r, g in vs.by_rows))
