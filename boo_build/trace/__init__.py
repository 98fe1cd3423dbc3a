"""From a model to its manifest: ``record_norms`` records the norm calls a
model makes, as the kernel calls its swapped model will make, and writes the
manifest that builds them (docs/trace.md).

    from boo_build.trace import record_norms

    with record_norms(rms_classes=["LlamaRMSNorm"]) as rec:
        train_one_step(model)
    rec.write("model.toml", name="my-model", targets=["cpu"])

``from_misses(bundle)``: the same for the calls a bundle opened with
``fallback="eager"`` missed. ``boo-build trace`` runs a script under the
recorder. Imports torch; never the compiler, iree-turbine or doit, and the
loader never imports this package.
"""

from .manifest_text import DEFAULT_TARGETS, DYNAMIC_MODES, MAX_STATIC, Entry, plan
from .recorder import RecordedCall, Recording, UnknownRmsClass, Unrecorded, from_misses, record_norms

__all__ = ["DEFAULT_TARGETS", "DYNAMIC_MODES", "MAX_STATIC", "Entry", "RecordedCall", "Recording", "UnknownRmsClass",
           "Unrecorded", "from_misses", "plan", "record_norms"]
