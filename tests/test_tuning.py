"""Tuned lowering configurations (``--tune``, ``stages/tuning.py``): their names and
sets, and one real build (a float32 forward on the cpu target, sm_80 without its device
and Mesa's lavapipe, ``--tune 2 --all-variants``) that compiles them, validates them
against float64 (cpu, lavapipe), times the CPU ones beside the other candidates, records
their configuration, and is up to date when run again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import boo_main, compiles

from boo_build.build.tasks import BuildConfig
from boo_build.candidates import (
    TUNE_BACKWARD,
    TUNE_FORWARD,
    TUNE_LLVMGPU,
    TUNE_SPIRV,
    Candidate,
    applies,
    candidates,
    gpu_tune_params,
    gpu_tune_variant,
    tune_params,
    tune_variant,
    tune_variants,
)
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.comparison import RoundsRecord
from boo_build.stages.selection import preference_order
from boo_build.targets import catalogue

FWD = KernelSignature("layer_norm", (2, 8, 256), (256,), "float32", 1)  # the build's kernel
NARROW = KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 1)
TUNED = tune_variant(*TUNE_FORWARD[0])  # the first forward configuration
GPU_OWN = gpu_tune_variant(*TUNE_LLVMGPU[0])  # sm_80's first: IREE's own for this row (64 threads of 4)
GPU_TUNED = gpu_tune_variant(128, 2)  # its second
VK_TUNED = gpu_tune_variant(*TUNE_SPIRV[0])  # lavapipe's first (IREE's own: 64 threads)
STEM = ModuleId(FWD, "aten").key


def test_names_sets_and_where_they_apply():
    assert TUNED == "tune-r64-d8" and tune_params(TUNED) == (64, 8) and tune_params("nosd") is None
    assert gpu_tune_params(GPU_OWN) == (64, 4) and gpu_tune_params(TUNED) is None
    c = Candidate.parse(f"manual+{TUNED}@local-sync")
    assert c.tuned and c.variant == TUNED and c.key == f"manual+{TUNED}@local-sync"
    assert Candidate.parse(f"aten+{GPU_TUNED}").tuned and not Candidate.parse("manual+nosd").tuned
    for bad in ("manual+tune-r0-d8", "manual+tune-r64", "manual+tune-x", "manual+tune-wg64", "manual+tune-wg0-t4"):
        with pytest.raises(ValueError):
            Candidate.parse(bad)
    # CPU: the first N of the direction's set whose reduction vector fits a row; none where no row is that wide
    assert tune_variants(FWD, 2) == tuple(tune_variant(*p) for p in TUNE_FORWARD[:2])
    assert tune_variants(FWD.replace(mask=14), 1) == (tune_variant(*TUNE_BACKWARD[0]),)
    assert tune_variants(FWD, 0) == () and tune_variants(NARROW, 4) == ()
    assert applies(TUNED, ModuleId(FWD, "aten")) and not applies(TUNED, ModuleId(NARROW, "manual"))
    # GPU: the family's set (LLVMGPU on HIP and CUDA, SPIR-V on Vulkan) whose tile divides a row
    cat = catalogue("x86_64")
    assert tune_variants(FWD, 2, cat["sm_80"]) == tune_variants(FWD, 2, cat["gfx942"]) == (
        GPU_OWN, GPU_TUNED)  # 256 threads of 4 do not divide 256
    assert tune_variants(FWD, 2, cat["vulkan-llvmpipe"]) == tuple(gpu_tune_variant(*p) for p in TUNE_SPIRV[:2])
    assert tune_variants(NARROW, 3, cat["gfx942"]) == () and not applies(GPU_TUNED, ModuleId(NARROW, "aten"))
    # CPU targets where explored; GPU targets only with --all-variants, modelled or explored
    mid = lambda i: ModuleId(FWD, i)  # noqa: E731
    assert {c.variant for c in candidates(["manual"], cat["cpu"], mid, True, tune=1)} >= {TUNED}
    assert all(not c.tuned for c in candidates(["manual"], cat["cpu"], mid, False, tune=1))
    plain, every = (BuildConfig((), Path("out"), tune=2, all_variants=a) for a in (False, True))
    assert plain.tune_for(cat["cpu"]) == every.tune_for(cat["cpu"]) == every.tune_for(cat["sm_80"]) == 2
    assert plain.tune_for(cat["sm_80"]) == plain.tune_for(cat["vulkan"]) == 0
    assert {c.variant for c in candidates(["aten"], cat["sm_80"], mid, False, True, tune=2)} == {
        "", *tune_variants(FWD, 2, cat["sm_80"])}


def test_tuned_candidates_are_preferred_last():
    names = [f"manual+{TUNED}", "aten+nosd@local-sync", "manual", f"aten+{TUNED}@local-sync", "aten",
             f"aten+{GPU_TUNED}"]
    order = preference_order(names)
    assert order[:3] == ["manual", "aten", "aten+nosd@local-sync"]
    assert {Candidate.parse(n).tuned for n in order[3:]} == {True}


def test_a_tuned_configuration_replaces_the_choice_only_beyond_the_noise():
    """Recorded samples (two passes of 12 rounds): a tuned configuration 5 % faster than the candidate a build
    without tuning would ship is a tie, the other one ships; 40 % faster, the tuned one ships."""
    from boo_build.stages.comparison import Rounds, choose

    base = [10.0 + 0.1 * (i % 3) for i in range(24)]
    tuned = f"manual+{TUNED}"
    for factor, winner in ((0.95, "manual"), (0.6, tuned)):
        r = Rounds({"manual": base, tuned: [t * factor for t in base], "eager": [12.0] * 24}, (12, 12))
        assert choose(r, preference_order(["manual", tuned])).winner == winner


TINY = """\
[bundle]
name = "tuned"
version = "0.1.0"
targets = ["cpu", "sm_80", "vulkan-llvmpipe"]

[[kernels]]
op = "layer_norm"
input_shape = [2, 8, 256]
dtype = "float32"
masks = [1]
impls = ["aten"]
"""


@pytest.fixture(scope="module")
@compiles
def tuned(tmp_path_factory):
    """The manifest built with one tuned configuration per target (sm_80's and lavapipe's with
    --all-variants), then again as is: (folder, each build's output)."""
    d = tmp_path_factory.mktemp("tuned")
    (d / "tiny.toml").write_text(TINY)
    runs = [boo_main("build", "tiny.toml", "--out", "out", "--tune", "1", "--all-variants", cwd=d).stdout
            for _ in range(2)]
    return d, runs


def _ran(text: str, stage: str) -> list[str]:
    """The tasks of ``stage`` a build's progress lines say ran (up-to-date ones print none)."""
    return re.findall(rf"^\[[^]]*\] \S+(?: \S+)?\s+{stage}:tuned/(\S+)$", text, re.M)


def _record(d: Path, target: str, stem: str, kind: str = "vmfb") -> dict:
    root = d / "out" / "tuned"
    return json.loads((root / kind / target / (f"{stem}.compile.json" if kind == "vmfb" else f"{stem}.json"))
                      .read_text())


def _index(d: Path) -> dict:
    from boo_build.stages.pack import read_index

    return read_index(d / "out" / "tuned-0.1.0.tar.zst")["kernels"][FWD.key]["targets"]


@pytest.mark.build
def test_a_tuned_configuration_compiles_validates_and_is_timed(tuned):
    d, _ = tuned
    rec = _record(d, "cpu", f"{STEM}+{TUNED}")
    assert rec["status"] == "ok" and rec["variant"] == TUNED
    (config,) = rec["tuning"].values()  # the forward's one dispatch, its root as compiled
    assert "vector_reduction = [0, 0, 64]" in config and "distribution = [1, 8, 0]" in config, config
    assert _record(d, "cpu", f"{STEM}+{TUNED}", "validate")["status"] == "passed"
    rounds = RoundsRecord.from_json(json.loads((d / "out" / "tuned" / "bench" / "cpu" / f"{FWD.key}.rounds.json")
                                               .read_text()))
    assert {f"aten+{TUNED}", f"aten+{TUNED}@local-sync", "aten"} <= set(rounds.sizes[0].times)
    # the bundle ships a tuned configuration only where it won: its entry then names it, as info does
    te = _index(d)["cpu"]
    shipped = te["impls"][te["selected"]]
    info = boo_main("info", "out/tuned-0.1.0.tar.zst", cwd=d).stdout
    assert f"aten+{TUNED}" in info
    page = (d / "out" / "tuned" / "report.html").read_text()
    if Candidate.parse(te["selected"]).tuned:
        sel = _record(d, "cpu", f"{STEM}+{Candidate.parse(te['selected']).variant}")
        assert shipped["tuning"] == sel["tuning"] and "tuned configuration of async_dispatch_0" in info
        assert "async_dispatch_0: distribution = [1, 8, 0]" in page
    else:
        assert "tuning" not in shipped and "tuned configuration" not in info
        assert "async_dispatch_0: distribution" not in page


@pytest.mark.build
def test_the_substituted_configuration_is_what_compiled_and_bytes_repeat(tuned, tmp_path):
    """The tuned CPU vmfb is the edited configuration's code (LLVM vectors 64 lanes wide and more; IREE's
    own configuration, a reduction vector of 8, makes 16 at most here), and compiling it again gives the
    build's bytes."""
    from boo_build.stages.tuning import Tuning, compile_tuned

    d, _ = tuned
    vmfb = d / "out" / "tuned" / "vmfb" / "cpu"
    mlir = (d / "out" / "tuned" / "mlir" / f"{STEM}.mlir").read_text()
    tc = compile_tuned(mlir, catalogue()["cpu"].flags, Tuning(64, 8),
                       extra=(f"--iree-hal-dump-executable-intermediates-to={tmp_path}",))
    assert tc.result is not None and tc.result.ok
    text = "".join(p.read_text() for p in tmp_path.glob("*.codegen.ll"))
    assert max(int(n) for n in re.findall(r"<(\d+) x float>", text)) >= 64
    assert tc.result.vmfb == (vmfb / f"{STEM}+{TUNED}.vmfb").read_bytes() != (vmfb / f"{STEM}.vmfb").read_bytes()


@pytest.mark.build
def test_gpu_configurations_build_with_all_variants(tuned):
    """sm_80, no device: with --all-variants the tuned candidate is modelled (the baseline's traffic: the same
    dispatches) and passes the model's gate; this one is IREE's own choice for a row of 256, so it compiles
    nothing and says so, and the bundle ships the default the model chose."""
    d, _ = tuned
    root = d / "out" / "tuned"
    own = _record(d, "sm_80", f"{STEM}+{GPU_OWN}")
    assert own["status"] == "unavailable" and "IREE's own configuration" in own["reason"], own
    traffic = json.loads((root / "traffic" / "sm_80" / f"{STEM}+{GPU_OWN}.json").read_text())
    assert traffic["traffic"] == json.loads((root / "traffic" / "sm_80" / f"{STEM}.json").read_text())["traffic"]
    te = _index(d)["sm_80"]
    assert te["selected"] == "aten" and te["reason"].startswith("least modelled traffic"), te


@pytest.mark.build
def test_gpu_configurations_are_what_compiles(tuned, tmp_path):
    """The edited workgroup is the code's: sm_80's PTX (``.maxntid``, in the vmfb's bytes: 128 threads, IREE's
    own 64) and gfx942's LLVM IR (its flat workgroup size, two waves of 64)."""
    from boo_build.stages.tuning import GpuTuning, compile_tuned

    d, _ = tuned
    mlir = (d / "out" / "tuned" / "mlir" / f"{STEM}.mlir").read_text()
    cat = catalogue()
    tc = compile_tuned(mlir, cat["sm_80"].flags, GpuTuning(128, 2))
    assert tc.result is not None and tc.result.ok, tc
    assert re.findall(rb"\.maxntid (\d+)", tc.result.vmfb) == [b"128"]
    base = (d / "out" / "tuned" / "vmfb" / "sm_80" / f"{STEM}.vmfb").read_bytes()
    assert re.findall(rb"\.maxntid (\d+)", base) == [b"64"]
    (config,) = tc.applied.values()
    assert config.startswith("workgroup_size = [128, 1, 1]") and "thread = [0, 0, 2]" in config, config
    hip = compile_tuned(mlir, cat["gfx942"].flags, GpuTuning(128, 2),
                        extra=(f"--iree-hal-dump-executable-intermediates-to={tmp_path}",))
    assert hip.result is not None and hip.result.ok, hip
    ir = "".join(p.read_text() for p in tmp_path.glob("*.linked.ll"))
    assert set(re.findall(r'"amdgpu-flat-work-group-size"="(\d+),', ir)) == {"128"}
    assert "subgroup_basis = [[1, 1, 2], [0, 1, 2]]" in next(iter(hip.applied.values()))


@pytest.mark.build
@pytest.mark.vulkan
def test_a_vulkan_configuration_validates_on_lavapipe(tuned):
    d, _ = tuned
    rec = _record(d, "vulkan-llvmpipe", f"{STEM}+{VK_TUNED}")
    assert rec["status"] == "ok" and next(iter(rec["tuning"].values())).startswith("workgroup_size = [32, 1, 1]"), rec
    val = _record(d, "vulkan-llvmpipe", f"{STEM}+{VK_TUNED}", "validate")
    assert val["status"] == "passed" and val["software"] == "llvmpipe", val
    te = _index(d)["vulkan-llvmpipe"]
    shipped = te["impls"][f"aten+{VK_TUNED}"]  # beside the default (lavapipe's timings are the CPU's: not used)
    assert shipped["validation"]["status"] == "passed" and shipped["tuning"] == rec["tuning"]


@pytest.mark.build
def test_a_rebuild_is_up_to_date(tuned):
    _, (first, again) = tuned
    tuned_modules = {f"{t}/{STEM}+{v}" for t, v in (("cpu", TUNED), ("sm_80", GPU_OWN),
                                                      ("vulkan-llvmpipe", VK_TUNED))}
    assert tuned_modules <= set(_ran(first, "compile")) and len(_ran(first, "compile")) == 7  # + aten x3, nosd
    assert f"sm_80/{STEM}+{GPU_OWN}" in _ran(first, "traffic")  # the baseline's model, copied
    for stage in ("export", "compile", "traffic", "validate", "bench", "select"):
        assert _ran(again, stage) == [], (stage, again)
