"""doit reporters: progress with done/total and time left.

On a terminal one line is redrawn; in logs and CI each finished task prints
one line. ``QuietReporter`` prints failures only. Actions run in threads and
must not print: stage outcomes come back as the action's returned dict.
"""

from __future__ import annotations

import time

from doit.reporter import ConsoleReporter

STAGES = ("export", "compile", "validate", "bench", "report", "pack")


def _stage(task) -> str:
    return task.name.split(":", 1)[0]


class ProgressReporter(ConsoleReporter):
    quiet = False

    def __init__(self, outstream, options):
        super().__init__(outstream, options)
        self.tty = bool(getattr(outstream, "isatty", lambda: False)())
        self.total = 0
        self.done = 0
        self.ran = 0
        self.started = time.monotonic()

    def initialize(self, tasks, selected_tasks):
        self.total = sum(1 for t in tasks.values() if _stage(t) in STAGES and t.actions)

    def _eta(self) -> str:
        left = self.total - self.done
        if not self.ran or left <= 0:
            return ""
        per = (time.monotonic() - self.started) / max(self.done, 1)
        secs = int(per * left)
        return f", ~{secs // 60}m{secs % 60:02d}s left"

    def _line(self, status: str, task) -> None:
        if _stage(task) not in STAGES or not task.actions:
            return
        self.done += 1
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
        # doit's thread runner reports starts late; only finishes are shown.
        if _stage(task) == "report" and self.tty:
            self.outstream.write("\r\033[K")

    def add_success(self, task):
        if task.actions:
            self.ran += 1
        values = getattr(task, "values", None) or {}
        status = values.get("status", "ok")
        self._line("ok" if status in ("ok", "passed", "unavailable") else status.upper(), task)

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

