"""Export: one MLIR module per (signature, implementation) through iree-turbine.

``export_module`` never raises for a kernel that cannot be exported: it
returns an ``ExportResult`` whose ``status`` is ``"unavailable"`` and whose
``reason`` says why, so a build carries on with the other implementation.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import torch

from .. import ops
from ..candidates import SINGLE_DISPATCH, single_dispatch  # one definition (pure Python)
from ..signature import KernelSignature, ModuleId
from . import interrupt
from .interrupt import Interrupted
from .torch_modules import make_module, sample_args


def _decompose() -> list:
    """Ops the importer in iree-base-compiler 3.13 does not lower (each op's
    ``decompositions``, e.g. ``aten._fused_rms_norm``): torch's own
    decompositions are applied for them before import."""
    return list(dict.fromkeys(d for name in ops.names() for d in ops.get(name).decompositions()))


# torch.export keeps tracing state per process ("ProxyTorchDispatchMode slot
# already occupied" when two threads trace at once): doit runs actions in
# threads, so exports take turns. Compiles, the slow part, still overlap.
_EXPORT_LOCK = threading.Lock()


@dataclass(frozen=True)
class ExportResult:
    module: ModuleId
    status: str  # "ok" | "unavailable"
    mlir: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def dynamic_shapes(sig: KernelSignature):
    """torch.export's ``dynamic_shapes`` for the kernel's arguments (None when
    static): one ``Dim`` per name, from 1 to its bound (``dim_bounds``), shared
    by every argument and position where the name appears, so equal names stay
    equal. Dim names are prefixed: a bare name could clash with sympy's."""
    if not sig.is_dynamic:
        return None
    bounds = sig.dim_bounds()
    dims = {n: torch.export.Dim(f"boo_{n}", min=1, max=bounds[n]) for n in sig.dim_names}
    specs = tuple({i: dims[d] for i, d in enumerate(shape) if isinstance(d, str)} or None
                  for _, shape, _ in sig.inputs())
    return {"args": specs}  # the modules' forward takes *args


def export_mlir(mid: ModuleId, variant: str = "") -> str:
    """MLIR text of the module (of its export ``variant``, ``candidates.EXPORT_VARIANTS``);
    raises on failure. Deterministic for a given id. A dynamic signature
    exports with symbolic dims (``dynamic_shapes``)."""
    from iree.compiler.ir import Attribute
    from iree.turbine import aot
    from iree.turbine.aot import extend_aot_decompositions

    module = make_module(mid, variant)
    args = sample_args(mid.signature)
    with _EXPORT_LOCK, warnings.catch_warnings():
        # An interrupted build waits for the export in torch (it cannot be cut
        # short) but not for those queued behind it: they do not start.
        interrupt.check(f"export {mid.key}")
        interrupt.pause_point("export")  # test-only (interrupt.PAUSE_ENV): the export is about to run
        warnings.simplefilter("ignore")
        with extend_aot_decompositions(from_current=True, add_ops=_decompose()):
            exported = aot.export(module, args=args, dynamic_shapes=dynamic_shapes(mid.signature),
                                  function_name=mid.func_name)
        exported.import_to("full")
    mod = exported.mlir_module
    if single_dispatch(mid):
        with mod.context:
            func_op = mod.regions[0].blocks[0].operations[0]
            func_op.attributes["preprocessing_pipeline"] = Attribute.parse(SINGLE_DISPATCH)
    return str(mod)


def export_module(mid: ModuleId, variant: str = "") -> ExportResult:
    try:
        text = export_mlir(mid, variant)
    except Interrupted:  # not the kernel's failure: nothing to record
        raise
    except Exception as e:  # noqa: BLE001 - any exporter failure makes the impl unavailable
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return ExportResult(mid, "unavailable", reason=f"export failed: {type(e).__name__}: {first}"[:500])
    if "torch.operator" in text:
        op = text.split('torch.operator "', 1)[1].split('"', 1)[0]
        return ExportResult(mid, "unavailable", reason=f"importer did not lower {op}")
    return ExportResult(mid, "ok", mlir=text)
