"""IREE's native runtime extension, reached without ``import iree.runtime``.

``import iree.runtime`` imports ``ml_dtypes`` (0.6-1.5 s on the build machine)
for numpy dtype tables the loader does not need. The classes the loader uses
(VmInstance, VmModule, VmContext, HalDevice, ...) live in the native module
``iree.runtime._binding`` stands for: ``iree._runtime.libs._runtime``, which
picks the runtime variant from ``IREE_PY_RUNTIME`` exactly as iree.runtime
does. Importing it costs about 0.01 s. Stdlib only here.
"""

from __future__ import annotations

import importlib


def runtime():
    """The native runtime module (cached by Python's import system)."""
    try:
        from iree._runtime.libs import _runtime
    except ImportError:  # another wheel layout: go through the public trampoline
        _runtime = importlib.import_module("iree.runtime._binding")
    return _runtime
