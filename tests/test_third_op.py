"""Adding an op touches boo_build/ops/ and tests only: this module defines a
third, trivial op (``scale_rows``: y = x * weight over the normalized dims),
registers it, builds it for the cpu target through the CLI and runs it
through the loader, checked against numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from boo_build import ops
from boo_build.cli import main
from boo_build.errors import SignatureError
from boo_build.loader import open_bundle
from boo_build.ops.base import INPUT_GRAD, WEIGHT_GRAD, Op
from boo_build.signature import KernelSignature


@dataclass(frozen=True)
class ScaleRows(Op):
    name: str = "scale_rows"
    masks: tuple[int, ...] = (1,)
    grads: tuple[int, ...] = (INPUT_GRAD, WEIGHT_GRAD)
    stats: tuple[str, ...] = ()
    has_bias: bool = False
    impls: tuple[str, ...] = ("manual",)

    def implementation(self, impl):
        def manual(m, x, w=None):
            y = x.to(m.compute) if w is None else x.to(m.compute) * w.to(m.compute)
            return (y.to(m.dtype),)

        return {"manual": manual}[impl]

    def forward64(self, sig, x, dims):
        return x, ()  # the reference applies the weight

    def eager_forward(self, sig, x, w, b):
        return (x if w is None else x * w,)

    def eager_backward(self, normalized_shape, mask, gy, x, w=None):
        # y = x * w: dx = gy * w, dw = gy * x summed over the rows
        lead = tuple(range(x.dim() - len(normalized_shape)))
        grads = {INPUT_GRAD: gy if w is None else gy * w, WEIGHT_GRAD: None if w is None else (gy * x).sum(lead)}
        return tuple(grads[bit] for bit in self.grads if mask & bit)

    def eager_call(self, sig, x, w, b, grad_out, compiled):
        return (lambda x, w: x if w is None else x * w), (x, w)


MANIFEST = """
[bundle]
name = "third-op"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "scale_rows"
input_shape = [4, 6, 32]
dtype = ["float32", "float16"]
"""


@pytest.fixture(scope="module")
def scale_rows():
    op = ops.register(ScaleRows())
    try:
        yield op
    finally:
        ops.unregister(op.name)
    assert "scale_rows" not in ops.names()


def test_the_op_joins_the_shared_vocabulary(scale_rows):
    sig = KernelSignature("scale_rows", (4, 6, 32), (32,), "float32", 1, bias=False)
    assert sig.key == "scale_rows-f32-4x6x32-n32-w-m1"
    assert KernelSignature.parse(sig.key) == sig
    assert sig.inputs() == (("input", (4, 6, 32), "float32"), ("weight", (32,), "float32"))
    assert sig.outputs() == (("output", (4, 6, 32), "float32"),)
    with pytest.raises(SignatureError, match="mask 2 is invalid for scale_rows"):
        KernelSignature("scale_rows", (4, 32), (32,), "float32", 2, bias=False)
    with pytest.raises(SignatureError, match="scale_rows has no bias"):
        KernelSignature("scale_rows", (4, 32), (32,), "float32", 1, bias=True)


@pytest.mark.build
def test_build_for_cpu_and_run_through_the_loader(scale_rows, tmp_path):
    manifest = tmp_path / "third.toml"
    manifest.write_text(MANIFEST)
    out = tmp_path / "out"
    rc = main(["build", str(manifest), "--targets", "cpu", "--no-bench", "--out", str(out), "-q"])
    assert rc == 0  # every kernel validated against the reference (a failed one would fail the build)
    bundle = open_bundle(out / "third-op-0.1.0.tar.zst", device="local-task")
    assert bundle.keys() == ["scale_rows-f16-4x6x32-n32-w-m1", "scale_rows-f32-4x6x32-n32-w-m1"]
    rng = np.random.default_rng(0)
    for dt, tol in (("float32", 1e-6), ("float16", 1e-3)):
        x = rng.standard_normal((4, 6, 32)).astype(dt)
        w = rng.standard_normal(32).astype(dt)
        (y,) = bundle.run(KernelSignature("scale_rows", (4, 6, 32), (32,), dt, 1, bias=False), x, w)
        assert isinstance(y, np.ndarray) and y.dtype == np.dtype(dt) and y.shape == x.shape
        np.testing.assert_allclose(y.astype(np.float64), x.astype(np.float64) * w.astype(np.float64), rtol=tol,
                                   atol=tol)
    assert bundle.stats(totals=True) == {"static_hits": 2, "dynamic_hits": 0, "misses": 0, "eager": 0}
    # the ATen-style entry points come from the registry: the built-in ops' are there, none for this op
    assert {"native_layer_norm", "fused_rms_norm_backward"} <= set(dir(bundle))
    assert bundle.native_layer_norm.__doc__.startswith("ATen's native_layer_norm")
    with pytest.raises(AttributeError, match="scale_rows"):
        bundle.scale_rows


def test_an_op_missing_a_hook_is_refused_where_it_is_made():
    """``Op``'s torch hooks are abstract: an op without one fails when it is made, not
    when a build first calls the hook."""

    hooks = ("implementation", "forward64", "eager_forward", "eager_backward")  # all but the benchmark's
    no_benchmark = dataclass(frozen=True)(type("NoBenchmark", (Op,), {h: vars(ScaleRows)[h] for h in hooks}))
    with pytest.raises(TypeError, match="abstract method.*eager_call"):
        no_benchmark(name="no_benchmark", masks=(1,), grads=(INPUT_GRAD,), stats=(), has_bias=False)


def test_registry_refuses_clashes(scale_rows):
    assert ops.get("scale_rows") is scale_rows and ops.names()[-1] == "scale_rows"
    ops.register(ScaleRows())  # the same op again: fine
    with pytest.raises(ValueError, match="already registered"):
        ops.register(ScaleRows(masks=(1, 2)))
    with pytest.raises(ops.UnknownOp, match="unknown op 'instance_norm': use one of layer_norm, rms_norm, group_norm, scale_rows"):
        ops.get("instance_norm")
