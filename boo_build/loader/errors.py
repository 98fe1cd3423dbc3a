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
    """A member's bytes do not match the checksum in the index; or, in the
    whole-file form (``of_file``: ``member`` is None), a bundle file's bytes
    do not match the sha256 or size a lock file or caller pinned."""

    def __init__(self, member: str, expected: str, actual: str, path: str = ""):
        self.member: str | None = member
        self.expected, self.actual, self.path = expected, actual, path
        where = f" of {path}" if path else ""
        super().__init__(f"member {member}{where} is corrupt: sha256 {actual} does not match "
                         f"the index ({expected}); rebuild or re-download the bundle")

    @classmethod
    def of_file(cls, source: str, expected: str, actual: str, problem: str, hint: str) -> "BundleIntegrityError":
        """A whole file (``source``: its URL or path) that is not the pinned one:
        ``expected`` and ``actual`` are sha256 digests (``actual`` may say why
        none was computed), ``problem`` what differs, ``hint`` what to do."""
        err = cls.__new__(cls)
        err.member, err.expected, err.actual, err.path = None, expected, actual, source
        BundleError.__init__(err, f"{source} is not the pinned bundle: {problem}; expected sha256 {expected}, "
                                  f"got {actual}; {hint}")
        return err

    def __reduce__(self) -> tuple:  # the whole-file form has no member: rebuild it from its state
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[BaseException], args: tuple, state: dict) -> BaseException:
    err = cls.__new__(cls)
    BaseException.__init__(err, *args)
    err.__dict__.update(state)
    return err


class BundleFetchError(BundleError, OSError):
    """A bundle (or a store's index) that could not be fetched: ``url`` and
    ``reason`` (an HTTP status, a refused connection, a timeout, a body cut
    short, an offline switch); ``status`` is the HTTP status, if one came."""

    def __init__(self, url: str, reason: str, status: int | None = None):
        self.url, self.reason, self.status = url, reason, status
        super().__init__(f"cannot fetch {url}: {reason}")

    def __str__(self) -> str:  # OSError would format a two-argument form
        return f"cannot fetch {self.url}: {self.reason}"

    def __reduce__(self) -> tuple:
        return (type(self), (self.url, self.reason, self.status))


class LockFileError(BundleFormatError):
    """A lock file that is malformed or of an unknown format version: ``field``
    names the field (``bundles[0].sha256``), ``path`` the file."""

    def __init__(self, path: str, field: str, problem: str):
        self.path, self.field, self.problem = path, field, problem
        super().__init__(f"lock file {path}: {field}: {problem}")

    def __reduce__(self) -> tuple:
        return (type(self), (self.path, self.field, self.problem))


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


__all__ = ["BundleError", "BundleFetchError", "BundleFormatError", "BundleIntegrityError", "KernelNotFound",
           "LockFileError", "NoCompatibleDevice"]
