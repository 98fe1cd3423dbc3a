"""The versions of everything that shapes a build's output (``Toolchain``)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..files import read_json, write_json


@dataclass(frozen=True)
class Toolchain:
    compiler: str  # iree-compile --version
    versions: dict[str, str]

    @staticmethod
    def detect(cache_dir: Path | None = None) -> "Toolchain":
        """Versions of everything that shapes the output. ``iree-compile
        --version`` costs ~0.4 s, so it is cached in ``cache_dir`` keyed on
        the compiler binary's path, size and mtime."""
        from importlib.metadata import PackageNotFoundError, version

        from ..stages.compile import compiler_path, compiler_version

        vers = {"boo-build": __version__, "python": platform.python_version()}
        for dist in ("iree-base-compiler", "iree-base-runtime", "iree-turbine", "torch"):
            try:
                vers[dist] = version(dist)
            except PackageNotFoundError:
                vers[dist] = "not installed"
        path = os.path.realpath(compiler_path())
        st = os.stat(path)
        stamp = f"{path}:{st.st_size}:{st.st_mtime_ns}:{vers['iree-base-compiler']}"
        cache = Path(cache_dir) / ".toolchain.json" if cache_dir else None
        cached = read_json(cache) if cache else None
        if cached and cached.get("stamp") == stamp:
            return Toolchain(compiler=cached["compiler"], versions=vers)
        comp = compiler_version(path)
        if cache:
            write_json(cache, {"stamp": stamp, "compiler": comp})
        return Toolchain(compiler=comp, versions=vers)
