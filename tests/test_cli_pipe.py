"""`boo-build ... | head -1`: a stdout closed early ends the command quietly
(exit status 141, 128 + SIGPIPE, no traceback), for every subcommand."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import BIN

from boo_build.cli.app import EXIT_BROKEN_PIPE
from boo_build.loader.format import TargetRecord
from boo_build.signature import KernelSignature
from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
from boo_build.targets import catalogue


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle whose index lists many kernels (info prints a line or more each);
    its vmfb is never loaded by info, so its bytes need not be a module."""
    d = tmp_path_factory.mktemp("pipe")
    (d / "k.vmfb").write_bytes(b"not loaded by info")
    vmfbs: dict[str, bytes] = {}
    kernels = []
    for n in range(1, 301):
        sig = KernelSignature("layer_norm", (n, 16), (16,), "float32", 1)
        impl = packed_impl(vmfbs, "cpu", sig, "manual", d / "k.vmfb")
        kernels.append(kernel_record(sig, {"cpu": TargetRecord.available("manual", {"manual": impl})}))
    return pack_bundle(d, name="pipe", version="1.0.0", targets=[catalogue()["cpu"]],
                       kernels=kernels, vmfbs=vmfbs, provenance={})


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Run boo-build with stdout a pipe nobody reads any more (`| head -1` after
    head exited): every write fails with EPIPE, deterministically."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([str(BIN / "boo-build"), *args], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("cmd", ["info", "verify"])
def test_closed_stdout_exits_quietly(bundle, cmd):
    proc = run_into_closed_pipe(cmd, str(bundle))
    assert proc.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored" line
    assert proc.returncode == EXIT_BROKEN_PIPE == 141


def test_closed_stdout_help_is_quiet():
    # argparse drops its own failed write; the exit stays quiet (and 0)
    proc = run_into_closed_pipe("--help")
    assert proc.stderr == "" and proc.returncode in (0, EXIT_BROKEN_PIPE)


def test_open_stdout_unchanged(bundle):
    proc = subprocess.run([str(BIN / "boo-build"), "info", str(bundle)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("pipe 1.0.0")
    assert proc.stdout.count("layer_norm-f32-") == 300


def test_head_pipeline(bundle):
    # what a user types; head may exit before or after boo-build has written everything
    proc = subprocess.run(f"'{BIN / 'boo-build'}' info '{bundle}' | head -1; echo \"${{PIPESTATUS[0]}}\"",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
    first, status = proc.stdout.splitlines()
    assert first.startswith("pipe 1.0.0") and status in ("0", "141")
    assert proc.stderr == ""
