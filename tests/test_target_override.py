"""An unknown target in a manifest is an error whatever --targets says."""

from __future__ import annotations

import pytest

from boo_build.build.tasks import BuildConfig, plan
from boo_build.cli import main
from boo_build.errors import BuildError, ManifestError
from boo_build.manifest.reader import load_manifest
from boo_build.targets import catalogue

BAD = """\
[bundle]
name = "tiny"
version = "0.1.0"
targets = ["cpu", "gfx9999"]

[[kernels]]
op = "rms_norm"
input_shape = [2, 8]
masks = [1]
impls = ["manual"]
"""


@pytest.fixture
def bad(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(BAD)
    return p


def test_manifest_target_checked_despite_override(bad):
    cat = catalogue()
    with pytest.raises(ManifestError) as e:
        load_manifest(bad, targets=["cpu"], catalogue=cat)
    assert e.value.errors == [f"{bad}: bundle: unknown target(s) 'gfx9999': known targets are "
                              f"{', '.join(sorted(cat))}"]
    # without a catalogue the manifest module checks spelling only
    assert load_manifest(bad, targets=["cpu"]).bundle.targets == ("cpu",)


def test_unknown_override_and_manifest_targets_reported_together(bad):
    with pytest.raises(ManifestError) as e:
        load_manifest(bad, targets=["cpu", "gfx0"], catalogue=catalogue())
    assert len(e.value.errors) == 2
    assert "bundle: unknown target(s) 'gfx9999'" in e.value.errors[0]
    assert "override: unknown target(s) 'gfx0'" in e.value.errors[1]


def test_txt_override_checked_against_catalogue(tmp_path):
    p = tmp_path / "cmds.txt"
    p.write_text("rmsnorm -X 2x8\n")
    with pytest.raises(ManifestError, match=r"cmds.txt: unknown target\(s\) 'gfx0'"):
        load_manifest(p, targets=["gfx0"], catalogue=catalogue())


def test_plan_refuses_manifest_target_despite_override(bad, tmp_path):
    with pytest.raises(BuildError, match=r"tiny.toml: bundle: unknown target\(s\) 'gfx9999'"):
        plan(BuildConfig(manifests=(bad,), out_dir=tmp_path / "out", targets=("cpu",)))


def test_build_with_targets_refuses_unknown_manifest_target(bad, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["build", str(bad), "--targets", "cpu", "--out", str(out), "--no-validate", "-q"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown target(s) 'gfx9999'" in err and "known targets are" in err
    assert not out.exists()
