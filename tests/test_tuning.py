"""Tuned lowering configurations (``--tune``, ``stages/tuning.py``): their names and
sets, and a real build on the cpu target that compiles one, validates it against
float64, times it beside the other candidates, records its configuration, and
stays up to date until the option changes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import boo, compiles

from boo_build.candidates import (
    TUNE_BACKWARD,
    TUNE_FORWARD,
    Candidate,
    applies,
    candidates,
    tune_params,
    tune_variant,
    tune_variants,
)
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.comparison import RoundsRecord
from boo_build.stages.selection import preference_order
from boo_build.targets import catalogue

FWD = KernelSignature("layer_norm", (2, 8, 64), (64,), "float32", 1)
NARROW = KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 1)
TUNED = tune_variant(*TUNE_FORWARD[0])  # the first forward configuration: a --tune 1 build's


def test_names_sets_and_where_they_apply():
    assert TUNED == "tune-r64-d8" and tune_params(TUNED) == (64, 8) and tune_params("nosd") is None
    c = Candidate.parse(f"manual+{TUNED}@local-sync")
    assert c.tuned and c.variant == TUNED and c.key == f"manual+{TUNED}@local-sync"
    assert not Candidate.parse("manual+nosd").tuned
    for bad in ("manual+tune-r0-d8", "manual+tune-r64", "manual+tune-x"):
        with pytest.raises(ValueError):
            Candidate.parse(bad)
    # the first N of the direction's set whose reduction vector fits a row; none where no row is that wide
    assert tune_variants(FWD, 2) == tuple(tune_variant(*p) for p in TUNE_FORWARD[:2])
    assert tune_variants(FWD.replace(mask=14), 1) == (tune_variant(*TUNE_BACKWARD[0]),)
    assert tune_variants(FWD, 0) == () and tune_variants(NARROW, 4) == ()
    assert applies(TUNED, ModuleId(FWD, "aten")) and not applies(TUNED, ModuleId(NARROW, "manual"))
    # only where a CPU target is explored
    cat = catalogue("x86_64")
    mid = lambda i: ModuleId(FWD, i)  # noqa: E731
    assert {c.variant for c in candidates(["manual"], cat["cpu"], mid, True, tune=1)} >= {TUNED}
    assert all(not c.tuned for c in candidates(["manual"], cat["cpu"], mid, False, tune=1))
    assert all(not c.tuned for c in candidates(["manual"], cat["gfx942"], mid, True, True, tune=1))


def test_tuned_candidates_are_preferred_last():
    names = [f"manual+{TUNED}", "aten+nosd@local-sync", "manual", f"aten+{TUNED}@local-sync", "aten"]
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
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shape = [2, 8, 64]
dtype = "float32"
masks = [1]
impls = ["manual"]
"""


@pytest.fixture(scope="module")
@compiles
def tuned(tmp_path_factory):
    """The manifest built with one tuned configuration (benchmarks on: candidates explored),
    rebuilt as is, then with two: (folder, each build's output)."""
    d = tmp_path_factory.mktemp("tuned")
    (d / "tiny.toml").write_text(TINY)
    runs = [boo("build", "tiny.toml", "--out", "out", "--tune", n, cwd=d).stdout for n in ("1", "1", "2")]
    return d, runs


def _summary(text: str, stage: str) -> tuple[int, int]:
    m = re.search(rf"{stage}\s+built (\d+), up to date (\d+)", text)
    assert m, text
    return int(m.group(1)), int(m.group(2))


@pytest.mark.build
def test_a_tuned_configuration_compiles_validates_and_is_timed(tuned):
    d, _ = tuned
    root = d / "out" / "tuned"
    stem = f"{ModuleId(FWD, 'manual').key}+{TUNED}"
    rec = json.loads((root / "vmfb" / "cpu" / f"{stem}.compile.json").read_text())
    assert rec["status"] == "ok" and rec["variant"] == TUNED
    (config,) = rec["tuning"].values()  # the forward's one dispatch, its root as compiled
    assert "vector_reduction = [0, 0, 64]" in config and "distribution = [1, 8, 0]" in config
    assert json.loads((root / "validate" / "cpu" / f"{stem}.json").read_text())["status"] == "passed"
    rounds = RoundsRecord.from_json(json.loads((root / "bench" / "cpu" / f"{FWD.key}.rounds.json").read_text()))
    timed = set(rounds.sizes[0].times)
    assert {f"manual+{TUNED}", f"manual+{TUNED}@local-sync", "manual"} <= timed
    # the bundle ships a tuned configuration only where it won: its entry then names it, as info does
    from boo_build.stages.pack import read_index

    te = read_index(d / "out" / "tuned-0.1.0.tar.zst")["kernels"][FWD.key]["targets"]["cpu"]
    shipped = te["impls"][te["selected"]]
    info = boo("info", "out/tuned-0.1.0.tar.zst", cwd=d).stdout
    assert f"manual+{TUNED}" in info
    page = (root / "report.html").read_text()
    if Candidate.parse(te["selected"]).tuned:
        assert shipped["tuning"] == rec["tuning"] and "tuned configuration of async_dispatch_0" in info
        assert "async_dispatch_0: distribution = [1, 8, 0]" in page
    else:
        assert "tuning" not in shipped and "tuned configuration" not in info
        assert "async_dispatch_0: distribution" not in page


@pytest.mark.build
def test_the_substituted_configuration_is_what_compiled_and_bytes_repeat(tuned, tmp_path):
    """The tuned vmfb is the edited configuration's code (LLVM vectors 64 lanes wide and more,
    which IREE's default of 8 never makes here), and compiling it again gives the same bytes."""
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.tuning import Tuning, compile_tuned

    d, _ = tuned
    root = d / "out" / "tuned"
    mlir = (root / "mlir" / f"{ModuleId(FWD, 'manual').key}.mlir").read_text()
    flags = catalogue()["cpu"].flags

    def widest(folder: Path) -> int:
        text = "".join(p.read_text() for p in folder.glob("*.codegen.ll"))
        return max(int(n) for n in re.findall(r"<(\d+) x float>", text))

    tc = compile_tuned(mlir, flags, Tuning(64, 8), extra=(f"--iree-hal-dump-executable-intermediates-to={tmp_path / 't'}",))
    base = compile_mlir(mlir, flags + (f"--iree-hal-dump-executable-intermediates-to={tmp_path / 'b'}",))
    assert tc.result is not None and tc.result.ok and base.ok
    assert widest(tmp_path / "t") >= 64 > widest(tmp_path / "b")
    built = (root / "vmfb" / "cpu" / f"{ModuleId(FWD, 'manual').key}+{TUNED}.vmfb").read_bytes()
    assert compile_tuned(mlir, flags, Tuning(64, 8)).result.vmfb == built != base.vmfb  # type: ignore[union-attr]


@pytest.mark.build
def test_a_rebuild_is_up_to_date_and_another_count_tunes_again(tuned):
    _, (first, again, more) = tuned
    assert _summary(first, "compile") == (4, 0)  # manual, nosd, lanes and the tuned one
    assert _summary(again, "compile") == (0, 4) and _summary(again, "bench") == (0, 1)
    # --tune 2: the second configuration compiles (the others are up to date), the kernel is timed again
    assert _summary(more, "compile") == (1, 4) and _summary(more, "bench") == (1, 0)
