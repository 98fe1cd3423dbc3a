"""Arrays at the runtime's boundary: aligned numpy buffers, torch <-> numpy
views, and HAL element types <-> numpy/torch dtypes.

Loader world: numpy, IREE's native runtime module (``native.py``) for its
element-type enum, ``ml_dtypes`` only for bfloat16 (it ships with
iree-base-runtime), torch only inside the functions that take or make tensors.
"""

from __future__ import annotations

import numpy as np

from .native import runtime as _rt

ALIGNMENT = 64  # bytes; IREE's heap buffer import rejects anything less aligned


def aligned_empty(shape, dtype, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous numpy array whose data is ``alignment``-aligned."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def aligned_copy(array: np.ndarray) -> np.ndarray:
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


def numpy_from_torch(t) -> np.ndarray:
    """A CPU torch tensor's data as a numpy array (shared; bfloat16 as ml_dtypes.bfloat16)."""
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes  # ships with iree-base-runtime

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def torch_from_numpy(a: np.ndarray):
    """A numpy array as a CPU torch tensor (shared unless read-only; ml_dtypes.bfloat16 as bfloat16)."""
    import torch

    if not a.flags.writeable:  # torch.from_numpy warns about, and would write into, read-only memory
        a = a.copy()
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


_NUMPY_TO_HAL = {
    "float32": "FLOAT_32", "float16": "FLOAT_16", "float64": "FLOAT_64", "int8": "SINT_8", "uint8": "UINT_8",
    "int16": "SINT_16", "uint16": "UINT_16", "int32": "SINT_32", "uint32": "UINT_32", "int64": "SINT_64",
    "uint64": "UINT_64", "bool": "BOOL_8", "bfloat16": "BFLOAT_16",
}


def torch_dtype_of(torch, element_type: int):
    """torch dtype of a HAL element type."""
    return getattr(torch, _element_name(element_type))


def element_type(dtype) -> int:
    """HAL element type of a numpy dtype (ml_dtypes.bfloat16 included)."""
    name = np.dtype(dtype).name
    try:
        return int(getattr(_rt().HalElementType, _NUMPY_TO_HAL[name]))
    except KeyError:
        raise TypeError(f"no HAL element type for numpy dtype {name}") from None


def _element_name(element_type: int) -> str:
    """numpy's (and torch's) dtype name of a HAL element type, signless integers as signed."""
    E = _rt().HalElementType
    for name, hal in _NUMPY_TO_HAL.items():
        if int(getattr(E, hal)) == element_type:
            return name
    signless = {int(E.INT_32): "int32", int(E.INT_64): "int64", int(E.INT_16): "int16", int(E.INT_8): "int8"}
    if element_type in signless:
        return signless[element_type]
    raise TypeError(f"no dtype for HAL element type {element_type:#x}")


def numpy_dtype(element_type: int) -> np.dtype:
    """numpy dtype of a HAL element type (bfloat16 as ml_dtypes.bfloat16)."""
    name = _element_name(element_type)
    if name == "bfloat16":
        import ml_dtypes  # ships with iree-base-runtime

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
