"""An interrupted build (Ctrl-C, SIGTERM) stops with no task cut off half-way
(``boo_build.stages.interrupt``): it waits for the actions in flight, starts no
other, exits 130 after its message, and leaves no temporary file; a rerun
resumes. The signal is sent at a chosen point of the export or compile step
through the stages' test-only pause hook (``interrupt.PAUSE_ENV``)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import BIN, TINY_MANIFEST, boo, env

from boo_build.files import write_atomic
from boo_build.stages import interrupt

INTERRUPTED = "boo-build: interrupted; finished work is kept, rerun to continue"

MODULE = "layer_norm-f32-4x6x10-n10-wb-m1-manual"


@pytest.fixture
def stopped():
    """The build's interrupt flag set for the test, cleared after it."""
    interrupt.stop()
    try:
        yield
    finally:
        interrupt.resume()


def temporaries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.name.endswith(".tmp"))


# ------------------------------------------------------------------ units
def test_running_actions_are_waited_for_and_none_starts_after_stop():
    entered, release = threading.Event(), threading.Event()

    @interrupt.tracked
    def action(x):
        entered.set()
        release.wait(60)
        return x

    results = []
    worker = threading.Thread(target=lambda: results.append(action(7)))
    worker.start()
    try:
        assert entered.wait(60)
        interrupt.stop()
        assert interrupt.running() == 1
        assert not interrupt.wait_idle(timeout=0)  # the action in flight is waited for
        with pytest.raises(interrupt.Interrupted, match="task action not started"):
            action(8)  # one starting after the signal does nothing
        assert interrupt.running() == 1
        release.set()
        worker.join(60)
        assert interrupt.wait_idle(timeout=0) and interrupt.running() == 0
        assert results == [7]  # it finished: an action is never cut off
        assert not interrupt.stop()  # a second signal: already stopping
    finally:
        release.set()
        interrupt.resume()
    assert action(9) == 9


def test_an_export_queued_at_the_interrupt_does_not_start(stopped):
    """Not recorded as an unavailable export either: the exception reaches doit."""
    from boo_build.signature import ModuleId
    from boo_build.stages.export import export_module

    with pytest.raises(interrupt.Interrupted, match=f"export {MODULE} not started"):
        export_module(ModuleId.parse(MODULE))


@pytest.mark.parametrize("fail_at", ["open", "fsync"])
def test_write_atomic_removes_its_temporary_on_interrupt(tmp_path, monkeypatch, fail_at):
    """A KeyboardInterrupt just after the temporary was created (the signal handled
    on this thread as ``os.open`` returns), or while it is written."""
    target = tmp_path / "sub" / "record.json"
    real = getattr(os, fail_at)

    def interrupted(*args, **kw):
        real(*args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, fail_at, interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, b"{}\n")
    monkeypatch.undo()
    assert list((tmp_path / "sub").iterdir()) == []
    write_atomic(target, b"{}\n")
    assert target.read_bytes() == b"{}\n"  # and the next write works


# --------------------------------------------------- the boo-build process
@pytest.mark.build
@pytest.mark.parametrize("stage", ["export", "compile"])
def test_sigint_during_a_stage_exits_130_and_a_rerun_resumes(tmp_path, stage):
    """SIGINT while the export is about to run in torch, or while the compiler runs."""
    (tmp_path / "tiny.toml").write_text(TINY_MANIFEST)
    marker = tmp_path / "paused"  # outside the output folder
    cmd = [str(BIN / "boo-build"), "build", "tiny.toml", "--out", "out", "--no-bench", "--targets", "cpu", "-j", "1",
           "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**env(), interrupt.PAUSE_ENV: f"{stage}:{marker}"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():  # the step writes it, then waits for the signal
            assert proc.poll() is None, f"the build ended before its {stage} paused: {proc.communicate()}"
            assert time.monotonic() < deadline, f"no {stage} paused"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err  # not 134: no thread was ended inside torch
    assert err.splitlines()[-1] == INTERRUPTED, err
    out = tmp_path / "out"
    assert temporaries(out) == []
    bundle = out / "tiny"
    export = json.loads((bundle / f"mlir/{MODULE}.export.json").read_text())
    mlir = (bundle / f"mlir/{MODULE}.mlir").read_bytes()
    # the export in flight at the signal (or finished before it) was written whole
    assert export["status"] == "ok" and mlir and export["mlir_sha256"] == hashlib.sha256(mlir).hexdigest()
    # the compile in flight was killed and records nothing; after an export, none started
    assert [p for p in (bundle / "vmfb").rglob("*") if p.is_file()] == []
    assert not (out / "tiny-0.1.0.tar.zst").exists()

    again = boo("build", "tiny.toml", "--out", "out", "--no-bench", "--targets", "cpu", "-q", cwd=tmp_path)
    assert again.returncode == 0
    assert (out / "tiny-0.1.0.tar.zst").exists()
    assert json.loads((bundle / f"vmfb/cpu/{MODULE}.compile.json").read_text())["status"] == "ok"
    assert temporaries(out) == []
