"""`boo-build measure` and the prepared GPU script, on the CPU: a real build
of a tiny manifest for cpu and sm_80, then benchmarks/gpu/run.sh --cpu in a
process where the build side (iree.compiler, iree.turbine, doit) cannot be
imported."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from helpers import REPO, boo, compiles

from boo_build.loader import open_bundle
from boo_build.loader.archive import read_archive
from boo_build.loader.devices import cpu_device
from boo_build.records import BenchResult, ValidationResult

TINY = """
[bundle]
name = "tiny"
version = "0.1.0"
targets = ["cpu", "sm_80"]

[[kernels]]
op = "layer_norm"
input_shape = [4, 64]
dtype = "float32"
masks = [1, 14]

[[kernels]]
op = "rms_norm"
input_shape = [3, 96]
dtype = "bfloat16"
affine = true
masks = [1]
"""

# Installed as sitecustomize in the measuring processes: the build side
# cannot be imported there, and each process logs what it holds at exit.
BLOCKER = textwrap.dedent('''
    import atexit, importlib.abc, os, sys
    BLOCKED = ("iree.compiler", "iree.turbine", "doit")
    LOG = os.environ["BOO_BLOCK_LOG"]

    def _hit(name):
        return any(name == b or name.startswith(b + ".") for b in BLOCKED)

    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if _hit(name):
                with open(LOG, "a") as f:
                    f.write(f"attempt {name}\\n")
                raise ImportError(f"{name} is blocked: measuring must not need the build side")
            return None

    sys.meta_path.insert(0, _Block())

    @atexit.register
    def _held():
        with open(LOG, "a") as f:
            f.write(f"exit {sorted(m for m in sys.modules if _hit(m))} {' '.join(sys.argv[:2])}\\n")
''')


@pytest.fixture(scope="module")
@compiles
def tiny(tmp_path_factory) -> Path:
    """The tiny bundle, built without validation: both implementations shipped on both targets."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "tiny.toml").write_text(TINY)
    boo("build", "tiny.toml", "--out", "out", "--no-validate", "-j", "2", cwd=d)
    return d / "out" / "tiny-0.1.0.tar.zst"


def test_build_for_sm80(tiny):
    proc = boo("info", str(tiny), cwd=tiny.parent)
    out = proc.stdout
    assert re.search(r"^\s+sm_80\s+cuda\s+sm_80\s+available 3, unavailable 0$", out, re.M), out
    assert "flags: --iree-hal-target-device=cuda --iree-cuda-target=sm_80 --iree-opt-level=O3" in out
    index = read_archive(tiny).index
    for key, k in index["kernels"].items():
        te = k["targets"]["sm_80"]
        # the implementations that compile, and the backward's fused variant where the model ranks it first
        # (at O3 the manual mask-14 backward fails "to distribute" on sm_80, as on some gfx targets)
        assert te["status"] == "available" and "aten" in te["impls"], key
        assert set(te["impls"]) <= {"aten", "manual", "manual+fused"}, key
        assert ("manual+fused" in te["impls"]) == (te["selected"] == "manual+fused"), key
        # chosen by the traffic model until a device measures it (docs/gpu-traffic.md)
        assert te["reason"].startswith("least modelled traffic, until measured") and "not run" in te["reason"]
        sel = re.escape(te["selected"])
        more = len(te["impls"]) - 1
        assert re.search(rf"^    {re.escape(key)}\n(.*\n)*?\s+sm_80\s+{sel} \(\+{more} more\)", out, re.M), key
    backward = index["kernels"]["layer_norm-f32-4x64-n64-wb-m14"]["targets"]["sm_80"]
    assert backward["selected"] == "manual+fused"  # fewer modelled bytes than aten's (docs/gpu-traffic.md)


def test_run_script_measures_on_the_cpu_without_the_build_side(tiny, tmp_path):
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER)
    log = tmp_path / "held.log"
    results = tmp_path / "results"
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(block), "BOO_BLOCK_LOG": str(log)}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu" / "run.sh"), "--cpu", "--bundle", str(tiny),
                           "--out", str(results)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # the build side was never imported: no attempt, nothing held at exit, in every process
    held = log.read_text().splitlines()
    assert not [ln for ln in held if ln.startswith("attempt")], held
    exits = [ln for ln in held if ln.startswith("exit")]
    assert any("boo_build/cli/__main__.py measure" in ln for ln in exits) and any("check_ordering.py" in ln for ln in exits), held
    assert all(ln.startswith("exit [] ") for ln in exits), held

    old, new = read_archive(tiny), read_archive(results / "measured.tar.zst")
    table = (results / "results.md").read_text()
    for key, k in new.index["kernels"].items():
        te = k["targets"]["cpu"]
        # every shipped implementation validated and timed here, and the selection follows the timings
        vals = {i: ValidationResult.from_json(r["validation"]) for i, r in te["impls"].items()}
        bens = {i: BenchResult.from_json(r["benchmark"]) for i, r in te["impls"].items()}
        assert sorted(te["impls"]) == ["aten", "manual"] and all(v.passed for v in vals.values()), key
        assert all(b.ok and b.target == "cpu" for b in bens.values()), key
        # timed as a build times: the implementations and torch eager in paired rounds, decided there
        timing = te["timing"]
        assert timing["rounds"] >= 12 and timing["eager"]["a"] == te["selected"] and timing["eager"]["b"] == "eager"
        assert te["reason_kind"] in ("fastest", "tied"), te["reason"]
        assert te["measured"]["eager"]["status"] == "ok" and te["measured"]["bytes"] > 0
        # torch eager's results as the loader routes them, validated here too (float32: they pass)
        assert te["measured"]["eager"]["validation"] == {"status": "passed", "reason": ""}, key
        # the kernel runs torch calls only where the paired rounds found it faster beyond 10 % and the noise
        assert ("prefer_eager" in te) == (timing["eager"]["verdict"] != "faster"), key
        assert te["measured"]["torch_compile"]["status"] == "ok", te["measured"]["torch_compile"]
        # torch.compile timed in the same rounds, as a build's baseline: the compile backend's verdict
        assert timing["compiled"]["a"] == te["selected"] and timing["compiled"]["b"] == "torch.compile", key
        assert "graph" in te["vs_compiled"] and te["vs_compiled"]["op_s"] > te["vs_compiled"]["compiled_s"] > 0, key
        # not measured here: the old record, untouched
        assert k["targets"]["sm_80"] == old.index["kernels"][key]["targets"]["sm_80"]
        row = next(ln for ln in table.splitlines() if ln.startswith(f"| `{key}` | cpu |"))
        assert "aten passed, manual passed" in row and f"| {te['selected']} |" in row
    prov = new.index["provenance"]["measured"]
    assert sorted(prov) == ["cpu"] and prov["cpu"]["device"]["arch"] == cpu_device().arch
    assert prov["cpu"]["peak_gbs"] is None and "peak bandwidth unknown" in table
    rows = list(csv.DictReader(io.StringIO(new.members["bench.csv"].decode())))
    assert {(r["key"], r["target"]) for r in rows} == {(k, t) for k in new.index["kernels"] for t in ("cpu", "sm_80")}
    assert all(r["selected"] == new.index["kernels"][r["key"]]["targets"]["cpu"]["selected"]
               for r in rows if r["target"] == "cpu")
    results_json = json.loads((results / "results.json").read_text())
    assert {k["key"] for k in results_json["kernels"]} == set(new.index["kernels"])
    assert "all checks passed" in (results / "ordering.md").read_text()
    assert "measure exit 0, ordering exit 0" in (results / "summary.md").read_text()
    # the loader opens and runs the new bundle
    assert open_bundle(results / "measured.tar.zst").target.name == "cpu"
    # everything the script wrote, in one archive too (where only one file comes back from the device)
    with tarfile.open(results / "results.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["device.txt", "measured.tar.zst", "ordering.md", "results.json",
                                          "results.md", "summary.md"]  # no ordering-async.md: CPU
        assert tar.extractfile("measured.tar.zst").read() == (results / "measured.tar.zst").read_bytes()


@pytest.mark.build
def test_measure_drops_an_implementation_that_fails(tmp_path):
    (tmp_path / "one.toml").write_text(TINY.split("[[kernels]]")[0].replace('"cpu", "sm_80"', '"cpu"')
                                       + '[[kernels]]\nop = "layer_norm"\ninput_shape = [4, 64]\nmasks = [1]\n')
    # the test switch plants an error in the manual implementation at export
    boo("build", "one.toml", "--out", "out", "--no-validate", cwd=tmp_path,
        extra_env={"BOO_BUILD_TEST_PLANT_ERROR": "1"})
    src = tmp_path / "out" / "tiny-0.1.0.tar.zst"
    proc = boo("measure", str(src), "--out", str(tmp_path / "new"), "--no-compile", "-q", cwd=tmp_path,
               check=False)
    assert proc.returncode == 1, proc.stderr
    new = read_archive(tmp_path / "new" / "tiny-0.1.0.tar.zst")
    (key, k), = new.index["kernels"].items()
    te = k["targets"]["cpu"]
    assert te["selected"] == "aten" and list(te["impls"]) == ["aten"]
    assert te["rejected"]["manual"].startswith("failed validation: output (seed0)")
    assert not any("manual" in m for m in new.members)
    assert f"`{key}` cpu manual: failed:" in proc.stdout and "| aten passed, manual failed | aten |" in proc.stdout
    assert te["measured"]["torch_compile"]["status"] == "skipped"
    assert te["vs_compiled"] == {"untimed": "not timed: --no-compile"}  # the backend decides against eager


def test_measure_refuses_when_no_device_runs_the_bundle(tiny, tmp_path):
    proc = boo("measure", str(tiny), "--out", str(tmp_path / "new"), "--targets", "sm_80", cwd=tmp_path,
               check=False)
    assert proc.returncode == 2
    assert "no device on this machine runs a target" in proc.stderr
    assert "sm_80: not run: no device (sm_80)" in proc.stderr and "cpu: not asked for" in proc.stderr
    proc = boo("measure", str(tiny), "--out", str(tmp_path / "new"), "--targets", "gfx942", cwd=tmp_path,
               check=False)
    assert proc.returncode == 2 and "gfx942 not in the bundle; it has cpu, sm_80" in proc.stderr
    assert not (tmp_path / "new").exists()
