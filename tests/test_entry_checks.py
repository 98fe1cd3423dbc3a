"""Every problem of one manifest entry is reported together, each naming its
field; eps must be a real number (not a string or a bool), positive, finite."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ENTRY, errors_of, keys, load, one_error

from boo_build.errors import SignatureError
from boo_build.signature import KernelSignature


def entry_errors(tmp_path, body: str) -> list[str]:
    errs = errors_of(tmp_path, "[[kernels]]\n" + body)
    assert all(e.startswith(f"{tmp_path / 'm.toml'}: kernels[0]: ") for e in errs), errs
    return [e.split(": kernels[0]: ", 1)[1] for e in errs]


@pytest.mark.parametrize("dtype", ['"f8"', '["float32", "f8"]'])
def test_bad_dtype_does_not_hide_bad_masks(tmp_path, dtype):
    errs = entry_errors(tmp_path, ENTRY + f'dtype = {dtype}\nmasks = [3, 14]\n')
    assert len(errs) == 2, errs
    assert errs[0].startswith("unknown dtype 'f8': use one of float32, float16, bfloat16")
    assert errs[1].startswith("mask 3 is invalid for layer_norm")


def test_every_field_of_an_entry_is_reported(tmp_path):
    errs = entry_errors(tmp_path, (
        'op = "layer_norm"\ninput_shape = [8, 768]\nnormalized_shape = [8]\n'
        'dtype = "f8"\nstats_dtype = "int8"\neps = "1e-5"\nmasks = [16]\nimpls = ["triton"]\n'))
    assert len(errs) == 6, errs
    starts = ["unknown dtype 'f8'", "unknown stats_dtype 'int8'", "eps must be a number",
              "unknown implementation 'triton'", "mask 16 is invalid for layer_norm",
              "normalized_shape [8] is not a suffix of input_shape [8, 768]"]
    for e, s in zip(errs, starts):
        assert e.startswith(s), (e, s)


def test_cross_field_problems_reported_together(tmp_path):
    errs = entry_errors(tmp_path, 'op = "rms_norm"\ninput_shape = [8, 768]\nbias = true\n'
                                  'affine = false\nmasks = [4, 8]\n')
    assert errs == [
        "rms_norm has no bias: set bias = false",
        "mask 4 asks for a weight gradient but affine = false",
        "mask 8 is invalid for rms_norm: rms_norm has no bias gradient (8); valid masks: 1, 2, 4, 6",
    ]


@pytest.mark.parametrize("value, expect", [
    ('"1e-5"', "eps must be a number (int or float), got '1e-5'"),
    ("true", "eps must be a number (int or float), got True"),
    ("[1e-5]", "eps must be a number (int or float), got [1e-05]"),
    ("nan", "eps must be a positive finite number, got nan"),
    ("inf", "eps must be a positive finite number, got inf"),
    ("-1e-5", "eps must be a positive finite number, got -1e-05"),
    ("0", "eps must be a positive finite number, got 0"),
])
def test_eps_field(tmp_path, value, expect):
    err = one_error(tmp_path, "[[kernels]]\n" + ENTRY + f"eps = {value}\n")
    assert err == f"{tmp_path / 'm.toml'}: kernels[0]: {expect}"


def test_eps_int_and_float_accepted(tmp_path):
    m = load(tmp_path, "[[kernels]]\n" + ENTRY + "eps = 1\nmasks = [1]\n")
    assert keys(m) == ["layer_norm-f32-8x128x768-n768-wb-eps1.0-m1"]


@pytest.mark.parametrize("eps", ["1e-5", b"1e-5", True, None, [1e-5], complex(1e-5)])
def test_signature_refuses_eps_that_is_not_a_real_number(eps):
    # torch.ops.aten.native_layer_norm refuses a string eps too
    with pytest.raises(SignatureError, match=r"eps must be a number \(int or float\)"):
        KernelSignature("layer_norm", (4, 10), (10,), "float32", 1, eps=eps)


@pytest.mark.parametrize("eps", [1e-5, 1, np.float32(1e-5), np.float64(1e-6)])
def test_signature_accepts_real_eps(eps):
    sig = KernelSignature("layer_norm", (4, 10), (10,), "float32", 1, eps=eps)
    assert type(sig.eps) is float and sig.eps == float(eps)
