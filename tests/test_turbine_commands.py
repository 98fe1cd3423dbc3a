"""iree-turbine's driver command lines: --use-aten, --input-permutation and .tsv command files."""

from __future__ import annotations

import shlex

import pytest

from boo_build.errors import ManifestError, SignatureError
from boo_build.manifest.reader import BundleSpec, load_manifest, parse_command
from boo_build.signature import KernelSignature

LN = dict(op="layer_norm", dtype="float32")


def impls(text: str, tsv: bool = False) -> tuple[str, ...]:
    req = parse_command(text, tsv=tsv)
    assert req is not None
    return req.impls


# -- iree-turbine's own command lines -------------------------------------------------------

# iree/turbine/kernel/boo/driver/sample_commands.txt's layer-norm lines, verbatim
SAMPLE_COMMANDS = [
    ("layernorm --input 10x32x42x32 -t 1 --mode 0 --iter 100", 1, False),
    ("layernorm --input 10x32x42x32 -t 1 --mode 1 --iter 100", 1, True),
    ("layernorm --input 10x32x42x32 -t 1 -F 2 --iter 100", 2, False),
    ("layernorm --input 10x32x42x32 -t 1 -F 4 --iter 100", 4, False),
    ("layernorm --input 10x32x42x32 -t 1 -F 8 --iter 100", 8, False),
]


@pytest.mark.parametrize("line, mask, affine", SAMPLE_COMMANDS)
def test_turbine_sample_commands(line, mask, affine):
    if mask in (4, 8):  # -m 0 (the default) has no weight or bias: no gradient of them
        with pytest.raises(SignatureError, match="(affine|bias) = false.*use -m 1 for their gradients"):
            parse_command(line)
        return
    req = parse_command(line)
    assert req is not None and req.impls == ("aten", "manual")
    assert req.signature == KernelSignature(**LN, input_shape=(10, 32, 42, 32), normalized_shape=(32,),
                                            mask=mask, affine=affine, bias=affine)


def test_turbine_parser_test_commands():
    # tests/kernel/boo/driver/parser_test.py: ["layernorm", "--input", "2x3x4x5", "--mode=0" / "--mode=1"]
    for mode, affine in (("0", False), ("1", True)):
        req = parse_command(shlex.join(["layernorm", "--input", "2x3x4x5", f"--mode={mode}"]))
        assert req is not None
        assert (req.signature.input_shape, req.signature.normalized_shape) == ((2, 3, 4, 5), (5,))
        assert (req.signature.affine, req.signature.bias) == (affine, affine)


# -- --use-aten ----------------------------------------------------------------------------

@pytest.mark.parametrize("flag, impl", [
    ("--use-aten", "aten"),  # bare, at the end
    ("--use-aten 1", "aten"),
    ("--use-aten true", "aten"),
    ("--use-aten True", "aten"),
    ("--use-aten=1", "aten"),
    ("--use-aten yes", "aten"),
    ("--use-aten 0", "manual"),
    ("--use-aten false", "manual"),
    ("--use-aten False", "manual"),
    ("--use-aten=0", "manual"),
    ("--use-aten off", "manual"),
    ("--use-aten=", "manual"),  # empty: false, as iree-turbine's type=bool reads it
    ("--use-aten ''", "manual"),
])
def test_use_aten_forms(flag, impl):
    line = f"layernorm -X 10x32x42x32 -F 14 -m 1 {flag}"
    req = parse_command(line)
    assert req is not None and req.impls == (impl,)
    # the flag chooses the implementation, nothing else: the kernel is the one without it
    assert req.signature == parse_command("layernorm -X 10x32x42x32 -F 14 -m 1").signature


def test_bare_use_aten_before_another_flag():
    assert impls("layernorm --use-aten -X 4x8 -F 2") == ("aten",)
    assert impls("layernorm -X 4x8 --use-aten -t 1 -F 2") == ("aten",)
    assert parse_command("layernorm --use-aten -X 4x8 -F 2").signature.mask == 2


def test_use_aten_on_every_command():
    assert impls("rmsnormbfp16 -X 2x128x4096 -F 6 -m 1 --use-aten 0") == ("manual",)
    assert impls("groupnormfp16 -n 2 -c 320 -H 64 -W 64 -g 32 -F 14 -m 1 --use-aten") == ("aten",)


@pytest.mark.parametrize("flag", ["--use-aten maybe", "--use-aten=2", "--use-aten 4x8"])
def test_use_aten_bad_value(flag):
    value = flag.replace("=", " ").split(" ", 1)[1]
    with pytest.raises(SignatureError) as e:
        parse_command(f"layernorm -X 4x8 {flag}")
    assert str(e.value) == (
        f"--use-aten {value!r} is neither true nor false: give no value or one of 1, true, yes, on "
        "(the aten implementation), or one of 0, false, no, off (the manual one)")


def test_use_aten_twice():
    with pytest.raises(SignatureError, match="flag --use-aten given twice"):
        parse_command("layernorm -X 4x8 --use-aten 1 --use-aten 0")


def test_use_aten_in_manifests(tmp_path):
    p = tmp_path / "turbine.txt"
    p.write_text("layernorm -X 4x8 -F 14 -m 1 --use-aten 1\n"
                 "layernorm -X 4x8 -F 14 -m 1 --use-aten 0\n"   # the same kernel: both implementations
                 "layernorm -X 4x8 -F 1 -m 1 --use-aten 0\n"
                 "rmsnorm -X 4x8 -F 1\n")
    m = load_manifest(p)
    assert sorted(str(mid.key) for mid in m.module_ids) == [
        "layer_norm-f32-4x8-n8-wb-m1-manual",
        "layer_norm-f32-4x8-n8-wb-m14-aten",
        "layer_norm-f32-4x8-n8-wb-m14-manual",
        "rms_norm-f32-4x8-n8-nw-m1-aten",
        "rms_norm-f32-4x8-n8-nw-m1-manual",
    ]
    t = tmp_path / "m.toml"
    t.write_text('commands = ["layernormbfp16 -X 8x128x768 -F 14 -m 1 --use-aten"]\n'
                 '[bundle]\nname = "x"\nversion = "0.1.0"\ntargets = ["cpu"]\n')
    assert [mid.key for mid in load_manifest(t).module_ids] == ["layer_norm-bf16-8x128x768-n768-wb-m14-aten"]


# -- --input-permutation --------------------------------------------------------------------

def test_input_permutation_refused():
    with pytest.raises(SignatureError) as e:
        parse_command("layernorm -X 10x32x42x32 -F 14 -m 1 --input-permutation 0 2 1 3 --use-aten 1")
    assert str(e.value) == (
        "--input-permutation 0 2 1 3 is not supported: boo-build builds kernels for contiguous inputs only "
        "(the loader copies an input of any other layout to a contiguous one); drop the flag, "
        "or give the identity 0 1 2 3")
    with pytest.raises(SignatureError, match="--input-permutation 0 2 3 1 is not supported.*identity 0 1 2 3"):
        parse_command("groupnorm -n 2 -c 8 -g 2 --input-permutation 0 2 3 1")


def test_input_permutation_identity_is_a_no_op():
    base = parse_command("layernorm -X 2x3x4 -F 2 -m 1")
    assert base is not None
    # the identity, no value (iree-turbine's default: the identity), and values ended by an ignored flag
    for flag in ("--input-permutation 0 1 2", "--input-permutation", "--input-permutation 0 1 2 -t 1"):
        req = parse_command(f"layernorm -X 2x3x4 {flag} -F 2 -m 1")
        assert req == base, flag
    # the values end at the next flag: -F is read, not taken as part of the permutation
    assert parse_command("layernorm -X 2x3x4 --input-permutation 0 1 2 -F 6 -m 1").signature.mask == 6


@pytest.mark.parametrize("flag, message", [
    ("--input-permutation 0 1", "--input-permutation 0 1 is not a permutation of 0..2 for the 3-d input 2x3x4"),
    ("--input-permutation 0 -1 2", "--input-permutation 0 -1 2 is not a permutation of 0..2 for the 3-d input 2x3x4"),
    ("--input-permutation 0 1 1", "--input-permutation 0 1 1 is not a permutation of 0..2"),
    ("--input-permutation=0,1,2",
     "--input-permutation takes integers, space-separated (e.g. --input-permutation 0 2 1), got '0,1,2'"),
    ("--input-permutation=0 1 2", "unexpected argument '1'"),  # after "=", one value (argparse's too)
])
def test_input_permutation_errors(flag, message):
    with pytest.raises(SignatureError) as e:
        parse_command(f"layernorm -X 2x3x4 {flag}")
    assert str(e.value).startswith(message)


# -- .tsv command files ---------------------------------------------------------------------

def test_tsv_manifest(tmp_path):
    p = tmp_path / "turbine-cmds.tsv"
    p.write_text("# a comment line\n"
                 "\n"
                 "layernorm\t--input\t10x32x42x32\t-t\t1\t--mode\t1\t--iter\t100\n"
                 "\tlayernormbfp16\t-X\t8x128x768\t-F\t14\t-m\t1\t--use-aten\t0  \r\n"  # stripped, as iree-turbine does
                 "layernorm\t-X\t4x8\t--use-aten\t\t-F\t2\n")  # an empty field: --use-aten's value, false
    m = load_manifest(p)
    assert m.bundle == BundleSpec("turbine-cmds", "0.0.0", ("cpu",))
    assert sorted(mid.key for mid in m.module_ids) == [
        "layer_norm-bf16-8x128x768-n768-wb-m14-manual",
        "layer_norm-f32-10x32x42x32-n32-wb-m1-aten",
        "layer_norm-f32-10x32x42x32-n32-wb-m1-manual",
        "layer_norm-f32-4x8-n8-nw-m2-manual",
    ]


def test_tsv_fields_are_taken_as_written():
    # no shell quoting and no comment after a field: each field is one argument, as iree-turbine splits them
    with pytest.raises(SignatureError, match="--use-aten \"''\" is neither true nor false"):
        parse_command("layernorm\t-X\t4x8\t--use-aten\t''", tsv=True)
    with pytest.raises(SignatureError, match="unexpected argument '# note'"):
        parse_command("layernorm\t-X\t4x8\t# note", tsv=True)


def test_tsv_errors_with_line_numbers(tmp_path):
    p = tmp_path / "cmds.tsv"
    p.write_text("layernorm\t-X\t4x8\n"
                 "layernorm -X 4x8 -F 2\n"
                 "layernorm\t-X 4x8\n"
                 "layernorm\t-X\t4x8\t--input-permutation\t1\t0\n")
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    errs = e.value.errors
    assert len(errs) == 3
    assert errs[0].startswith(f"{p}:2: unknown command 'layernorm -X 4x8 -F 2'")
    assert errs[0].endswith("(a .tsv file separates arguments with tabs, and 'layernorm -X 4x8 -F 2' holds "
                            "spaces: separate them with tabs, or use a .txt file)")
    assert errs[1].startswith(f"{p}:3: unknown flag '-X 4x8' for layernorm")
    assert errs[2].startswith(f"{p}:4: --input-permutation 1 0 is not supported")


def test_unknown_suffix_names_the_command_files(tmp_path):
    p = tmp_path / "cmds.csv"
    p.write_text("layernorm,-X,4x8\n")
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    assert e.value.errors == [f"{p}: unknown manifest type '.csv': use .toml, or .txt / .tsv for driver command lines"]


# -- against iree-turbine's own parser ---------------------------------------------------------

AGREED = [
    # iree-turbine 3.9.0 inverts -m (fixed upstream in #1306): what -m means is not compared
    ["layernorm", "--input", "10x32x42x32", "-F", "14", "-m", "1", "--use-aten", "1"],
    ["layernormbfp16", "-X", "8x128x768", "-o", "2", "--input-permutation", "0", "1", "2", "-e", "1e-6"],
    ["layernormfp16", "--input=2x3x4x5", "--use-aten", "", "--input-permutation", "-F", "2"],
    ["layernorm", "-X", "2x3x4x5", "--input-permutation", "0", "2", "1", "3", "-F", "2", "--use-aten", "1"],
    ["layernorm", "-X", "2x3x4x5", "--use-aten=true", "-F", "1", "--input-permutation", "0", "1", "2", "3"],
]


@pytest.mark.parametrize("args", AGREED)
def test_same_reading_as_iree_turbine(args):
    """What iree-turbine's own LayerNormParser (the installed release) reads from
    a line, as a command and as a .tsv line, is read the same here: shape,
    normalized shape, eps, mask, ``--use-aten`` (for values both read alike) and
    ``--input-permutation``'s values (the identity accepted, another refused)."""
    layer_norm = pytest.importorskip("iree.turbine.kernel.boo.op_exports.layer_norm")
    ns = layer_norm.LayerNormParser.get_miopen_parser().parse_args(args)
    theirs = layer_norm.LayerNormParser.get_signature(ns)
    for tsv, text in ((False, shlex.join(args)), (True, "\t".join(args))):
        if theirs.input_permutation != list(range(len(theirs.input_shape))):
            written = " ".join(map(str, theirs.input_permutation))
            with pytest.raises(SignatureError, match=f"^--input-permutation {written} is not supported"):
                parse_command(text, tsv=tsv)
            continue
        req = parse_command(text, tsv=tsv)
        assert req is not None
        ours = req.signature
        assert (list(ours.input_shape), list(ours.normalized_shape), ours.eps, ours.mask) == \
            (theirs.input_shape, theirs.normalized_shape, theirs.eps, int(theirs.mode))
        # without the flag iree-turbine runs aten; a manifest builds both, the faster one ships
        if "--use-aten" in args:
            assert req.impls == (("aten",) if theirs.use_aten else ("manual",))
