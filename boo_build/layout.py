"""Where a build's outputs live: ``OUT/<bundle name>/...`` (docs/ARCHITECTURE.md).

Pure path arithmetic, shared by the graph (``tasks``), its actions and the
report page, none of which need import another for it.
"""

from __future__ import annotations

from pathlib import Path

from .candidates import module_file, split_module_file
from .signature import ModuleId

EAGER_SUFFIX = "-eager"  # the graph's benchmark subject for torch eager: "<signature key>-eager"


def eager_subject(signature_key: str) -> str:
    """The benchmark subject (task and file name) of torch eager for a signature."""
    return f"{signature_key}{EAGER_SUFFIX}"


def is_eager(subject: str) -> bool:
    return subject.endswith(EAGER_SUFFIX)


def subject_signature(subject: str) -> str:
    """The signature key a benchmark subject (module key or eager subject,
    a module's ``+<variant>`` and ``@<mode>`` allowed) times."""
    if is_eager(subject):
        return subject.removesuffix(EAGER_SUFFIX)
    return ModuleId.parse(split_module_file(subject.partition("@")[0])[0]).signature.key


def bench_subject(module: str, mode: str = "") -> str:
    """A module's benchmark subject (task and file name) in ``mode``: ``<module>[@<mode>]``."""
    return f"{module}@{mode}" if mode else module


class Layout:
    """Where each stage's outputs live for one bundle."""

    def __init__(self, out_dir: Path, bundle_name: str):
        self.out_dir = Path(out_dir)
        self.root = self.out_dir / bundle_name

    # ``variant``: an export variant (``candidates.EXPORT_VARIANTS``), beside the baseline's
    def mlir(self, mid: ModuleId, variant: str = "") -> Path:
        return self.root / "mlir" / f"{module_file(mid.key, variant)}.mlir"

    def export_record(self, mid: ModuleId, variant: str = "") -> Path:
        return self.root / "mlir" / f"{module_file(mid.key, variant)}.export.json"

    # ``variant``: a compile variant's module (``candidates``), beside the baseline's
    def vmfb(self, target: str, mid: ModuleId, variant: str = "") -> Path:
        return self.root / "vmfb" / target / f"{module_file(mid.key, variant)}.vmfb"

    def compile_record(self, target: str, mid: ModuleId, variant: str = "") -> Path:
        return self.root / "vmfb" / target / f"{module_file(mid.key, variant)}.compile.json"

    def fallback(self, target: str, signature_key: str) -> Path:
        """A kernel's fallback step on a target (``records.FallbackRecord``): the variants
        tried where none of its candidates compiled."""
        return self.root / "vmfb" / target / f"{signature_key}.fallback.json"

    def validation(self, target: str, mid: ModuleId, variant: str = "") -> Path:
        return self.root / "validate" / target / f"{module_file(mid.key, variant)}.json"

    def traffic(self, target: str, mid: ModuleId, variant: str = "") -> Path:
        """A GPU module's traffic model record (``stages/traffic.py``)."""
        return self.root / "traffic" / target / f"{module_file(mid.key, variant)}.json"

    def bench(self, target: str, subject: str) -> Path:
        return self.root / "bench" / target / f"{subject}.json"

    def rounds(self, target: str, signature_key: str) -> Path:
        """A kernel's benchmark in paired rounds (``comparison.RoundsRecord``): its candidates and torch eager."""
        return self.root / "bench" / target / f"{signature_key}.rounds.json"

    def select(self, target: str, signature_key: str) -> Path:
        """A kernel's decision on a target (``stages/select.py``'s ``SelectRecord``)."""
        return self.root / "select" / target / f"{signature_key}.json"

    @property
    def report(self) -> Path:
        return self.root / "build-report.json"

    @property
    def csv(self) -> Path:
        return self.root / "bench.csv"

    @property
    def page(self) -> Path:
        return self.root / "report.html"

    def bundle(self, manifest) -> Path:
        """The bundle file of ``manifest`` (a ``manifest.Manifest``)."""
        return self.out_dir / f"{manifest.bundle.name}-{manifest.bundle.version}.tar.zst"
