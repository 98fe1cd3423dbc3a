"""The loader's errors: what goes wrong opening a bundle or running its kernels.

Standard library only: every loader module, the bundle writer and the CLI
import these, so they depend on nothing of the project.
"""

from __future__ import annotations

from typing import Sequence


class BundleError(Exception):
    """Base class of the loader's errors."""


class BundleFormatError(BundleError, ValueError):
    """The file is not a bundle this loader can read (corrupt, truncated, unsafe, unknown format)."""


class BundleIntegrityError(BundleError):
    """A member's bytes do not match the checksum in the index."""

    def __init__(self, member: str, expected: str, actual: str, path: str = ""):
        self.member, self.expected, self.actual = member, expected, actual
        where = f" of {path}" if path else ""
        super().__init__(f"member {member}{where} is corrupt: sha256 {actual} does not match "
                         f"the index ({expected}); rebuild or re-download the bundle")


class NoCompatibleDevice(BundleError, RuntimeError):
    """No device present can run any target of the bundle (the message lists why, per target)."""

    def __init__(self, message: str, reasons: dict[str, str] | None = None):
        super().__init__(message)
        self.reasons = dict(reasons or {})


class KernelNotFound(BundleError, LookupError):
    """The bundle has no kernel for a call's signature on the chosen target."""

    def __init__(self, key: str, target: str, nearest: Sequence[str], reason: str = ""):
        self.key, self.target, self.nearest, self.reason = key, target, list(nearest), reason
        msg = f"no kernel {key} for target {target}"
        if reason:
            msg += f": {reason}"
        msg += "; nearest in the bundle: " + (", ".join(self.nearest) if self.nearest else "(none)")
        msg += " (open the bundle with fallback='eager' to run torch instead)"
        super().__init__(msg)

    def __str__(self) -> str:  # LookupError would repr() a single argument
        return self.args[0]


__all__ = ["BundleError", "BundleFormatError", "BundleIntegrityError", "KernelNotFound", "NoCompatibleDevice"]
