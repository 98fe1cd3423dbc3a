"""One bundle name/version rule (boo_build.bundle_names) for the manifest and pack,
and ``boo-build --version``."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest
from helpers import BIN

import boo_build
from boo_build.errors import ManifestError, PackError
from boo_build.loader.format import TargetRecord
from boo_build.manifest.reader import parse_toml
from boo_build.signature import KernelSignature
from boo_build.stages.pack import kernel_record, pack_bundle, read_index
from boo_build.targets import catalogue

GOOD = ("1.0.0+build.5", "1.0.0-rc.1", "0.1.0", "2.3.4-alpha.1+sha.5114f85")
BAD = ("1.0", "01.0.0", "1.0.0+", "1.0.0+a..b", "1.0.0-01", "v1.0.0", "1.0.0\n", "1.0.٣")


def _toml(version: str, name: str = "norms") -> str:
    return f'[bundle]\nname = "{name}"\nversion = "{version}"\ntargets = ["cpu"]\n' \
           '[[kernels]]\nop = "layer_norm"\ninput_shape = [4, 10]\ndtype = "float32"\nmasks = [1]\n'


def _pack(out: Path, version: str, name: str = "norms") -> Path:
    # an unavailable kernel needs no compiled module: the name/version rules are all this exercises
    sig = KernelSignature("layer_norm", (4, 10), (10,), "float32", 1)
    return pack_bundle(out, name=name, version=version, targets=[catalogue()["cpu"]],
                       kernels=[kernel_record(sig, {"cpu": TargetRecord.unavailable("not built: test")})],
                       vmfbs={}, provenance={})


@pytest.mark.parametrize("version", GOOD)
def test_semver_versions_accepted_by_manifest_and_pack(version, tmp_path):
    assert parse_toml(_toml(version.replace("\n", "\\n"))).bundle.version == version
    # '+' is fine in the bundle's file name, and the bundle reads back
    path = _pack(tmp_path, version)
    assert path.name == f"norms-{version}.tar.zst" and path.is_file()
    assert read_index(path)["version"] == version


@pytest.mark.parametrize("version", BAD)
def test_non_semver_versions_refused_by_manifest_and_pack(version, tmp_path):
    want = f"version {version!r} is not semver: expected MAJOR.MINOR.PATCH"
    with pytest.raises(ManifestError) as e:
        parse_toml(_toml(version.replace("\n", "\\n")), "m.toml")
    assert any(want in err for err in e.value.errors), e.value.errors
    with pytest.raises(PackError) as e:
        _pack(tmp_path, version)
    assert want in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("name", ("a b", "a/b", "a+b", "-x", ""))
def test_bad_bundle_names_refused_by_manifest_and_pack(name, tmp_path):
    want = f"bundle name {name!r} is invalid: use letters, digits"
    with pytest.raises(ManifestError, match="bundle name"):
        parse_toml(_toml("1.0.0", name), "m.toml")
    with pytest.raises(PackError) as e:
        _pack(tmp_path, "1.0.0", name)
    assert want in str(e.value)


def test_version_option_prints_the_package_version():
    proc = subprocess.run([str(BIN / "boo-build"), "--version"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"boo-build {boo_build.__version__}\n"
    # the installed metadata reads the same source (pyproject: dynamic version)
    assert importlib.metadata.version("boo-build") == boo_build.__version__
