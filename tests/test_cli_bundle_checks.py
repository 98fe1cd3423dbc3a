"""``boo-build info|verify`` and the bundle's ``iree_runtime`` range;
``--max-size`` on ``info``, ``verify`` and ``diff``.

Real bundles, no compiling: the committed bundle built before the field
existed (``tests/fixtures``), and copies of it whose ``bundle.json`` carries
the field the pack step writes for the pinned compiler, or one edited around
this process's iree-base-runtime (``helpers.rewrite`` keeps the members, so
their sha256s still match). The commands run through ``cli.main`` and, where
argparse or the console script matter, as the installed ``boo-build``.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest
from helpers import REPO, boo, rewrite

from boo_build.cli import main
from boo_build.cli.text import parse_size
from boo_build.loader import read_archive
from boo_build.loader.format import RUNTIME_FIELD
from boo_build.loader.native import runtime_version
from boo_build.loader.versions import iree_release
from boo_build.stages.pack import runtime_requirements

PRE_FIELD = REPO / "tests" / "fixtures" / "pre-runtime-fields-0.1.0.tar.zst"
RUNTIME = runtime_version()  # this process's iree-base-runtime (the venv's pin)


def _with_field(tmp_path, name: str, field) -> str:
    """A copy of the fixture whose index holds ``field`` as its iree_runtime."""
    return str(rewrite(PRE_FIELD, tmp_path / f"{name}.tar.zst", index=lambda ix: ix.__setitem__(RUNTIME_FIELD, field)))


@pytest.fixture
def recorded(tmp_path) -> tuple[str, dict]:
    """The fixture with the field pack writes for the pinned iree-base-compiler."""
    field = runtime_requirements(version("iree-base-compiler"))
    assert field is not None
    return _with_field(tmp_path, "recorded", field), field


def _around_this_runtime(older: bool) -> dict:
    """A well-formed field whose range leaves this runtime out: all newer
    (``older``: this runtime is too old) or all older (it is untested)."""
    assert RUNTIME and iree_release(RUNTIME), "the tests need an installed iree-base-runtime"
    major, minor, _ = iree_release(RUNTIME)
    other = f"{major}.{minor + 1}.0" if older else f"{major}.{minor - 1}.0"
    return {"compiler": other, "min": other, "max_tested": other}


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


# ------------------------------------------------------------------- info
def test_info_shows_the_range_and_that_this_runtime_is_in_it(recorded, capsys):
    path, field = recorded
    rc, out, _ = _run(capsys, "info", path)
    assert rc == 0
    line = next(x for x in out.splitlines() if "iree_runtime:" in x)
    assert f"{field['min']} to {field['max_tested']}" in line, line
    assert f"built by iree-compile {field['compiler']}" in line, line
    assert f"this process's iree-base-runtime {RUNTIME} is in the range" in line, line


def test_info_of_a_bundle_without_the_field_says_not_recorded(capsys):
    assert RUNTIME_FIELD not in read_archive(PRE_FIELD).index  # really a bundle from before the field
    rc, out, _ = _run(capsys, "info", str(PRE_FIELD))
    assert rc == 0
    assert "iree_runtime: not recorded" in out and "does not check the runtime" in out, out


@pytest.mark.parametrize("older", [True, False], ids=["runtime-too-old", "runtime-untested"])
def test_info_says_when_this_runtime_is_out_of_the_range(tmp_path, capsys, older):
    field = _around_this_runtime(older)
    rc, out, _ = _run(capsys, "info", _with_field(tmp_path, "out", field))
    assert rc == 0
    line = next(x for x in out.splitlines() if "iree_runtime:" in x)
    want = f"older than {field['min']}: open_bundle refuses" if older else "newer than any tested: open_bundle warns"
    assert f"iree-base-runtime {RUNTIME} is OUT of the range" in line and want in line, line


def test_info_shows_a_malformed_field(tmp_path, capsys):
    rc, out, _ = _run(capsys, "info", _with_field(tmp_path, "bad", {"compiler": "3.13.0", "min": "twelve"}))
    assert rc == 0  # info describes; verify fails on it
    line = next(x for x in out.splitlines() if "iree_runtime:" in x)
    assert "MALFORMED" in line and "'twelve'" in line and "boo-build verify refuse" in line, line


# ----------------------------------------------------------------- verify
def test_verify_passes_and_reports_the_range(recorded, capsys):
    path, field = recorded
    rc, out, err = _run(capsys, "verify", path)
    assert rc == 0, (out, err)
    assert f"{path}: OK, 1 kernel members verified" in out, out
    assert f"{path}: iree_runtime {field['min']} to {field['max_tested']}" in out, out
    assert f"iree-base-runtime {RUNTIME} is in the range" in out, out
    assert "warning" not in err, err


def test_verify_of_a_bundle_without_the_field_passes_as_the_loader_opens_it(capsys):
    rc, out, err = _run(capsys, "verify", str(PRE_FIELD))
    assert rc == 0, (out, err)
    assert "iree_runtime not recorded" in out and "OK, 1 kernel members verified" in out, out
    assert "warning" not in err, err


@pytest.mark.parametrize("field, shows", [
    ({"compiler": "3.13.0", "min": "twelve", "max_tested": "3.13.0"}, "'twelve'"),
    ({"compiler": "3.13.0", "min": "3.12.0"}, "'min': '3.12.0'"),  # no max_tested
    ({"compiler": 3.13, "min": "3.12.0", "max_tested": "3.13.0"}, "'compiler': 3.13"),
    ("3.12.0", "got '3.12.0'"),
], ids=["bad-version", "missing-key", "not-a-string", "not-an-object"])
def test_verify_fails_on_a_malformed_field(tmp_path, capsys, field, shows):
    path = _with_field(tmp_path, "bad", field)
    rc, out, err = _run(capsys, "verify", path)
    assert rc == 2, (out, err)  # refused like any malformed index (open_bundle: BundleFormatError)
    assert err.startswith(f"boo-build: {path}: malformed bundle.json: {RUNTIME_FIELD} must hold"), err
    assert shows in err, err
    assert "OK" not in out, out


@pytest.mark.parametrize("older", [True, False], ids=["runtime-too-old", "runtime-untested"])
def test_verify_warns_when_the_range_leaves_this_runtime_out(tmp_path, capsys, older):
    field = _around_this_runtime(older)
    path = _with_field(tmp_path, "out", field)
    rc, out, err = _run(capsys, "verify", path)
    assert rc == 0, (out, err)  # the bundle is intact: a warning, not a failure
    assert "OK, 1 kernel members verified" in out and f"{RUNTIME} is OUT of the range" in out, out
    warn = [x for x in err.splitlines() if x.startswith("warning: ")]
    assert len(warn) == 1, err
    # the loader's own message, with its fix
    want = (f"needs iree-base-runtime {field['min']} or newer" if older
            else "newer than any tested with its modules")
    assert want in warn[0] and f"iree-base-runtime {RUNTIME}" in warn[0], warn


# ------------------------------------------------------------- --max-size
def test_parse_size():
    assert parse_size("4096") == 4096
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("2GiB") == 2 << 30
    assert parse_size("1KiB") == 1024
    assert parse_size("1.5 kib") == 1536
    assert parse_size("2MB") == 2_000_000
    assert parse_size(" 7B ") == 7
    for bad in ("", "12XB", "lots", "-5", "1.2.3GiB", "GiB", "0", "0.1B"):
        with pytest.raises(ValueError, match=f"invalid size {bad!r}"):
            parse_size(bad)


@pytest.mark.parametrize("cmd", ["info", "verify", "diff"])
@pytest.mark.parametrize("limit, says", [
    ("1KiB", "is 5610 bytes, over the limit of 1024"),  # the file itself
    ("8KiB", "decompresses to 20480 bytes, over the limit of 8192"),  # its declared decompressed size
], ids=["file", "decompressed"])
def test_max_size_refuses_a_larger_bundle_naming_the_option(capsys, cmd, limit, says):
    assert PRE_FIELD.stat().st_size == 5610 and read_archive(PRE_FIELD).size == 20480  # between the two limits
    paths = [str(PRE_FIELD)] * (2 if cmd == "diff" else 1)
    rc, out, err = _run(capsys, cmd, "--max-size", limit, *paths)
    assert rc == 2, (out, err)
    assert err.startswith(f"boo-build: {PRE_FIELD} {says}"), err
    assert "raise the limit with --max-size SIZE" in err and "max_size=" not in err, err
    # and a bound it fits in lets it through
    rc, out, err = _run(capsys, cmd, "--max-size", "20480", *paths)
    assert rc == 0, (out, err)


@pytest.mark.parametrize("value", ["12XB", "lots", "0", "-5"])
def test_a_bad_max_size_value_exits_2_naming_it(value):
    proc = boo("verify", "--max-size", value, str(PRE_FIELD), cwd=REPO, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"argument --max-size: invalid size {value!r}" in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_the_console_script_runs_info_with_max_size():
    proc = boo("info", "--max-size", "1MiB", str(PRE_FIELD), cwd=REPO)
    assert "pre-runtime-fields 0.1.0" in proc.stdout and "iree_runtime: not recorded" in proc.stdout
