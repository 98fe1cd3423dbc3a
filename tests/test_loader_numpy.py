"""numpy arrays through every loader entry point: numpy in, numpy out
(bfloat16 as ml_dtypes.bfloat16), also in a process that cannot import torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
import torch
from helpers import REPO, _ln

from boo_build.loader import KernelNotFound, open_bundle

BF16 = ml_dtypes.bfloat16


def _cases(seed=0):
    rng = np.random.default_rng(seed)
    f32 = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    return {"x": f32(4, 6, 10), "w": f32(10), "b": f32(10), "gy": f32(4, 6, 10),
            "x16": f32(3, 37).astype(BF16), "w16": f32(37).astype(BF16), "gy16": f32(3, 37).astype(BF16)}


def _torch(a):
    a = np.array(a)  # a writable copy (kernel outputs may map read-only memory)
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == BF16 else torch.from_numpy(a)


def _assert_same(out, ref, what):
    """numpy results equal to the torch call's, dtype for dtype."""
    assert len(out) == len(ref), what
    for o, r in zip(out, ref):
        if r is None:
            assert o is None, what
            continue
        assert isinstance(o, np.ndarray), (what, type(o))
        assert o.dtype == (BF16 if r.dtype == torch.bfloat16 else r.numpy().dtype) and o.shape == tuple(r.shape), what
        assert np.array_equal(o.astype(np.float32), r.float().numpy(), equal_nan=True), what


def test_numpy_in_numpy_out(bundle):
    c = _cases()
    t = {k: _torch(v) for k, v in c.items()}
    y, mean, rstd = out = bundle.native_layer_norm(c["x"], 10, c["w"], c["b"])  # int normalized_shape, default eps
    _assert_same(out, bundle.native_layer_norm(t["x"], [10], t["w"], t["b"]), "layer norm")
    tm, tr = _torch(mean), _torch(rstd)
    for mask in ((True, True, True), (True, False, False)):
        bias, tbias = (c["b"], t["b"]) if mask[2] else (None, None)  # bias-free: the key is relaxed alike
        _assert_same(bundle.native_layer_norm_backward(c["gy"], c["x"], [10], mean, rstd, c["w"], bias, mask),
                     bundle.native_layer_norm_backward(t["gy"], t["x"], [10], tm, tr, t["w"], tbias, mask),
                     f"layer norm backward {mask}")
    _assert_same(bundle.native_layer_norm(c["x"], [10], None, c["b"]),  # a bias without a weight
                 bundle.native_layer_norm(t["x"], [10], None, t["b"]), "bias only")
    y16, rstd16 = out = bundle.fused_rms_norm(c["x16"], [37], c["w16"], 1e-5)
    _assert_same(out, bundle.fused_rms_norm(t["x16"], [37], t["w16"], 1e-5), "bf16 rms norm")
    _assert_same(bundle.fused_rms_norm_backward(c["gy16"], c["x16"], (37,), rstd16, c["w16"], eps=1e-5),
                 bundle.fused_rms_norm_backward(t["gy16"], t["x16"], (37,), _torch(rstd16), t["w16"], eps=1e-5),
                 "bf16 rms norm backward")
    _assert_same(bundle.run(_ln(1).key, c["x"], c["w"], c["b"]), (_torch(y), _torch(mean), _torch(rstd)), "run")
    xt = np.ascontiguousarray(c["x"].transpose(0, 2, 1)).transpose(0, 2, 1)  # not contiguous: copied
    assert not xt.flags.c_contiguous
    _assert_same(bundle.native_layer_norm(xt, [10], c["w"], c["b"]), (_torch(y), _torch(mean), _torch(rstd)),
                 "non-contiguous")


def test_numpy_argument_errors(bundle):
    x, w = np.zeros((4, 6, 10), np.float32), np.ones(10, np.float32)
    both = "pass all torch tensors or all numpy arrays"
    with pytest.raises(TypeError, match=f"^weight is a torch.Tensor but input is a numpy.ndarray: {both}$"):
        bundle.native_layer_norm(x, [10], torch.ones(10), None)
    with pytest.raises(TypeError, match=f"^bias is a numpy.ndarray but input is a torch.Tensor: {both}$"):
        bundle.native_layer_norm(torch.zeros(4, 6, 10), [10], torch.ones(10), w)
    with pytest.raises(TypeError, match=f"^rstd is a torch.Tensor but input is a numpy.ndarray: {both}$"):
        bundle.fused_rms_norm_backward(x, x, [10], torch.ones(4, 6, 1), w)
    with pytest.raises(TypeError, match=f"^grad_out is a torch.Tensor but input is a numpy.ndarray: {both}$"):
        bundle.native_layer_norm_backward(torch.zeros(4, 6, 10), x, [10], x[..., :1], x[..., :1], w)
    with pytest.raises(TypeError, match=f"^weight is a torch.Tensor but input is a numpy.ndarray: {both}$"):
        bundle.run(_ln(1).key, x, torch.ones(10), w)
    with pytest.raises(TypeError, match="^input must be a torch.Tensor or a numpy.ndarray, got list$"):
        bundle.native_layer_norm(x.tolist(), [10], w, w)
    with pytest.raises(TypeError, match="^weight has dtype float16, expected float32$"):
        bundle.native_layer_norm(x, [10], w.astype(np.float16), w)
    with pytest.raises(TypeError, match="^input has dtype float64: kernels take float32, float16 or bfloat16$"):
        bundle.native_layer_norm(x.astype(np.float64), [10], w, w)
    with pytest.raises(KernelNotFound, match=_ln(1).replace(bias=False).key):  # no weight-only kernel
        bundle.native_layer_norm(x, [10], w)


def test_numpy_eager_fallback_and_zero_size(built):
    b = open_bundle(built.path, device="local-task", fallback="eager")
    rng = np.random.default_rng(1)
    x, w, gy = (rng.standard_normal(s, dtype=np.float32) for s in ((2, 5, 10), (10,), (2, 5, 10)))
    out = b.native_layer_norm(x, [10], w, w)  # not in the bundle: torch eager on the arrays
    _assert_same(out, b.native_layer_norm(_torch(x), [10], _torch(w), _torch(w)), "eager layer norm")
    _assert_same(b.fused_rms_norm_backward(gy, x, [10], out[2], w), b.fused_rms_norm_backward(
        _torch(gy), _torch(x), [10], _torch(out[2]), _torch(w)), "eager rms backward")
    assert sum(v["misses"] for v in b.stats().values()) == 4
    b.reset_stats()
    z = np.zeros((0, 10), np.float32)
    _assert_same(b.native_layer_norm(z, [10], w, w), torch.ops.aten.native_layer_norm(
        _torch(z), [10], _torch(w), _torch(w), 1e-5), "zero-size layer norm")
    gx, gw, gb = b.native_layer_norm_backward(z, z, [10], z[:, :1], z[:, :1], w, w)
    assert gx.shape == (0, 10) and np.array_equal(gw, np.zeros(10, np.float32)) and gb.dtype == np.float32
    z16 = np.zeros((0, 37), BF16)
    y, rstd = b.fused_rms_norm(z16, [37], np.ones(37, BF16))
    assert (y.dtype, y.shape, rstd.dtype, rstd.shape) == (BF16, (0, 37), np.float32, (0, 1))
    assert b.stats() == {}


# Runs in a process where torch cannot be imported: a meta-path finder refuses
# it before anything is imported, checked by trying.
_NO_TORCH = textwrap.dedent('''
    import importlib.abc
    import sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
            return None

    sys.meta_path.insert(0, NoTorch())
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the block let torch in")

    import ml_dtypes
    import numpy as np
    from boo_build.loader import KernelNotFound, open_bundle

    BF16 = ml_dtypes.bfloat16
    b = open_bundle(sys.argv[1])
    d = dict(np.load(sys.argv[2]))
    for k in ("x16", "w16", "gy16"):
        d[k] = d[k].astype(BF16)  # saved as float32: exact
    checks = 0

    def same(got, *names):
        global checks
        assert len(got) == len(names), names
        for o, n in zip(got, names):
            want = d[n]
            assert isinstance(o, np.ndarray) and o.shape == want.shape, (n, type(o), getattr(o, "shape", None))
            assert np.array_equal(o.astype(np.float32), want.astype(np.float32), equal_nan=True), n
            checks += 1

    y, mean, rstd = b.native_layer_norm(d["x"], 10, d["w"], d["b"])
    same((y, mean, rstd), "y", "mean", "rstd")
    same(b.native_layer_norm_backward(d["gy"], d["x"], [10], mean, rstd, d["w"], d["b"], [True, True, True]),
         "gx", "gw", "gb")
    same(b.native_layer_norm_backward(d["gy"], d["x"], [10], mean, rstd, d["w"], None, [True, False, False])[:1],
         "gx2")
    same(b.native_layer_norm(d["x"], [10], None, d["b"]), "y_bias_only", "mean", "rstd")
    y16, rstd16 = b.fused_rms_norm(d["x16"], (37,), d["w16"], 1e-5)
    assert y16.dtype == BF16 and rstd16.dtype == np.float32
    same((y16, rstd16), "y16", "rstd16")
    same(b.fused_rms_norm_backward(d["gy16"], d["x16"], [37], rstd16, d["w16"], eps=1e-5), "gx16", "gw16")
    same(b.run(sys.argv[3], d["x"], d["w"], d["b"]), "y", "mean", "rstd")
    try:  # weight None: looked up as with torch
        b.native_layer_norm(d["x"], [10], None, None)
        raise AssertionError("no kernel without weight and bias, yet no error")
    except KernelNotFound:
        pass
    z = np.zeros((0, 10), np.float32)
    y, mean, rstd = b.native_layer_norm(z, [10], d["w"], d["b"])
    assert y.shape == (0, 10) and mean.shape == rstd.shape == (0, 1) and mean.dtype == np.float32
    gx, gw = b.fused_rms_norm_backward(z, z, [10], mean, d["w"])
    assert gx.shape == (0, 10) and np.array_equal(gw, np.zeros(10, np.float32))
    eager = open_bundle(sys.argv[1], fallback="eager")
    try:
        eager.native_layer_norm(d["x"][:2], [10], d["w"], d["b"])
        raise AssertionError("eager fallback without torch, yet no error")
    except ImportError as e:
        assert "fallback='eager' runs torch's op, but torch cannot be imported" in str(e), e
    assert not [m for m in sys.modules if m == "torch" or m.startswith("torch.")], "torch was imported"
    print("OK", checks)
''')


def test_numpy_without_torch(bundle, tmp_path):
    c = _cases(seed=2)
    t = {k: _torch(v) for k, v in c.items()}
    y, mean, rstd = bundle.native_layer_norm(t["x"], [10], t["w"], t["b"])
    gx, gw, gb = bundle.native_layer_norm_backward(t["gy"], t["x"], [10], mean, rstd, t["w"], t["b"])
    gx2 = bundle.native_layer_norm_backward(t["gy"], t["x"], [10], mean, rstd, t["w"], None, [True, False, False])[0]
    y_bias_only = bundle.native_layer_norm(t["x"], [10], None, t["b"])[0]
    y16, rstd16 = bundle.fused_rms_norm(t["x16"], [37], t["w16"], 1e-5)
    gx16, gw16 = bundle.fused_rms_norm_backward(t["gy16"], t["x16"], [37], rstd16, t["w16"], eps=1e-5)
    expected = dict(y=y, mean=mean, rstd=rstd, gx=gx, gw=gw, gb=gb, gx2=gx2, y_bias_only=y_bias_only,
                    y16=y16, rstd16=rstd16, gx16=gx16, gw16=gw16)
    arrays = {k: v.float().numpy() for k, v in expected.items()}
    arrays.update({k: v.astype(np.float32) for k, v in c.items()})
    np.savez(tmp_path / "cases.npz", **arrays)
    # -c: this checkout's boo_build comes first on sys.path (cwd), as in the tests' own process
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(bundle.path), str(tmp_path / "cases.npz"), _ln(1).key],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["OK", "17"]
