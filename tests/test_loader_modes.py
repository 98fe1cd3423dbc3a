"""A kernel's execution mode: a target entry's optional ``mode`` (the build
found the kernel faster on another driver of the same device, e.g. inline on
``local-sync`` rather than on ``local-task``'s worker pool) runs it on that
driver; one bundle, one process, both CPU devices."""

from __future__ import annotations

import pytest
import torch
from helpers import _ln, _rms32, with_modes, with_prefer_eager

from boo_build.loader import open_bundle

CANDIDATES = {"aten": {"median_s": 4.0e-05, "status": "slower", "reason": "slower: 40.0 us vs 9.0 us"},
              "manual": {"median_s": 3.0e-05, "status": "slower", "reason": "slower: 30.0 us vs 9.0 us"},
              "manual@local-sync": {"median_s": 9.0e-06, "status": "selected", "reason": ""}}


@pytest.fixture(scope="module")
def moded(built, tmp_path_factory):
    return with_modes(built.path, tmp_path_factory.mktemp("modes") / "modes.tar.zst",
                      {_ln(1).key: "local-sync", _rms32(1).key: "local-sync"}, CANDIDATES)


def test_one_bundle_runs_local_sync_and_local_task_kernels(moded):
    b = open_bundle(moded)  # the best device present: the CPU, on the target's driver
    assert b.target.name == "cpu" and b.device.uri == "local-task"
    fwd, bwd = _ln(1).key, _ln(14).key
    assert b.device_of(fwd) == "local-sync" and b.device_of(bwd) == "local-task"
    assert b.info()["kernels"][fwd]["cpu"] == {"status": "available", "selected": "manual", "mode": "local-sync"}
    assert "mode" not in b.info()["kernels"][bwd]["cpu"]

    g = torch.Generator().manual_seed(0)
    x, w, bias = torch.randn(4, 6, 10, generator=g), torch.randn(10, generator=g), torch.randn(10, generator=g)
    y, mean, rstd = b.native_layer_norm(x, (10,), w, bias, 1e-5)
    gy = torch.randn(4, 6, 10, generator=g)
    gx, gw, gb = b.native_layer_norm_backward(gy, x, (10,), mean, rstd, w, bias, (True, True, True))
    # the two kernels ran on two runtime devices of one process
    sync, task = b.load(fwd), b.load(bwd)
    assert (sync.device.uri, sync.device.driver, task.device.uri) == ("local-sync", "local-sync", "local-task")
    assert sync.device.hal_device is not task.device.hal_device and sync.device.threads() == 1
    assert b.stats() == {fwd: {"hits": 1, "misses": 0, "eager": 0}, bwd: {"hits": 1, "misses": 0, "eager": 0}}
    # results as torch's
    ry, rmean, rrstd = torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)
    rgx, rgw, rgb = torch.ops.aten.native_layer_norm_backward(gy, x, [10], mean, rstd, w, bias, [True] * 3)
    for out, ref in ((y, ry), (mean, rmean), (rstd, rrstd), (gx, rgx), (gw, rgw), (gb, rgb)):
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    # the other op's local-sync kernel shares the same local-sync device
    y2, _ = b.fused_rms_norm(x, (10,), w, torch.finfo(torch.float32).eps)
    torch.testing.assert_close(y2, torch.ops.aten._fused_rms_norm(x, [10], w, torch.finfo(torch.float32).eps)[0],
                               atol=1e-4, rtol=1e-4)
    assert b.load(_rms32(1).key).device.hal_device is sync.device.hal_device


def test_a_bundle_opened_on_local_sync_runs_everything_there(moded):
    b = open_bundle(moded, device="local-sync")
    assert {b.device_of(k) for k in b.keys()} == {"local-sync"}
    x = torch.randn(4, 6, 10)
    assert b.native_layer_norm(x, (10,), torch.ones(10), torch.zeros(10))[0].shape == (4, 6, 10)


def test_local_sync_results_stay_intact_while_held(moded):
    # the local-sync device reuses freed buffers (devices.LOCAL_SYNC_ALLOCATOR):
    # never one a caller still holds
    b = open_bundle(moded, device="local-sync")
    g = torch.Generator().manual_seed(3)
    w, bias = torch.randn(10, generator=g), torch.randn(10, generator=g)
    xs = [torch.randn(4, 6, 10, generator=g) * (i + 1) for i in range(6)]
    held = []
    for i, x in enumerate(xs):
        held.append(b.native_layer_norm(x, (10,), w, bias, 1e-5))
        if i % 2:
            held[i - 1] = None  # freed: its buffers go back to the cache
    for x, out in zip(xs, held):
        if out is not None:
            for o, r in zip(out, torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)):
                torch.testing.assert_close(o, r, atol=1e-4, rtol=1e-4)
    assert b.stats()[_ln(1).key]["hits"] == 6


def test_a_view_with_another_fallback_keeps_the_modes(moded):
    b = open_bundle(moded, device="local-task")
    v = b.with_fallback("eager")
    assert v.device_of(_ln(1).key) == "local-sync" and v.load(_ln(1).key) is b.load(_ln(1).key)
    x = torch.randn(4, 6, 10)
    v.native_layer_norm(x, (10,), torch.ones(10), torch.zeros(10))
    assert v.stats()[_ln(1).key]["hits"] == 1  # views share the counts


def test_an_unknown_mode_runs_on_the_targets_driver(built, tmp_path):
    # a mode this loader does not know (a newer build's): the same vmfb on the target's driver
    p = with_modes(built.path, tmp_path / "future.tar.zst", {_ln(1).key: "local-future"})
    b = open_bundle(p, device="local-task")
    assert b.device_of(_ln(1).key) == "local-task"
    y = b.native_layer_norm(torch.randn(4, 6, 10), (10,), torch.ones(10), torch.zeros(10))[0]
    assert y.shape == (4, 6, 10)


def test_a_bundle_without_modes_runs_as_before(bundle):
    assert {bundle.device_of(k) for k in bundle.keys()} == {"local-task"}
    assert all("mode" not in e["cpu"] for e in bundle.info()["kernels"].values())


def test_torch_tensors_go_to_torch_eager_where_the_build_found_it_faster(built, tmp_path):
    import numpy as np

    fwd, bwd = _ln(1).key, _ln(14).key
    p = with_prefer_eager(built.path, tmp_path / "eager.tar.zst", [fwd])
    b = open_bundle(p, device="local-task")
    assert b.info()["kernels"][fwd]["cpu"]["prefer_eager"] is True
    assert "prefer_eager" not in b.info()["kernels"][bwd]["cpu"]
    g = torch.Generator().manual_seed(0)
    x, w, bias = torch.randn(4, 6, 10, generator=g), torch.randn(10, generator=g), torch.randn(10, generator=g)
    y, mean, rstd = b.native_layer_norm(x, (10,), w, bias, 1e-5)
    ry, rmean, rrstd = torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)
    assert torch.equal(y, ry) and torch.equal(mean, rmean) and torch.equal(rstd, rrstd)  # torch's own op ran
    b.native_layer_norm_backward(torch.ones_like(x), x, (10,), mean, rstd, w, bias, (True, True, True))
    assert b.stats() == {fwd: {"hits": 0, "misses": 0, "eager": 1}, bwd: {"hits": 1, "misses": 0, "eager": 0}}
    # numpy arrays run the kernel (torch may not be there); so does run(), the raw kernel call
    yn = b.native_layer_norm(x.numpy(), (10,), w.numpy(), bias.numpy(), 1e-5)[0]
    yk = b.run(fwd, x, w, bias)[0]
    assert b.stats()[fwd] == {"hits": 2, "misses": 0, "eager": 1}
    np.testing.assert_allclose(yn, ry.numpy(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(yk, ry, atol=1e-4, rtol=1e-4)
    # opened with prefer_eager=False, torch tensors run the kernel too
    k = open_bundle(p, device="local-task", prefer_eager=False)
    k.native_layer_norm(x, (10,), w, bias, 1e-5)
    assert k.stats()[fwd] == {"hits": 1, "misses": 0, "eager": 0}


def test_routed_calls_repeat_without_checks_and_a_changed_call_is_checked_again(built, tmp_path):
    """After a key's first (checked) call, torch eager serves it from the key alone:
    forward and backward, any memory layout; a call with another key is checked."""
    fwd, bwd = _ln(1).key, _ln(14).key
    b = open_bundle(with_prefer_eager(built.path, tmp_path / "eager.tar.zst", [fwd, bwd]), device="local-task")
    g = torch.Generator().manual_seed(1)
    x, w, bias = torch.randn(4, 6, 10, generator=g), torch.randn(10, generator=g), torch.randn(10, generator=g)
    gy = torch.randn(4, 6, 10, generator=g)
    checked = []  # calls that went through the checks
    for name in ("prepare", "prepare_backward"):
        real = getattr(b.checks, name)
        setattr(b.checks, name, lambda *a, _real=real, _name=name, **kw: checked.append(_name) or _real(*a, **kw))
    ref = torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)
    ref_grads = torch.ops.aten.native_layer_norm_backward(gy, x, [10], ref[1], ref[2], w, bias, [True] * 3)
    for _ in range(3):
        out = b.native_layer_norm(x, (10,), w, bias, 1e-5)
        assert all(torch.equal(o, r) for o, r in zip(out, ref))
        grads = b.native_layer_norm_backward(gy, x, (10,), out[1], out[2], w, bias, (True, True, True))
        assert all(torch.equal(o, r) for o, r in zip(grads, ref_grads))
    assert checked == ["prepare", "prepare_backward", "prepare"]  # first calls only (backward checks run prepare)
    # the same key, another memory layout: torch takes it as it is
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)
    assert not xt.is_contiguous()
    assert torch.equal(b.native_layer_norm(xt, (10,), w, bias, 1e-5)[0], ref[0])
    assert b.stats() == {fwd: {"hits": 0, "misses": 0, "eager": 4}, bwd: {"hits": 0, "misses": 0, "eager": 3}}
    # another key (a float64 weight) goes through the checks, which refuse it
    with pytest.raises(TypeError, match="weight has dtype torch.float64"):
        b.native_layer_norm(x, (10,), w.double(), bias, 1e-5)
    # the counts stay exact past the pending-hits limit
    from boo_build.loader.memo import MEMO_LIMIT

    b.reset_stats()
    for _ in range(MEMO_LIMIT + 5):
        b.native_layer_norm(x, (10,), w, bias, 1e-5)
    assert b.stats()[fwd] == {"hits": 0, "misses": 0, "eager": MEMO_LIMIT + 5}

def test_routed_backward_takes_statistics_in_any_layout_and_the_mask_as_a_list(built, tmp_path):
    """A routed backward key decides once whether its statistics need a reshape
    (the key pins their shape): both layouts give ATen's gradients; an output mask
    given as a list is the key of the same mask given as a tuple (checked once)."""
    fwd, bwd = _ln(1).key, _ln(14).key
    b = open_bundle(with_prefer_eager(built.path, tmp_path / "eager.tar.zst", [fwd, bwd]), device="local-task")
    g = torch.Generator().manual_seed(2)
    x, w, bias = torch.randn(4, 6, 10, generator=g), torch.randn(10, generator=g), torch.randn(10, generator=g)
    gy = torch.randn(4, 6, 10, generator=g)
    _, mean, rstd = b.native_layer_norm(x, (10,), w, bias, 1e-5)
    ref = torch.ops.aten.native_layer_norm_backward(gy, x, [10], mean, rstd, w, bias, [True] * 3)
    checked = []
    real = b.checks.prepare_backward
    b.checks.prepare_backward = lambda *a, **kw: checked.append(tuple(a[5][0].shape)) or real(*a, **kw)
    for stats in ((mean, rstd), (mean.reshape(-1), rstd.reshape(-1))):
        for mask in ([True, True, True], (True, True, True), [True, True, True]):
            grads = b.native_layer_norm_backward(gy, x, (10,), *stats, w, bias, mask)
            assert all(torch.equal(o, r) for o, r in zip(grads, ref))
    assert checked == [(4, 6, 1), (24,)]  # once per statistics layout
    assert b.stats()[bwd] == {"hits": 0, "misses": 0, "eager": 6}
    with pytest.raises(ValueError, match="output_mask must have 3 booleans"):
        b.native_layer_norm_backward(gy, x, (10,), mean, rstd, w, bias, [True, True])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_routed_half_precision_call_runs_atens_mixed_type_kernels(dtype):
    """A routed half-precision layer norm with a weight runs ATen's mixed-type
    kernels: the forward's output bit for bit ATen's, its statistics float32,
    not ATen's half ones cast (closer to float64's), and the backward on the
    float32 statistics as given (an input gradient closer to float64's than
    ATen's all-half one)."""
    from boo_build.ops.layer_norm import LAYER_NORM
    from boo_build.signature import KernelSignature

    dt, code = getattr(torch, dtype), {"bfloat16": "bf16", "float16": "f16"}[dtype]
    aten = torch.ops.aten

    def err(got, ref):
        return float((got.double() - ref).norm() / ref.norm())

    for rows in (4096, 37):
        fwd = KernelSignature.parse(f"layer_norm-{code}-{rows}x64-n64-wb-m1")
        g = torch.Generator().manual_seed(rows)
        x, w, b, gy = (torch.randn(s, generator=g).to(dt) for s in ((rows, 64), (64,), (64,), (rows, 64)))
        x = x + 16  # an offset: statistics rounded to half lose digits
        y, mean, rstd = LAYER_NORM.eager_route(fwd)(x, w, b)
        ry, rmean, rrstd = aten.native_layer_norm(x, [64], w, b, 1e-5)  # half statistics
        _, m64, r64 = aten.native_layer_norm(x.double(), [64], w.double(), b.double(), 1e-5)
        assert torch.equal(y, ry) and mean.dtype == rstd.dtype == torch.float32
        assert err(rstd, r64) < err(rrstd, r64) / 4 and err(mean, m64) < err(rmean, m64)
        grads = LAYER_NORM.eager_route(fwd.replace(mask=14), (mean, rstd))(gy, x, (mean, rstd), w, b)
        assert [t.dtype for t in grads] == [dt] * 3
        dx64 = aten.native_layer_norm_backward(gy.double(), x.double(), [64], m64, r64, w.double(), b.double(),
                                               [True, False, False])[0]
        half = aten.native_layer_norm_backward(gy, x, [64], mean.to(dt), rstd.to(dt), w, b, [True] * 3)
        assert err(grads[0], dx64) < err(half[0], dx64)
