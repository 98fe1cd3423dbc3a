"""Dynamic dimensions: manifest syntax, keys, bounds, the build (export,
compile, validation at several sizes) and the loader serving any batch and
sequence length. Real export, iree-compile and iree.runtime, width 16."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import torch
from helpers import BIN, compiles, env

from boo_build.dtypes import tolerance
from boo_build.errors import ManifestError, SignatureError
from boo_build.loader import DYNAMIC_FORMAT_VERSION, KernelNotFound, open_bundle, read_archive
from boo_build.loader import nn as boo_nn
from boo_build.manifest.reader import parse_command, parse_toml
from boo_build.records import BenchResult
from boo_build.shapes import DEFAULT_MAX_ELEMENTS, MAX_DIM
from boo_build.signature import KernelSignature, ModuleId, function_name
from boo_build.stages.benchmark import bench_eager_at, bench_kernel_at
from boo_build.stages.reference import reference
from boo_build.stages.torch_modules import sample_args, torch_dtype
from boo_build.stages.validate import LARGE_ROWS, compare, validation_shapes
from boo_build.targets import DYNAMIC_CPU_FLAGS, catalogue

W = 16
MAX_ELEMENTS = 2**20  # the test bundle's: rows of width 16 up to 65536

HEAD = """
[bundle]
name = "dyn"
version = "0.1.0"
targets = ["cpu"]
"""

MANIFEST = HEAD + f"""max_elements = {MAX_ELEMENTS}

[[kernels]]                      # static, next to the dynamic one of the same kind
op = "layer_norm"
input_shape = [4, 6, {W}]
masks = [1]
impls = ["manual"]

[[kernels]]
op = "layer_norm"
input_shape = ["batch", "seq", {W}]
dtype = ["float32", "bfloat16"]
masks = [1, 14]
impls = ["manual"]

[[kernels]]
op = "rms_norm"
input_shape = ["batch", "seq", {W}]
dtype = ["float32", "bfloat16"]
eps = 1e-6
masks = [1, 6]
impls = ["aten"]
"""


def sig(shape=("batch", "seq", 768), norm=(768,), dtype="bfloat16", mask=14, **kw) -> KernelSignature:
    return KernelSignature("layer_norm", shape, norm, dtype, mask, **kw)


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as e:
        parse_toml(text, "m.toml")
    return e.value.errors


def entry(body: str) -> str:
    return HEAD + "\n[[kernels]]\n" + body


# ------------------------------------------------------------ keys and bounds
@pytest.mark.parametrize("s", [
    sig(),
    sig(("rows", 768), mask=1, dtype="float32"),
    sig(("n", "n", 16), (16,), mask=1),  # one name twice: one size
    sig(("batch", 128, 768), mask=2, affine=False, bias=False),
    sig(("b", "s", 4, 8), (4, 8), eps=1e-6, stats_dtype="bfloat16", max_elements=4096),
    KernelSignature("rms_norm", ("tokens_2", 4096), (4096,), "float16", 6, eps=1e-6, bias=False,
                    max_elements=2**33),
    sig((8, 128, 768)),  # static keys unchanged
])
def test_key_parses_back_to_the_signature(s):
    assert KernelSignature.parse(s.key) == s
    assert KernelSignature.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert ModuleId.parse(ModuleId(s, "aten").key) == ModuleId(s, "aten")
    assert re.fullmatch(r"[A-Za-z0-9_.x-]+", s.key)  # safe in file names
    assert function_name(s.key).isidentifier()


def test_key_format():
    assert sig().key == "layer_norm-bf16-BATCHxSEQx768-n768-wb-m14"
    assert sig(max_elements=10**6).key == "layer_norm-bf16-BATCHxSEQx768-n768-wb-max1000000-m14"
    assert sig(max_elements=DEFAULT_MAX_ELEMENTS) == sig()  # the default is not written
    # static signatures carry no limit: same key and JSON as before dynamic dims
    static = sig((8, 128, 768), max_elements=10**6)
    assert static.max_elements is None and "max_elements" not in static.to_json()
    with pytest.raises(SignatureError, match="bad shape"):
        KernelSignature.parse("layer_norm-bf16-batchxSEQx768-n768-wb-m14")  # names are capitals
    with pytest.raises(SignatureError, match="not canonical"):
        KernelSignature.parse(f"layer_norm-bf16-BATCHxSEQx768-n768-wb-max{DEFAULT_MAX_ELEMENTS}-m14")


def test_bounds_and_binding():
    s = sig(max_elements=10**6)
    assert s.dim_bounds() == {"batch": 10**6 // 768, "seq": 10**6 // 768}
    assert sig(("n", "n", 16), (16,), max_elements=1000).dim_bounds() == {"n": 7}  # 7*7*16 <= 1000
    assert sig(("rows", 768)).dim_bounds() == {"rows": min(MAX_DIM, DEFAULT_MAX_ELEMENTS // 768)}
    assert s.bind((4, 5, 768)) == sig((4, 5, 768))
    # other ranks flatten into the last leading dim when every leading dim is dynamic
    assert s.bind((7, 768)).input_shape == (1, 7, 768)
    assert s.bind((2, 3, 4, 768)).input_shape == (1, 24, 768)
    with pytest.raises(SignatureError, match=r"'seq' = 1303 .* above its upper bound 1302"):
        s.bind((1, 1303, 768))
    with pytest.raises(SignatureError, match="above max_elements"):
        s.bind((1000, 1000, 768))  # each dim within its bound, the tensor not
    with pytest.raises(SignatureError, match="sizes 3 and 4 differ"):
        sig(("n", "n", 16), (16,)).bind((3, 4, 16))
    with pytest.raises(SignatureError, match="fixed at 128"):
        sig(("batch", 128, 768)).bind((2, 64, 768))
    with pytest.raises(SignatureError, match="takes 3-d inputs"):
        sig(("batch", 128, 768)).bind((256, 768))


# ------------------------------------------------------------------ manifests
def test_dynamic_and_static_entries_of_the_same_kind():
    m = parse_toml(entry('op = "layer_norm"\ninput_shapes = [[8, 128, 768], ["batch", "seq", 768]]\n'
                         'masks = [1]\n'), "m.toml")
    assert [s.key for s in m.signatures] == ["layer_norm-f32-8x128x768-n768-wb-m1",
                                             "layer_norm-f32-BATCHxSEQx768-n768-wb-m1"]
    # the manifest's limit sets the bounds
    m = parse_toml(HEAD + 'max_elements = 1536\n[[kernels]]\nop = "rms_norm"\ninput_shape = ["t", 768]\n',
                   "m.toml")
    assert {s.dim_bounds()["t"] for s in m.signatures} == {2}


@pytest.mark.parametrize("body, message", [
    ('input_shape = [8, "hidden"]', "kernels[0]: input_shape dimension 1 ('hidden') is normalized: "
                                    "normalized dimensions must be integers"),
    ('input_shape = ["b", "s", 4, 8]\nnormalized_shape = ["s", 4, 8]',
     "kernels[0]: normalized_shape must be a non-empty list of positive integers, got ['s', 4, 8]: "
     "dynamic dimension names are allowed only in input_shape"),
    ('input_shape = ["b", "s", 8]\nnormalized_shape = [4, 8]', "kernels[0]: input_shape dimension 1 ('s') is normalized"),
    ('input_shape = ["", 768]', "kernels[0]: input_shape dimension 0 '' is not a dynamic dimension name"),
    ('input_shape = ["Batch", 768]', "kernels[0]: input_shape dimension 0 'Batch' is not a dynamic dimension name"),
    ('input_shape = ["2b", 768]', "kernels[0]: input_shape dimension 0 '2b' is not a dynamic dimension name"),
    ('input_shape = ["a_very_long_dimension_name", 768]', "at most 16 characters"),
    ('input_shape = [8, 768]\nbench_shapes = [[8, 768]]', "kernels[0]: bench_shapes is for dynamic input shapes"),
    ('input_shape = ["b", 768]\nbench_shapes = [[8, 512]]', "kernels[0]: bench_shapes[0] [8, 512] does not fit"),
])
def test_bad_dynamic_entries_name_the_entry(body, message):
    errors = errors_of(entry('op = "layer_norm"\n' + body + "\n"))
    assert any(message in e for e in errors), errors


def test_dynamic_dim_needs_room_under_max_elements():
    errors = errors_of(HEAD + 'max_elements = 1000\n[[kernels]]\nop = "layer_norm"\ninput_shape = ["b", 768]\n')
    assert any("kernels[0]" in e and "dynamic dimension 'b'" in e and "can only be 1" in e for e in errors), errors
    errors = errors_of(HEAD + 'max_elements = 700\n[[kernels]]\nop = "layer_norm"\ninput_shape = ["b", 768]\n')
    assert any("kernels[0]" in e and "more than max_elements = 700" in e for e in errors), errors


def test_miopen_commands_stay_static():
    with pytest.raises(SignatureError, match="bad -X"):
        parse_command("layernorm -X batchx768")


def test_validation_and_bench_shapes():
    m = parse_toml(entry(f'op = "layer_norm"\ninput_shapes = [[4, 6, {W}], [300, 20, {W}], ["batch", "seq", {W}]]\n'
                         'masks = [1]\n'), "m.toml")
    dyn = next(s for s in m.signatures if s.is_dynamic)
    assert m.largest_rows(dyn) == 6000
    shapes = validation_shapes(dyn, m.largest_rows(dyn))
    rows = [s[0] * s[1] for s in shapes]
    assert shapes[0] == (1, 1, W) and (37, 1, W) in shapes and (1, 37, W) in shapes  # one row; a prime, each dim alone
    assert rows[-1] > 6000 and rows[-1] >= LARGE_ROWS and min(shapes[-1][:2]) > 1  # more than the manifest names
    assert m.bench_shapes(dyn) == ((300, 20, W), (4, 6, W), (1, 1, W), (1, 64, W), (1, 4096, W))  # key order
    # the bounds cap them
    small = sig(("rows", W), (W,), max_elements=100 * W)
    assert validation_shapes(small) == ((1, W), (37, W), (100, W))


# ------------------------------------------------------------------- the build
@pytest.fixture(scope="module")
@compiles
def built(tmp_path_factory):
    """One build of MANIFEST through the real graph (no benchmarks)."""
    d = tmp_path_factory.mktemp("dyn")
    (d / "dyn.toml").write_text(MANIFEST)
    proc = subprocess.run([str(BIN / "boo-build"), "build", "dyn.toml", "--out", "out", "--no-bench", "-j", "2"],
                          cwd=d, capture_output=True, text=True, timeout=900,
                          env=env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return d / "out"


@pytest.fixture(scope="module")
def bundle(built):
    return open_bundle(built / "dyn-0.1.0.tar.zst", device="local-task")


def test_a_bundle_with_dynamic_kernels_is_format_version_5(built):
    """Written as every bundle now is (format 5); a loader that reads only version 1 then
    refuses it with "upgrade boo-build" rather than failing on a key it cannot parse.
    Format 2, which first held dynamic kernels, is still read (tests/test_format_versions.py)."""
    index = read_archive(built / "dyn-0.1.0.tar.zst").index
    assert index["format_version"] == 5 > DYNAMIC_FORMAT_VERSION == 2
    assert any(KernelSignature.parse(k).is_dynamic for k in index["kernels"])


def test_build_validates_dynamic_kernels_at_several_sizes(built):
    key = f"layer_norm-bf16-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m14-manual"
    rec = json.loads((built / "dyn" / "validate" / "cpu" / f"{key}.json").read_text())
    assert rec["status"] == "passed"
    cases = {c["case"].split("@")[1] for c in rec["outputs"]}
    assert cases == {"1x1x16", "37x1x16", "1x37x16", "3x1367x16"}
    comp = json.loads((built / "dyn" / "vmfb" / "cpu" / f"{key}.compile.json").read_text())
    assert set(DYNAMIC_CPU_FLAGS) <= set(comp["flags"])
    static = json.loads((built / "dyn" / "vmfb" / "cpu" / f"layer_norm-f32-4x6x{W}-n{W}-wb-m1-manual.compile.json")
                        .read_text())
    assert not set(DYNAMIC_CPU_FLAGS) & set(static["flags"])


# ------------------------------------------------------------------ the loader
SHAPES = [(1, 1, W), (1, W), (53, 1, W), (1, 53, W), (3, 7, W), (3001, W), (2, 3, 5, W)]


def _check(outs, expected, dtype, what):
    for i, (o, e) in enumerate(zip(outs, expected)):
        assert tuple(o.shape) == tuple(e.shape), f"{what} output {i}: {tuple(o.shape)} vs {tuple(e.shape)}"
        c = compare(str(i), what, o, e, tolerance(dtype if o.dtype == torch_dtype(dtype) else "float32"))
        assert c.ok, f"{what}: {c.describe()}"


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_any_size_matches_the_float64_reference(bundle, op, dtype):
    bundle.reset_stats()
    eps = 1e-5 if op == "layer_norm" else 1e-6
    for shape in SHAPES:
        kw = dict(op=op, input_shape=shape, normalized_shape=(W,), dtype=dtype, eps=eps, bias=op == "layer_norm")
        fwd, bwd = KernelSignature(mask=1, **kw), KernelSignature(mask=14 if op == "layer_norm" else 6, **kw)
        args = sample_args(fwd, seed=len(shape))
        bargs = sample_args(bwd, seed=len(shape))
        if op == "layer_norm":
            x, w, b = args
            outs = bundle.native_layer_norm(x, (W,), w, b, eps)
            gy, xb, mean, rstd, wb = bargs
            bouts = bundle.native_layer_norm_backward(gy, xb, (W,), mean, rstd, wb, torch.zeros_like(wb),
                                                      (True, True, True))
        else:
            x, w = args
            outs = bundle.fused_rms_norm(x, (W,), w, eps)
            gy, xb, rstd, wb = bargs
            bouts = bundle.fused_rms_norm_backward(gy, xb, (W,), rstd, wb, (True, True))
        _check(outs, reference(fwd, args), dtype, f"{op} {dtype} forward {shape}")
        _check(bouts, reference(bwd, bargs), dtype, f"{op} {dtype} backward {shape}")
    stats = bundle.stats()
    assert all(KernelSignature.parse(k).is_dynamic for k in stats), stats  # none of these shapes is static
    assert bundle.stats(totals=True) == {"static_hits": 0, "dynamic_hits": 2 * len(SHAPES), "misses": 0, "eager": 0}


def test_static_kernel_preferred_where_both_exist(bundle):
    bundle.reset_stats()
    w, b = torch.randn(W), torch.randn(W)
    for shape in [(4, 6, W), (5, 6, W), (4, 6, W)]:
        y, _, _ = bundle.native_layer_norm(torch.randn(shape), (W,), w, b, 1e-5)
        assert y.shape == shape
    assert bundle.stats() == {f"layer_norm-f32-4x6x{W}-n{W}-wb-m1": {"hits": 2, "misses": 0, "eager": 0},
                              f"layer_norm-f32-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m1": {"hits": 1, "misses": 0, "eager": 0}}
    assert bundle.stats(totals=True) == {"static_hits": 2, "dynamic_hits": 1, "misses": 0, "eager": 0}


def test_torch_eager_where_the_build_found_it_faster_at_the_nearest_size(built, tmp_path):
    import dataclasses

    from helpers import rewrite

    key = f"layer_norm-f32-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m1"
    ix = read_archive(built / "dyn-0.1.0.tar.zst").bundle_index
    pref = {"eager_s": 1e-4, "kernel_s": 5e-5, "reason": "at 1 of 2 sizes", "by_rows": [[1, True], [1024, False]]}
    ix = ix.with_entry(key, "cpu", dataclasses.replace(ix.kernels[key].targets["cpu"], prefer_eager=pref))
    new = ix.to_json()
    b = open_bundle(rewrite(built / "dyn-0.1.0.tar.zst", tmp_path / "rows.tar.zst",
                            index=lambda d: (d.clear(), d.update(new))), device="local-task")
    w, bias = torch.randn(W), torch.randn(W)
    for rows, to_eager in ((1, True), (3, True), (30, True), (40, False), (1024, False), (3000, False)):
        b.reset_stats()
        x = torch.randn(rows, 1, W)
        y = b.native_layer_norm(x, (W,), w, bias, 1e-5)[0]
        torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (W,), w, bias, 1e-5), rtol=1e-4, atol=1e-4)
        assert b.stats()[key] == {"hits": int(not to_eager), "misses": 0, "eager": int(to_eager)}, rows


def test_above_the_upper_bound_is_not_found(bundle):
    w, b = torch.randn(W), torch.randn(W)
    y, _, _ = bundle.native_layer_norm(torch.randn(MAX_ELEMENTS // W, W), (W,), w, b, 1e-5)  # at the bound
    assert y.shape == (MAX_ELEMENTS // W, W)
    with pytest.raises(KernelNotFound) as e:
        bundle.native_layer_norm(torch.randn(MAX_ELEMENTS // W + 1, W), (W,), w, b, 1e-5)
    dyn = f"layer_norm-f32-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m1"
    assert f"'seq' = {MAX_ELEMENTS // W + 1}" in str(e.value) and f"above its upper bound {MAX_ELEMENTS // W}" in str(e.value)
    assert e.value.nearest[0] == dyn  # the dynamic kernel that came close comes first


def test_zero_size_batch(bundle):
    bundle.reset_stats()
    for dtype in ("float32", "bfloat16"):
        dt = torch_dtype(dtype)
        x, w = torch.randn(0, 5, W, dtype=dt), torch.randn(W, dtype=dt)
        y, mean, rstd = bundle.native_layer_norm(x, (W,), w, w, 1e-5)
        assert (y.shape, mean.shape, rstd.shape) == ((0, 5, W), (0, 5, 1), (0, 5, 1))
        gx, gw, gb = bundle.native_layer_norm_backward(torch.randn_like(x), x, (W,), mean, rstd, w, w,
                                                       (True, True, True))
        assert gx.shape == (0, 5, W) and torch.equal(gw, torch.zeros(W, dtype=dt)) and torch.equal(gb, gw)
        y, rstd = bundle.fused_rms_norm(x, (W,), w, 1e-6)
        assert (y.shape, rstd.shape) == ((0, 5, W), (0, 5, 1))
    assert bundle.stats(totals=True)["misses"] == 0


def test_nn_modules_any_batch_and_sequence_length(bundle):
    bundle.reset_stats()
    torch.manual_seed(0)
    lin = lambda: torch.nn.Linear(W, W)  # noqa: E731 (the norms' inputs need gradients: full backward kernels)
    ref = torch.nn.Sequential(lin(), torch.nn.LayerNorm(W), lin(), torch.nn.RMSNorm(W, eps=1e-6))
    boo = torch.nn.Sequential(lin(), boo_nn.LayerNorm(W, bundle=bundle), lin(),
                              boo_nn.RMSNorm(W, eps=1e-6, bundle=bundle))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    boo.load_state_dict(ref.state_dict())
    for batch, seq in [(1, 1), (2, 17), (5, 3), (1, 129)]:
        x = torch.randn(batch, seq, W)
        losses = []
        for model in (ref, boo):
            model.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-4)
        for p, q in zip(ref.parameters(), boo.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    s = bundle.stats()
    assert set(s) == {f"layer_norm-f32-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m1",
                      f"layer_norm-f32-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m14",
                      f"rms_norm-f32-BATCHxSEQx{W}-n{W}-w-eps1em06-max{MAX_ELEMENTS}-m1",
                      f"rms_norm-f32-BATCHxSEQx{W}-n{W}-w-eps1em06-max{MAX_ELEMENTS}-m6"}
    assert all(v == {"hits": 4, "misses": 0, "eager": 0} for v in s.values())


def test_run_takes_a_dynamic_key(bundle):
    key = f"layer_norm-f32-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m1"
    x, w, b = torch.randn(2, 7, W), torch.randn(W), torch.randn(W)
    y, mean, rstd = bundle.run(key, x, w, b)
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, (W,), w, b), atol=1e-5)
    assert mean.shape == (2, 7, 1)
    with pytest.raises(ValueError, match="above its upper bound"):
        bundle.run(key, torch.randn(1, MAX_ELEMENTS // W + 1, W), w, b)


def test_benchmark_at_several_shapes(built):
    mid = ModuleId.parse(f"rms_norm-f32-BATCHxSEQx{W}-n{W}-w-eps1em06-max{MAX_ELEMENTS}-m1-aten")
    from boo_build.loader.devices import discover, match_target

    target = catalogue()["cpu"]
    dev, _ = match_target(target, discover(gpus=False))
    vmfb = (built / "dyn" / "vmfb" / "cpu" / f"{mid.key}.vmfb").read_bytes()
    quick = dict(warmup=1, min_reps=3, max_reps=6, max_seconds=0.05)
    shapes = [(1, 1, W), (8, 33, W)]
    for res in (bench_kernel_at(vmfb, mid, target, dev, shapes, **quick),
                bench_eager_at(mid.signature, shapes, threads=1, **quick)):
        assert res.ok and res.signature == mid.signature.key
        assert [list(s.shape) for s in res.sizes] == [list(s) for s in shapes]
        assert all(s.status == "ok" and s.median_s > 0 for s in res.sizes)
        assert res.median_s == res.sizes[0].median_s
        assert BenchResult.from_json(json.loads(json.dumps(res.to_json()))) == res


def test_unavailable_dynamic_kernel_says_why(built, tmp_path):
    """A dynamic kernel the bundle lists as unavailable on its target: a call it
    would have served names it and the build's reason."""
    from helpers import rewrite

    dyn = f"layer_norm-bf16-BATCHxSEQx{W}-n{W}-wb-max{MAX_ELEMENTS}-m1"

    def drop(ix):
        ix["kernels"][dyn]["targets"]["cpu"] = {"status": "unavailable", "reason": "compile failed: boom",
                                                "rejected": {}}

    path = rewrite(built / "dyn-0.1.0.tar.zst", tmp_path / "b.tar.zst", index=drop)
    b = open_bundle(path, device="local-task")
    x, w = torch.randn(3, 5, W, dtype=torch.bfloat16), torch.randn(W, dtype=torch.bfloat16)
    with pytest.raises(KernelNotFound, match=f"compile failed: boom \\(as {dyn}\\)"):
        b.native_layer_norm(x, (W,), w, w, 1e-5)


def test_report_compares_dynamic_with_static_and_eager():
    """The build report's per-size rows for a dynamic kernel: its median, torch
    eager's and the static kernel's of the same shape where the manifest has one."""
    from boo_build.report.build_report import _dynamic_sizes

    dyn = sig(("batch", "seq", W), (W,), "float32", 1)
    static = sig((4, 6, W), (W,), "float32", 1)
    sizes = [{"shape": [4, 6, W], "median_s": 2e-6}, {"shape": [1, 1, W], "median_s": 1e-6}]
    kernels = [
        {"key": static.key, "signature": static.to_json(),
         "targets": {"cpu": {"selected": "manual", "impls": {"manual": {"bench": {"median_s": 3e-6}}}}}},
        {"key": dyn.key, "signature": dyn.to_json(),
         "targets": {"cpu": {"selected": "aten", "impls": {"aten": {"bench": {"median_s": 2e-6, "sizes": sizes}}},
                             "eager": {"sizes": [{"shape": [1, 1, W], "median_s": 5e-6}]}}}},
    ]
    _dynamic_sizes(kernels)
    assert kernels[1]["targets"]["cpu"]["sizes"] == [
        {"shape": [4, 6, W], "dynamic_us": 2.0, "eager_us": None, "static_us": 3.0},
        {"shape": [1, 1, W], "dynamic_us": 1.0, "eager_us": 5.0, "static_us": None}]
    assert "sizes" not in kernels[0]["targets"]["cpu"]
