"""The loader: device selection, kernel lookup, results, integrity, fallback,
argument checks, thread safety, and its import footprint."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from helpers import KERNELS, PROVENANCE, REPO, _ln, assert_close, flip_byte, rewrite

from boo_build.loader import (
    BundleIntegrityError,
    KernelNotFound,
    NoCompatibleDevice,
    open_bundle,
)
from boo_build.loader.format import TargetRecord
from boo_build.signature import KernelSignature
from boo_build.stages.pack import kernel_record, pack_bundle
from boo_build.stages.reference import reference
from boo_build.stages.torch_modules import sample_args
from boo_build.targets import catalogue


# ---------------------------------------------------------------- devices
def test_default_device_is_the_cpu(built):
    b = open_bundle(built.path)  # gfx942 is in the bundle but no such GPU here
    assert b.target.name == "cpu" and b.device.uri == "local-task"
    info = b.info()
    assert info["target"] == "cpu" and info["device"]["driver"] == "local-task"
    assert info["targets"]["gfx942"]["unavailable"] == 8 and info["targets"]["cpu"]["available"] == 9
    assert info["kernels"][_ln(2).key]["gfx942"]["reason"] == "compile failed: test"
    assert info["provenance"] == PROVENANCE


def test_no_compatible_device(built, tmp_path):
    gfx_only = pack_bundle(tmp_path, name="gfx", version="1.0.0", targets=[catalogue()["gfx942"]],
                           kernels=built.entries(targets=("gfx942",)), vmfbs=built.vmfbs, provenance={})
    with pytest.raises(NoCompatibleDevice) as e:
        open_bundle(gfx_only)
    assert "gfx942 (hip, gfx942): not run: no device (gfx942)" in str(e.value)
    assert set(e.value.reasons) == {"gfx942"}
    with pytest.raises(NoCompatibleDevice, match="gfx942"):
        open_bundle(gfx_only, device="local-task")  # the CPU cannot run a gfx942 target

    v4 = catalogue()["cpu-x86-64-v4"]
    # the cpu modules packed again under the v4 target (a record's member names its target)
    vmfbs: dict[str, bytes] = {}
    entries = []
    for k in built.entries(targets=("cpu",)):
        cpu = k.targets["cpu"]
        impls = built.impls_for(v4.name, k.signature, vmfbs)
        entries.append(kernel_record(k.signature, {v4.name: TargetRecord.available(
            cpu.selected, impls, cpu.reason, cpu.rejected)}))
    p = pack_bundle(tmp_path, name="v4", version="1.0.0", targets=[v4], kernels=entries, vmfbs=vmfbs,
                    provenance={})
    from boo_build.loader.devices import cpu_device

    if cpu_device().arch != "x86-64-v4":
        with pytest.raises(NoCompatibleDevice, match="cpu-x86-64-v4 .*lacks x86-64-v4"):
            open_bundle(p)


def test_explicit_device(built):
    b = open_bundle(built.path, device="local-task")
    assert b.device.uri == "local-task" and b.target.name == "cpu"
    s = open_bundle(built.path, device="local-sync")  # the CPU, single-threaded
    assert s.device.driver == "local-sync" and s.target.name == "cpu"
    x = torch.randn(4, 6, 10)
    w, bias = torch.ones(10), torch.zeros(10)
    assert torch.equal(s.native_layer_norm(x, (10,), w, bias)[0], b.native_layer_norm(x, (10,), w, bias)[0])
    with pytest.raises(NoCompatibleDevice, match="'vulkan://3' is not present on this machine; devices present: "
                                                 "local-task"):
        open_bundle(built.path, device="vulkan://3")


# ---------------------------------------------------------------- results
def _call(bundle, sig: KernelSignature, args):
    """The ATen-style method for ``sig`` on ``args`` (its calling convention)."""
    ns = sig.normalized_shape
    if sig.op == "layer_norm":
        if sig.is_forward:
            x, w, b = args
            return bundle.native_layer_norm(x, ns, w, b, sig.eps)
        gy, x, mean, rstd, *w = args
        w = w[0] if w else torch.ones(ns, dtype=x.dtype)
        mask = (bool(sig.mask & 2), bool(sig.mask & 4), bool(sig.mask & 8))
        out = bundle.native_layer_norm_backward(gy, x, ns, mean, rstd, w, torch.zeros(ns, dtype=x.dtype), mask)
        assert [o is not None for o in out] == list(mask)
        return tuple(o for o in out if o is not None)
    if sig.is_forward:
        x, w = args
        return bundle.fused_rms_norm(x, ns, w, sig.eps)
    gy, x, rstd, *w = args
    w = w[0] if w else torch.ones(ns, dtype=x.dtype)
    mask = (bool(sig.mask & 2), bool(sig.mask & 4))
    out = bundle.fused_rms_norm_backward(gy, x, ns, rstd, w, mask, eps=sig.eps)
    return tuple(o for o in out if o is not None)


@pytest.mark.parametrize("key", sorted(s.key for s in KERNELS))
def test_results_match_reference(bundle, key):
    sig = KernelSignature.parse(key)
    args = sample_args(sig, seed=3)
    ref = reference(sig, args)
    for how, out in (("run", bundle.run(key, *args)), ("aten", _call(bundle, sig, args))):
        assert len(out) == len(ref) == len(sig.outputs())
        for o, r, (name, shape, dtype) in zip(out, ref, sig.outputs()):
            assert o.dtype == getattr(torch, dtype) and tuple(o.shape) == shape
            assert_close(o, r, sig.dtype, f"{key} {how} {name}")


def test_matches_torch_eager(bundle):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 10, generator=g)
    w, b = torch.randn(10, generator=g), torch.randn(10, generator=g)
    y, mean, rstd = bundle.native_layer_norm(x, [10], w, b, 1e-5)
    ry, rm, rr = torch.ops.aten.native_layer_norm(x, [10], w, b, 1e-5)
    for o, r in ((y, ry), (mean, rm), (rstd, rr)):
        assert o.shape == r.shape
        assert_close(o, r, "float32")
    gy = torch.randn(4, 6, 10, generator=g)
    out = bundle.native_layer_norm_backward(gy, x, [10], mean, rstd, w, b, [True, True, True])
    ref = torch.ops.aten.native_layer_norm_backward(gy, x, [10], rm, rr, w, b, [True, True, True])
    for o, r in zip(out, ref):
        assert_close(o, r, "float32")
    xb = torch.randn(3, 37, generator=g).bfloat16()
    wb = torch.randn(37, generator=g).bfloat16()
    y, rstd = bundle.fused_rms_norm(xb, [37], wb, 1e-5)
    assert rstd.dtype == torch.float32 and rstd.shape == (3, 1)
    assert_close(y, torch.nn.functional.rms_norm(xb.float(), [37], wb.float(), 1e-5), "bfloat16")


def test_stats_count_hits(built):
    b = open_bundle(built.path, device="local-task")
    x = torch.randn(4, 6, 10)
    for _ in range(3):
        b.native_layer_norm(x, (10,), torch.ones(10), torch.zeros(10))
    assert b.stats() == {_ln(1).key: {"hits": 3, "misses": 0, "eager": 0}}


# ---------------------------------------------------------------- integrity
def test_integrity_checked_on_first_load(built, tmp_path):
    member = f"kernels/cpu/{_ln(2).key}-aten.vmfb"
    bad = rewrite(built.path, tmp_path / "bad.tar.zst",
                  members=lambda m: m.__setitem__(member, flip_byte(m[member])))
    b = open_bundle(bad, device="local-task")  # opening hashes nothing
    x = torch.randn(4, 6, 10)
    y, mean, rstd = b.native_layer_norm(x, (10,), torch.ones(10), torch.zeros(10))  # other kernels fine
    b.native_layer_norm_backward(x, x, (10,), mean, rstd, torch.ones(10), torch.zeros(10), (True, True, True))
    for _ in range(2):  # every try, not only the first
        with pytest.raises(BundleIntegrityError, match=f"member {member} of .*bad.tar.zst is corrupt") as e:
            b.native_layer_norm_backward(x, x, (10,), mean, rstd, torch.ones(10), None, (True, False, False))
        assert e.value.member == member


# ---------------------------------------------------------------- lookup
def test_kernel_not_found_names_nearest(bundle):
    x = torch.randn(4, 6, 12)
    with pytest.raises(KernelNotFound) as e:
        bundle.native_layer_norm(x, (12,), torch.ones(12), torch.zeros(12))
    want = KernelSignature("layer_norm", (4, 6, 12), (12,), "float32", 1).key
    assert e.value.key == want and want in str(e.value)
    assert e.value.nearest[0] == _ln(1).key and len(e.value.nearest) == 3
    assert "nearest in the bundle: " + _ln(1).key in str(e.value) and "fallback='eager'" in str(e.value)
    assert isinstance(e.value, LookupError)
    want = _ln(1, eps=1e-3).key  # eps is part of a forward kernel's key
    with pytest.raises(KernelNotFound, match=want):
        bundle.native_layer_norm(torch.randn(4, 6, 10), (10,), torch.ones(10), torch.zeros(10), 1e-3)


def test_unavailable_kernel_says_why(built, tmp_path):
    """A kernel the bundle lists as unavailable for the chosen target names the build's reason."""
    entries = [kernel_record(k.signature, {"cpu": TargetRecord.unavailable("validation failed: max error 0.5")
                                           if k.key == _ln(6).key else k.targets["cpu"]})
               for k in built.entries(targets=("cpu",))]
    p = pack_bundle(tmp_path, name="u", version="1.0.0", targets=[catalogue()["cpu"]], kernels=entries,
                    vmfbs=built.vmfbs, provenance={})
    b = open_bundle(p, device="local-task")
    assert _ln(6).key not in b.keys() and b.info()["kernels"][_ln(6).key]["cpu"]["status"] == "unavailable"
    x = torch.randn(4, 6, 10)
    _, mean, rstd = b.native_layer_norm(x, (10,), torch.ones(10), torch.zeros(10))
    with pytest.raises(KernelNotFound, match=f"no kernel {_ln(6).key} for target cpu: unavailable on target "
                                             "cpu: validation failed: max error 0.5"):
        b.native_layer_norm_backward(x, x, (10,), mean, rstd, torch.ones(10), torch.zeros(10), (True, True, False))


def test_eager_fallback_counts_misses(built):
    b = open_bundle(built.path, device="local-task", fallback="eager")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 10, generator=g)  # not in the bundle
    w, bias = torch.randn(10, generator=g), torch.randn(10, generator=g)
    y, mean, rstd = b.native_layer_norm(x, (10,), w, bias, 1e-5)
    ry, rm, rr = torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)
    assert torch.equal(y, ry) and mean.dtype == torch.float32 and mean.shape == rm.shape
    gy = torch.randn(2, 5, 10, generator=g)
    gx, gw, gb = b.native_layer_norm_backward(gy, x, (10,), mean, rstd, w, bias, (True, False, True))
    assert gw is None
    ref = torch.ops.aten.native_layer_norm_backward(gy, x, [10], rm, rr, w, bias, [True, False, True])
    assert_close(gx, ref[0], "float32") and assert_close(gb, ref[2], "float32")
    # RMS backward on the CPU: torch has no kernel for it; the decomposition runs
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    yr = torch.nn.functional.rms_norm(xr, (10,), wr, 1e-6)
    yr.backward(gy)
    _, rstd = b.fused_rms_norm(x, (10,), w, 1e-6)
    gx, gw = b.fused_rms_norm_backward(gy, x, (10,), rstd, w, (True, True))
    assert_close(gx, xr.grad, "float32") and assert_close(gw, wr.grad, "float32")
    b.native_layer_norm(torch.randn(4, 6, 10), (10,), w, bias)  # a hit
    s = b.stats()
    miss = lambda sig: s[sig.key]["misses"]  # noqa: E731
    assert miss(KernelSignature("layer_norm", (2, 5, 10), (10,), "float32", 1)) == 1
    assert miss(KernelSignature("layer_norm", (2, 5, 10), (10,), "float32", 10)) == 1
    assert miss(KernelSignature("rms_norm", (2, 5, 10), (10,), "float32", 1, eps=1e-6, bias=False)) == 1
    assert miss(KernelSignature("rms_norm", (2, 5, 10), (10,), "float32", 6, bias=False)) == 1
    assert s[_ln(1).key] == {"hits": 1, "misses": 0, "eager": 0}
    assert sum(v["misses"] for v in s.values()) == 4


# ---------------------------------------------------------------- arguments
def test_argument_checks(bundle):
    x = torch.randn(4, 6, 10)
    w, b = torch.ones(10), torch.zeros(10)
    with pytest.raises(TypeError, match="weight has dtype torch.float16, expected torch.float32"):
        bundle.native_layer_norm(x, (10,), w.half(), b)
    with pytest.raises(TypeError, match="input has dtype torch.float64"):
        bundle.native_layer_norm(x.double(), (10,), w.double(), b.double())
    with pytest.raises(ValueError, match="input is on device meta"):
        bundle.native_layer_norm(x.to("meta"), (10,), w, b)
    with pytest.raises(ValueError, match="bias has shape \\[9\\], expected \\[10\\]"):
        bundle.native_layer_norm(x, (10,), w, b[:9])
    with pytest.raises(ValueError, match="not a suffix"):
        bundle.native_layer_norm(x, (6,), w[:6], b[:6])
    with pytest.raises(TypeError, match="weight is a torch.Tensor but input is a numpy.ndarray"):
        bundle.native_layer_norm(np.zeros((4, 6, 10), np.float32), (10,), w, b)  # numpy: all or none
    with pytest.raises(TypeError, match="rstd has dtype torch.float64"):
        bundle.fused_rms_norm_backward(x, x, (10,), torch.ones(4, 6, 1, dtype=torch.float64), w, eps=1.19e-7)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        bundle.run(_ln(1).key, x)

    # not contiguous: made contiguous, same result
    xt = torch.randn(4, 10, 6).transpose(1, 2)
    assert not xt.is_contiguous()
    y1 = bundle.native_layer_norm(xt, (10,), w, b)[0]
    y2 = bundle.native_layer_norm(xt.contiguous(), (10,), w, b)[0]
    assert torch.equal(y1, y2)
    # bias without a weight (ATen allows it): a weight of ones
    y3 = bundle.native_layer_norm(x, (10,), None, b + 1)[0]
    assert_close(y3, torch.nn.functional.layer_norm(x, (10,), None, b + 1), "float32")


def test_thread_safe_lazy_loading(built):
    b = open_bundle(built.path, device="local-task")
    keys = sorted(s.key for s in KERNELS)
    cases = {k: sample_args(KernelSignature.parse(k), seed=5) for k in keys}
    expected = {k: b.run(k, *a) for k, a in cases.items()}
    b2 = open_bundle(built.path, device="local-task")  # cold: every load races
    errors = []

    def work(i):
        try:
            for k in keys[i % 3:] + keys[: i % 3]:
                for _ in range(3):
                    out = b2.run(k, *cases[k])
                    assert all(torch.equal(o, e) for o, e in zip(out, expected[k])), k
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert all(v["hits"] == 18 for v in b2.stats().values())


# ---------------------------------------------------------------- footprint
_RUN = textwrap.dedent('''
    import sys, importlib.abc
    BLOCKED = ("iree.compiler", "iree.turbine", "doit", "boo_build.stages.export", "boo_build.stages.torch_modules",
               "boo_build.stages.compile", "boo_build.build.tasks", "boo_build.stages.reference", "boo_build.stages.pack",
               "matplotlib", "boo_build.report.page")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"{name} is blocked in the loader's world")
            return None

    sys.meta_path.insert(0, Block())
    import numpy as np
    import torch
    from boo_build.loader import open_bundle
    from boo_build.signature import KernelSignature
    from boo_build.dtypes import tolerance

    bundle_path, npz_path = sys.argv[1:3]
    b = open_bundle(bundle_path)
    data = np.load(npz_path)
    n = 0
    for key in b.keys():
        sig = KernelSignature.parse(key)
        args = [torch.from_numpy(data[f"{key}/in{i}"]).to(getattr(torch, dt))
                for i, (_, _, dt) in enumerate(sig.inputs())]
        outs = b.run(key, *args)
        for i, o in enumerate(outs):
            ref = torch.from_numpy(data[f"{key}/out{i}"])
            tol = tolerance(sig.dtype)
            err = (o.double() - ref).abs()
            bound = tol.atol * max(1.0, ref.abs().max().item()) + tol.rtol * ref.abs()
            assert bool((err <= bound).all()), (key, i, err.max().item())
            n += 1
    bad = [m for m in sys.modules if any(m == x or m.startswith(x + ".") for x in BLOCKED)]
    assert not bad, bad
    print("OK", len(b.keys()), n)
''')


def test_runs_without_the_build_side(built, tmp_path):
    arrays = {}
    for sig in KERNELS:
        args = sample_args(sig, seed=7)
        for i, a in enumerate(args):
            arrays[f"{sig.key}/in{i}"] = a.float().numpy()  # bf16 -> f32 -> bf16 is exact
        for i, r in enumerate(reference(sig, args)):
            arrays[f"{sig.key}/out{i}"] = r.numpy()
    np.savez(tmp_path / "cases.npz", **arrays)
    script = tmp_path / "run.py"
    script.write_text(_RUN)
    proc = subprocess.run([sys.executable, str(script), str(built.path), str(tmp_path / "cases.npz")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    n_out = sum(len(s.outputs()) for s in KERNELS)
    assert proc.stdout.split() == ["OK", str(len(KERNELS)), str(n_out)]


@pytest.mark.slow
def test_import_is_light():
    code = ("import sys, boo_build.loader, boo_build.loader.bundle, boo_build.cli.info, boo_build.cli.verify, boo_build.cli.diff\n"
            "heavy = ('iree.compiler', 'iree.turbine', 'doit', 'torch', 'iree.runtime', 'boo_build.stages.export',"
            " 'boo_build.stages.torch_modules', 'boo_build.build.tasks')\n"
            "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    # and nn pulls in torch but not the build side
    code = ("import sys, boo_build.loader.nn\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'doit' or m.startswith('iree.')"
            " and m.split('.')[1] in ('compiler', 'turbine')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_entry_points_are_methods_of_the_bundle_class():
    """The built-in ops' ATen-style entry points are defined on ``Bundle`` itself
    (help(), grep and IDEs see them), as ``loader.entries``' functions, and reading
    them imports no torch; an op given entry points without a line there fails."""
    from boo_build.loader import Bundle
    from boo_build.loader import entries as entry_modules

    entries = {name: fn for op in entry_modules.MODULES for name, fn in entry_modules.of_op(op).items()}
    assert entries and all(getattr(Bundle, name) is fn for name, fn in entries.items()), sorted(entries)
    # once read, the function itself is on the class (the lazy stand-in gone): calls bind it as any method
    assert all(Bundle.__dict__.get(name) is fn for name, fn in entries.items())
    code = ("import sys, pydoc, boo_build.loader as L\n"
            "text = pydoc.render_doc(L.Bundle, renderer=pydoc.plaintext)\n"
            f"print(all(('  ' + n + '(') in text for n in {sorted(entries)!r}), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]


def test_import_loader_is_light():
    """``import boo_build.loader`` imports no numpy, torch, op module (the ops'
    code is imported by the first call that needs it) nor the build side."""
    code = ("import sys, boo_build.loader\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'torch', 'iree', 'doit', 'ml_dtypes')"
            " or m in ('boo_build.ops.layer_norm', 'boo_build.ops.rms_norm', 'boo_build.ops.norm_math')"
            " or m.startswith(('boo_build.stages', 'boo_build.build', 'boo_build.manifest'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_first_call_skips_ml_dtypes(built, tmp_path):
    # import iree.runtime would pull in ml_dtypes (the bulk of the loader's
    # cold-start budget); the loader uses the native module, and the process
    # must still exit cleanly with kernel outputs alive (device lifetime).
    key = next(s.key for s in KERNELS if s.dtype == "bfloat16")
    code = textwrap.dedent(f'''
        import sys, torch
        from boo_build.loader import open_bundle
        from boo_build.signature import KernelSignature
        b = open_bundle(sys.argv[1])
        sig = KernelSignature.parse({key!r})
        args = [torch.ones(s, dtype=getattr(torch, dt)) for (_, s, dt) in sig.inputs()]
        outs = b.run({key!r}, *args)
        assert all(torch.isfinite(o.float()).all() for o in outs)
        print(sorted(m for m in ("ml_dtypes", "iree.runtime") if m in sys.modules))
    ''')
    proc = subprocess.run([sys.executable, "-c", code, str(built.path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


def test_device_shared_with_iree_runtime():
    import iree.runtime as rt

    from boo_build.loader.hal import open_device

    assert open_device("local-task").hal_device is rt.get_device("local-task")
    # local-sync has the loader's own allocator, which iree.runtime's device lacks
    assert open_device("local-sync").hal_device is not rt.get_device("local-sync")


_REUSE = textwrap.dedent('''
    import gc, sys
    import numpy as np
    from boo_build.loader.hal import open_device
    from boo_build.loader.native import runtime
    rt = runtime()
    alloc = open_device("local-sync").hal_device.allocator
    def buffer():
        return alloc.allocate_buffer(memory_type=rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE,
                                     allowed_usage=rt.BufferUsage.DEFAULT | rt.BufferUsage.MAPPING,
                                     allocation_size=1 << 16)
    b = buffer()
    b.map().asarray([1 << 16], np.dtype(np.uint8))[:] = 7
    del b
    gc.collect()
    print(int(buffer().map().asarray([1 << 16], np.dtype(np.uint8)).max()))
''')


@pytest.mark.parametrize("spec, kept", [(None, 7), ("none", 0)])
def test_local_sync_device_hands_freed_buffers_back_unless_turned_off(spec, kept):
    # IREE's heap allocator zero-fills each new buffer (what the cache saves);
    # a buffer from the cache keeps its bytes
    import os

    env = {k: v for k, v in os.environ.items() if k != "BOO_LOCAL_SYNC_ALLOCATOR"}
    if spec is not None:
        env["BOO_LOCAL_SYNC_ALLOCATOR"] = spec
    proc = subprocess.run([sys.executable, "-c", _REUSE], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(kept)


def test_a_bad_allocator_spec_is_named():
    import os

    env = {**os.environ, "BOO_LOCAL_SYNC_ALLOCATOR": "cachingg"}
    code = "from boo_build.loader.hal import open_device; open_device('local-sync')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.returncode != 0
    assert "BOO_LOCAL_SYNC_ALLOCATOR" in proc.stderr and "'cachingg'" in proc.stderr and "'none'" in proc.stderr


def test_an_unknown_token_names_a_function_that_exists():
    """The error for a token no open bundle has tells what to call; that call exists."""
    import importlib
    import re

    from boo_build.loader import tokens

    with pytest.raises(LookupError, match="no open bundle has token 'nope'") as e:
        tokens.bundle_for("nope")
    module, name = re.search(r"with (boo_build[\w.]+)\.(\w+)\(open_bundle", str(e.value)).groups()
    assert callable(getattr(importlib.import_module(module), name))
