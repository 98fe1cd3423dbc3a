"""The errors the build side raises, under one root: ``BooBuildError``.

Every error here carries a message that names the culprit (a manifest entry,
an option, a target, a bundle file) and says what to do; ``boo-build``
catches ``BooBuildError`` once (``cli.app.main``), prints the message and
exits with status 2. Each class also derives from the built-in exception it
has always been (``ValueError`` for bad input, ``RuntimeError`` for a
cluster that cannot do the work), so ``except ValueError`` keeps working.

``SignatureError`` is shared with the loader: signatures are the vocabulary
of both sides, and the loader's own tree (``loader.errors.BundleError``:
bundles that cannot be opened, kernels not found, devices not present) stays
apart, so an application importing the loader imports nothing of the build
side but this module (stdlib only).

    BooBuildError
    +-- UsageError          a bad command-line option or argument
    +-- SignatureError      a kernel signature, key or shape that cannot exist
    +-- UnknownOp           no op of that name is registered
    +-- UnknownTarget       no target of that name in the catalogue
    +-- ManifestError       every problem of a manifest file, at once
    +-- BuildError          a build that cannot start (bad manifests, options)
    +-- PackError           inputs that cannot make a bundle
    +-- ReportError         a source the report page cannot be drawn from
    +-- MeasureError        nothing can be measured on this machine
    +-- DistributedError    the Dask cluster cannot do the build's work
        +-- SchedulerLost   the scheduler went away
        +-- WorkerMismatch  a worker's compiler differs from the driver's
"""

from __future__ import annotations

from typing import Iterable, Sequence

__all__ = [
    "BooBuildError", "BuildError", "DistributedError", "ManifestError", "MeasureError", "PackError", "ReportError",
    "SchedulerLost", "SignatureError", "UnknownOp", "UnknownTarget", "UsageError", "WorkerMismatch",
]


class BooBuildError(Exception):
    """What boo-build cannot do; the message names the culprit and what to do."""


class UsageError(BooBuildError, ValueError):
    """A command-line option or argument that cannot be used."""


class SignatureError(BooBuildError, ValueError):
    """A signature that cannot exist; the message says which field and why."""


class UnknownOp(BooBuildError, ValueError):
    """No op of that name is registered."""


class UnknownTarget(BooBuildError, ValueError):
    """A target name the catalogue does not have."""


class ManifestError(BooBuildError, ValueError):
    """Everything wrong with one manifest; ``str()`` is one error per line (file, entry or line, field)."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


class BuildError(BooBuildError):
    """A build that cannot start: bad manifest, unknown target, bad option."""


class PackError(BooBuildError, ValueError):
    """Inputs that cannot make a bundle; the message says which and why."""


class ReportError(BooBuildError, ValueError):
    """A source the report page cannot be drawn from; the message says which and what to do."""


class MeasureError(BooBuildError):
    """Nothing can be measured (bad bundle, no device for any target); the message says why."""


class DistributedError(BooBuildError, RuntimeError):
    """The cluster cannot do the build's work."""


class SchedulerLost(DistributedError):
    """The Dask scheduler went away (or could not be reached)."""


class WorkerMismatch(DistributedError):
    """A worker's compiler differs from the driver's (``workers`` names them)."""

    def __init__(self, message: str, workers: Iterable[str] = ()):
        super().__init__(message)
        self.workers = tuple(workers)
