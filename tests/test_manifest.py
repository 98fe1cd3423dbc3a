"""Manifests: TOML expansion, MIOpen commands, errors (all at once), defaults."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import BUNDLE, ENTRY, REPO, errors_of, keys, load, one_error, write

from boo_build.errors import ManifestError, SignatureError
from boo_build.manifest.entries import ENTRY_KEYS, KernelRequest
from boo_build.manifest.reader import BundleSpec, Manifest, load_manifest, parse_command, parse_commands, parse_toml
from boo_build.ops.base import IMPLS
from boo_build.signature import ALL_MASKS, KernelSignature, ModuleId

DEFAULT = REPO / "manifests" / "default.toml"


def sig(**kw) -> KernelSignature:
    base = dict(op="layer_norm", input_shape=(8, 128, 768), normalized_shape=(768,),
                dtype="float32", mask=1)
    base.update(kw)
    return KernelSignature(**base)


# -- the data model ---------------------------------------------------------------

def test_bundle_spec_validates():
    b = BundleSpec("x", "0.1.0-rc.1", ["cpu", "gfx942", "cpu"])
    assert b.targets == ("cpu", "gfx942")
    assert BundleSpec("x", "0.1.0+build.5", ["cpu"]).version == "0.1.0+build.5"  # semver build metadata
    for bad in ("1.0", "01.0.0", "1.0.0+", "v1.0.0", "1.0.0-", "1.0.0-01", "1.0.0\n"):
        with pytest.raises(ValueError, match="not semver"):
            BundleSpec("x", bad, ("cpu",))
    with pytest.raises(ValueError, match="targets is empty"):
        BundleSpec("x", "1.0.0", ())


def test_kernel_request_sorts_impls():
    r = KernelRequest(sig(), ("manual", "aten", "manual"))
    assert r.impls == ("aten", "manual")
    assert KernelRequest(sig()).impls == tuple(sorted(IMPLS))
    with pytest.raises(ValueError, match="unknown implementation 'triton'"):
        KernelRequest(sig(), ("triton",))
    with pytest.raises(ValueError, match="impls is empty"):
        KernelRequest(sig(), ())


def test_manifest_sorts_merges_and_lists_module_ids():
    m = Manifest("x.toml", BundleSpec("x", "1.0.0", ("cpu",)), (
        KernelRequest(sig(mask=14), ("manual",)),
        KernelRequest(sig(), ("aten",)),
        KernelRequest(sig(mask=14), ("aten",)),
    ))
    assert keys(m) == sorted([sig().key, sig(mask=14).key])
    assert [k.impls for k in m.kernels] == [("aten",), ("aten", "manual")]
    assert all(isinstance(i, ModuleId) for i in m.module_ids)
    assert [i.key for i in m.module_ids] == sorted([
        sig().key + "-aten", sig(mask=14).key + "-aten", sig(mask=14).key + "-manual"])


# -- TOML: expansion, de-duplication, defaults -----------------------------------------

def test_basic_toml(tmp_path):
    m = load(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 128, 768]
        masks = [1]
    """)
    assert m.bundle == BundleSpec("test-bundle", "1.2.3", ("cpu", "gfx942"))
    assert m.path == str(tmp_path / "m.toml")
    assert keys(m) == ["layer_norm-f32-8x128x768-n768-wb-m1"]
    assert m.kernels[0].impls == tuple(sorted(IMPLS))
    assert len(m.module_ids) == len(IMPLS)


def test_cartesian_product(tmp_path):
    m = load(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shapes = [[8, 128, 768], [4, 768], [2, 3, 768]]
        normalized_shape = 768
        dtype = ["float32", "float16", "bfloat16"]
        masks = [1, 2, 14, 6]
        impls = ["manual"]
    """)
    assert len(m.kernels) == 3 * 3 * 4
    assert len(m.module_ids) == 36
    assert {k.impls for k in m.kernels} == {("manual",)}
    assert keys(m) == sorted(keys(m))


def test_defaults(tmp_path):
    m = load(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [10, 32, 42, 32]

        [[kernels]]
        op = "rms_norm"
        input_shape = [2, 4096]

        [[kernels]]
        op = "layer_norm"
        input_shape = [4, 16]
        affine = false

        [[kernels]]
        op = "layer_norm"
        input_shape = [4, 16]
        bias = false

        [[kernels]]
        op = "rms_norm"
        input_shape = [4, 16]
        affine = false
    """)
    by = {}
    for k in m.kernels:
        s = k.signature
        by.setdefault((s.op, s.input_shape, s.affine_code), []).append(s.mask)
        assert s.normalized_shape == s.input_shape[-1:]
        assert s.dtype == "float32" and s.eps == 1e-5 and s.stats_dtype == "float32"
    assert sorted(by[("layer_norm", (10, 32, 42, 32), "wb")]) == list(ALL_MASKS["layer_norm"])
    assert sorted(by[("rms_norm", (2, 4096), "w")]) == list(ALL_MASKS["rms_norm"])
    assert sorted(by[("layer_norm", (4, 16), "nw")]) == [1, 2]
    assert sorted(by[("layer_norm", (4, 16), "w")]) == [1, 2, 4, 6]
    assert sorted(by[("rms_norm", (4, 16), "nw")]) == [1, 2]
    assert len(by) == 5


def test_other_fields(tmp_path):
    m = load(tmp_path, """
        [[kernels]]
        op = "rms_norm"
        input_shape = [2, 128, 4096]
        dtype = "bf16"
        stats_dtype = "bfloat16"
        eps = 1e-6
        masks = [6]
        impls = "aten"

        [[kernels]]
        op = "layer_norm"
        input_shape = "10x32x42x32"
        normalized_shape = [42, 32]
        masks = 14
    """)
    assert keys(m) == ["layer_norm-f32-10x32x42x32-n42x32-wb-m14",
                       "rms_norm-bf16-2x128x4096-n4096-w-sbf16-eps1em06-m6"]
    assert m.kernels[1].impls == ("aten",)


def test_duplicates_collapse(tmp_path):
    m = load(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 128, 768]
        dtype = "bf16"
        masks = [1, 14]
        impls = ["aten"]

        [[kernels]]
        masks = [14, 14]
        bias = true
        normalized_shape = [768]
        dtype = ["bfloat16", "bfp16"]
        input_shapes = [[8, 128, 768]]
        affine = true
        eps = 0.00001
        stats_dtype = "f32"
        op = "layer_norm"
        impls = ["manual"]

        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 128, 768]
        dtype = "BF16"
        masks = [1]
        impls = ["aten"]
    """)
    assert keys(m) == ["layer_norm-bf16-8x128x768-n768-wb-m1",
                       "layer_norm-bf16-8x128x768-n768-wb-m14"]
    assert [k.impls for k in m.kernels] == [("aten",), ("aten", "manual")]
    assert len(m.module_ids) == 3


def test_toml_commands_merge_with_kernels(tmp_path):
    # commands must come before [bundle]: TOML puts later keys inside the table
    p = tmp_path / "c.toml"
    p.write_text(textwrap.dedent("""\
        commands = [
            "layernormbfp16 -X 8x128x768 -F 14 -m 1",
            "# a comment",
            "layernorm -X 8x128x768 -F 1 -m 0",
        ]
    """) + BUNDLE + textwrap.dedent("""
        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 128, 768]
        dtype = "bf16"
        masks = [14]
        impls = ["aten"]
    """))
    m = load_manifest(p)
    assert keys(m) == ["layer_norm-bf16-8x128x768-n768-wb-m14",
                       "layer_norm-f32-8x128x768-n768-nw-m1"]
    assert m.kernels[0].impls == tuple(sorted(IMPLS))


def test_commands_only_toml(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('commands = ["rmsnorm -X 4x64 -m 1"]\n' + BUNDLE)
    assert keys(load_manifest(p)) == ["rms_norm-f32-4x64-n64-w-m1"]


def test_overrides(tmp_path):
    p = write(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [4, 8]
        masks = [1]
    """)
    m = load_manifest(p, targets=["gfx950"], version="2.0.0-dev.1")
    assert m.bundle == BundleSpec("test-bundle", "2.0.0-dev.1", ("gfx950",))
    with pytest.raises(ManifestError, match="override: version '2.0' is not semver"):
        load_manifest(p, version="2.0")
    with pytest.raises(ManifestError, match="override: targets is empty"):
        load_manifest(p, targets=[])


def test_parse_toml_directly():
    m = parse_toml(BUNDLE + '[[kernels]]\nop = "rms_norm"\ninput_shape = [3, 5]\nmasks = [1]\n',
                   "inline.toml")
    assert m.path == "inline.toml"
    assert keys(m) == ["rms_norm-f32-3x5-n5-w-m1"]


# -- TOML errors ---------------------------------------------------------------------

@pytest.mark.parametrize("body, expect", [
    ('op = "layer_norm"\ninput_shape = [8, 128, 768]\nnormalized_shape = [128]\n',
     "kernels[0]: normalized_shape [128] is not a suffix of input_shape [8, 128, 768]"),
    ('op = "layer_norm"\ninput_shape = [8, 128, 768]\nnormalized_shape = [8, 8, 128, 768]\n',
     "is not a suffix"),
    (ENTRY + 'dtype = "float8"\n', "kernels[0]: unknown dtype 'float8'"),
    (ENTRY + 'stats_dtype = "int8"\n', "kernels[0]: unknown stats_dtype 'int8'"),
    ('op = "instance_norm"\ninput_shape = [8, 128, 768]\n',
     "kernels[0]: unknown op 'instance_norm': use one of layer_norm, rms_norm, group_norm"),
    (ENTRY + "masks = [0]\n", "kernels[0]: mask 0 is invalid for layer_norm: 0 selects nothing"),
    (ENTRY + "masks = [3]\n", "kernels[0]: mask 3 is invalid for layer_norm: forward (1) cannot"),
    (ENTRY + "masks = [16]\n", "kernels[0]: mask 16 is invalid for layer_norm: only bits 1, 2, 4, 8"),
    ('op = "rms_norm"\ninput_shape = [8, 768]\nmasks = [8]\n',
     "kernels[0]: mask 8 is invalid for rms_norm: rms_norm has no bias gradient (8)"),
    ('op = "rms_norm"\ninput_shape = [8, 768]\nmasks = [10]\n', "rms_norm has no bias gradient"),
    ('op = "rms_norm"\ninput_shape = [8, 768]\nbias = true\n',
     "kernels[0]: rms_norm has no bias: set bias = false"),
    (ENTRY + "affine = false\nbias = true\n", "kernels[0]: bias requires affine = true"),
    (ENTRY + "affine = false\nmasks = [4]\n",
     "kernels[0]: mask 4 asks for a weight gradient but affine = false"),
    (ENTRY + "bias = false\nmasks = [8]\n",
     "kernels[0]: mask 8 asks for a bias gradient but bias = false"),
    ('op = "layer_norm"\ninput_shape = [8, 0, 768]\n',
     "kernels[0]: input_shape must be a non-empty list of positive integers, got [8, 0, 768]"),
    ('op = "layer_norm"\ninput_shape = [8, -1, 768]\n', "positive integers"),
    ('op = "layer_norm"\ninput_shape = []\n', "input_shape must be a non-empty list"),
    (ENTRY + "normalized_shape = [0]\n", "normalized_shape must be a non-empty list of positive"),
    ('op = "layer_norm"\ninput_shapes = [[8, 768], [0, 768]]\n', "input_shapes[1] must be"),
    ('input_shape = [8, 768]\n', "kernels[0]: missing key 'op'"),
    ('op = "layer_norm"\n', "kernels[0]: missing key 'input_shape' (or 'input_shapes'"),
    (ENTRY + 'input_shapes = [[4, 768]]\n', "give input_shape or input_shapes, not both"),
    (ENTRY + "eps = 0.0\n", "kernels[0]: eps must be a positive finite number"),
    (ENTRY + 'eps = "1e-5"\n', "kernels[0]: eps must be a number"),
    (ENTRY + 'affine = "yes"\n', "affine must be true or false"),
    (ENTRY + 'masks = ["1"]\n', "masks must be a non-empty list of integers"),
    (ENTRY + "masks = []\n", "masks must be a non-empty list of integers"),
    (ENTRY + 'impls = ["triton"]\n', "kernels[0]: unknown implementation 'triton': use one of"),
    (ENTRY + "impls = []\n", "impls is empty"),
    (ENTRY + "dtype = []\n", "dtype must be a string or a non-empty list of strings"),
])
def test_entry_errors(tmp_path, body, expect):
    err = one_error(tmp_path, "[[kernels]]\n" + body)
    assert expect in err
    assert err.startswith(f"{tmp_path / 'm.toml'}: kernels[0]: ")


def test_unknown_key_names_key_and_valid_keys(tmp_path):
    err = one_error(tmp_path, "[[kernels]]\n" + ENTRY + "mask = [1]\n")
    assert "kernels[0]: unknown key 'mask'" in err
    for k in ENTRY_KEYS:
        assert k in err


def test_repeated_signature_error_reported_once(tmp_path):
    # a shape error is the same for every dtype x mask: one message, not 16
    errs = errors_of(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 768]
        normalized_shape = [8]
        dtype = ["f32", "bf16"]
    """)
    assert len(errs) == 1 and "not a suffix" in errs[0]


def test_all_errors_reported_at_once(tmp_path):
    errs = errors_of(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 768]
        masks = [1]

        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 768]
        masks = [3]

        [[kernels]]
        op = "rms_norm"
        input_shape = [8, 768]
        masks = [1]

        [[kernels]]
        op = "rms_norm"
        input_shape = [8, 768]
        masks = [1, 8]

        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 768]
        dtype = "f8"
        masks = [1]
    """)
    assert len(errs) == 3, errs
    assert "kernels[1]: mask 3 is invalid for layer_norm" in errs[0]
    assert "kernels[3]: mask 8 is invalid for rms_norm" in errs[1]
    assert "kernels[4]: unknown dtype 'f8'" in errs[2]


def test_several_errors_in_one_entry(tmp_path):
    errs = errors_of(tmp_path, """
        [[kernels]]
        op = "layer_norm"
        input_shape = [8, 768]
        masks = [0, 3, 16, 14]
        colour = "blue"
    """)
    assert len(errs) == 4
    assert all(": kernels[0]: " in e for e in errs)
    assert "unknown key 'colour'" in errs[0]
    assert [e for e in errs if "mask 0 " in e] and [e for e in errs if "mask 16 " in e]


@pytest.mark.parametrize("bundle, expect", [
    ('[bundle]\nname = "x"\nversion = "1.0"\ntargets = ["cpu"]\n', "bundle: version '1.0' is not semver"),
    ('[bundle]\nname = "x"\nversion = "1.0.0.0"\ntargets = ["cpu"]\n', "is not semver"),
    ('[bundle]\nname = "x"\nversion = 1\ntargets = ["cpu"]\n', "is not semver"),
    ('[bundle]\nname = "x"\ntargets = ["cpu"]\n', "bundle: missing key 'version'"),
    ('[bundle]\nversion = "1.0.0"\ntargets = ["cpu"]\n', "bundle: missing key 'name'"),
    ('[bundle]\nname = "a b"\nversion = "1.0.0"\ntargets = ["cpu"]\n', "bundle name 'a b' is invalid"),
    ('[bundle]\nname = "x"\nversion = "1.0.0"\n', "bundle: missing key 'targets'"),
    ('[bundle]\nname = "x"\nversion = "1.0.0"\ntargets = []\n', "bundle: targets is empty"),
    ('[bundle]\nname = "x"\nversion = "1.0.0"\ntargets = "cpu"\n', "targets must be a list"),
    ('[bundle]\nname = "x"\nversion = "1.0.0"\ntargets = ["cpu"]\nowner = "me"\n',
     "bundle: unknown key 'owner'"),
    ('', "missing [bundle] table"),
    ('bundel = 1\n[bundle]\nname = "x"\nversion = "1.0.0"\ntargets = ["cpu"]\n',
     "unknown top-level key 'bundel'"),
])
def test_bundle_errors(tmp_path, bundle, expect):
    p = tmp_path / "b.toml"
    p.write_text(bundle + "[[kernels]]\n" + ENTRY + "masks = [1]\n")
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    assert len(e.value.errors) == 1, e.value.errors
    assert expect in e.value.errors[0]
    assert e.value.errors[0].startswith(str(p) + ": ")


def test_bundle_and_entry_errors_together(tmp_path):
    p = tmp_path / "b.toml"
    p.write_text('[bundle]\nname = "x"\nversion = "one"\ntargets = ["cpu"]\n'
                 '[[kernels]]\nop = "softmax"\ninput_shape = [4]\n'
                 'commands = ["layernorm -X 4x4 --bogus 1"]\n')
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    # note: commands after [[kernels]] belongs to the entry, so it is an unknown key
    assert len(e.value.errors) == 3
    joined = str(e.value)
    assert "not semver" in joined and "unknown op 'softmax'" in joined
    assert "unknown key 'commands'" in joined


def test_empty_manifest(tmp_path):
    assert "no kernels" in one_error(tmp_path, "")
    p = tmp_path / "k.toml"
    p.write_text("kernels = []\n" + BUNDLE)
    with pytest.raises(ManifestError, match="no kernels"):
        load_manifest(p)
    p = tmp_path / "c.toml"
    p.write_text('commands = ["# nothing"]\n' + BUNDLE)
    with pytest.raises(ManifestError, match="no kernels"):
        load_manifest(p)


def test_kernels_as_table_is_an_error(tmp_path):
    err = one_error(tmp_path, "[kernels]\n" + ENTRY)
    assert "kernels must be an array of tables: write [[kernels]]" in err


def test_invalid_toml(tmp_path):
    err = one_error(tmp_path, "[[kernels]\n")
    assert "invalid TOML" in err and "line" in err


def test_unknown_suffix_and_missing_file(tmp_path):
    p = tmp_path / "m.json"
    p.write_text("{}")
    with pytest.raises(ManifestError, match="unknown manifest type '.json'"):
        load_manifest(p)
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.toml")


# -- MIOpen commands ------------------------------------------------------------------

def cmd(text: str) -> KernelSignature:
    req = parse_command(text)
    assert req is not None and req.impls == tuple(sorted(IMPLS))
    return req.signature


def test_turbine_sample_command():
    s = cmd("layernorm -X 10x32x42x32 -F 14 -m 1 -e 1e-5 -o 3")
    assert s == KernelSignature(op="layer_norm", input_shape=(10, 32, 42, 32),
                                normalized_shape=(32,), dtype="float32", mask=14,
                                affine=True, bias=True)


LN_MASKS = ALL_MASKS["layer_norm"]
RMS_MASKS = ALL_MASKS["rms_norm"]


@pytest.mark.parametrize("mask", LN_MASKS)
def test_layernorm_mode_1_every_mask(mask):
    s = cmd(f"layernorm -X 10x32x42x32 -F {mask} -m 1")
    assert (s.op, s.affine, s.bias, s.mask) == ("layer_norm", True, True, mask)
    assert s.affine_code == "wb"


@pytest.mark.parametrize("mask", LN_MASKS)
def test_layernorm_mode_0_every_mask(mask):
    text = f"layernorm -X 10x32x42x32 -F {mask} -m 0"
    if mask & (4 | 8):
        with pytest.raises(SignatureError, match="but (affine|bias) = false.*-m 1"):
            parse_command(text)
    else:
        s = cmd(text)
        assert (s.affine, s.bias, s.mask) == (False, False, mask)
        assert s.affine_code == "nw"


@pytest.mark.parametrize("mask", [m for m in range(16) if m not in LN_MASKS])
def test_layernorm_invalid_F(mask):
    with pytest.raises(SignatureError, match=f"mask {mask} is invalid for layer_norm"):
        parse_command(f"layernorm -X 4x8 -F {mask} -m 1")


@pytest.mark.parametrize("mask", RMS_MASKS)
def test_rmsnorm_modes_every_mask(mask):
    s = cmd(f"rmsnorm -X 2x128x4096 -F {mask} -m 1")
    assert (s.op, s.affine, s.bias, s.mask) == ("rms_norm", True, False, mask)
    assert s.affine_code == "w"
    text = f"rmsnorm -X 2x128x4096 -F {mask} -m 0"
    if mask & 4:
        with pytest.raises(SignatureError, match="weight gradient but affine = false"):
            parse_command(text)
    else:
        assert cmd(text).affine_code == "nw"


def test_rmsnorm_bias_gradient_is_invalid():
    with pytest.raises(SignatureError, match="rms_norm has no bias gradient.*no bias"):
        parse_command("rmsnorm -X 4x8 -F 14 -m 1")


def test_mode_default_is_0_and_forw_default_is_1():
    s = cmd("layernorm -X 4x8")
    assert (s.mask, s.affine, s.bias, s.eps, s.normalized_shape) == (1, False, False, 1e-5, (8,))


@pytest.mark.parametrize("name, op, dtype", [
    ("layernorm", "layer_norm", "float32"),
    ("layernormfp16", "layer_norm", "float16"),
    ("layernormbfp16", "layer_norm", "bfloat16"),
    ("rmsnorm", "rms_norm", "float32"),
    ("rmsnormfp16", "rms_norm", "float16"),
    ("rmsnormbfp16", "rms_norm", "bfloat16"),
])
def test_command_names(name, op, dtype):
    s = cmd(f"{name} -X 4x8 -m 1")
    assert (s.op, s.dtype) == (op, dtype)


@pytest.mark.parametrize("o, norm", [(0, (10, 32, 42, 32)), (1, (32, 42, 32)), (2, (42, 32)),
                                     (3, (32,))])
def test_normalized_dim(o, norm):
    s = cmd(f"layernorm -X 10x32x42x32 -o {o} -m 1")
    assert s.normalized_shape == norm
    assert cmd(f"layernorm --input=10x32x42x32 --normalized_dim={o}").normalized_shape == norm


@pytest.mark.parametrize("o", [4, -1, 10])
def test_normalized_dim_out_of_range(o):
    with pytest.raises(SignatureError, match=f"-o/--normalized_dim {o} is out of range.*0..3"):
        parse_command(f"layernorm -X 10x32x42x32 -o {o}")


def test_long_flags_and_equals():
    a = cmd("layernormbfp16 --input 8x128x768 --forw 6 --mode 1 --eps 1e-6 --normalized_dim 2")
    b = cmd("layernormbfp16 --input=8x128x768 --forw=6 --mode=1 --eps=1e-6 --normalized_dim=2")
    c = cmd("layernormbfp16 -X 8x128x768 -F 6 -m 1 -e 0.000001 -o 2")
    assert a == b == c
    assert a.key == "layer_norm-bf16-8x128x768-n768-wb-eps1em06-m6"


def test_ignored_timing_flags():
    base = cmd("layernorm -X 4x8 -F 2 -m 1")
    assert cmd("layernorm -X 4x8 -F 2 -m 1 -t 1 -V 0 -i 10 -w 1") == base
    assert cmd("layernorm -t 1 -X 4x8 --iter 100 -F 2 --verify=1 -m 1 --wall 0 --time=1") == base
    with pytest.raises(SignatureError, match="flag -t needs a value"):
        parse_command("layernorm -X 4x8 -t")


def test_driver_prefix_and_trailing_comment():
    assert cmd("./bin/MIOpenDriver layernorm -X 4x8 -m 1  # from a log") == cmd("layernorm -X 4x8 -m 1")


@pytest.mark.parametrize("text, match", [
    ("instancenorm -X 4x8", "unknown command 'instancenorm'"),
    ("layernorm -X 4x8 --foo 1", "unknown flag '--foo'"),
    ("layernorm -X 4x8 -q 1", "unknown flag '-q'"),
    ("layernorm -X 4x8 --foo=1", "unknown flag '--foo'"),
    ("layernorm -X 4x8 17", "unexpected argument '17'"),
    ("layernorm -X", "flag -X needs a value"),
    ("layernorm -F 1", "needs -X/--input"),
    ("layernorm -X 4xAx8", "bad -X/--input '4xAx8'"),
    ("layernorm -X 4x0x8", "input_shape must be a non-empty list of positive integers"),
    ("layernorm -X 4x8 -F one", "-F/--forw must be an integer"),
    ("layernorm -X 4x8 -m 2", "-m/--mode 2 is invalid"),
    ("layernorm -X 4x8 -e tiny", "-e/--eps must be a number"),
    ("layernorm -X 4x8 -e 0", "eps must be a positive finite number"),
    ("layernorm -X 4x8 -F 1 -F 2", "given twice"),
    ("layernorm -X 4x8 -F 0", "mask 0 is invalid"),
    ("layernorm -X 4x8 -F 3", "mask 3 is invalid"),
    ("layernorm -X 4x8 -F 16 -m 1", "mask 16 is invalid"),
    ("layernorm -X 4x8 'unclosed", "cannot split command"),
])
def test_command_errors(text, match):
    with pytest.raises(SignatureError, match=match):
        parse_command(text)


def test_blank_and_comment_lines():
    assert parse_command("") is None
    assert parse_command("   # just a comment") is None


def test_parse_commands_reports_every_bad_line():
    lines = [
        "# a MIOpen log",
        "layernorm -X 10x32x42x32 -F 1 -m 1",
        "",
        "layernorm -X 10x32x42x32 -F 14 -m 0",
        "layernorm -X 4x8 --foo 1",
        "softmax -X 4x8",
        "rmsnormbfp16 -X 2x4096 -F 6 -m 1",
    ]
    with pytest.raises(ManifestError) as e:
        parse_commands(lines, "cmds.txt")
    errs = e.value.errors
    assert len(errs) == 3
    assert errs[0].startswith("cmds.txt:4: mask 14 asks for a weight gradient but affine = false")
    assert errs[1].startswith("cmds.txt:5: unknown flag '--foo'")
    assert errs[2].startswith("cmds.txt:6: unknown command 'softmax'")
    good = parse_commands("\n".join(lines[:3] + lines[6:]), "ok.txt")
    assert [r.signature.key for r in good] == ["layer_norm-f32-10x32x42x32-n32-wb-m1",
                                              "rms_norm-bf16-2x4096-n4096-w-m6"]


def test_toml_command_errors_name_the_entry(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('commands = ["layernorm -X 4x8", "layernorm -X 4x8 --foo 1", 3]\n' + BUNDLE)
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    assert e.value.errors == [
        f"{p}: commands[1]: unknown flag '--foo' for layernorm: use -X/--input, -F/--forw, "
        "-m/--mode, -e/--eps, -o/--normalized_dim, -t/--time, -i/--iter, -V/--verify, -w/--wall, "
        "--use-aten, --input-permutation",
        f"{p}: commands[2]: a command must be a string, got 3",
    ]


# -- .txt manifests -----------------------------------------------------------------

def test_txt_manifest(tmp_path):
    p = tmp_path / "my-cmds.txt"
    p.write_text("# LN sweep\nlayernorm -X 10x32x42x32 -F 14 -m 1\n\n"
                 "layernorm -X 10x32x42x32 -F 14 -m 1 -t 1\n"   # duplicate collapses
                 "layernormfp16 -X 4x8 -F 1\n")
    m = load_manifest(p)
    assert m.bundle == BundleSpec("my-cmds", "0.0.0", ("cpu",))
    assert keys(m) == ["layer_norm-f16-4x8-n8-nw-m1", "layer_norm-f32-10x32x42x32-n32-wb-m14"]
    assert len(m.module_ids) == 2 * len(IMPLS)
    m = load_manifest(p, targets=("gfx942", "gfx90a"), version="3.1.4")
    assert m.bundle == BundleSpec("my-cmds", "3.1.4", ("gfx942", "gfx90a"))


def test_txt_errors_with_line_numbers(tmp_path):
    p = tmp_path / "cmds.txt"
    p.write_text("layernorm -X 4x8\n# ok\nlayernorm -X 4x8 --foo 1\nrmsnorm -X 4x8 -F 8 -m 1\n")
    with pytest.raises(ManifestError) as e:
        load_manifest(p, version="bad")
    errs = e.value.errors
    assert len(errs) == 3
    assert errs[0] == f"{p}: version 'bad' is not semver: expected MAJOR.MINOR.PATCH (no leading zeros) " \
        "with an optional -prerelease and +build metadata, e.g. 0.1.0, 1.2.0-rc.1 or 1.2.0+build.5"
    assert errs[1].startswith(f"{p}:3: unknown flag '--foo'")
    assert errs[2].startswith(f"{p}:4: mask 8 is invalid for rms_norm")


def test_empty_txt(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("# nothing here\n\n")
    with pytest.raises(ManifestError, match="no kernels"):
        load_manifest(p)


# -- the default manifest --------------------------------------------------------------

def test_default_manifest_loads():
    m = load_manifest(DEFAULT)
    assert m.bundle == BundleSpec("boo-norms", "0.1.0",
                                  ("cpu", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"))
    ks = set(keys(m))
    assert 14 <= len(ks) <= 50
    for mask in ALL_MASKS["layer_norm"]:
        assert f"layer_norm-f32-10x32x42x32-n32-wb-m{mask}" in ks
    for dt in ("f32", "bf16"):
        for mask in (1, 14):
            assert f"layer_norm-{dt}-8x128x768-n768-wb-m{mask}" in ks
    for mask in (1, 6):
        assert f"rms_norm-bf16-2x128x4096-n4096-w-eps1em06-m{mask}" in ks
    # any batch and sequence length: dynamic BERT-base and Llama-class norms
    for dt in ("f32", "bf16"):
        for mask in (1, 14):
            assert f"layer_norm-{dt}-BATCHxSEQx768-n768-wb-m{mask}" in ks
    for dt in ("f32", "bf16", "f16"):
        for mask in (1, 6):
            assert f"rms_norm-{dt}-BATCHxSEQx4096-n4096-w-eps1em06-m{mask}" in ks
    # Stable Diffusion 1.x group norms: the UNet's, the VAE's (eps 1e-6), the mid block for any batch
    for shape in ("2x320x64x64", "2x640x32x32", "2x1280x16x16"):
        for mask in (1, 14):
            assert f"group_norm-f16-{shape}-g32-wb-m{mask}" in ks
    for mask in (1, 14):
        assert f"group_norm-f16-1x512x64x64-g32-wb-eps1em06-m{mask}" in ks
        assert f"group_norm-f16-BATCHx1280x8x8-g32-wb-m{mask}" in ks
    manual_only = {k.signature.key for k in m.kernels if k.impls == ("manual",)}
    assert manual_only == {"group_norm-f16-BATCHx1280x8x8-g32-wb-m1", "group_norm-f16-BATCHx1280x8x8-g32-wb-m14"}
    assert all(k.impls == tuple(sorted(IMPLS)) for k in m.kernels if k.signature.key not in manual_only)
    assert len(m.module_ids) == (len(ks) - len(manual_only)) * len(IMPLS) + len(manual_only)


# -- no torch -----------------------------------------------------------------------

def test_manifest_does_not_import_torch():
    code = "import boo_build.manifest.reader, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
