"""Manifests: which kernels a bundle holds, read from TOML or MIOpen command files.

Pure Python (no torch): the CLI reads manifests before deciding whether
anything heavy needs importing. ``reader`` reads whole files into a
``Manifest``; ``entries`` turns one TOML ``[[kernels]]`` entry into its
``KernelRequest``s; ``miopen`` parses MIOpen driver command lines. The format
is documented in ``docs/manifest.md``.
"""

from ..errors import ManifestError
from .entries import KernelRequest
from .reader import BundleSpec, Manifest, load_manifest, parse_command, parse_toml

__all__ = ["BundleSpec", "KernelRequest", "Manifest", "ManifestError", "load_manifest", "parse_command", "parse_toml"]
