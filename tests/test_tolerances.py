"""Validation tolerances catch real errors: a perfect kernel (the float64
reference rounded to each output's dtype) passes ``compare`` while the same
outputs with one of them off by 5 % fail, at every dtype, for layer-norm and
RMS-norm forwards and backwards, on both validation cases (as drawn and with
the large mean offset), under the whole rule (the conditioning floor
considered). Where float32's own error is of the order of an output (RMS norm
of width 1), what the rule still catches."""

from __future__ import annotations

import pytest
import torch

from boo_build.dtypes import tolerance
from boo_build.signature import KernelSignature
from boo_build.stages import tolerances
from boo_build.stages.reference import formula_errors, reference
from boo_build.stages.tolerances import error_scale
from boo_build.stages.torch_modules import sample_args, torch_dtype
from boo_build.stages.validate import cases, compare, one_torch_thread

DTYPES = ("float32", "float16", "bfloat16")


def _sigs(dtype: str) -> list[KernelSignature]:
    ln = dict(op="layer_norm", input_shape=(4, 6, 32), normalized_shape=(32,), dtype=dtype)
    rms = dict(op="rms_norm", input_shape=(5, 48), normalized_shape=(48,), dtype=dtype, eps=1e-6, bias=False)
    return [KernelSignature(mask=1, **ln), KernelSignature(mask=14, **ln),
            KernelSignature(mask=1, **rms), KernelSignature(mask=6, **rms)]


def _perfect(sig: KernelSignature, seed: int, offset: float):
    """(name, dtype, what an exact kernel returns, float64 reference, the float32
    formula's error) per output."""
    args = sample_args(sig, seed, offset)
    ref = reference(sig, args)
    errs = formula_errors(sig, args, ref)
    return [(name, dt, r.to(torch_dtype(dt)), r, fe) for (name, _, dt), r, fe in zip(sig.outputs(), ref, errs)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_output_off_by_5_percent_fails_at_every_dtype(dtype):
    for sig in _sigs(dtype):
        for case, seed, offset in cases(sig):
            outs = _perfect(sig, seed, offset)
            for name, dt, got, ref, fe in outs:
                check = compare(name, case, got, ref, tolerance(dt), dt, fe)
                assert check.ok, f"{sig.op} mask {sig.mask} {case}: exact {name} rejected: {check.describe()}"
            for k, (name, dt, got, ref, fe) in enumerate(outs):
                wrong = (got.double() * 1.05).to(got.dtype)
                checks = [compare(n, case, wrong if i == k else g, r, tolerance(d), d, e)
                          for i, (n, d, g, r, e) in enumerate(outs)]
                assert [c.ok for c in checks] == [i != k for i in range(len(outs))], (
                    f"{sig.op} mask {sig.mask} {case}: {name} * 1.05 not caught alone: "
                    + "; ".join(c.describe() for c in checks))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_rule_does_not_depend_on_the_output_magnitude(dtype):
    """An output and its error scaled together get the same verdict: a small
    output (a mean near 0, a gradient of a small loss) is held to the same
    relative standard as a large one."""
    tol = tolerance(dtype)
    ref = torch.randn(64, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    wrong = ref * 1.05
    for c in (1e-3, 1.0, 1e3):
        check = compare("output", "seed0", wrong * c, ref * c, tol, dtype)
        assert not check.ok and check.ratio == pytest.approx(
            compare("output", "seed0", wrong, ref, tol, dtype).ratio, rel=1e-9)
    assert error_scale(ref * 1e-3) == pytest.approx(1e-3 * error_scale(ref))
    assert error_scale(torch.zeros(3, dtype=torch.float64)) == 1.0  # nothing to be relative to


def test_the_conditioning_floor():
    """``tolerances.floor``: the scale floor unless the float32 formula's error
    (times FACTOR, and at least FACTOR times the dtype's spacing at 0) is larger."""
    tol = tolerance("float32")
    assert tolerances.floor(tol, 2.0, None, "float32") == (2e-4, tolerances.SCALE)
    assert tolerances.floor(tol, 2.0, 1e-5, "float32") == (2e-4, tolerances.SCALE)
    assert tolerances.floor(tol, 2.0, 1e-3, "float32") == (tolerances.FACTOR * 1e-3, tolerances.CONDITIONING)
    # float16 cannot hold 2e-8: a gradient that small comes back as 0
    f16 = tolerance("float16")
    assert tolerances.floor(f16, 1e-8, 0.0, "float16") == (tolerances.FACTOR * 2.0 ** -24, tolerances.CONDITIONING)
    assert compare("grad_input", "seed0", torch.zeros(1, dtype=torch.float16),
                   torch.tensor([2.3e-8], dtype=torch.float64), f16, "float16", 0.0).ok
    assert not compare("grad_input", "seed0", torch.zeros(1, dtype=torch.float16),
                       torch.tensor([2.3e-8], dtype=torch.float64), f16, "float16").ok  # scale floor alone


def test_formula_errors_are_float32_sized_and_reproducible():
    """The float32 formula's error: on a well-conditioned output, even at the
    mean offset, FACTOR times it stays below the scale floor (which decides); large next to an ill-conditioned one
    (layer norm of width 2 at a mean offset: the input gradient is tiny); the
    same figures on every run and at any torch thread count."""
    wide = KernelSignature("layer_norm", (4, 6, 32), (32,), "float32", 14)
    args = sample_args(wide, 0, 100.0)
    ref = reference(wide, args)
    for (name, _, dt), r, fe in zip(wide.outputs(), ref, formula_errors(wide, args, ref)):
        assert 0 < tolerances.FACTOR * fe < tolerance(dt).atol * error_scale(r), name
    narrow = KernelSignature("layer_norm", (1, 2), (2,), "float32", 14)
    args = sample_args(narrow, 0, 100.0)
    ref = reference(narrow, args)
    fe = formula_errors(narrow, args, ref)
    assert fe[0] > 10 * tolerance("float32").atol * error_scale(ref[0])  # grad_input: the scale floor is out of reach
    assert fe == formula_errors(narrow, args, ref) == formula_errors(narrow, args)
    big = KernelSignature("layer_norm", (32768, 2), (2,), "float32", 14)  # reductions torch splits over threads
    args = sample_args(big, 0, 100.0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with one_torch_thread():
            two = formula_errors(big, args)
        torch.set_num_threads(1)
        one = formula_errors(big, args)
    finally:
        torch.set_num_threads(before)
    assert one == two


@pytest.mark.parametrize("dtype", DTYPES)
def test_what_rms_norm_of_width_1_still_catches(dtype):
    """RMS norm of width 1: the input gradient is ``gy * w * rstd * eps / (x**2 +
    eps)``, below float32's resolution of the terms that cancel in it, so it
    passes when 5 % off, or 0; a gradient missing its projection term fails,
    and every other output (output, rstd, weight gradient) still fails 5 % off."""
    forward = KernelSignature("rms_norm", (1,), (1,), dtype, 1, eps=1e-6, bias=False)
    backward = forward.replace(mask=6)
    for sig in (forward, backward):
        for case, seed, offset in cases(sig):
            for name, dt, got, ref, fe in _perfect(sig, seed, offset):
                def check(value):
                    return compare(name, case, value.to(got.dtype), ref, tolerance(dt), dt, fe)

                assert check(got).ok, (name, case)
                if name == "grad_input":
                    assert check(ref * 1.05).ok and check(ref * 0).ok
                    assert check(ref * 1.05).bound == tolerances.CONDITIONING
                    gy, x, _, w = (a.double() for a in sample_args(sig, seed, offset))
                    no_projection = gy * w / torch.sqrt(x * x + sig.eps)
                    assert not check(no_projection).ok, (name, case)
                else:
                    assert not check(ref * 1.05).ok, (name, case)
