"""The records of work that did not run, made here only, with one wording per cause.

A validation or benchmark that cannot run still writes a record that says
why: the build report, the bundle index (through the selection's reasons)
and the report page show that reason. Made in a local build's actions, on a
Dask worker without the device, on the driver when no worker declared the
target, and in the report for a target without a device; a ``--no-bench``
bundle must not depend on which of them made it, so all of them come here.
"""

from __future__ import annotations

from ..layout import is_eager, subject_signature
from ..records import EAGER, BenchResult, BenchStatus, ValidationResult

VALIDATION_DISABLED = "not run: validation disabled (--no-validate)"


def no_device(arch: str) -> str:
    """A target whose device is absent here (or on every worker): the loader's
    wording, which ``validate_kernel`` and ``bench_kernel`` write too."""
    from ..loader.devices import no_device_reason

    return no_device_reason(arch)


def not_compiled(compile_status: str | None) -> str:
    return f"not compiled: {compile_status or 'no record'}"


def not_validated(validation_status: str | None) -> str:
    return f"not validated: {validation_status or 'no record'}"


def validation(module_key: str, target: str, reason: str) -> ValidationResult:
    return ValidationResult.not_run(module_key, target, reason)


def bench(subject: str, target: str, reason: str) -> BenchResult:
    """``subject`` as the graph names it: a module key, or ``<signature>-eager``
    (whose record's subject is ``eager``)."""
    sig = subject_signature(subject)
    return BenchResult.not_run(EAGER if is_eager(subject) else subject, sig, target, reason)


def skipped_bench(module_key: str, target: str, validation_status: str | None) -> BenchResult:
    """A kernel that did not pass validation is not timed."""
    return BenchResult(subject=module_key, signature=subject_signature(module_key), target=target,
                       status=BenchStatus.SKIPPED, reason=not_validated(validation_status))
