"""KernelSignature / ModuleId: keys, parsing, JSON, digests, masks, arity."""

from __future__ import annotations

import json
import re

import pytest

from boo_build.errors import SignatureError
from boo_build.ops.base import IMPLS
from boo_build.signature import ALL_MASKS, KernelSignature, ModuleId, dumps, function_name


def sig(**kw) -> KernelSignature:
    base = dict(op="layer_norm", input_shape=(8, 128, 768), normalized_shape=(768,),
                dtype="float32", mask=1)
    base.update(kw)
    return KernelSignature(**base)


def many_signatures() -> list[KernelSignature]:
    out = []
    for op, affine, bias in [("layer_norm", True, True), ("layer_norm", True, False),
                             ("layer_norm", False, False), ("rms_norm", True, False),
                             ("rms_norm", False, False)]:
        for mask in ALL_MASKS[op]:
            if (mask & 4 and not affine) or (mask & 8 and not bias):
                continue
            for dtype in ("float32", "float16", "bfloat16"):
                for eps in (1e-5, 1e-6, 1.5e-3, 0.1):
                    for stats in (None, "float16", "bfloat16"):
                        for shape, norm in [((8, 128, 768), (768,)), ((10, 32, 42, 32), (42, 32)),
                                            ((7,), (7,))]:
                            out.append(KernelSignature(
                                op=op, input_shape=shape, normalized_shape=norm, dtype=dtype,
                                mask=mask, eps=eps, affine=affine, bias=bias, stats_dtype=stats))
    return out


SIGS = many_signatures()


# -- key format -----------------------------------------------------------------

def test_key_example():
    s = KernelSignature(op="layer_norm", input_shape=(8, 128, 768), normalized_shape=(768,),
                        dtype="bfloat16", mask=14)
    assert s.key == "layer_norm-bf16-8x128x768-n768-wb-m14"
    assert str(s) == s.key


@pytest.mark.parametrize("kw, key", [
    (dict(), "layer_norm-f32-8x128x768-n768-wb-m1"),
    (dict(dtype="fp16"), "layer_norm-f16-8x128x768-n768-wb-m1"),
    (dict(bias=False), "layer_norm-f32-8x128x768-n768-w-m1"),
    (dict(affine=False, bias=False, mask=2), "layer_norm-f32-8x128x768-n768-nw-m2"),
    (dict(eps=1e-6), "layer_norm-f32-8x128x768-n768-wb-eps1em06-m1"),
    (dict(eps=0.001), "layer_norm-f32-8x128x768-n768-wb-eps0.001-m1"),
    (dict(stats_dtype="bf16"), "layer_norm-f32-8x128x768-n768-wb-sbf16-m1"),
    (dict(stats_dtype="float32"), "layer_norm-f32-8x128x768-n768-wb-m1"),
    (dict(stats_dtype="f16", eps=1e-6, mask=6),
     "layer_norm-f32-8x128x768-n768-wb-sf16-eps1em06-m6"),
    (dict(input_shape=(10, 32, 42, 32), normalized_shape=(42, 32)),
     "layer_norm-f32-10x32x42x32-n42x32-wb-m1"),
    (dict(op="rms_norm", bias=False, dtype="bf16", input_shape=(2, 128, 4096),
          normalized_shape=4096, eps=1e-6, mask=6),
     "rms_norm-bf16-2x128x4096-n4096-w-eps1em06-m6"),
])
def test_key_format(kw, key):
    assert sig(**kw).key == key


def test_dtype_aliases_canonicalise():
    keys = {sig(dtype=d).key for d in ("bfloat16", "bf16", "BF16", "bfp16")}
    assert keys == {"layer_norm-bf16-8x128x768-n768-wb-m1"}
    assert sig(dtype="bf16") == sig(dtype="bfloat16")
    assert sig(dtype="half").dtype == "float16"
    assert sig(normalized_shape=768) == sig(normalized_shape=[768])


def test_default_stats_dtype_is_float32():
    for d in ("float32", "float16", "bfloat16"):
        assert sig(dtype=d).stats_dtype == "float32"
        assert sig(op="rms_norm", bias=False, dtype=d).stats_dtype == "float32"


# -- parse / JSON round trips -------------------------------------------------------

def test_many_signatures_are_distinct():
    assert len(SIGS) > 1000
    assert len({s.key for s in SIGS}) == len(SIGS)
    assert len({s.digest for s in SIGS}) == len(SIGS)


@pytest.mark.parametrize("s", SIGS[::7], ids=lambda s: s.key)
def test_parse_round_trip(s):
    parsed = KernelSignature.parse(s.key)
    assert parsed == s
    assert parsed.key == s.key


def test_parse_round_trip_all():
    for s in SIGS:
        assert KernelSignature.parse(s.key) == s


def test_json_round_trip():
    for s in SIGS[::5]:
        data = json.loads(dumps(s.to_json()))
        assert data["key"] == s.key
        assert data["input_shape"] == list(s.input_shape)
        assert KernelSignature.from_json(data) == s


def test_from_json_rejects_mismatched_key():
    data = sig().to_json()
    data["key"] = sig(mask=2).key
    with pytest.raises(SignatureError, match="does not match"):
        KernelSignature.from_json(data)


@pytest.mark.parametrize("key, match", [
    ("layer_norm-f32-8x128x768", "too few fields"),
    ("layer_norm-f8-8x128x768-n768-wb-m1", "unknown dtype code"),
    ("layer_norm-f32-8x128x768-768-wb-m1", "expected n<normalized shape>"),
    ("layer_norm-f32-8x128x768-n768-ww-m1", "expected wb, w or nw"),
    ("layer_norm-f32-8x128x768-n768-wb-q1", "unknown field"),
    ("layer_norm-f32-8x128x768-n768-wb-sf16", "no m<mask> field"),
    ("layer_norm-f32-8x128x768-n768-wb-eps1em05-m1", "not canonical"),
    ("layer_norm-f32-8x128x768-n768-wb-sf32-m1", "not canonical"),
    ("layer_norm-f32-8x128x768-n768-wb-m1-eps1em06", "not canonical"),
    ("layer_norm-f32-8xax768-n768-wb-m1", "bad shape"),  # names are capitals in keys
    ("softmax-f32-8x128x768-n768-wb-m1", "unknown op"),
    ("layer_norm-f32-8x128x768-n128-wb-m1", "not a suffix"),
])
def test_parse_rejects(key, match):
    with pytest.raises(SignatureError, match=match):
        KernelSignature.parse(key)


# -- digest -----------------------------------------------------------------------

def test_digest_stable_and_short():
    s = sig(dtype="bf16", mask=14)
    assert re.fullmatch(r"[0-9a-f]{12}", s.digest)
    assert s.digest == sig(dtype="bfloat16", mask=14).digest
    assert s.digest == KernelSignature.parse(s.key).digest
    # sha256 of the key, pinned so a change to hashing is noticed
    import hashlib
    assert s.digest == hashlib.sha256(b"layer_norm-bf16-8x128x768-n768-wb-m14").hexdigest()[:12]


# -- ModuleId ---------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_module_id_key_and_parse(impl):
    s = sig(dtype="bf16", mask=14)
    mid = ModuleId(s, impl)
    assert mid.key == f"layer_norm-bf16-8x128x768-n768-wb-m14-{impl}"
    assert ModuleId.parse(mid.key) == mid
    assert str(mid) == mid.key


def test_module_id_keys_end_with_impl():
    assert ModuleId(sig(), "aten").key.endswith("-aten")
    assert ModuleId(sig(), "manual").key.endswith("-manual")


def test_module_id_unknown_impl():
    with pytest.raises(SignatureError, match="unknown implementation 'triton'"):
        ModuleId(sig(), "triton")
    with pytest.raises(SignatureError):
        ModuleId.parse(sig().key + "-triton")


def test_func_name_is_identifier():
    for s in SIGS[::3]:
        for impl in IMPLS:
            mid = ModuleId(s, impl)
            assert mid.func_name.isidentifier(), mid.func_name
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", mid.func_name)
    assert function_name("layer_norm-f32-8x768-n768-wb-eps0.001-m1-aten") == \
        "layer_norm_f32_8x768_n768_wb_eps0p001_m1_aten"


def test_func_names_unique():
    names = {ModuleId(s, i).func_name for s in SIGS for i in IMPLS}
    assert len(names) == 2 * len(SIGS)


# -- masks --------------------------------------------------------------------------

def test_all_masks():
    assert ALL_MASKS["layer_norm"] == (1, 2, 4, 6, 8, 10, 12, 14)
    assert ALL_MASKS["rms_norm"] == (1, 2, 4, 6)


INVALID = [
    (op, m) for op in ("layer_norm", "rms_norm") for m in range(0, 33) if m not in ALL_MASKS[op]
]


@pytest.mark.parametrize("op, mask", INVALID)
def test_invalid_masks_raise(op, mask):
    bias = op == "layer_norm"
    with pytest.raises(SignatureError) as e:
        sig(op=op, bias=bias, mask=mask)
    msg = str(e.value)
    assert f"mask {mask} is invalid for {op}" in msg
    assert "valid masks: " + ", ".join(map(str, ALL_MASKS[op])) in msg


@pytest.mark.parametrize("op, mask, why", [
    ("layer_norm", 0, "0 selects nothing"),
    ("layer_norm", 3, "forward (1) cannot be combined with gradients"),
    ("layer_norm", 15, "forward (1) cannot be combined"),
    ("layer_norm", 16, "only bits 1, 2, 4, 8 exist"),
    ("rms_norm", 0, "0 selects nothing"),
    ("rms_norm", 7, "forward (1) cannot be combined"),
    ("rms_norm", 8, "rms_norm has no bias gradient (8)"),
    ("rms_norm", 14, "rms_norm has no bias gradient (8)"),
    ("rms_norm", 16, "only bits 1, 2, 4, 8 exist"),
])
def test_invalid_mask_messages(op, mask, why):
    with pytest.raises(SignatureError, match=re.escape(why)):
        sig(op=op, bias=op == "layer_norm", mask=mask)


@pytest.mark.parametrize("kw, match", [
    (dict(affine=False, bias=False, mask=4), "asks for a weight gradient but affine = false"),
    (dict(affine=False, bias=False, mask=14), "weight gradient but affine = false"),
    (dict(bias=False, mask=8), "asks for a bias gradient but bias = false"),
    (dict(bias=False, mask=10), "bias gradient but bias = false"),
    (dict(op="rms_norm", affine=False, bias=False, mask=6), "weight gradient but affine = false"),
    (dict(affine=False, bias=True), "bias requires affine = true"),
    (dict(op="rms_norm", bias=True), "rms_norm has no bias"),
    (dict(mask=True), "mask must be an integer"),
    (dict(mask=1.0), "mask must be an integer"),
    (dict(op="softmax"), "unknown op 'softmax'"),
    (dict(dtype="float8"), "unknown dtype 'float8'"),
    (dict(stats_dtype="int8"), "unknown dtype 'int8'"),
    (dict(eps=0), "eps must be a positive finite number"),
    (dict(eps=-1e-5), "eps must be a positive finite number"),
    (dict(eps=float("inf")), "eps must be a positive finite number"),
    (dict(eps="x"), "eps must be a number"),
    (dict(input_shape=(8, 0, 768)), "input_shape must be a non-empty list of positive integers"),
    (dict(input_shape=(), normalized_shape=(768,)), "input_shape must be a non-empty"),
    (dict(normalized_shape=(-768,)), "normalized_shape must be a non-empty list of positive"),
    (dict(normalized_shape=(128,)), "is not a suffix of input_shape"),
    (dict(normalized_shape=(2, 8, 128, 768)), "is not a suffix"),
])
def test_invalid_fields(kw, match):
    with pytest.raises(SignatureError, match=re.escape(match)):
        sig(**kw)


# -- calling convention arity ----------------------------------------------------------

# (op, affine, bias, mask) -> (input names, output names)
ARITY = [
    ("layer_norm", True, True, 1, ("input", "weight", "bias"), ("output", "mean", "rstd")),
    ("layer_norm", True, False, 1, ("input", "weight"), ("output", "mean", "rstd")),
    ("layer_norm", False, False, 1, ("input",), ("output", "mean", "rstd")),
    ("layer_norm", True, True, 2, ("grad_output", "input", "mean", "rstd", "weight"), ("grad_input",)),
    ("layer_norm", False, False, 2, ("grad_output", "input", "mean", "rstd"), ("grad_input",)),
    ("layer_norm", True, True, 4, ("grad_output", "input", "mean", "rstd"), ("grad_weight",)),
    ("layer_norm", True, True, 6, ("grad_output", "input", "mean", "rstd", "weight"),
     ("grad_input", "grad_weight")),
    ("layer_norm", True, True, 8, ("grad_output", "input", "mean", "rstd"), ("grad_bias",)),
    ("layer_norm", True, True, 10, ("grad_output", "input", "mean", "rstd", "weight"),
     ("grad_input", "grad_bias")),
    ("layer_norm", True, True, 12, ("grad_output", "input", "mean", "rstd"),
     ("grad_weight", "grad_bias")),
    ("layer_norm", True, True, 14, ("grad_output", "input", "mean", "rstd", "weight"),
     ("grad_input", "grad_weight", "grad_bias")),
    ("rms_norm", True, False, 1, ("input", "weight"), ("output", "rstd")),
    ("rms_norm", False, False, 1, ("input",), ("output", "rstd")),
    ("rms_norm", True, False, 2, ("grad_output", "input", "rstd", "weight"), ("grad_input",)),
    ("rms_norm", False, False, 2, ("grad_output", "input", "rstd"), ("grad_input",)),
    ("rms_norm", True, False, 4, ("grad_output", "input", "rstd"), ("grad_weight",)),
    ("rms_norm", True, False, 6, ("grad_output", "input", "rstd", "weight"),
     ("grad_input", "grad_weight")),
]


@pytest.mark.parametrize("op, affine, bias, mask, ins, outs", ARITY)
def test_inputs_outputs(op, affine, bias, mask, ins, outs):
    s = KernelSignature(op=op, input_shape=(10, 32, 42, 32), normalized_shape=(42, 32),
                        dtype="bfloat16", mask=mask, affine=affine, bias=bias)
    assert tuple(n for n, _, _ in s.inputs()) == ins
    assert tuple(n for n, _, _ in s.outputs()) == outs
    shapes = {n: (shape, dt) for n, shape, dt in s.inputs() + s.outputs()}
    for n in ("input", "output", "grad_output", "grad_input"):
        if n in shapes:
            assert shapes[n] == ((10, 32, 42, 32), "bfloat16")
    for n in ("weight", "bias", "grad_weight", "grad_bias"):
        if n in shapes:
            assert shapes[n] == ((42, 32), "bfloat16")
    for n in ("mean", "rstd"):
        if n in shapes:
            assert shapes[n] == ((10, 32, 1, 1), "float32")


def test_arity_table_covers_every_valid_combination():
    seen = {(op, a, b, m) for op, a, b, m, _, _ in ARITY}
    for op, affine, bias in [("layer_norm", True, True), ("rms_norm", True, False)]:
        for m in ALL_MASKS[op]:
            assert (op, affine, bias, m) in seen


def test_derived_properties():
    s = sig(input_shape=(10, 32, 42, 32), normalized_shape=(42, 32), mask=14)
    assert s.rows == 320 and s.width == 42 * 32
    assert s.stats_shape == (10, 32, 1, 1)
    assert not s.is_forward and sig().is_forward
    assert s.affine_code == "wb"


def test_replace_and_ordering():
    s = sig()
    assert s.replace(mask=14).key.endswith("-m14")
    with pytest.raises(SignatureError):
        s.replace(mask=3)
    assert sorted([sig(mask=2), sig(mask=1)])[0] == sig(mask=1)
    assert hash(sig(dtype="bf16")) == hash(sig(dtype="bfloat16"))
