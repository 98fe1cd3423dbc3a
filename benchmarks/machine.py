"""What every benchmark says about the machine it ran on, and the load some put on it."""

import platform
import subprocess
import sys
import time
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Hogs:
    """``n`` processes spinning on the CPU while the ``with`` block runs: a loaded machine, as
    other work on a shared build machine or a laptop makes it."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self) -> "Hogs":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
