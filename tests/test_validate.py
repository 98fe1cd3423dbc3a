"""Validation: real export, real iree-compile for the cpu target, real iree.runtime.

The small kernel set tested here (helpers.kernel_set, shared with
test_benchmark.py and test_devices.py) is built once per session: exports in
this process, compiles two at a time.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import CPU_TARGET, GOOD, PLANTED, compiles, kernel_set, ln, rms

from boo_build.dtypes import tolerance
from boo_build.loader.devices import DeviceInfo, discover
from boo_build.records import OutputCheck, ValidationResult
from boo_build.signature import ModuleId
from boo_build.stages import tolerances
from boo_build.stages import torch_modules as modules
from boo_build.stages.reference import reference
from boo_build.stages.tolerances import error_scale
from boo_build.stages.validate import OFFSETS, cases, compare, validate_kernel
from boo_build.targets import catalogue


@pytest.fixture(scope="session")
@compiles
def kernels():
    return kernel_set()


@pytest.fixture(scope="session")
def cpu() -> DeviceInfo:
    dev = discover(gpus=False)[0]
    assert dev.driver == "local-task"
    return dev


# ------------------------------------------------------------ good kernels
@pytest.mark.parametrize("mid", GOOD, ids=lambda m: m.key)
def test_good_kernels_pass(kernels, cpu, mid):
    res = validate_kernel(kernels[(mid.key, False)], mid, CPU_TARGET, cpu, seeds=(0, 1))
    assert res.status == "passed", res.reason
    names = [n for n, _, _ in mid.signature.outputs()]
    # every output of every case checked: 2 seeds x (plain, offset)
    assert [c.name for c in res.outputs] == names * 4
    assert {c.case for c in res.outputs} == {"seed0", "seed1", f"seed0+offset{OFFSETS[mid.signature.dtype]:g}",
                                             f"seed1+offset{OFFSETS[mid.signature.dtype]:g}"}
    for c in res.outputs:
        assert c.ok and 0 <= c.ratio <= 1 and c.max_abs >= 0
        assert c.dtype == dict((n, dt) for n, _, dt in mid.signature.outputs())[c.name]
    # tolerances recorded for the output dtypes
    assert mid.signature.dtype in res.tolerance["by_dtype"]
    assert res.tolerance["by_dtype"][mid.signature.dtype]["atol"] == tolerance(mid.signature.dtype).atol


def test_tolerances_have_margin_but_are_not_loose(kernels, cpu):
    """Correct kernels use a fraction of the tolerance for each dtype, yet an
    output moved past its bound by a couple of tolerance units fails, at the
    element that was moved."""
    for dtype in ("float32", "float16", "bfloat16"):
        mid = ModuleId(ln(dtype, 1), "manual")
        res = validate_kernel(kernels[(mid.key, False)], mid, CPU_TARGET, cpu)
        assert res.passed, res.reason
        assert max(c.ratio for c in res.outputs) < 0.75, res.outputs  # margin left for other shapes

        from boo_build.loader.hal import open_device
        from boo_build.loader.invoke import KernelRunner

        args = modules.sample_args(mid.signature, 0)
        got = KernelRunner(open_device(cpu.uri), kernels[(mid.key, False)], mid.func_name)(*args)
        y, ref = got[0], reference(mid.signature, args)[0]
        tol = tolerance(dtype)
        assert compare("output", "seed0", y, ref, tol).ok
        scale = error_scale(ref)
        for k in (0, 17, y.numel() - 1):
            bound = tol.atol * scale + tol.rtol * abs(float(ref.reshape(-1)[k]))
            bad = ref.clone().reshape(-1)
            bad[k] += 2 * bound
            check = compare("output", "seed0", bad.reshape(ref.shape), ref, tol)
            assert not check.ok
            assert check.worst_index == tuple(int(i) for i in torch.unravel_index(torch.tensor(k), ref.shape))
            assert check.ratio == pytest.approx(2.0, rel=1e-6)
        # A uniform relative error passes within rtol and fails once it passes
        # atol + rtol at the largest element (float16: 8 units of roundoff
        # each, bfloat16: 4): float32 and float16 catch 1 %, bfloat16 5 %.
        limit = tol.atol + tol.rtol
        assert not compare("output", "seed0", ref * (1 + 1.2 * limit), ref, tol).ok
        assert compare("output", "seed0", ref * (1 + 0.9 * tol.rtol), ref, tol).ok
        assert compare("output", "seed0", ref * 1.01, ref, tol).ok == (dtype == "bfloat16")
        assert not compare("output", "seed0", ref * 1.05, ref, tol).ok


# ------------------------------------------------------------ wrong kernels
@pytest.mark.parametrize("mid", PLANTED, ids=lambda m: m.key)
def test_planted_error_fails_and_names_the_worst_element(kernels, cpu, mid):
    vmfb = kernels[(mid.key, True)]
    assert vmfb != kernels.get((mid.key, False), b"")
    res = validate_kernel(vmfb, mid, CPU_TARGET, cpu)
    assert res.status == "failed"
    bad = [c for c in res.outputs if not c.ok]
    assert bad and all(c.name == "output" for c in bad)  # the statistics are still right
    worst = res.worst()
    assert worst.name == "output" and not worst.ok and worst.ratio > 1
    # the reason names the element and both values
    idx = ",".join(map(str, worst.worst_index))
    assert f"[{idx}]" in res.reason and "got" in res.reason and "expected" in res.reason
    # and that element really is the worst one, relative to its bound
    args = modules.sample_args(mid.signature, 0, 0.0 if worst.case == "seed0" else OFFSETS[mid.signature.dtype])
    ref = reference(mid.signature, args)[0]
    assert worst.expected == pytest.approx(float(ref[worst.worst_index]), rel=1e-12)
    assert worst.got == pytest.approx(worst.expected * 1.01, rel=5e-3, abs=1e-2)


def test_runtime_error_is_error_not_failed(kernels, cpu):
    mid = GOOD[0]
    junk = validate_kernel(b"not a vmfb" * 10, mid, CPU_TARGET, cpu)
    assert junk.status == "error" and "load failed" in junk.reason
    # a vmfb for a different signature: the runtime rejects the call
    other = ModuleId(rms("float16", 1), "aten")
    wrong = validate_kernel(kernels[(other.key, False)], mid, CPU_TARGET, cpu)
    assert wrong.status == "error", wrong.reason


# ------------------------------------------------------------ not run
def test_no_device_is_not_run_never_passed(kernels):
    mid = GOOD[0]
    for name in ("gfx942", "gfx90a", "gfx1100"):
        res = validate_kernel(kernels[(mid.key, False)], mid, catalogue()[name], None)
        assert res.status == "not run" and not res.passed
        assert res.reason == f"not run: no device ({name})"
        assert res.outputs == ()
    v4 = validate_kernel(kernels[(mid.key, False)], mid, catalogue()["cpu-x86-64-v4"], None)
    assert v4.status == "not run" and v4.reason.startswith("not run: ")
    # even the cpu target, when the caller has no device for it
    assert validate_kernel(kernels[(mid.key, False)], mid, CPU_TARGET, None).status == "not run"


# ------------------------------------------------------------ records
def test_cases_and_offsets():
    assert cases(ln("float32", 1), seeds=(0, 3)) == [
        ("seed0", 0, 0.0), ("seed0+offset100", 0, 100.0), ("seed3", 3, 0.0), ("seed3+offset100", 3, 100.0)]
    assert cases(ln("float16", 1), offset_case=False) == [("seed0", 0, 0.0)]
    # half-precision offsets keep a spacing of sigma/8 around the offset
    for dt, tdt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        off = OFFSETS[dt]
        assert float(torch.tensor(off + 0.125, dtype=tdt)) == off + 0.125
        assert float(torch.tensor(off + 0.0625, dtype=tdt)) in (off, off + 0.125)  # rounds: spacing is 1/8


def test_validation_result_json_round_trip():
    checks = (
        OutputCheck("output", "seed0", 1e-3, 2e-3, (1, 2, 3), 0.5, 0.499, False, 3.5, "float32"),
        OutputCheck("rstd", "seed0", float("nan"), float("inf"), (0,), float("nan"), 1.0, False, float("inf")),
        OutputCheck("grad_input", "seed0+offset100", 4e-6, 1.1, (0, 1), 7.7e-6, 3.7e-6, True, 0.2, "float32",
                    bound="conditioning", formula_error=5e-6),
    )
    res = ValidationResult("k-manual", "cpu", "failed", "why", checks, {"rule": "r"})
    text = json.dumps(res.to_json(), allow_nan=False)  # strict JSON
    back = ValidationResult.from_json(json.loads(text))
    assert back.module == "k-manual" and back.status == "failed" and back.tolerance == {"rule": "r"}
    assert back.outputs[0] == checks[0] and back.outputs[2] == checks[2]
    assert math.isnan(back.outputs[1].max_abs) and back.outputs[1].max_rel == math.inf
    # which floor decided is always written; the formula error where it was computed
    assert [c.get("bound") for c in res.to_json()["outputs"]] == ["scale", "scale", "conditioning"]
    assert [c.get("formula_error") for c in res.to_json()["outputs"]] == [None, None, 5e-6]
    assert "conditioning floor, float32's own error 5e-06" in checks[2].describe()
    with pytest.raises(ValueError):
        ValidationResult("k", "cpu", "ok")
    # records the build writes for targets without a device
    nr = ValidationResult(module="k", target="gfx942", status="not run", reason="not run: no device (gfx942)",
                          outputs=(), tolerance={})
    assert ValidationResult.from_json(nr.to_json()) == nr


def test_compare_nan_and_shape():
    ref = torch.zeros(2, 3, dtype=torch.float64)
    got = ref.clone()
    got[1, 2] = float("nan")
    c = compare("output", "seed0", got, ref, tolerance("float32"))
    assert not c.ok and c.worst_index == (1, 2) and c.ratio == math.inf
    c = compare("output", "seed0", torch.zeros(3, 2), ref, tolerance("float32"))
    assert not c.ok


def test_torch_eager_is_validated_as_the_loader_routes_it():
    """``validate_eager``: torch eager's results as the loader would route torch
    calls (``Op.eager_route``), checked like a kernel's. float32 passes; ATen's
    half-precision CPU backward sums the weight and bias gradients in half
    precision and fails at a few thousand rows; the half-precision forward's
    statistics come from ATen's mixed-type kernel and pass."""
    from boo_build.signature import KernelSignature
    from boo_build.stages.validate import validate_eager

    ok = validate_eager(KernelSignature.parse("layer_norm-f32-4096x64-n64-wb-m14"))
    assert ok.passed and ok.module == "layer_norm-f32-4096x64-n64-wb-m14-eager" and ok.outputs
    bad = validate_eager(KernelSignature.parse("layer_norm-bf16-4096x64-n64-wb-m12"))
    assert bad.status == "failed" and bad.reason.startswith(("grad_weight", "grad_bias"))
    # worse than both floors: float32's own error on those sums is far smaller
    worst = bad.worst()
    assert worst.formula_error is not None and worst.bound == "scale" and worst.ratio > 2
    assert validate_eager(KernelSignature.parse("layer_norm-bf16-37x768-n768-wb-m1")).passed
    dyn = validate_eager(KernelSignature.parse("rms_norm-f32-BATCHxSEQx64-n64-w-eps1em06-m6"))
    assert dyn.passed and any("@" in c.case for c in dyn.outputs)  # at its validation shapes


def test_torch_eagers_record_says_per_size_where_it_passed():
    """``eager_record``: a dynamic signature's verdict per row count, over its
    validation shapes and the bench shapes: ATen's half-precision weight and
    bias gradients pass at one row and fail at thousands."""
    from boo_build.signature import KernelSignature
    from boo_build.stages.validate import eager_record

    rec = eager_record(KernelSignature.parse("layer_norm-bf16-BATCHxSEQx64-n64-wb-m12"), "cpu", [[64, 1, 64]])
    assert rec.status == "failed" and rec.reason.startswith(("grad_weight", "grad_bias"))
    rows = dict(rec.by_rows)
    assert sorted(rows) == [1, 37, 64, 4101] and rows[1] and not rows[4101]
    static = eager_record(KernelSignature.parse("layer_norm-f32-64x64-n64-wb-m14"))
    assert static.to_json() == {"status": "passed", "reason": ""}


# ------------------------------------------------------------ ill-conditioned widths
def _narrow_kernels() -> dict[ModuleId, bytes]:
    """Layer norm of width 2 (``[1, 2]``) and RMS norm of width 1 (``[1]``): every mask in
    float32, the forward and the full backward in each half type; one implementation each
    (both are covered, alternating), exported and compiled for cpu two at a time: 20 small
    compiles (the masks in between add nothing a half type's full backward does not show)."""
    from concurrent.futures import ThreadPoolExecutor

    from boo_build.signature import KernelSignature
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir

    sigs = []
    for dtype, ln_masks, rms_masks in (("float32", (1, 2, 4, 6, 8, 10, 12, 14), (1, 2, 4, 6)),
                                       ("float16", (1, 14), (1, 6)), ("bfloat16", (1, 14), (1, 6))):
        sigs += [KernelSignature("layer_norm", (1, 2), (2,), dtype, m) for m in ln_masks]
        sigs += [rms(dtype, m, (1,), (1,)) for m in rms_masks]
    # ATen's half-precision forward rounds the float32 statistics to the input
    # dtype (the default manifest drops it for that too): the manual forward
    backwards = [s for s in sigs if not s.is_forward]
    mids = [ModuleId(s, "manual" if s.is_forward or backwards.index(s) % 2 else "aten") for s in sigs]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {mid: pool.submit(compile_mlir, export_mlir(mid), CPU_TARGET.flags) for mid in mids}
        out = {}
        for mid, fut in futures.items():
            res = fut.result()
            assert res.ok, f"{mid.key}: {res.error}"
            out[mid] = res.vmfb
    return out


@pytest.mark.build
def test_width_1_and_2_kernels_validate(cpu):
    """Ill-conditioned widths: at width 2 a layer norm's output is about +-1
    whatever the input, so its input gradient is tiny next to the rounding of
    ``x - mean`` at a mean offset; RMS norm of width 1 likewise. The scale
    floor alone refuses every implementation there (they are as accurate as
    torch's own op); under the conditioning floor they pass, and the record
    says which floor decided and float32's own error. The figures do not
    depend on the torch thread count."""
    kernels = _narrow_kernels()
    decided = set()
    for mid, vmfb in kernels.items():
        res = validate_kernel(vmfb, mid, CPU_TARGET, cpu)
        assert res.passed, f"{mid.key}: {res.reason}"
        assert res.tolerance["conditioning"]["factor"] == tolerances.FACTOR
        for c in res.outputs:
            # the conditioning floor is computed only where the scale floor was missed
            assert c.bound == tolerances.SCALE or (c.formula_error or 0) > 0
            if c.bound == tolerances.CONDITIONING:
                decided.add((mid.signature.op, mid.signature.dtype, c.name))
    # it decided for the input gradients, in float32 for both ops
    assert {("layer_norm", "float32", "grad_input"), ("rms_norm", "float32", "grad_input")} <= decided, decided
    assert {name for _, _, name in decided} == {"grad_input"}
    # the same record with torch on two threads as on one
    mid = next(m for m in kernels if m.signature.op == "layer_norm" and m.signature.mask == 14
               and m.signature.dtype == "float32")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = validate_kernel(kernels[mid], mid, CPU_TARGET, cpu).to_json()
        torch.set_num_threads(1)
        one = validate_kernel(kernels[mid], mid, CPU_TARGET, cpu).to_json()
    finally:
        torch.set_num_threads(before)
    assert one == two
    assert any(c["bound"] == "conditioning" for c in one["outputs"])
