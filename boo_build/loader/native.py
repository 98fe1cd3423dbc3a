"""IREE's native runtime extension, reached without ``import iree.runtime``.

``import iree.runtime`` imports ``ml_dtypes`` (0.6-1.5 s on the build machine)
for numpy dtype tables the loader does not need. The classes the loader uses
(VmInstance, VmModule, VmContext, HalDevice, ...) live in the native module
``iree.runtime._binding`` stands for: ``iree._runtime.libs._runtime``, which
picks the runtime variant from ``IREE_PY_RUNTIME`` exactly as iree.runtime
does. Importing it costs about 0.01 s. Stdlib only here.

``runtime_version`` reads the version of that runtime without loading the
extension: ``open_bundle`` checks it against the bundle before any kernel is
loaded (cheaply: ``importlib.metadata`` alone would cost more to import than
the whole loader).
"""

from __future__ import annotations

import importlib
import os


def runtime():
    """The native runtime module (cached by Python's import system)."""
    try:
        from iree._runtime.libs import _runtime
    except ImportError:  # another wheel layout: go through the public trampoline
        _runtime = importlib.import_module("iree.runtime._binding")
    return _runtime


# Packages that hold the native module, in the order iree._runtime.libs picks
# them (IREE_PY_RUNTIME=tracy selects the second); each has a generated
# ``version.py`` (checked in iree-base-runtime 3.9.0 to 3.13.0).
_LIBS = ("iree._runtime_libs", "iree._runtime_libs_tracy")


def runtime_version() -> str | None:
    """The iree-base-runtime version this process loads (e.g. "3.13.0rc20261016":
    release wheels carry the rc tag they were built from), or None if unknown.

    Read from the runtime package's ``version.py``, found by the same import
    path as the native module (so a runtime earlier on ``sys.path`` wins, as
    it does for the module); falls back to the installed distribution's
    metadata for other layouts."""
    names = _LIBS[::-1] if os.environ.get("IREE_PY_RUNTIME") == "tracy" else _LIBS
    for name in names:
        try:
            return str(importlib.import_module(name + ".version").VERSION)
        except (ImportError, AttributeError):
            continue
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iree-base-runtime")
    except PackageNotFoundError:
        return None
