"""Compile: MLIR text -> vmfb bytes with iree-compile, one subprocess per kernel.

The MLIR goes in on stdin (iree-compile embeds the source path in the vmfb,
so a fixed "-" keeps output byte-identical), and the vmfb comes back on
stdout: the caller writes it with ``files.write_atomic``, so a killed
compile never leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import interrupt  # stdlib only: the graph imports this module at load time
from .interrupt import Interrupted

__all__ = ["COMPILER_ENV", "CompileInterrupted", "CompileResult", "DEFAULT_TIMEOUT_S", "compile_mlir", "compiler_path", "compiler_version", "kill_running", "useful_stderr"]

DEFAULT_TIMEOUT_S = 900.0  # the slowest default-manifest compile takes ~280 s on 2 cores


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    command: str
    seconds: float
    vmfb: bytes = b""
    error: str = ""  # the useful part of stderr, or the timeout


COMPILER_ENV = "BOO_BUILD_IREE_COMPILE"  # another iree-compile binary (a local build, a nightly)


def compiler_path() -> str:
    """``$BOO_BUILD_IREE_COMPILE`` if set, else the iree-compile binary of
    iree-base-compiler itself: the venv's ``bin/iree-compile`` is a Python
    wrapper that costs a start-up per compile and, killed on a timeout,
    leaves the real compiler running."""
    import importlib.util

    chosen = os.environ.get(COMPILER_ENV)
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise FileNotFoundError(f"{COMPILER_ENV}={chosen} is not an executable file; "
                                    "point it at an iree-compile binary or unset it")
        return chosen

    spec = importlib.util.find_spec("iree.compiler")
    if spec and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            real = Path(loc) / "_mlir_libs" / "iree-compile"
            if real.exists():
                return str(real)
    beside = Path(sys.executable).with_name("iree-compile")
    if beside.exists():
        return str(beside)
    found = shutil.which("iree-compile")
    if not found:
        raise FileNotFoundError("iree-compile not found: install iree-base-compiler (make install)")
    return found


def compiler_version(path: str | None = None) -> str:
    """First lines of ``iree-compile --version``: part of every compile's up-to-date check."""
    out = subprocess.run([path or compiler_path(), "--version"], capture_output=True, text=True, check=True)
    lines = [ln.strip() for ln in out.stdout.splitlines() if "version" in ln.lower()]
    return " | ".join(lines)


def useful_stderr(stderr: str, limit: int = 4000) -> str:
    """The error lines and their context; iree-compile prints a lot of IR."""
    lines = stderr.splitlines()
    keep = [i for i, ln in enumerate(lines) if "error" in ln.lower()]
    if not keep:
        text = "\n".join(lines[-40:])
    else:
        picked: list[str] = []
        for i in keep[:6]:
            picked.extend(lines[i : i + 3])
        text = "\n".join(picked)
    return text[-limit:]


# Compilers now running in this process's threads. Each runs in its own session
# (so a timeout can kill its whole group), which also puts it out of reach of a
# terminal's Ctrl-C and of a SIGTERM sent to the build: an interrupted build
# kills them itself (kill_running).
_RUNNING: set[subprocess.Popen] = set()
_KILLED: set[int] = set()  # pids kill_running stopped: their compiles did not fail
_RUNNING_LOCK = threading.RLock()  # re-entrant: kill_running runs in signal handlers


class CompileInterrupted(Interrupted):
    """The build was interrupted while this compile ran: nothing to record."""


def kill_running() -> int:
    """Kill every compiler started by compile_mlir that is still running;
    returns how many. Their compile_mlir calls raise CompileInterrupted. Call
    it after ``interrupt.stop()``: a compile starting meanwhile (a worker
    thread of the build still winding down) then sees the flag instead, and
    raises too, until ``interrupt.resume()``."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
        _KILLED.update(p.pid for p in procs)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return len(procs)


def compile_mlir(mlir: str, flags: tuple[str, ...] | list[str], *, timeout: float = DEFAULT_TIMEOUT_S,
                 compiler: str | None = None, cwd: str | None = None) -> CompileResult:
    """``cwd``: where the compiler runs (a relative path in ``flags`` is read from there;
    iree-compile embeds the path of a substituted configuration in the vmfb)."""
    cmd = [compiler or compiler_path(), "-", *flags, "-o", "-"]
    shown = shlex.join(cmd[:1] + ["<module.mlir>"] + cmd[2:])
    t0 = time.monotonic()
    # Own process group, so a timeout kills the compiler and anything it started.
    if interrupt.stopping():
        raise CompileInterrupted(f"compile not started: the build was interrupted: {shown}")
    with _RUNNING_LOCK:  # kill_running sees it, or it sees the flag (set before kill_running runs)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=cwd or tempfile.gettempdir(), start_new_session=True)
        _RUNNING.add(proc)
        if interrupt.stopping():
            _KILLED.add(proc.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    try:
        interrupt.pause_point("compile")  # test-only (interrupt.PAUSE_ENV): the compiler is running
        out, err_bytes = proc.communicate(mlir.encode(), timeout=timeout)
    except BaseException as e:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            return CompileResult(False, shown, time.monotonic() - t0, error=f"timed out after {timeout:g} s")
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
            killed = proc.pid in _KILLED
            _KILLED.discard(proc.pid)
    if killed:
        raise CompileInterrupted(f"compile stopped by an interrupted build: {shown}")
    dt = time.monotonic() - t0
    if proc.returncode != 0 or not out:
        err = useful_stderr(err_bytes.decode(errors="replace")) or f"exit status {proc.returncode}"
        return CompileResult(False, shown, dt, error=err)
    return CompileResult(True, shown, dt, vmfb=out)
