"""The command line a new user meets: bare ``boo-build``, each command's own help and
options, ``clean`` and ``forget`` on a real build, ``list`` into a closed pipe,
``info``/``verify`` on a lock file and on a manifest, the download cache's variable."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import BIN

from boo_build.cli.app import COMMANDS, EXIT_BROKEN_PIPE, EXIT_USAGE
from boo_build.loader.format import TargetRecord
from boo_build.loader.remote import cache_dir
from boo_build.signature import KernelSignature
from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
from boo_build.targets import catalogue

MANIFEST = """\
[bundle]
name = "clitest"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shape = [2, 8]
masks = [1]
impls = ["aten"]
"""


def boo(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: int = 300):
    return subprocess.run([str(BIN / "boo-build"), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def test_bare_boo_build_lists_the_commands():
    proc = boo()
    assert proc.returncode == EXIT_USAGE and proc.stdout == ""
    assert "usage: boo-build" in proc.stderr and "COMMAND" in proc.stderr
    for name in COMMANDS:
        assert f"\n    {name} " in proc.stderr, name
    assert "required: cmd" not in proc.stderr


def test_each_command_has_its_own_help_and_options():
    helps = {name: boo(name, "--help").stdout for name in COMMANDS}
    for name in COMMANDS:  # a description of its own under the usage
        assert helps[name].startswith(f"usage: boo-build {name}") and helps[name].split("\n\n")[1].strip(), name
    assert len(set(helps.values())) == len(COMMANDS)
    # the graph commands: only their own options
    assert "--no-bench" in helps["build"] and "--allow-missing" in helps["build"]
    assert "--no-bench" not in helps["bench"] and "--jobs" in helps["bench"]
    for name in ("list", "clean", "forget"):
        assert "--no-bench" not in helps[name] and "--scheduler" not in helps[name] and "--out" in helps[name]
    assert len({helps[n] for n in ("build", "bench", "list", "clean", "forget")}) == 5
    # every positional argument says what it is
    assert "a bundle (.tar.zst), or a lock file" in helps["info"] and "a lock file" in helps["verify"]
    assert "OLD_BUNDLE" in helps["diff"] and "the bundle compared against" in helps["diff"]
    assert "a build's output folder" in helps["report"]


@pytest.mark.build
def test_clean_and_forget_on_a_build(tmp_path):
    (tmp_path / "m.toml").write_text(MANIFEST)
    out = tmp_path / "out"
    built = boo("build", "m.toml", "--out", str(out), "--no-bench", cwd=tmp_path)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert re.search(r"^build took [0-9.]+ s$", built.stdout, re.M), built.stdout[-1000:]  # its total time
    bundle = out / "clitest-0.1.0.tar.zst"
    vmfbs = list(out.rglob("*.vmfb"))
    assert bundle.is_file() and vmfbs

    forgot = boo("forget", "m.toml", "--out", str(out), cwd=tmp_path)
    assert forgot.returncode == 0 and "forgot every task's up-to-date state" in forgot.stdout, forgot.stderr
    assert bundle.is_file() and all(v.is_file() for v in vmfbs)  # forget keeps the files
    stamp = vmfbs[0].stat().st_mtime_ns
    again = boo("build", "m.toml", "--out", str(out), "--no-bench", cwd=tmp_path)
    assert again.returncode == 0 and vmfbs[0].stat().st_mtime_ns != stamp  # compiled again

    cleaned = boo("clean", "m.toml", "--out", str(out), cwd=tmp_path)
    assert cleaned.returncode == 0, cleaned.stderr
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert not bundle.exists() and not any(p.endswith((".vmfb", ".mlir", ".json", ".csv", ".html")) for p in left
                                           if not p.startswith(".")), left
    assert cleaned.stdout.startswith("removed ") and "built files of 1 manifest" in cleaned.stdout
    rebuilt = boo("build", "m.toml", "--out", str(out), "--no-bench", cwd=tmp_path)
    assert rebuilt.returncode == 0 and bundle.is_file()


def test_list_into_a_closed_pipe_exits_quietly(tmp_path):
    (tmp_path / "m.toml").write_text(MANIFEST)
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([str(BIN / "boo-build"), "list", "m.toml", "--out", str(tmp_path / "out")], stdout=w,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path)
    finally:
        os.close(w)
    assert proc.stderr == "" and proc.returncode == EXIT_BROKEN_PIPE
    listed = boo("list", "m.toml", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert listed.returncode == 0 and "export:clitest/" in listed.stdout


def test_info_and_verify_on_a_manifest_say_what_it_is(tmp_path):
    (tmp_path / "m.toml").write_text(MANIFEST)
    (tmp_path / "cmds.txt").write_text("# MIOpen commands\nlayernorm -n 2 -c 8 -H 1 -W 1 -m 0\n")
    for cmd in ("info", "verify"):
        for name in ("m.toml", "cmds.txt"):
            proc = boo(cmd, name, cwd=tmp_path)
            assert proc.returncode == EXIT_USAGE, proc.stdout
            assert f"{name} is a manifest, not a bundle: build it with `boo-build build {name}`" in proc.stderr


@pytest.fixture
def small_bundle(tmp_path) -> Path:
    """A one-kernel bundle (its vmfb bytes never run: info and verify read the index and checksums)."""
    (tmp_path / "k.vmfb").write_bytes(b"not run here")
    vmfbs: dict[str, bytes] = {}
    sig = KernelSignature("layer_norm", (2, 8), (8,), "float32", 1)
    impl = packed_impl(vmfbs, "cpu", sig, "aten", tmp_path / "k.vmfb")
    kernels = [kernel_record(sig, {"cpu": TargetRecord.available("aten", {"aten": impl})})]
    return pack_bundle(tmp_path / "b", name="locked", version="1.0.0", targets=[catalogue()["cpu"]],
                       kernels=kernels, vmfbs=vmfbs, provenance={})


def test_info_and_verify_on_a_lock_file_show_the_bundles_it_pins(small_bundle, tmp_path):
    env = {"BOO_BUILD_CACHE_DIR": str(tmp_path / "cache")}
    store = tmp_path / "store"
    assert boo("publish", str(small_bundle), str(store), env=env).returncode == 0
    locked = boo("lock", "locked", "--store", str(store), "-o", str(tmp_path / "boo.lock"), env=env)
    assert locked.returncode == 0, locked.stderr
    info = boo("info", str(tmp_path / "boo.lock"), env=env)
    assert info.returncode == 0, info.stderr
    assert info.stdout.startswith(f"locked 1.0.0, pinned by {tmp_path / 'boo.lock'}:")
    assert "layer_norm-f32-2x8-n8-wb-m1" in info.stdout and "not a zstd file" not in info.stderr
    verify = boo("verify", str(tmp_path / "boo.lock"), env=env)
    assert verify.returncode == 0 and "OK, 1 kernel members verified" in verify.stdout, verify.stderr


def test_the_download_cache_has_a_variable_of_its_own(tmp_path):
    default = cache_dir({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert default == tmp_path / "xdg" / "boo-build"
    # iree-turbine's kernel cache variable (its clear_cache() deletes that folder) is not read
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "BOO_CACHE_DIR": str(tmp_path / "turbine")}) == default
    assert cache_dir({"BOO_BUILD_CACHE_DIR": str(tmp_path / "mine")}) == tmp_path / "mine"
