"""Traffic model: how many dispatches a GPU kernel runs per call and how many
bytes they move, read from what iree-compile emits, without a GPU.

Norms are memory-bound: a kernel's time on a device is about the bytes it moves
over the memory bandwidth, and launches add a few microseconds each. The model
runs iree-compile on the kernel's MLIR up to ``--compile-to=executable-sources``
(about 0.2 s: no code generation) and reads, per dispatch function:

* each ``dispatch.tensor.load`` of a binding: its bytes times the passes over it,
  at least one. A reduction, or a store, that consumes the loaded tensor (through
  reshapes and slices) is one pass; an elementwise op (every loop parallel) is
  fused into whatever consumes its result, so it counts as the passes over its
  result. The layer-norm forward of two-pass variance reads ``x`` three times:
  the mean's reduction, the variance's (through ``x - mean``), the normalization
  (through ``x - mean`` too);
* each ``dispatch.tensor.store``: its bytes, once;

and, in the host function, each ``stream.cmd.dispatch`` of such a function: one
launch per call. The sum over launches is the modelled traffic of a call.

What it cannot see: reuse through caches, within a dispatch (a row re-read by a
second op from L1/L2 may cost no DRAM traffic: the model then overcounts) or
across dispatches (an intermediate written by one dispatch and read by the next
may stay in L2); what the code generator fuses or tiles beyond the dispatch's
linalg ops (``executable-configurations`` would show it). A modelled figure is
an estimate, never a measurement: ``boo-build info``, ``bench.csv`` and the
report page say "modelled".

The minimal traffic of a call is what any kernel must move: each input read
once and each output written once (the calling convention: forward x, weight,
bias in, y and statistics out; backward grad_y, x, statistics, weight in, the
requested gradients out). A dynamic kernel is evaluated at a static shape it
serves (its bench shape): a ``?`` dimension takes that shape's dynamic sizes in
order, or their product where the dispatch flattened them into one.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..dtypes import ITEMSIZE
from ..signature import KernelSignature

PHASE = "executable-sources"

# bytes per element of the element types a norm's dispatches use
_ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1,
                  "index": 8}

_FUNC = re.compile(r"^\s*func\.func @(?P<name>[^\s(]+)\(")
_LOAD = re.compile(r"^\s*(?P<res>%[\w.]+) = (?:iree_tensor_ext|flow)\.dispatch\.tensor\.load .*"
                   r":\s*!(?:iree_tensor_ext|flow)\.dispatch\.tensor<\w+:tensor<(?P<binding>[^>]+)>>(?:\{[^}]*\})? "
                   r"-> tensor<(?P<type>[^>]+)>")
_STORE = re.compile(r"^\s*(?:iree_tensor_ext|flow)\.dispatch\.tensor\.store .*: tensor<(?P<type>[^>]+)> -> "
                    r"!(?:iree_tensor_ext|flow)\.dispatch\.tensor<\w+:tensor<(?P<binding>[^>]+)>>")
_ALIAS = re.compile(r"^\s*(?P<res>%[\w.]+) = tensor\.(?:expand_shape|collapse_shape|extract_slice|cast|reshape) "
                    r"(?P<src>%[\w.]+)")
_LINALG_INS = re.compile(r"^\s*(?:(?P<res>%[\w.]+)(?::\d+)?(?:, %[\w.:]+)* = )?(?:linalg|iree_linalg_ext)\.\w+.*?"
                         r"\bins\((?P<ins>[^:)]*)")
_STORED = re.compile(r"^\s*(?:iree_tensor_ext|flow)\.dispatch\.tensor\.store (?P<src>%[\w.]+),")
_DISPATCH = re.compile(r"stream\.cmd\.dispatch @[^:\s]+::@[^:\s]+::@(?P<entry>[^\s{(\[]+)")
_SSA = re.compile(r"%[\w.]+")
_CONST = re.compile(r"^\s*(?P<res>%[\w.]+) = arith\.constant (?P<value>-?\d+) : index")
# a loop inside a dispatch (split reduction: each iteration loads its own rows)
_LOOP = re.compile(r"^(?P<indent>\s*)(?:%[\w.:]+ = )?scf\.(?:forall|for) .*?"
                   r"(?:= \((?P<lb>[^)]*)\) to \((?P<ub>[^)]*)\) step \((?P<step>[^)]*)\)"
                   r"|= (?P<lb1>\S+) to (?P<ub1>\S+) step (?P<step1>\S+))")


class TrafficError(ValueError):
    """The model cannot be evaluated: a compile that fails at the phase, a type it cannot size."""


@dataclass(frozen=True)
class DispatchTraffic:
    """One dispatch function: bytes it reads (passes counted) and writes per launch."""
    name: str
    read_bytes: int
    write_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "read_bytes": self.read_bytes, "write_bytes": self.write_bytes}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DispatchTraffic:
        return cls(str(d["name"]), int(d["read_bytes"]), int(d["write_bytes"]))


@dataclass(frozen=True)
class Traffic:
    """A kernel's modelled traffic per call (module docstring), at ``shape`` (its input's)."""
    dispatches: int
    read_bytes: int
    write_bytes: int
    minimal_bytes: int
    shape: tuple[int, ...]
    per_dispatch: tuple[DispatchTraffic, ...] = ()  # one per launch, in launch order

    @property
    def modelled_bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def ratio(self) -> float:
        """Modelled over minimal bytes (1.0: each tensor moved once)."""
        return self.modelled_bytes / self.minimal_bytes if self.minimal_bytes else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"model": PHASE, "dispatches": self.dispatches, "read_bytes": self.read_bytes,
                "write_bytes": self.write_bytes, "modelled_bytes": self.modelled_bytes,
                "minimal_bytes": self.minimal_bytes, "ratio": round(self.ratio, 4), "shape": list(self.shape),
                "per_dispatch": [d.to_json() for d in self.per_dispatch]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Traffic:
        return cls(int(d["dispatches"]), int(d["read_bytes"]), int(d["write_bytes"]), int(d["minimal_bytes"]),
                   tuple(int(v) for v in d["shape"]),
                   tuple(DispatchTraffic.from_json(x) for x in d.get("per_dispatch", ())))

    def summary(self) -> str:
        """``"6 dispatches, 4.00x minimal (modelled)"``."""
        return f"{self.dispatches} dispatch{'es' if self.dispatches != 1 else ''}, {self.ratio:.2f}x minimal (modelled)"


# ------------------------------------------------------------------ parsing
def _tensor_bytes(type_text: str, dynamic: tuple[int, ...]) -> int:
    """Bytes of ``tensor<...>``'s text (``1024x768xf32``); ``?`` dims from ``dynamic``:
    in order where there are as many, else one ``?`` is their product."""
    *dims, elem = type_text.split(",")[0].strip().split("x")
    size = _ELEMENT_BYTES.get(elem.strip())
    if size is None:
        raise TrafficError(f"element type {elem!r} of tensor<{type_text}> has no known size")
    unknown = [i for i, d in enumerate(dims) if d == "?"]
    values = [int(d) if d != "?" else 0 for d in dims]
    if unknown:
        if len(unknown) == len(dynamic):
            for i, v in zip(unknown, dynamic):
                values[i] = v
        elif len(unknown) == 1 and dynamic:
            values[unknown[0]] = math.prod(dynamic)
        else:
            raise TrafficError(f"tensor<{type_text}> has {len(unknown)} dynamic dims; the shape gives "
                               f"{len(dynamic)} sizes")
    return math.prod(values) * size


def _trips(m: re.Match[str], consts: Mapping[str, int]) -> int | None:
    """Iterations of a loop header (``_LOOP``) whose bounds are constants, else None."""
    bounds = (m[g] if m[g] is not None else m[g + "1"] for g in ("lb", "ub", "step"))
    trips = 1
    for lo, hi, st in zip(*(b.split(",") for b in bounds)):
        low, high, step = (_index(t, consts) for t in (lo, hi, st))
        if low is None or high is None or not step:
            return None
        trips *= max(0, -(-(high - low) // step))
    return trips


def _index(text: str, consts: Mapping[str, int]) -> int | None:
    """An index operand's value: a literal, or an ``arith.constant`` seen before; else None."""
    text = text.strip()
    if text.startswith("%"):
        return consts.get(text)
    try:
        return int(text)
    except ValueError:
        return None


def _in_loops(m: re.Match[str], loops: list[tuple[int, int | None]], dynamic: tuple[int, ...]) -> int:
    """Bytes a load or store moves per launch: its tile's, once per iteration of the loops
    around it; where a trip count is unknown (dynamic bounds), the whole binding's
    (a split-reduction loop covers its binding)."""
    trips = [t for _, t in loops if t is not None]
    if len(trips) < len(loops):
        return _tensor_bytes(m["binding"], dynamic)
    return _tensor_bytes(m["type"], dynamic) * math.prod(trips)


def dispatch_functions(text: str, dynamic: tuple[int, ...] = ()) -> dict[str, DispatchTraffic]:
    """Every dispatch function of an ``executable-sources`` module, by entry name."""
    out: dict[str, DispatchTraffic] = {}
    name: str | None = None
    loads: dict[str, int] = {}  # loaded SSA value -> bytes
    alias: dict[str, str] = {}  # reshaped/sliced value -> the value it views
    consumers: dict[str, list[str | None]] = {}  # value -> the elementwise ops' results it feeds; None: one pass
    writes = 0
    consts: dict[str, int] = {}  # index constants, for loop bounds
    loops: list[tuple[int, int | None]] = []  # open loops: (indent, trip count or None where unknown)

    def passes(v: str, seen: frozenset[str] = frozenset()) -> int:
        if v in seen:  # (SSA has no cycles; a guard all the same)
            return 1
        return sum(1 if c is None else max(1, passes(c, seen | {v})) for c in consumers.get(v, ()))

    def close() -> None:
        if name is not None:
            reads = sum(b * max(1, passes(v)) for v, b in loads.items())
            out[name] = DispatchTraffic(name, reads, writes)

    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            close()
            name, loads, alias, consumers, writes, consts, loops = m["name"], {}, {}, {}, 0, {}, []
            continue
        if name is None:
            continue
        indent = len(line) - len(line.lstrip())
        while loops and indent <= loops[-1][0] and line.lstrip().startswith("}"):
            loops.pop()
        if m := _CONST.match(line):
            consts[m["res"]] = int(m["value"])
        elif m := _LOOP.match(line):
            loops.append((indent, _trips(m, consts)))
        elif m := _LOAD.match(line):
            loads[m["res"]] = _in_loops(m, loops, dynamic)
        elif m := _STORE.match(line):
            writes += _in_loops(m, loops, dynamic)
            if s := _STORED.match(line):
                consumers.setdefault(alias.get(s["src"], s["src"]), []).append(None)
        elif m := _ALIAS.match(line):
            alias[m["res"]] = alias.get(m["src"], m["src"])
        elif m := _LINALG_INS.match(line):
            # an elementwise op passes its reads on to its result's consumers; a reduction is one pass
            elementwise = "iterator_types" in line and "reduction" not in line and m["res"] is not None
            for v in set(_SSA.findall(m["ins"])):
                consumers.setdefault(alias.get(v, v), []).append(m["res"] if elementwise else None)
    close()
    return out


def launches(text: str) -> list[str]:
    """The dispatch functions a call launches, in order (the host code's ``stream.cmd.dispatch``)."""
    return [m["entry"] for m in _DISPATCH.finditer(text)]


def minimal_bytes(sig: KernelSignature) -> int:
    """Each input read once and each output written once (static ``sig``)."""
    # a static signature: its dims are ints, which the field's type cannot say
    return sum(math.prod(shape) * ITEMSIZE[dt]  # type: ignore[arg-type, misc]
               for _, shape, dt in (*sig.inputs(), *sig.outputs()))


def model(text: str, sig: KernelSignature, kernel: KernelSignature | None = None) -> Traffic:
    """The traffic of one call of static ``sig`` from the ``executable-sources`` text of
    ``kernel``'s module (default ``sig``; a dynamic kernel serving ``sig``)."""
    kernel = kernel or sig
    dyn = tuple(int(s) for s, d in zip(sig.input_shape, kernel.input_shape) if not isinstance(d, int))
    funcs = dispatch_functions(text, dyn)
    order = launches(text)
    missing = sorted({e for e in order if e not in funcs})
    if not order or missing:
        raise TrafficError("no dispatch launched" if not order else f"launched but not found: {missing[0]}")
    per = tuple(funcs[e] for e in order)
    return Traffic(len(per), sum(d.read_bytes for d in per), sum(d.write_bytes for d in per), minimal_bytes(sig),
                   tuple(int(d) for d in sig.input_shape), per)


@dataclass(frozen=True)
class TrafficRecord:
    """The traffic stage's record of one module on one GPU target: ``traffic`` where
    the model ran, else ``reason`` (the module did not compile, the model failed)."""
    module: str
    target: str
    traffic: Traffic | None = None
    reason: str = ""
    run_id: str | None = None
    seconds: float | None = None
    modelled_on: str | None = None  # the target whose model this is (same flags but the architecture)

    @property
    def ok(self) -> bool:
        return self.traffic is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"module": self.module, "target": self.target,
                               "status": "ok" if self.ok else "not modelled", "run_id": self.run_id}
        if self.traffic is not None:
            out["traffic"] = self.traffic.to_json()
        else:
            out["reason"] = self.reason
        if self.seconds is not None:
            out["seconds"] = self.seconds
        if self.modelled_on is not None:
            out["modelled_on"] = self.modelled_on
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrafficRecord:
        t = d.get("traffic")
        return cls(str(d.get("module", "")), str(d.get("target", "")), Traffic.from_json(t) if t else None,
                   str(d.get("reason", "")), d.get("run_id"), d.get("seconds"), d.get("modelled_on"))


def executable_sources(mlir: str, flags: Iterable[str], compiler: str | None = None, timeout: float = 300.0) -> str:
    """iree-compile's module at ``--compile-to=executable-sources`` for ``flags`` (a target's)."""
    from .compile import compiler_path, useful_stderr

    cmd = [compiler or compiler_path(), "-", *flags, f"--compile-to={PHASE}", "-o", "-"]
    proc = subprocess.run(cmd, input=mlir.encode(), capture_output=True, timeout=timeout,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise TrafficError(f"iree-compile --compile-to={PHASE} failed: "
                           f"{useful_stderr(proc.stderr.decode(errors='replace'), 600)}")
    return proc.stdout.decode()


def kernel_traffic(mlir: str, flags: Iterable[str], sig: KernelSignature, kernel: KernelSignature | None = None,
                   compiler: str | None = None) -> Traffic:
    """``model`` of the module ``mlir`` compiled with ``flags``, at static ``sig``."""
    return model(executable_sources(mlir, flags, compiler), sig, kernel)


__all__ = ["DispatchTraffic", "PHASE", "Traffic", "TrafficError", "TrafficRecord", "dispatch_functions", "executable_sources",
           "kernel_traffic", "launches", "minimal_bytes", "model"]
