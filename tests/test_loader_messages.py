"""The loader's argument errors: each allowed dtype named once; eps must be
a real number (torch refuses a string eps too)."""

from __future__ import annotations

import pytest
import torch

from boo_build.loader import open_bundle
from boo_build.loader.format import TargetRecord
from boo_build.signature import KernelSignature
from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
from boo_build.targets import catalogue


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A bundle with one (never loaded) kernel of another shape: every call
    here is checked and then misses, running torch eager instead."""
    d = tmp_path_factory.mktemp("messages")
    (d / "k.vmfb").write_bytes(b"never loaded")
    sig = KernelSignature("layer_norm", (2, 3), (3,), "float32", 1)
    vmfbs: dict[str, bytes] = {}
    impl = packed_impl(vmfbs, "cpu", sig, "manual", d / "k.vmfb")
    path = pack_bundle(d, name="messages", version="1.0.0", targets=[catalogue()["cpu"]],
                       kernels=[kernel_record(sig, {"cpu": TargetRecord.available("manual", {"manual": impl})})],
                       vmfbs=vmfbs, provenance={})
    return open_bundle(path, device="local-task", fallback="eager")


@pytest.mark.parametrize("dtype, expect", [
    (torch.float32, "expected torch.float32"),
    (torch.bfloat16, "expected torch.float32 or torch.bfloat16"),
])
def test_stats_dtype_error_names_each_dtype_once(bundle, dtype, expect):
    x = torch.randn(4, 10, dtype=dtype)
    rstd = torch.ones(4, 1)
    bad_mean = torch.zeros(4, 1, dtype=torch.float64)
    with pytest.raises(TypeError) as e:
        bundle.native_layer_norm_backward(x, x, [10], bad_mean, rstd, None, None, [True, False, False])
    assert str(e.value) == f"mean has dtype torch.float64, {expect}"


def test_string_eps_refused_like_torch(bundle):
    x = torch.randn(4, 10)
    with pytest.raises(RuntimeError, match="eps"):  # torch's own refusal
        torch.ops.aten.native_layer_norm(x, [10], None, None, "1e-5")
    for call in (lambda: bundle.native_layer_norm(x, [10], None, None, "1e-5"),
                 lambda: bundle.fused_rms_norm(x, [10], None, "1e-5")):
        with pytest.raises(ValueError, match=r"eps must be a number \(int or float\), got '1e-5'"):
            call()
    y, _, _ = bundle.native_layer_norm(x, [10], None, None, 1e-5)  # a number still runs (eager here)
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, [10], eps=1e-5))
