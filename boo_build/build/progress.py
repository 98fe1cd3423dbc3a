"""doit reporters: progress with done/total, time left and the longest-running task.

On a terminal one line is redrawn (once a second, so the time left counts down
and a long task's age grows); in logs and CI each finished task prints one
line. ``QuietReporter`` prints failures only. Actions run in threads and must
not print: stage outcomes come back as the action's returned dict.

The time left (``Estimate``) replays the rest of the graph: each task's
expected seconds from the shipped prior (``durations``), scaled by what the
build has measured so far, list-scheduled on ``-j`` workers in doit's order
with the dependencies respected. A stage's mean cannot do this: a few GPU
compiles take minutes where the rest take a second, and which ones is known
from the kind of task, not from the tasks seen so far.
"""

from __future__ import annotations

import heapq
import shutil
import threading
import time
from collections import Counter, deque
from typing import Mapping

from doit.reporter import ConsoleReporter

from ..records import CompileStatus, ExportStatus, ValidationStatus
from . import durations

STAGES = ("export", "compile", "fallback", "traffic", "validate", "bench", "select", "report", "pack", "page")
# Outcomes shown as "ok"; any other status an action returns is shown in
# capitals (FAILED, NOT RUN, SKIPPED, ERROR).
OK_STATUSES = frozenset({ExportStatus.OK, ExportStatus.UNAVAILABLE, CompileStatus.UNAVAILABLE, ValidationStatus.PASSED})
LONG_RUNNING_S = 30.0  # a task running this long is named on the line, with its age
FALLBACK_S = 1.0  # a task the prior has no key for (it still scales with the measured ratio)
PSEUDO_S = 20.0  # prior seconds of confidence before a stage's measured ratio takes over
REPLAY_EVERY_S = 0.5  # the schedule is replayed at most this often (clock seconds)
TICK_S = 1.0  # a terminal's line is redrawn this often


def _bundle(name: str) -> str:
    """The bundle a task name belongs to (``<stage>:<bundle>[/...]``)."""
    return name.partition(":")[2].split("/", 1)[0]


def _stage(name: str) -> str:
    return name.split(":", 1)[0]


def _counted(task) -> bool:
    """Tasks the line counts: a stage's, with actions (``ready:`` and ``build`` are barriers)."""
    return _stage(task.name) in STAGES and bool(task.actions)


def clock_text(secs: float) -> str:
    secs = max(0, int(round(secs)))
    return f"{secs // 60}m{secs % 60:02d}s"


class Estimate:
    """Time left of one doit run.

    A task's expected seconds: its prior (``durations.expected``; ``FALLBACK_S``
    without one) times its stage's measured ratio of actual to prior seconds,
    shrunk towards the ratio over all stages while the stage has measured less
    than ``PSEUDO_S`` prior seconds (and that towards 1 likewise), times the
    share of its stage's tasks that ran rather than being up to date (so an
    incremental build's estimate falls as tasks are found up to date). A
    running task has its expected seconds minus its age left, but at least a
    quarter of its age: one that overruns is expected to take a while longer.

    The rest of the graph is then list-scheduled on ``jobs`` workers: a task
    starts when its ``task_dep`` are done and a worker is free, in the order
    doit's dispatcher reaches tasks (breadth first over the ``task_dep`` lists
    from the selected tasks). The time left is when the last task ends.
    """

    def __init__(self, tasks: Mapping, selected: list[str], jobs: int,
                 prior: Mapping[str, float] | None = None):
        self.jobs = max(1, int(jobs))
        prior = durations.load_prior() if prior is None else prior
        # doit's dispatch order: breadth first from the selected tasks
        order: dict[str, int] = {}
        queue = deque(n for n in selected if n in tasks)
        while queue:
            name = queue.popleft()
            if name not in order:
                order[name] = len(order)
                queue.extend(d for d in tasks[name].task_dep if d in tasks)
        self.order = order
        self.deps = {n: [d for d in tasks[n].task_dep if d in order] for n in order}
        self.dependents: dict[str, list[str]] = {n: [] for n in order}
        for n, ds in self.deps.items():
            for d in ds:
                self.dependents[d].append(n)
        # a barrier (no actions) takes no time; a page, longer when its bundle holds dynamic kernels,
        # and by its kernel x target cells (its bundle's select tasks: durations.PAGE_CELL_S)
        dynamic = durations.dynamic_bundles(order)
        cells = Counter(_bundle(n) for n in order if _stage(n) == "select")

        def base(n: str) -> float:
            if not tasks[n].actions:
                return 0.0
            b = _bundle(n)
            seconds = durations.expected(n, prior, dynamic.get(b)) or FALLBACK_S
            if _stage(n) == "page":
                seconds += durations.PAGE_CELL_S * max(0, cells[b] - durations.PAGE_PRIOR_CELLS)
            return seconds
        self.base = {n: base(n) for n in order}
        self.stage = {n: _stage(n) for n in order}
        self.done: set[str] = set()
        self.running: dict[str, float] = {}  # name -> clock at start
        self.actual: dict[str, float] = {}  # stage -> measured seconds of tasks that ran
        self.expected_sum: dict[str, float] = {}  # stage -> their prior seconds
        self.ran: dict[str, int] = {}  # stage -> tasks that ran
        self.checked: dict[str, int] = {}  # stage -> tasks finished either way
        self._cache: tuple[float, float] | None = None  # (clock, seconds left then)

    # ---------------------------------------------------------- events
    def start(self, name: str, now: float) -> None:
        if name in self.order:
            self.running[name] = now

    def finish(self, name: str, now: float) -> None:
        """``name`` is done: ran (it had started) or up to date, failed, skipped."""
        if name not in self.order or name in self.done:
            return
        self.done.add(name)
        stage = self.stage[name]
        start = self.running.pop(name, None)
        if self.base[name] > 0:  # barriers say nothing about a stage
            self.checked[stage] = self.checked.get(stage, 0) + 1
            if start is not None:
                self.ran[stage] = self.ran.get(stage, 0) + 1
                self.actual[stage] = self.actual.get(stage, 0.0) + max(0.0, now - start)
                self.expected_sum[stage] = self.expected_sum.get(stage, 0.0) + self.base[name]

    @property
    def measured(self) -> bool:
        return bool(self.ran)

    # ------------------------------------------------------- the model
    def ratio(self, stage: str) -> float:
        """Measured seconds per prior second of ``stage``, shrunk towards all stages'."""
        overall = (sum(self.actual.values()) + PSEUDO_S) / (sum(self.expected_sum.values()) + PSEUDO_S)
        return (self.actual.get(stage, 0.0) + PSEUDO_S * overall) / (self.expected_sum.get(stage, 0.0) + PSEUDO_S)

    def run_share(self, stage: str) -> float:
        """Share of ``stage``'s tasks that run rather than being up to date."""
        overall = (sum(self.ran.values()) + 1) / (sum(self.checked.values()) + 1)
        return (self.ran.get(stage, 0) + overall) / (self.checked.get(stage, 0) + 1)

    def expected(self, name: str) -> float:
        """Seconds ``name`` is expected to take when it runs."""
        return self.base[name] * self.ratio(self.stage[name])

    def left(self, now: float) -> float:
        """Seconds until the last task ends. The schedule is replayed at most every
        ``REPLAY_EVERY_S`` (a replay costs a few ms on a graph of a thousand tasks, and
        an incremental build on a terminal finds tasks up to date by the hundred)."""
        if self._cache is not None and now - self._cache[0] < REPLAY_EVERY_S:
            return max(0.0, self._cache[1] - (now - self._cache[0]))
        secs = self._replay(now)
        self._cache = (now, secs)
        return secs

    def _replay(self, now: float) -> float:
        ratio = {s: self.ratio(s) for s in set(self.stage.values())}
        share = {s: self.run_share(s) for s in ratio}
        waiting = {}
        ready: list[tuple[int, str]] = []
        for n in self.order:
            if n in self.done or n in self.running:
                continue
            waiting[n] = sum(1 for d in self.deps[n] if d not in self.done)
            if waiting[n] == 0:
                ready.append((self.order[n], n))
        heapq.heapify(ready)
        ends: list[tuple[float, str]] = []
        for n, t0 in self.running.items():
            age, exp = now - t0, self.base[n] * ratio[self.stage[n]]
            ends.append((max(exp - age, age / 4), n))
        heapq.heapify(ends)
        free, t = self.jobs - len(ends), 0.0
        while True:
            while free > 0 and ready:
                _, n = heapq.heappop(ready)
                s = self.stage[n]
                heapq.heappush(ends, (t + self.base[n] * ratio[s] * share[s], n))
                free -= 1
            if not ends:
                return t
            t, n = heapq.heappop(ends)
            free += 1
            for m in self.dependents[n]:
                if m in waiting:
                    waiting[m] -= 1
                    if waiting[m] == 0:
                        heapq.heappush(ready, (self.order[m], m))

    def longest_running(self, now: float) -> tuple[str, float] | None:
        """The task running longest and its age, if any runs."""
        if not self.running:
            return None
        name = min(self.running, key=lambda n: self.running[n])
        return name, now - self.running[name]


class ProgressReporter(ConsoleReporter):
    """``[done/total, ~time left]`` and each finished task; the task running
    longest, with its age, once that is ``LONG_RUNNING_S`` or more. The time
    left is ``Estimate``'s, shown once a task has run here."""

    quiet = False
    jobs = 1  # doit's default is serial; ``for_jobs`` sets the build's -j
    prior: Mapping[str, float] | None = None  # None: the shipped one (``durations``)
    tick = TICK_S  # a terminal's redraw period; 0: no redraw thread

    def __init__(self, outstream, options, clock=time.monotonic):
        super().__init__(outstream, options)
        self.tty = bool(getattr(outstream, "isatty", lambda: False)())
        self.clock = clock
        self.total = 0
        self.done = 0
        self.estimate: Estimate | None = None
        self._last: tuple[str, str] | None = None  # (status, name) of the last task shown on a terminal
        self._reports = 0  # report tasks running: they print the summary, so the line keeps out of the way
        self._lock = threading.RLock()  # hooks come from doit's worker threads and the redraw thread
        self._stop = threading.Event()

    @classmethod
    def for_jobs(cls, jobs: int) -> type:
        """This reporter class told the build's parallelism (doit hands reporters no -j)."""
        return type(cls.__name__, (cls,), {"jobs": max(1, int(jobs))})

    def initialize(self, tasks, selected_tasks):
        self.estimate = Estimate(tasks, list(selected_tasks or ()), self.jobs, self.prior)
        self.total = sum(1 for n in self.estimate.order if _counted(tasks[n]))
        if self.tty and not self.quiet and self.tick > 0:
            threading.Thread(target=self._redraw_loop, name="boo-build-progress", daemon=True).start()

    # ---------------------------------------------------------- the line
    def _eta(self, now: float) -> str:
        est = self.estimate
        if est is None or not est.measured or self.done >= self.total:
            return ""
        return f", ~{clock_text(est.left(now))} left"

    def _running(self, now: float) -> tuple[str, float] | None:
        longest = self.estimate.longest_running(now) if self.estimate else None
        return longest if longest and longest[1] >= LONG_RUNNING_S else None

    def _terminal_text(self, now: float, status: str, name: str) -> str:
        head = f"[{self.done}/{self.total}{self._eta(now)}]"
        running = self._running(now)
        # a terminal has room for one task: the one holding things up, else the last finished
        text = f"{head} running {clock_text(running[1])} {running[0]}" if running else f"{head} {status:10s} {name}"
        return text[:max(20, shutil.get_terminal_size((120, 24)).columns - 1)]

    def _line(self, status: str, task) -> None:
        now = self.clock()
        with self._lock:
            if self.estimate is not None:
                self.estimate.finish(task.name, now)
            if not _counted(task):
                return
            self.done += 1
            if _stage(task.name) == "report":
                self._reports = max(0, self._reports - 1)
            if self.quiet and status in ("ok", "up to date"):
                return
            if self.tty and not self.quiet and status in ("ok", "up to date"):
                self._last = (status, task.name)
                self.outstream.write("\r\033[K" + self._terminal_text(now, status, task.name))
            else:
                if self.tty:
                    self.outstream.write("\r\033[K")
                if status != "up to date":
                    text = f"[{self.done}/{self.total}{self._eta(now)}] {status:10s} {task.name}"
                    running = self._running(now)
                    if running:
                        text += f"  (running {clock_text(running[1])}: {running[0]})"
                    self.outstream.write(text + "\n")
            self.outstream.flush()

    def redraw(self) -> None:
        """Redraw a terminal's line: the time left counts down, a long task's age grows."""
        with self._lock:
            if not self.tty or self.quiet or self._last is None or self._reports:
                return
            self.outstream.write("\r\033[K" + self._terminal_text(self.clock(), *self._last))
            self.outstream.flush()

    def _redraw_loop(self) -> None:
        while not self._stop.wait(self.tick):
            self.redraw()

    # doit hooks
    def execute_task(self, task):
        # doit's thread runner calls this from the worker thread as the task
        # starts, so it times the task; only finishes are shown.
        with self._lock:
            if task.actions and self.estimate is not None:
                self.estimate.start(task.name, self.clock())
            if _stage(task.name) == "report":
                self._reports += 1
                if self.tty:
                    self.outstream.write("\r\033[K")
                    self.outstream.flush()

    def add_success(self, task):
        values = getattr(task, "values", None) or {}
        status = values.get("status", "ok")
        self._line("ok" if status in OK_STATUSES else status.upper(), task)

    def skip_uptodate(self, task):
        self._line("up to date", task)

    def skip_ignore(self, task):
        with self._lock:
            if self.estimate is not None:
                self.estimate.finish(task.name, self.clock())
        super().skip_ignore(task)

    def add_failure(self, task, fail):
        super().add_failure(task, fail)
        self._line("FAILED", task)

    def complete_run(self):
        self._stop.set()
        with self._lock:
            if self.tty:
                self.outstream.write("\r\033[K")
            # doit prints captured output of failures here.
            self.outstream.flush()
        super().complete_run()


class QuietReporter(ProgressReporter):
    quiet = True
