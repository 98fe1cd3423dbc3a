"""The build's progress line: time left from measured durations per stage."""

from __future__ import annotations

import io

from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.task import Task

from boo_build.build.progress import ProgressReporter, QuietReporter
from boo_build.cli.graph import doit_config


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _task(name: str) -> Task:
    return Task(name, [(lambda: None, (), {})])


def _run(rep, clock, names, start, end):
    tasks = [_task(n) for n in names]
    clock.now = start
    for t in tasks:
        rep.execute_task(t)
    clock.now = end
    for t in tasks:
        rep.add_success(t)


def test_eta_is_per_stage_mean_times_tasks_left_over_jobs():
    names = ["export:u", "export:v", *(f"compile:{c}" for c in "abcde"), "pack:x"]
    clock, out = FakeClock(), io.StringIO()
    rep = ProgressReporter.for_jobs(2)(out, {}, clock=clock)
    rep.initialize({n: _task(n) for n in names}, names)
    assert rep.total == 8

    rep.skip_uptodate(_task("export:v"))  # up to date: no measured duration
    assert rep._eta() == ""  # nothing measured yet, nothing shown
    _run(rep, clock, ["export:u"], 0, 4)
    _run(rep, clock, ["compile:a", "compile:b"], 4, 14)
    # left: 3 compiles x 10 s + 1 pack x overall mean (4+10+10)/3 = 8 s; 2 at once
    assert out.getvalue().splitlines()[-1] == "[4/8, ~0m19s left] ok         compile:b"

    _run(rep, clock, ["compile:c", "compile:d", "compile:e"], 14, 26)
    # left: 1 pack x (4+10+10+12+12+12)/6 = 10 s; one task left runs alone
    assert out.getvalue().splitlines()[-1] == "[7/8, ~0m10s left] ok         compile:e"

    _run(rep, clock, ["pack:x"], 26, 27)
    assert out.getvalue().splitlines()[-1] == "[8/8] ok         pack:x"


def test_build_reporter_knows_jobs(tmp_path):
    rep = doit_config(tmp_path, 3, quiet=False)["reporter"]
    assert issubclass(rep, ProgressReporter) and rep.jobs == 3
    quiet = doit_config(tmp_path, 5, quiet=True)["reporter"]
    assert issubclass(quiet, QuietReporter) and quiet.jobs == 5
    assert ProgressReporter.jobs == 1  # the base class is left alone


def test_real_doit_run_times_run_tasks_not_up_to_date_ones(tmp_path):
    # Real doit thread runner: its hooks must start and stop the per-task timer.
    seen = []

    class Recorder(ProgressReporter.for_jobs(2)):
        def __init__(self, outstream, options):
            super().__init__(outstream, options)
            seen.append(self)

    src = tmp_path / "src"
    src.write_text("x")

    def task_compile():
        for name in "ab":
            out = tmp_path / name
            yield {"name": name, "file_dep": [src], "targets": [out],
                   "actions": [lambda out=out: out.write_text("y") and None]}

    mod = {"task_compile": task_compile,
           "DOIT_CONFIG": {**doit_config(tmp_path, 2, quiet=False), "reporter": Recorder}}
    args = ["run", "-n", "2", "-P", "thread", "compile"]
    assert DoitMain(ModuleTaskLoader(mod)).run(args) == 0
    assert DoitMain(ModuleTaskLoader(mod)).run(args) == 0  # all up to date now
    first, second = seen
    assert first.total == 2 and len(first.spent["compile"]) == 2
    assert all(s >= 0 for s in first.spent["compile"])
    assert second.done == 2 and second.spent == {}
