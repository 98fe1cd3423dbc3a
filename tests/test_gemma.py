"""RMS norm with a weight offset (Gemma's ``x * rsqrt(mean(x**2) + eps) * (1 + weight)``):
the signature field and its key, manifest errors, the module, every implementation's math.
transformers' Gemma traced, built, swapped and trained eagerly and compiled, and the bundle
format and the loader's calls of its kernels: tests/test_hand_written_norms.py."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import assert_close, errors_of

from boo_build.errors import SignatureError
from boo_build.loader.nn import RMSNorm
from boo_build.signature import KernelSignature

HIDDEN, HEADS, LAYERS, VOCAB = 64, 2, 2, 96
TRACED = ((2, 8), (1, 6))  # (batch, seq) the trace runs: two sizes, so the entries are dynamic
UNTRACED = (3, 5)


def _sig(**kw) -> KernelSignature:
    fields = dict(op="rms_norm", input_shape=(2, 8, 64), normalized_shape=(64,), dtype="bfloat16", mask=6,
                  eps=1e-6, bias=False, weight_offset=1.0)
    return KernelSignature(**{**fields, **kw})


# ------------------------------------------------------------ the signature
def test_the_offset_is_part_of_the_key_and_the_json():
    s = _sig()
    assert s.key == "rms_norm-bf16-2x8x64-n64-w-eps1em06-off1.0-m6"
    assert KernelSignature.parse(s.key) == s and KernelSignature.from_json(s.to_json()) == s
    assert _sig(weight_offset=-0.5).key.endswith("-offn0.5-m6") and _sig(weight_offset=2).weight_offset == 2.0
    assert KernelSignature.parse(_sig(weight_offset=-0.5).key).weight_offset == -0.5
    plain = _sig(weight_offset=0)
    assert "off" not in plain.key and "weight_offset" not in plain.to_json()  # as before the field existed
    assert plain != s and plain.key != s.key  # kernels of another offset never serve a call
    with pytest.raises(SignatureError, match="not canonical"):
        KernelSignature.parse("rms_norm-bf16-2x8x64-n64-w-eps1em06-off1-m6")
    for bad, why in ((float("nan"), "finite"), ("1", "a number"), (True, "a number")):
        with pytest.raises(SignatureError, match=why):
            _sig(weight_offset=bad)
    with pytest.raises(SignatureError, match="layer_norm takes no weight_offset"):
        KernelSignature("layer_norm", (2, 64), (64,), "float32", 1, weight_offset=1.0)
    with pytest.raises(SignatureError, match="needs a weight"):
        _sig(affine=False, mask=2)


def test_manifest_errors_name_a_bad_offset(tmp_path):
    entry = '[[kernels]]\nop = "{op}"\ninput_shape = [8, 64]\nweight_offset = {off}\n'
    (err,) = errors_of(tmp_path, entry.format(op="layer_norm", off=1.0))
    assert "layer_norm takes no weight_offset" in err and "remove it" in err, err
    (err,) = errors_of(tmp_path, entry.format(op="rms_norm", off='"one"'))
    assert "weight_offset must be a number" in err and "'one'" in err, err
    (err,) = errors_of(tmp_path, entry.format(op="rms_norm", off="inf"))
    assert "weight_offset must be a finite number" in err, err
    (err,) = errors_of(tmp_path, entry.format(op="rms_norm", off=1.0) + "affine = false\nmasks = [1, 2]\n")
    assert "weight_offset 1.0 needs a weight (affine = true)" in err, err


def test_nn_rmsnorm_with_an_offset_starts_at_the_identity_scale():
    m = RMSNorm(8, eps=1e-6, weight_offset=1.0)
    assert torch.equal(m.weight, torch.zeros(8)) and "weight_offset=1.0" in repr(m)
    assert torch.equal(RMSNorm(8).weight, torch.ones(8)) and "weight_offset" not in repr(RMSNorm(8))
    with pytest.raises(ValueError, match="needs a weight"):
        RMSNorm(8, weight_offset=1.0, elementwise_affine=False)
    assert copy.deepcopy(m).weight_offset == 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_implementation_and_variant_scales_by_offset_plus_weight(dtype):
    """Each export's torch code (both implementations; the CPU ``lanes`` forward, the GPU
    ``fused`` backward), run in torch, against the float64 reference of ``offset + weight``;
    and the plain norm's result is not within tolerance of it (the offset is not lost)."""
    from boo_build.ops.base import FUSED, LANES
    from boo_build.signature import ModuleId
    from boo_build.stages.reference import reference
    from boo_build.stages.torch_modules import make_module, sample_args

    for mask, variant in ((1, ""), (1, LANES), (6, ""), (6, FUSED), (2, FUSED), (4, "")):
        sig = _sig(dtype=dtype, mask=mask, input_shape=(4, 64))
        args = sample_args(sig, seed=1)
        expected = reference(sig, args)
        plain = reference(sig.replace(weight_offset=0.0), args)
        for impl in ("aten", "manual"):
            if variant and impl == "aten":
                continue
            with torch.no_grad():
                got = make_module(ModuleId(sig, impl), variant)(*args)
            for g, e in zip(got, expected):
                assert_close(g, e, dtype, f"{sig.key} {impl}+{variant}")
            if mask != 4:  # the weight gradient alone does not depend on the weight
                assert not torch.allclose(got[0].double(), plain[0], rtol=0.05, atol=0.05), (sig.key, impl, variant)
