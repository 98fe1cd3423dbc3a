"""An interrupted build's worker threads may still be starting compiles after
the signal: those must not start (they would outlive the build, in their own
sessions), and a later build in the same process compiles again."""

from __future__ import annotations

import pytest

from boo_build.stages import compile as bc
from boo_build.stages import interrupt


def test_no_compile_starts_after_the_interrupt_until_resume(tmp_path):
    marker = tmp_path / "ran"
    fake = tmp_path / "fake-iree-compile"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\ncat > /dev/null\nexit 3\n")
    fake.chmod(0o755)
    try:
        interrupt.stop()
        bc.kill_running()
        with pytest.raises(bc.CompileInterrupted, match="interrupted"):
            bc.compile_mlir("module {}", [], compiler=str(fake))
        assert not marker.exists()
        assert not bc._RUNNING
    finally:
        interrupt.resume()
    result = bc.compile_mlir("module {}", [], compiler=str(fake))
    assert marker.exists() and not result.ok and "exit status 3" in result.error
