"""The doit graph, driven through the real `boo-build` CLI in subprocesses:
real export, real iree-compile, small shapes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import BIN, REPO, boo, compiles, env

from boo_build.stages.compile import COMPILER_ENV, compiler_path

pytestmark = pytest.mark.build  # every test builds through the real graph

SMALL = """
[bundle]
name = "small"
version = "0.1.0"
targets = ["cpu", "gfx942"]

[[kernels]]
op = "layer_norm"
input_shape = [4, 6, 10]
dtype = "float32"
masks = [1, 14]

[[kernels]]
op = "rms_norm"
input_shape = [3, 37]
dtype = "bfloat16"
masks = [6]
"""


def records(out: Path, kind: str) -> dict[str, dict]:
    """stage records by path relative to the bundle folder."""
    pattern = {"export": "mlir/*.export.json", "compile": "vmfb/*/*.compile.json",
               "validate": "validate/*/*.json"}[kind]
    return {str(p.relative_to(out / "small")): json.loads(p.read_text()) for p in (out / "small").glob(pattern)}


def run_ids(out: Path, kind: str) -> dict[str, str]:
    return {k: v["run_id"] for k, v in records(out, kind).items()}


@pytest.fixture(scope="module")
@compiles
def built(tmp_path_factory):
    """One cold build of the small manifest (validation on: cpu kernels run)."""
    d = tmp_path_factory.mktemp("graph")
    (d / "small.toml").write_text(SMALL)
    proc = boo("build", "small.toml", "--out", "out", "--no-bench", cwd=d)
    return d, proc


def test_cold_build_produces_every_vmfb_and_reports(built):
    d, proc = built
    out = d / "out"
    comp = records(out, "compile")
    # 3 signatures x 2 impls x 2 targets, and on gfx942 the GPU variants of the 2 backwards
    # (manual+fused, manual+fused.nosplit), ranked by the traffic model
    base = {k: r for k, r in comp.items() if "+" not in k}
    assert len(base) == 12 and len(comp) == 12 + 2 * 2
    assert all(r["status"] == "ok" for r in base.values()), base
    for sig in ("layer_norm-f32-4x6x10-n10-wb-m14", "rms_norm-bf16-3x37-n37-w-m6"):
        variants = {k: r for k, r in comp.items() if "+" in k and sig in k}
        assert len(variants) == 2 and all(k.startswith("vmfb/gfx942/") for k in variants)
        assert sum(r["status"] == "ok" for r in variants.values()) <= 1  # the best-modelled one, where it wins
        assert all(r["reason"].startswith("least modelled traffic is") for r in variants.values()
                   if r["status"] != "ok")
    # every kernel compiled somewhere: its fallback step (one per kernel and target with fallback
    # variants: nosd, stack; nosplit and novd on gfx942) tried none, and wrote nothing else
    fallbacks = {str(p.relative_to(out / "small")): json.loads(p.read_text())
                 for p in (out / "small").glob("vmfb/*/*.fallback.json")}
    assert len(fallbacks) == 6 and {r["status"] for r in fallbacks.values()} == {"not tried"}
    assert {r["reason"] for r in fallbacks.values()} == {"not needed: aten compiled"}
    for rel in (k for k, r in comp.items() if r["status"] == "ok"):
        vmfb = out / "small" / rel.replace(".compile.json", ".vmfb")
        assert vmfb.stat().st_size > 1000
    report = json.loads((out / "small" / "build-report.json").read_text())
    for k in report["kernels"]:
        assert k["targets"]["cpu"]["validation"] == "passed"
        # honest status: no gfx942 device here
        assert k["targets"]["gfx942"]["validation"].startswith("not run")
        assert k["targets"]["gfx942"]["status"] == "available"
    assert proc.stdout.strip().splitlines()[-1].endswith("small-0.1.0.tar.zst")
    assert "gfx942" in proc.stdout and "not validated 3" in proc.stdout


def test_cpu_vmfbs_load_and_run(built):
    import iree.runtime as rt

    d, _ = built
    vmfbs = sorted((d / "out" / "small" / "vmfb").glob("*/*.vmfb"))
    # one per compile record that says ok: none missing, on every target
    ok = sorted(r.with_name(r.name.removesuffix(".compile.json") + ".vmfb")
                for r in (d / "out" / "small" / "vmfb").glob("*/*.compile.json")
                if json.loads(r.read_text())["status"] == "ok")
    assert vmfbs and vmfbs == ok and {v.parent.name for v in vmfbs} == {"cpu", "gfx942"}
    for vmfb in vmfbs:
        # every vmfb loads; the cpu ones were run by validation in the build
        cfg = rt.Config("local-task")
        rt.VmModule.copy_buffer(cfg.vm_instance, vmfb.read_bytes())


def test_noop_rebuild_runs_nothing(built):
    d, _ = built
    before = {**run_ids(d / "out", "export"), **run_ids(d / "out", "compile")}
    # the same build named by absolute paths from another folder (as the
    # dodo.py does) shares the up-to-date state of the relative one
    proc = boo("build", str(d / "small.toml"), "--out", str(d / "out"), "--no-bench", cwd=d.parent)
    after = {**run_ids(d / "out", "export"), **run_ids(d / "out", "compile")}
    assert before == after
    assert "export   built 0" in proc.stdout and "compile  built 0" in proc.stdout
    assert "select   built 0" in proc.stdout  # each kernel decided once: its records are unchanged


def test_identical_reexport_recompiles_nothing(built):
    # later stages depend on content, not on the run that wrote it
    d, _ = built
    out = d / "out"
    exports, compiles, validations = (run_ids(out, k) for k in ("export", "compile", "validate"))
    assert validations
    for rec in (out / "small" / "mlir").glob("*.export.json"):
        rec.unlink()
    proc = boo("build", "small.toml", "--out", "out", "--no-bench", cwd=d)
    again = run_ids(out, "export")
    assert again.keys() == exports.keys() and all(again[k] != exports[k] for k in exports)
    assert run_ids(out, "compile") == compiles and run_ids(out, "validate") == validations
    assert f"export   built {len(exports)}" in proc.stdout and "compile  built 0" in proc.stdout


def test_vmfbs_are_byte_identical_across_builds(built, tmp_path):
    d, _ = built
    (tmp_path / "small.toml").write_text(SMALL)
    boo("build", "small.toml", "--out", "out", "--no-validate", "--targets", "cpu", cwd=tmp_path)
    a = {p.name: p.read_bytes() for p in (d / "out/small/vmfb/cpu").glob("*.vmfb")}
    b = {p.name: p.read_bytes() for p in (tmp_path / "out/small/vmfb/cpu").glob("*.vmfb")}
    assert a and a == b


def test_edit_one_entry_or_one_targets_flags_reruns_only_their_tasks(tmp_path):
    """One cold build, then two incremental ones in the same folder (each against the one before)."""
    (tmp_path / "small.toml").write_text(SMALL)
    boo("build", "small.toml", "--out", "out", "--no-validate", cwd=tmp_path)
    before = run_ids(tmp_path / "out", "compile")
    # change the rms entry's masks: 6 -> 2; the layer_norm entries are untouched
    (tmp_path / "small.toml").write_text(SMALL.replace("masks = [6]", "masks = [2]"))
    boo("build", "small.toml", "--out", "out", "--no-validate", cwd=tmp_path)
    after = run_ids(tmp_path / "out", "compile")
    new = {k for k in after if k not in before}
    assert new and all("rms_norm" in k and "-m2-" in k for k in new)
    assert all(after[k] == before[k] for k in after if "layer_norm" in k)
    # change one target's flags: only that target's modules compile again
    before = after
    boo("build", "small.toml", "--out", "out", "--no-validate",
        "--flag", "gfx942=--iree-opt-level=O2", cwd=tmp_path)
    after = run_ids(tmp_path / "out", "compile")
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {k for k in after if k.startswith("vmfb/gfx942/") and "-m6" not in k}, changed


def test_broken_mlir_fails_alone_and_sets_exit_status(tmp_path):
    (tmp_path / "small.toml").write_text(SMALL)
    boo("build", "small.toml", "--out", "out", "--no-validate", cwd=tmp_path)
    victim = next((tmp_path / "out/small/mlir").glob("rms_norm-*-manual.mlir"))
    victim.write_text("module { func.func @broken( }\n")
    before = run_ids(tmp_path / "out", "compile")
    proc = boo("build", "small.toml", "--out", "out", "--no-validate", cwd=tmp_path)
    comp = records(tmp_path / "out", "compile")
    failed = {k for k, r in comp.items() if r["status"] == "failed"}
    assert failed == {f"vmfb/{t}/{victim.stem}.compile.json" for t in ("cpu", "gfx942")}
    assert all("error" in comp[k]["error"] for k in failed)
    # the others were neither rebuilt nor lost, but for the signature's GPU variants:
    # the traffic model's inputs changed (manual's model is gone), so they decided again
    sig = victim.stem.removesuffix("-manual")
    redecided = {k for k in comp if k.startswith(f"vmfb/gfx942/{sig}-") and "+" in k}
    assert len(redecided) == 2
    assert all(comp[k]["run_id"] == before[k] for k in comp if k not in failed | redecided)
    # only one impl of that signature failed: the kernel is still available (aten),
    # and the summary and report say why manual is not shipped
    report = json.loads((tmp_path / "out/small/build-report.json").read_text())
    rms = next(k for k in report["kernels"] if k["key"].startswith("rms_norm"))
    assert rms["targets"]["cpu"]["status"] == "available" and rms["targets"]["cpu"]["selected"] == "aten"
    rejected = rms["targets"]["cpu"]["decision"]["rejected"]["manual"]  # the select record's, in the report
    assert rejected["kind"] == "compile-failed" and "compile failed" in rejected["text"]
    # the summary says "dropped" (not FAILED) for it, and names what ships instead
    summary = proc.stdout[proc.stdout.index("== small 0.1.0 =="):]
    assert re.search(rf"^  dropped  {victim.stem} on cpu: compile failed: .* \(ships aten\)$", summary, re.M)
    assert "FAILED" not in summary and "a dropped implementation is not shipped" in summary
    # both implementations broken: the kernel is missing and the exit status says so
    aten = victim.with_name(victim.name.replace("-manual", "-aten"))
    aten.write_text("module { func.func @broken( }\n")
    proc = boo("build", "small.toml", "--out", "out", "--no-validate", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert f"MISSING {victim.stem.removesuffix('-manual')} on cpu" in proc.stdout
    # no working implementation left on the cpu: both are FAILED, none "dropped"
    for stem in (victim.stem, aten.stem):
        assert f"FAILED  {stem} on cpu: compile failed" in proc.stdout
    assert f"dropped  {victim.stem} on cpu" not in proc.stdout
    # gfx942 still ships the fused variant (its own export), the only candidate left with a model
    assert re.search(rf"^  dropped  {victim.stem} on gfx942: compile failed: .* \(ships manual\+fused\)$",
                     proc.stdout, re.M)
    # before it was declared missing on the cpu, its fallback variant (stack) was tried, for each
    sig = victim.stem.removesuffix("-manual")
    assert (f"fallback {sig} on cpu: none of its 2 candidate module(s) compiled; tried aten+stack (compile failed), "
            "manual+stack (compile failed)") in proc.stdout
    comp = records(tmp_path / "out", "compile")
    assert {k for k, r in comp.items() if r["status"] == "failed"} == failed | {
        f"vmfb/{t}/{aten.stem}.compile.json" for t in ("cpu", "gfx942")} | {
        f"vmfb/cpu/{stem}+stack.compile.json" for stem in (aten.stem, victim.stem)}


def test_failed_kernel_without_alternative_fails_build_unless_allow_missing(tmp_path):
    (tmp_path / "small.toml").write_text(SMALL)
    proc = boo("build", "small.toml", "--out", "out", "--no-validate",
               "--flag", "gfx942=--iree-no-such-flag", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "MISSING" in proc.stdout and "gfx942" in proc.stdout
    assert not (tmp_path / "out/small-0.1.0.tar.zst").exists()
    report = json.loads((tmp_path / "out/small/build-report.json").read_text())
    assert len(report["missing"]) == 3 and all("gfx942" in m for m in report["missing"])
    assert all(k["targets"]["cpu"]["status"] == "available" for k in report["kernels"])
    proc = boo("build", "small.toml", "--out", "out", "--no-validate", "--allow-missing",
               "--flag", "gfx942=--iree-no-such-flag", cwd=tmp_path)
    assert (tmp_path / "out/small-0.1.0.tar.zst").exists()
    report = json.loads((tmp_path / "out/small/build-report.json").read_text())
    assert all(k["targets"]["gfx942"]["status"] == "unavailable" for k in report["kernels"])
    assert all("no-such-flag" in k["targets"]["gfx942"]["reason"] for k in report["kernels"])


def test_unknown_target_refused_up_front(tmp_path):
    (tmp_path / "small.toml").write_text(SMALL)
    proc = boo("build", "small.toml", "--out", "out", "--targets", "cpu,gfx9999", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "gfx9999" in proc.stderr and "known targets" in proc.stderr
    assert not (tmp_path / "out" / "small").exists()


def marked_processes(marker: str) -> list[int]:
    """pids of live processes whose environment holds ``marker``."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes().split(b"\0"):
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def test_sigterm_keeps_progress(tmp_path):
    big = SMALL.replace("masks = [1, 14]", "masks = [1, 2, 6, 14]")
    (tmp_path / "small.toml").write_text(big)
    # (without the GPU variants, which the traffic model decides on: exports and compiles only)
    cmd = [str(BIN / "boo-build"), "build", "small.toml", "--out", "out", "--no-validate", "--no-traffic", "-j", "1",
           "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(records(tmp_path / "out", "compile")) < 4:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert proc.returncode != 0
    first = {**run_ids(tmp_path / "out", "export"), **run_ids(tmp_path / "out", "compile")}
    total = 2 * (4 + 1) + 2 * 2 * (4 + 1)  # exports + compiles
    assert 4 <= len(first) < total
    assert all(r["status"] == "ok" for r in records(tmp_path / "out", "compile").values())
    boo("build", "small.toml", "--out", "out", "--no-validate", "--no-traffic", cwd=tmp_path)
    second = {**run_ids(tmp_path / "out", "export"), **run_ids(tmp_path / "out", "compile")}
    assert len(second) == total
    # at most the task in flight when the signal came is redone
    redone = [k for k in first if second[k] != first[k]]
    assert len(redone) <= 1, redone


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupt_stops_the_compilers_in_flight(tmp_path, sig):
    """Compilers run in their own sessions, out of reach of the signal: the
    build kills them and records nothing for them; a rerun (after SIGTERM) compiles them."""
    slow = tmp_path / "slow-iree-compile"
    slow.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] || sleep 120\nexec {compiler_path()} \"$@\"\n")
    slow.chmod(0o755)
    (tmp_path / "small.toml").write_text(SMALL)
    mark = f"BOO_TEST_MARK={tmp_path.name}"  # inherited by everything the build starts
    cmd = [str(BIN / "boo-build"), "build", "small.toml", "--out", "out", "--no-validate", "--targets", "cpu",
           "-j", "2", "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**env(), "BOO_TEST_MARK": tmp_path.name, COMPILER_ENV: str(slow)})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(marked_processes(mark)) < 3:  # the build + a compile (sh, sleep)
        time.sleep(0.1)
    assert len(marked_processes(mark)) >= 3, "no compile started"
    proc.send_signal(sig)
    proc.wait(timeout=60)  # well inside the 120 s the stuck compiles would take
    assert proc.returncode != 0
    time.sleep(0.5)
    assert marked_processes(mark) == [], "a compiler outlived the interrupted build"
    assert records(tmp_path / "out", "compile") == {}  # killed compiles are not failures
    if sig == signal.SIGTERM:  # what a rerun does after either signal is the same: checked once
        boo("build", "small.toml", "--out", "out", "--no-validate", "--targets", "cpu", cwd=tmp_path)
        assert all(r["status"] == "ok" for r in records(tmp_path / "out", "compile").values())


def test_dodo_loads_the_same_graph():
    """`doit list` at the repo root sees the graph (dodo.py loads boo_build.build.tasks)."""
    proc = subprocess.run([str(BIN / "doit"), "list", "--all"], cwd=REPO, env=env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = proc.stdout.split()
    for stage in ("export", "compile", "validate", "bench", "report", "pack", "build"):
        assert stage in names


def test_planted_error_fails_validation_and_the_build(tmp_path):
    """The manual implementation with a planted error (test-only switch) is
    the only one requested: validation fails and so does the build."""
    from boo_build.stages.torch_modules import PLANT_ERROR_ENV

    (tmp_path / "wrong.toml").write_text(SMALL.split("[[kernels]]")[0] + """
[[kernels]]
op = "layer_norm"
input_shape = [4, 6, 10]
dtype = "float32"
masks = [1]
impls = ["manual"]
""")
    proc = boo("build", "wrong.toml", "--out", "out", "--no-bench", "--targets", "cpu", cwd=tmp_path,
               check=False, extra_env={PLANT_ERROR_ENV: "1"})
    assert proc.returncode != 0
    assert "validation failed" in proc.stdout and "worst at" in proc.stdout
    assert not (tmp_path / "out/small-0.1.0.tar.zst").exists()
    report = json.loads((tmp_path / "out/small/build-report.json").read_text())
    (k,) = report["kernels"]
    assert k["targets"]["cpu"]["status"] == "unavailable"
    assert "worst at" in k["targets"]["cpu"]["impls"]["manual"]["validation"]["reason"]


def test_a_kernel_none_of_whose_candidates_compiles_ships_a_fallback(tmp_path):
    """Its only implementation fails in iree-compile on the CPU (a fused row reduction of
    42x32 asks more than the default 32 KiB of stack): the fallback step tries the CPU's
    fallback variants until one works (``stack``: the bound dynamic kernels have), which
    compiles, passes validation and ships; a rebuild finds it up to date. (Where a
    candidate compiles, the step tries nothing: ``test_cold_build_produces_every_vmfb_and_reports``.)"""
    import torch

    from boo_build.loader import open_bundle

    (tmp_path / "fb.toml").write_text("""
[bundle]
name = "fb"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shape = [16, 42, 32]
normalized_shape = [42, 32]
dtype = "float32"
masks = [14]
impls = ["manual"]
""")
    proc = boo("build", "fb.toml", "--out", "out", "--no-bench", cwd=tmp_path)
    key = "layer_norm-f32-16x42x32-n42x32-wb-m14"
    vmfb = tmp_path / "out/fb/vmfb/cpu"
    base = json.loads((vmfb / f"{key}-manual.compile.json").read_text())
    assert base["status"] == "failed" and "exceeded stack allocation limit" in base["error"]
    fb = json.loads((vmfb / f"{key}.fallback.json").read_text())
    assert fb["status"] == "tried" and fb["tried"] == ["manual+stack"]  # (nosd, lanes.nosd: forwards only)
    rec = json.loads((vmfb / f"{key}-manual+stack.compile.json").read_text())
    assert rec["status"] == "ok" and "--iree-llvmcpu-stack-allocation-limit=131072" in rec["flags"]
    assert f"fallback {key} on cpu: none of its 1 candidate module(s) compiled; tried manual+stack (compiled, " \
           "passed validation)" in proc.stdout
    assert re.search(rf"^  dropped  {key}-manual on cpu: compile failed: .* \(ships manual\+stack\)$", proc.stdout,
                     re.M)
    assert sorted(p.name for p in vmfb.glob("*+*")) == [f"{key}-manual+stack.compile.json",
                                                        f"{key}-manual+stack.vmfb"]
    b = open_bundle(tmp_path / "out/fb-0.1.0.tar.zst", prefer_eager=False)
    te = b.index["kernels"][key]["targets"]["cpu"]
    assert te["selected"] == "manual+stack" and te["impls"]["manual+stack"]["validation"]["status"] == "passed"
    assert te["rejected"]["manual"].startswith("compile failed: ")
    x, w, bias, gy = torch.randn(16, 42, 32), torch.randn(42, 32), torch.randn(42, 32), torch.randn(16, 42, 32)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [42, 32], w, bias, 1e-5)
    got = b.native_layer_norm_backward(gy, x, [42, 32], mean, rstd, w, bias, [True, True, True])
    want = torch.ops.aten.native_layer_norm_backward(gy, x, [42, 32], mean, rstd, w, bias, [True, True, True])
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    again = boo("build", "fb.toml", "--out", "out", "--no-bench", cwd=tmp_path)
    assert "compile  built 0" in again.stdout and "select   built 0" in again.stdout
    assert json.loads((vmfb / f"{key}.fallback.json").read_text())["run_id"] == fb["run_id"]
