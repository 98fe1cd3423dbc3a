"""doit reporters: progress with done/total and time left.

On a terminal one line is redrawn; in logs and CI each finished task prints
one line. ``QuietReporter`` prints failures only. Actions run in threads and
must not print: stage outcomes come back as the action's returned dict.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from doit.reporter import ConsoleReporter

from ..records import CompileStatus, ExportStatus, ValidationStatus

STAGES = ("export", "compile", "validate", "bench", "report", "pack")
# Outcomes shown as "ok"; any other status an action returns is shown in
# capitals (FAILED, NOT RUN, SKIPPED, ERROR).
OK_STATUSES = frozenset({ExportStatus.OK, ExportStatus.UNAVAILABLE, CompileStatus.UNAVAILABLE, ValidationStatus.PASSED})


def _stage(task) -> str:
    return task.name.split(":", 1)[0]


def _mean(values, default: float) -> float:
    return sum(values) / len(values) if values else default


class ProgressReporter(ConsoleReporter):
    """Time left = sum over stages of (tasks left x that stage's mean measured
    duration; the mean over all measured tasks for a stage not measured yet),
    divided by the parallelism. Nothing is shown until a task has run."""

    quiet = False
    jobs = 1  # doit's default is serial; ``for_jobs`` sets the build's -j

    def __init__(self, outstream, options, clock=time.monotonic):
        super().__init__(outstream, options)
        self.tty = bool(getattr(outstream, "isatty", lambda: False)())
        self.clock = clock
        self.total = 0
        self.done = 0
        self.todo: Counter[str] = Counter()  # stage -> tasks not finished yet
        self.spent: dict[str, list[float]] = {}  # stage -> measured seconds of tasks that ran
        self._starts: dict[str, float] = {}  # task name -> clock at start
        self._lock = threading.Lock()  # execute_task runs in doit's worker threads

    @classmethod
    def for_jobs(cls, jobs: int) -> type:
        """This reporter class told the build's parallelism (doit hands reporters no -j)."""
        return type(cls.__name__, (cls,), {"jobs": max(1, int(jobs))})

    def initialize(self, tasks, selected_tasks):
        self.todo = Counter(_stage(t) for t in tasks.values() if _stage(t) in STAGES and t.actions)
        self.total = sum(self.todo.values())

    def _eta(self) -> str:
        left = sum(self.todo.values())
        measured = [s for spent in self.spent.values() for s in spent]
        if not measured or left <= 0:
            return ""
        overall = sum(measured) / len(measured)
        work = sum(n * _mean(self.spent.get(stage), overall) for stage, n in self.todo.items())
        # Up to -j tasks run at once, never more than are left. Dependency
        # chains (export -> compile -> validate) can keep fewer busy, so this
        # leans optimistic early on; it needs no guess about the graph's shape.
        secs = int(work / min(self.jobs, left))
        return f", ~{secs // 60}m{secs % 60:02d}s left"

    def _line(self, status: str, task) -> None:
        if _stage(task) not in STAGES or not task.actions:
            return
        self.done += 1
        stage = _stage(task)
        if self.todo[stage] > 0:
            self.todo[stage] -= 1
        with self._lock:
            start = self._starts.pop(task.name, None)
        if start is not None:  # ran here; up-to-date and never-started tasks have no start
            self.spent.setdefault(stage, []).append(self.clock() - start)
        if self.quiet and status in ("ok", "up to date"):
            return
        text = f"[{self.done}/{self.total}{self._eta()}] {status:10s} {task.name}"
        if self.tty and not self.quiet and status in ("ok", "up to date"):
            self.outstream.write("\r\033[K" + text[:200])
        else:
            if self.tty:
                self.outstream.write("\r\033[K")
            if status != "up to date":
                self.outstream.write(text + "\n")
        self.outstream.flush()

    # doit hooks
    def execute_task(self, task):
        # doit's thread runner calls this from the worker thread as the task
        # starts, so it times the task; only finishes are shown.
        if task.actions:
            with self._lock:
                self._starts[task.name] = self.clock()
        if _stage(task) == "report" and self.tty:
            self.outstream.write("\r\033[K")

    def add_success(self, task):
        values = getattr(task, "values", None) or {}
        status = values.get("status", "ok")
        self._line("ok" if status in OK_STATUSES else status.upper(), task)

    def skip_uptodate(self, task):
        self._line("up to date", task)

    def add_failure(self, task, fail):
        super().add_failure(task, fail)
        self._line("FAILED", task)

    def complete_run(self):
        if self.tty:
            self.outstream.write("\r\033[K")
        # doit prints captured output of failures here.
        self.outstream.flush()
        super().complete_run()


class QuietReporter(ProgressReporter):
    quiet = True

