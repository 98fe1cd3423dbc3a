"""What else the machine is doing while a benchmark runs, and which machine it is.

Read by the benchmark's rounds (``benchmark.bench_rounds``) around and between
its passes: other processes' CPU time (``cpu_use``, ``others_between``), their
threads waiting to run (``waiting_threads``), the benchmark process's nice value
(``nice``); and by a rebuild, to keep only decisions made on the same machine
(``machine_id``). Linux's ``/proc``; None where it cannot be read.
"""

from __future__ import annotations

import os
import time


def machine_id(device) -> str:
    """The machine a benchmark ran on, as a rebuild recognises it (``comparison.Previous``):
    the device's model and arch, and on the CPU how many CPUs the process may use."""
    text = f"{device.name} ({device.arch})"
    return f"{text}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} CPUs" \
        if device.is_cpu else text


SETTLE_S = 0.002  # waiting_threads' pause first: this process's threads that spin after a call go to sleep


def waiting_threads() -> int | None:
    """Threads of other processes ready to run now: the machine's runnable threads
    (``procs_running`` in ``/proc/stat``) less this process's (its threads in state R,
    the more of a count before and one after), read after ``SETTLE_S`` (torch's OpenMP
    team and IREE's workers spin a while after a call; one that went to sleep between
    the reads would count as another process's); None where the counters cannot be read."""
    time.sleep(SETTLE_S)
    try:
        before = _own_running()
        with open("/proc/stat") as f:
            running = next(int(line.split()[1]) for line in f if line.startswith("procs_running"))
        own = max(before, _own_running())
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return max(0, running - own)


def _own_running() -> int:
    """This process's threads in state R (running or ready)."""
    own = 0
    for task in os.scandir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task.name}/stat") as f:
                stat = f.read()
        except OSError:  # a thread that ended meanwhile
            continue
        own += stat[stat.rindex(")") + 2] == "R"
    return own


def cpu_use() -> tuple[float, float] | None:
    """(CPU seconds the machine has run anything since boot, of them this process's), None
    where the machine's counters cannot be read (no ``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal: all but idle and iowait ran something
    # (steal: another virtual machine on the same host, which is other work too)
    ticks = [int(x) for x in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK"), time.process_time()


def others_between(before: tuple[float, float] | None, after: tuple[float, float] | None,
                   wall_s: float) -> float | None:
    """The CPUs other processes used on average between two ``cpu_use`` readings ``wall_s``
    apart (the machine's CPU time less this process's), None where either is missing."""
    if before is None or after is None or wall_s <= 0:
        return None
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / wall_s)


def nice() -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (OSError, AttributeError):
        return None


__all__ = ["SETTLE_S", "cpu_use", "machine_id", "nice", "others_between", "waiting_threads"]
