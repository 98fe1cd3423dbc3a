"""benchmarks/cpu_vs_eager.py on the session's small bundle (one kernel moved to
local-sync), with tiny sample counts: the report's structure and every kernel
in it (not the timings: this machine is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO, _ln, with_modes, with_prefer_eager

from boo_build.loader import open_bundle


def test_report_lists_every_kernel_with_loader_eager_and_overhead(built, tmp_path):
    moded = with_modes(built.path, tmp_path / "moded.tar.zst", {_ln(1).key: "local-sync"})
    path = with_prefer_eager(moded, tmp_path / "routed.tar.zst", [_ln(14).key])  # torch tensors go to eager
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "cpu_vs_eager.py"), "--bundle", str(path), "--samples", "2",
         "--min-batch-s", "0", "--json", str(out), "-q"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(out.read_text())
    keys = open_bundle(path, device="local-task").keys()
    assert [r["key"] for r in rec["kernels"]] == keys and rec["target"] == "cpu" and rec["samples"] == 2
    for r in rec["kernels"]:
        assert "error" not in r, r
        assert all(r[f] > 0 for f in ("loader_us", "eager_us", "bare_us", "speedup")), r
        assert isinstance(r["overhead_us"], float) and r["shape"] and r["candidate"]
        assert r["speedup"] == pytest.approx(r["eager_us"] / r["loader_us"])
        assert r["kernel_speedup"] == pytest.approx(r["eager_us"] / r["kernel_us"])
        assert r["route"] == ("eager" if r["key"] == _ln(14).key else "kernel")
        if r["route"] == "kernel":
            assert r["kernel_us"] == r["loader_us"]  # one path: the kernel is what ships
    rows = {r["key"]: r for r in rec["kernels"]}
    assert rows[_ln(1).key]["device"] == "local-sync" and rows[_ln(1).key]["candidate"] == "manual@local-sync"
    assert rows[_ln(14).key]["device"] == "local-task" and rows[_ln(14).key]["candidate"] == "aten"
    s = rec["summary"]
    for op, n in (("layer_norm", 4), ("rms_norm", 5)):  # separate geomeans: RMS eager is a weak baseline
        assert s[op]["kernels"] == n and s[op]["geomean_speedup"] > 0
        assert s[op]["below_0.8x"] == len(s[op]["slow"]) and s[op]["kernel_geomean_speedup"] > 0
        assert s[op]["to_eager"] == (1 if op == "layer_norm" else 0)
    assert set(s["overhead_us"]) == {"local-sync", "local-task"} and s["errors"] == []
    # the 8 small local-task kernels measured on local-sync too: 1 + 8 there
    assert s["overhead_us"]["local-sync"]["kernels"] == 9 and s["overhead_us"]["local-task"]["kernels"] == 8
    task = {o["key"] for o in rec["overhead"] if o["device"] == "local-task"}
    assert task <= {o["key"] for o in rec["overhead"] if o["device"] == "local-sync"}
    assert all(o["max"] >= o["median"] for o in s["overhead_us"].values())
    assert rec["machine"]["torch_threads"] == rec["machine"]["iree_local_task_workers"] or \
        rec["machine"]["iree_local_task_workers"] == 0
    # the routed key: its call against torch's op called directly (float32: in the summary)
    (routed,) = rec["routed"]
    assert routed["key"] == _ln(14).key and routed["kind"] == "backward" and "error" not in routed, routed
    assert routed["direct_us"] > 0 and isinstance(routed["cpu_us"], float)
    assert set(s["routed_us"]) == {"backward"} and s["routed_us"]["backward"]["kernels"] == 1
    md = proc.stdout
    assert "## Routed calls" in md and "more than torch's op called directly" in md
    assert all(k in md for k in keys) and "layer_norm: geomean speed-up over eager" in md
    assert "rms_norm: geomean speed-up over eager" in md and "per-call overhead" in md
    assert "(1 routed to torch eager)" in md and "the compiled kernels alone" in md


def test_each_path_alternates_call_by_call_with_eager():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cpu_vs_eager
    finally:
        sys.path.pop(0)
    order = []
    path_s, eager_s = cpu_vs_eager.alternating(lambda: order.append("path"), lambda: order.append("eager"),
                                               samples=3, min_batch_s=0, warmup=1)
    # a warm-up pair, three calls that size the rounds, then rounds of one pair each
    assert order == ["eager", "path"] + ["path"] * 3 + ["eager", "path"] * 3
    assert path_s > 0 and eager_s > 0
