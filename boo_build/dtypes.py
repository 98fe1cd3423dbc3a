"""The one dtype table: the element types kernels take, by name.

Pure Python (the loader imports it): torch and numpy dtypes are looked up by
name, each library imported only by the function that returns its dtype.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

# dtype name -> short code used in signature keys
CODES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
NAMES = tuple(CODES)  # what kernels take, in this order in messages
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}  # bytes per element
BY_CODE = {code: name for name, code in CODES.items()}
ALIASES = {
    "float32": "float32", "f32": "float32", "fp32": "float32", "float": "float32",
    "float16": "float16", "f16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "bfp16": "bfloat16",
}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# What a kernel's output may miss its float64 reference by, per dtype: the
# validation's rule (``boo_build.stages.tolerances``, which says how they enter
# it) and ``replace_norms``' check of a look-alike class's math. Here, beside
# the dtypes, because the loader's side reads them too.
TOLERANCES = {
    # float32: accumulation error of reductions over a few thousand elements.
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    # float16: 11-bit mantissa, unit roundoff 4.9e-4, a few roundings per output.
    "float16": Tolerance(atol=4e-3, rtol=4e-3),
    # bfloat16: 8-bit mantissa, unit roundoff 3.9e-3: 4 units each (8 would
    # let a uniform 5 % error pass).
    "bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2),
}


def tolerance(dtype: str) -> Tolerance:
    return TOLERANCES[dtype]


def canonical(name: object) -> str | None:
    """The dtype name for a spelling (``"bf16"`` -> ``"bfloat16"``), None if unknown."""
    return ALIASES.get(str(name).lower())


def torch_dtype(name: str):
    """torch's dtype of that name (imports torch)."""
    import torch

    return getattr(torch, name)


def numpy_dtype(name: str):
    """numpy's dtype of that name; bfloat16 is ``ml_dtypes.bfloat16`` (it ships
    with iree-base-runtime, and numpy has none)."""
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def name_of(dtype) -> str | None:
    """The name of a torch or numpy dtype if kernels take it, else None (imports
    neither library: a torch dtype prints as ``torch.float32``, a numpy one's
    ``name`` is ``float32``, ``ml_dtypes.bfloat16``'s ``bfloat16``)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        name: str | None = str(dtype).removeprefix("torch.")
    else:
        name = getattr(dtype, "name", None)
    return name if name in CODES else None
