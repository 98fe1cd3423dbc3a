"""Validation tolerances catch real errors: a perfect kernel (the float64
reference rounded to each output's dtype) passes ``compare`` while the same
outputs with one of them off by 5 % fail, at every dtype, for layer-norm and
RMS-norm forwards and backwards, on both validation cases (as drawn and with
the large mean offset)."""

from __future__ import annotations

import pytest
import torch

from boo_build.signature import KernelSignature
from boo_build.stages.reference import reference
from boo_build.stages.tolerances import error_scale, tolerance
from boo_build.stages.torch_modules import sample_args, torch_dtype
from boo_build.stages.validate import cases, compare

DTYPES = ("float32", "float16", "bfloat16")


def _sigs(dtype: str) -> list[KernelSignature]:
    ln = dict(op="layer_norm", input_shape=(4, 6, 32), normalized_shape=(32,), dtype=dtype)
    rms = dict(op="rms_norm", input_shape=(5, 48), normalized_shape=(48,), dtype=dtype, eps=1e-6, bias=False)
    return [KernelSignature(mask=1, **ln), KernelSignature(mask=14, **ln),
            KernelSignature(mask=1, **rms), KernelSignature(mask=6, **rms)]


def _perfect(sig: KernelSignature, seed: int, offset: float):
    """(name, dtype, what an exact kernel returns, float64 reference) per output."""
    ref = reference(sig, sample_args(sig, seed, offset))
    return [(name, dt, r.to(torch_dtype(dt)), r) for (name, _, dt), r in zip(sig.outputs(), ref)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_output_off_by_5_percent_fails_at_every_dtype(dtype):
    for sig in _sigs(dtype):
        for case, seed, offset in cases(sig):
            outs = _perfect(sig, seed, offset)
            for name, dt, got, ref in outs:
                check = compare(name, case, got, ref, tolerance(dt), dt)
                assert check.ok, f"{sig.op} mask {sig.mask} {case}: exact {name} rejected: {check.describe()}"
            for k, (name, dt, got, ref) in enumerate(outs):
                wrong = (got.double() * 1.05).to(got.dtype)
                checks = [compare(n, case, wrong if i == k else g, r, tolerance(d), d)
                          for i, (n, d, g, r) in enumerate(outs)]
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
