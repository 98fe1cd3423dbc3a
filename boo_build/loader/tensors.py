"""A call's arrays: torch tensors or numpy arrays, told apart and handled alike.

The loader's entry points take either and give back what they were given
(the loader runs without torch). Neither library is imported to tell the
kinds apart: an argument can only be a torch tensor (a numpy array) when
torch (numpy) is already imported. torch is imported only when a call needs
it (torch tensors, the eager fallback); numpy likewise.
"""

from __future__ import annotations

import sys

from ..dtypes import name_of, numpy_dtype, torch_dtype

_TORCH = None


def _torch():
    global _TORCH
    if _TORCH is None:
        import torch

        _TORCH = torch
    return _TORCH


_NAMES: dict = {}  # dtype object -> its kernel dtype name (or None): name_of, memoized for the hot path
_TORCH_DTYPES: dict = {}  # kernel dtype name -> torch dtype


def _dtype_name(t) -> str | None:
    """The kernel dtype name of an array's dtype (``boo_build.dtypes``), None if kernels take none."""
    dt = t.dtype
    try:
        return _NAMES[dt]
    except KeyError:
        name = _NAMES[dt] = name_of(dt)
        return name
    except TypeError:  # an unhashable dtype object
        return name_of(dt)


def _torch_dtype_text(t) -> str:
    """A torch tensor's dtype name, whether kernels take it or not (``float64``)."""
    return str(t.dtype).removeprefix("torch.")


def _numpy_dtype_text(t) -> str:
    """A numpy array's dtype name, whether kernels take it or not (``float64``)."""
    return str(t.dtype.name)


# The entry points take torch tensors or numpy arrays (the loader runs without
# torch), and give back what they were given. What they do to their arguments,
# per kind; neither library is imported to tell the kinds apart: an argument
# can only be a torch tensor (a numpy array) when torch (numpy) is imported.
class TorchArrays:
    name, dtype_prefix = "torch.Tensor", "torch."

    @staticmethod
    def owns(t) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(t, torch.Tensor)

    dtype_name = staticmethod(_dtype_name)
    dtype_text = staticmethod(_torch_dtype_text)  # any dtype's name (a call no kernel takes: the eager fallback's)

    @staticmethod
    def contiguous(t):
        return t if t.is_contiguous() else t.contiguous()

    @staticmethod
    def contiguous3(x, w, b) -> bool:
        """Whether x and the weight and bias given (None: absent) are contiguous."""
        return x.is_contiguous() and (w is None or w.is_contiguous()) and (b is None or b.is_contiguous())

    @staticmethod
    def full(shape, value, dtype: str, like):
        return _torch().full(shape, value, dtype=torch_dtype(dtype), device=like.device)

    @staticmethod
    def cast(t, dtype: str):
        want = _TORCH_DTYPES.get(dtype)
        if want is None:
            want = _TORCH_DTYPES[dtype] = torch_dtype(dtype)
        return t if t.dtype is want else t.to(want)

    @staticmethod
    def eager(fn, args: tuple, what: str):
        return fn(*args)


class NumpyArrays:
    name, dtype_prefix = "numpy.ndarray", ""

    @staticmethod
    def owns(t) -> bool:
        np = sys.modules.get("numpy")
        return np is not None and isinstance(t, np.ndarray)

    dtype_name = staticmethod(_dtype_name)  # ml_dtypes.bfloat16's name is "bfloat16"
    dtype_text = staticmethod(_numpy_dtype_text)

    @staticmethod
    def contiguous(t):
        return t if t.flags.c_contiguous else sys.modules["numpy"].ascontiguousarray(t)

    @staticmethod
    def contiguous3(x, w, b) -> bool:
        return (x.flags.c_contiguous and (w is None or w.flags.c_contiguous)
                and (b is None or b.flags.c_contiguous))

    @staticmethod
    def full(shape, value, dtype: str, like):
        return sys.modules["numpy"].full(shape, value, dtype=numpy_dtype(dtype))

    @staticmethod
    def cast(t, dtype: str):
        return t.astype(numpy_dtype(dtype), copy=False)

    @staticmethod
    def eager(fn, args: tuple, what: str):
        """torch's op on numpy arrays: shared as CPU tensors, results back as arrays."""
        try:
            _torch()
        except ImportError as e:
            raise ImportError(f"{what}; fallback='eager' runs torch's op, but torch cannot be imported ({e}): "
                              "install torch, or build the kernel into the bundle") from None
        from .arrays import numpy_from_torch, torch_from_numpy

        outs = fn(*(torch_from_numpy(a) if NumpyArrays.owns(a) else a for a in args))
        return tuple(numpy_from_torch(o) for o in outs)


def arrays_of(name: str, t):
    """The kind of a call's first array argument, which the others must share."""
    for kind in (TorchArrays, NumpyArrays):
        if kind.owns(t):
            return kind
    raise TypeError(f"{name} must be a torch.Tensor or a numpy.ndarray, got {type(t).__name__}")
