"""The small runtime that loads and runs bundled kernels.

Light on purpose: importing it imports the standard library, zstandard and
the pure-Python ``boo_build`` modules (``signature``, ``targets``, ...) only.
The first kernel load (or GPU discovery) imports numpy and IREE's native
runtime extension (``native.py``), not the ``iree.runtime`` package, whose
import costs about a second of ``ml_dtypes``: that package is imported only to
stage numpy arrays or CPU tensors for a GPU kernel. torch is needed only for
torch tensors (numpy arrays work without it); the build side (iree.compiler,
iree.turbine, doit) never.

    from boo_build.loader import open_bundle
    bundle = open_bundle("norms-1.0.0.tar.zst", fallback="eager")
    y, mean, rstd = bundle.native_layer_norm(x, (768,), weight, bias, 1e-5)

    from boo_build.loader.nn import LayerNorm, RMSNorm   # torch.nn drop-ins
    from boo_build.loader.nn import replace_norms        # swap them into a model
"""

from .archive import DEFAULT_MAX_SIZE, Archive, read_archive, verify_members
from .bundle import Bundle, open_bundle
from .errors import BundleError, BundleFormatError, BundleIntegrityError, KernelNotFound, NoCompatibleDevice
from .format import DYNAMIC_FORMAT_VERSION, FORMAT, FORMAT_VERSION, READABLE_VERSIONS
from .versions import RuntimeTooOld, UntestedRuntimeWarning

__all__ = [
    "DEFAULT_MAX_SIZE", "DYNAMIC_FORMAT_VERSION", "FORMAT", "FORMAT_VERSION", "READABLE_VERSIONS",
    "Archive", "Bundle", "BundleError", "BundleFormatError", "BundleIntegrityError",
    "KernelNotFound", "NoCompatibleDevice", "RuntimeTooOld", "UntestedRuntimeWarning", "open_bundle", "read_archive", "verify_members",
    "LayerNorm", "RMSNorm", "replace_norms", "set_default_bundle", "default_bundle",
]

_LAZY = {"LayerNorm", "RMSNorm", "replace_norms", "set_default_bundle", "default_bundle"}


def __getattr__(name: str):
    # nn imports torch: only when asked for.
    if name in _LAZY:
        from . import nn

        return getattr(nn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
