"""Shape bounds in manifests (rank, dims, elements per tensor, [bundle]
max_elements), checked while parsing, so that `boo-build build` refuses a bad
manifest before anything is exported and leaves no output folder."""

from __future__ import annotations

import pytest
from helpers import BUNDLE, errors_of, keys, load, one_error, write

from boo_build.cli import main
from boo_build.errors import ManifestError, SignatureError
from boo_build.manifest.reader import load_manifest, parse_command
from boo_build.shapes import DEFAULT_MAX_ELEMENTS, MAX_DIM, MAX_RANK

BIG = 2**63 - 1
ONES_1000 = "[" + ", ".join(["1"] * 1000) + "]"


def entry(shape: str, extra: str = "") -> str:
    return f'[[kernels]]\nop = "layer_norm"\ninput_shape = {shape}\nmasks = [1]\n{extra}'


@pytest.mark.parametrize("body, expect", [
    (entry("[100000, 100000, 100000]"),
     f"kernels[0]: input_shape [100000, 100000, 100000] has 1000000000000000 elements, "
     f"more than max_elements = {DEFAULT_MAX_ELEMENTS} per tensor"),
    (entry(f"[{BIG}]"), f"kernels[0]: input_shape dimension 0 is {BIG}: at most {MAX_DIM}"),
    (entry(f"[4, {MAX_DIM + 1}]"), f"kernels[0]: input_shape dimension 1 is {MAX_DIM + 1}"),
    (entry(ONES_1000), f"kernels[0]: input_shape has 1000 dimensions: at most {MAX_RANK}"),
    (entry("[1, 1, 1, 1, 1, 1, 1, 1, 1]"), "kernels[0]: input_shape has 9 dimensions"),
    (entry('"' + "x".join(["2"] * 9) + '"'), "kernels[0]: input_shape has 9 dimensions"),
    (entry(f"[2, {2**30 + 1}]"), "input_shape [2, 1073741825] has 2147483650 elements"),
    ('[[kernels]]\nop = "rms_norm"\ninput_shapes = [[8, 768], [100000, 100000]]\nmasks = [1]\n',
     "kernels[0]: input_shapes[1] [100000, 100000] has 10000000000 elements"),
    (entry("[8, 768]", "normalized_shape = [1, 1, 1, 1, 1, 1, 1, 1, 768]\n"),
     "kernels[0]: normalized_shape has 9 dimensions"),
])
def test_unbounded_shapes_are_refused(tmp_path, body, expect):
    err = one_error(tmp_path, body)
    assert expect in err
    assert err.startswith(f"{tmp_path / 'm.toml'}: kernels[0]: ")


def test_bounds_are_inclusive(tmp_path):
    m = load(tmp_path, entry("[1, 1, 1, 1, 1, 1, 2, 3]") + entry(f"[2, {2**30}]")
             + entry(f"[{MAX_DIM}]"))
    assert keys(m) == [
        "layer_norm-f32-1x1x1x1x1x1x2x3-n3-wb-m1",
        "layer_norm-f32-2147483647-n2147483647-wb-m1",
        "layer_norm-f32-2x1073741824-n1073741824-wb-m1",
    ]


def with_max(value: str) -> str:
    return ('[bundle]\nname = "b"\nversion = "1.0.0"\ntargets = ["cpu"]\n'
            f"max_elements = {value}\n")


def test_max_elements_raises_and_lowers_the_bound(tmp_path):
    p = write(tmp_path, with_max("1000000000000000") + entry("[100000, 100000, 100000]"), bundle=False)
    assert keys(load_manifest(p)) == ["layer_norm-f32-100000x100000x100000-n100000-wb-m1"]
    errs = errors_of(tmp_path, with_max("100") + entry("[8, 768]"), bundle=False)
    assert len(errs) == 1 and "kernels[0]: input_shape [8, 768] has 6144 elements, more than " \
        "max_elements = 100" in errs[0]


@pytest.mark.parametrize("value, got", [("0", "0"), ("-1", "-1"), ('"big"', "'big'"), ("true", "True"),
                                        ("1.5", "1.5"), ("[1]", "[1]")])
def test_max_elements_must_be_a_positive_integer(tmp_path, value, got):
    # an invalid bound is reported alone: entries are not checked against a bound nobody meant
    errs = errors_of(tmp_path, with_max(value) + entry("[100000, 100000, 100000]"), bundle=False)
    assert len(errs) == 1, errs
    assert ": bundle: max_elements must be a positive integer" in errs[0] and errs[0].endswith(f"got {got}")


def test_commands_are_bounded(tmp_path):
    cmds = ['layernorm -X 100000x100000x100000', f"layernorm -X 4x{BIG}",
            "layernorm -X " + "x".join(["1"] * 1000), "rmsnorm -X 8x768"]
    body = "commands = [" + ", ".join(f'"{c}"' for c in cmds) + "]\n"  # top level: before [bundle]
    errs = errors_of(tmp_path, body + BUNDLE, bundle=False)
    assert len(errs) == 3, errs
    assert "commands[0]: -X/--input [100000, 100000, 100000] has 1000000000000000 elements" in errs[0]
    assert f"commands[1]: -X/--input dimension 1 is {BIG}" in errs[1]
    assert "commands[2]: -X/--input has 1000 dimensions" in errs[2]
    # a raised bound applies to commands too
    p = write(tmp_path, f'commands = ["{cmds[0]}"]\n' + with_max("1000000000000000"), bundle=False)
    assert keys(load_manifest(p)) == ["layer_norm-f32-100000x100000x100000-n100000-nw-m1"]


def test_txt_commands_are_bounded(tmp_path):
    p = tmp_path / "cmds.txt"
    p.write_text("layernorm -X 8x768\nlayernorm -X 100000x100000x100000\n")
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    assert e.value.errors == [
        f"{p}:2: -X/--input [100000, 100000, 100000] has 1000000000000000 elements, more than "
        f"max_elements = {DEFAULT_MAX_ELEMENTS} per tensor: use a smaller shape, or raise "
        "max_elements in the [bundle] table of a TOML manifest"]


def test_parse_command_bounds():
    with pytest.raises(SignatureError, match="has 9 dimensions: at most 8"):
        parse_command("layernorm -X " + "x".join(["2"] * 9))
    with pytest.raises(SignatureError, match="more than max_elements = 10 "):
        parse_command("layernorm -X 4x4", max_elements=10)
    assert parse_command("layernorm -X 100000x100000x100000", max_elements=None) is not None


@pytest.mark.parametrize("shape, expect", [
    ("[100000, 100000, 100000]", "has 1000000000000000 elements"),
    (f"[{BIG}]", f"dimension 0 is {BIG}"),
    (ONES_1000, "has 1000 dimensions"),
])
def test_build_refuses_before_export_and_leaves_nothing(tmp_path, capsys, shape, expect):
    p = write(tmp_path, entry("[4, 10]") + entry(shape))
    out = tmp_path / "out"
    rc = main(["build", str(p), "--out", str(out), "--targets", "cpu", "--no-validate", "-q"])
    captured = capsys.readouterr()
    assert rc == 2
    assert f"{p}: kernels[1]: input_shape" in captured.err and expect in captured.err
    assert "Traceback" not in captured.err + captured.out
    assert not out.exists()
