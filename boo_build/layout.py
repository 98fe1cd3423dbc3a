"""Where a build's outputs live: ``OUT/<bundle name>/...`` (docs/ARCHITECTURE.md).

Pure path arithmetic, shared by the graph (``tasks``), its actions and the
report page, none of which need import another for it.
"""

from __future__ import annotations

from pathlib import Path

from .signature import ModuleId

EAGER_SUFFIX = "-eager"  # the graph's benchmark subject for torch eager: "<signature key>-eager"


def eager_subject(signature_key: str) -> str:
    """The benchmark subject (task and file name) of torch eager for a signature."""
    return f"{signature_key}{EAGER_SUFFIX}"


def is_eager(subject: str) -> bool:
    return subject.endswith(EAGER_SUFFIX)


def subject_signature(subject: str) -> str:
    """The signature key a benchmark subject (module key or eager subject) times."""
    if is_eager(subject):
        return subject.removesuffix(EAGER_SUFFIX)
    return ModuleId.parse(subject).signature.key


class Layout:
    """Where each stage's outputs live for one bundle."""

    def __init__(self, out_dir: Path, bundle_name: str):
        self.out_dir = Path(out_dir)
        self.root = self.out_dir / bundle_name

    def mlir(self, mid: ModuleId) -> Path:
        return self.root / "mlir" / f"{mid.key}.mlir"

    def export_record(self, mid: ModuleId) -> Path:
        return self.root / "mlir" / f"{mid.key}.export.json"

    def vmfb(self, target: str, mid: ModuleId) -> Path:
        return self.root / "vmfb" / target / f"{mid.key}.vmfb"

    def compile_record(self, target: str, mid: ModuleId) -> Path:
        return self.root / "vmfb" / target / f"{mid.key}.compile.json"

    def validation(self, target: str, mid: ModuleId) -> Path:
        return self.root / "validate" / target / f"{mid.key}.json"

    def bench(self, target: str, subject: str) -> Path:
        return self.root / "bench" / target / f"{subject}.json"

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
