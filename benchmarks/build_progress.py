"""The build's time-left estimate: its prior, a recorded build to replay, and how well each estimate did.

    # the shipped prior (boo_build/build/durations.json): each task's wall seconds in a cold build
    .venv/bin/python benchmarks/build_progress.py prior artifacts --log build.log
    # the same from the recorded quiet builds (what the shipped prior was made from)
    .venv/bin/python benchmarks/build_progress.py prior --fixture tests/fixtures/progress_default_build.json \
        --fixture tests/fixtures/progress_quickstart_quiet.json --fixture tests/fixtures/progress_two_targets_quiet.json
    # a replay fixture: the graph of the manifests, each task's wall seconds in that build
    .venv/bin/python benchmarks/build_progress.py fixture artifacts build.log
    # ... of another manifest, its seconds from the log's finishes (see below)
    .venv/bin/python benchmarks/build_progress.py fixture OUT build.log --manifest quickstart.toml -j 2 \
        --order-from-log --to tests/fixtures/progress_quickstart_quiet.json
    # how a build's printed estimates compare with the time that was left
    .venv/bin/python benchmarks/build_progress.py evaluate build.log
    # the current estimate on the fixture, replayed (also: --scale 3, --noise 0.7)
    .venv/bin/python benchmarks/build_progress.py replay

``build.log``: a build's output with each line prefixed by the unix time it
was printed (``START <time>`` first, ``END <time>`` last), e.g.

    (echo "START $(date +%s.%N)"; make build 2>&1 | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done;
     echo "END $(date +%s.%N)") > build.log

The log says when each task finished, not when it started: ``reconstruct``
drives doit's dispatcher with the logged finishes, in their order, to learn
which task each freed worker took, hence each task's start (on the recorded
build, compiles come out within 0.02 s of their records' own ``seconds``).
This needs the graph in the order the logged build had it: after a change of
the order (``tasks._all_names``), write the fixture from the old one's seconds,
``fixture ... --seconds-from OLD_FIXTURE``. Where the graph made here does not
reproduce the order the build gave tasks out in (the quick start's and the
two-target builds' logs finish tasks the dispatcher here has not started yet),
``--order-from-log`` takes each task's seconds from the finishes instead
(``from_finishes``): a record's own seconds for exports and compiles, else its
finish minus the latest of its dependencies' finishes and of the finish ``-j``
lines before its own.

The recorded builds: ``progress_default_build.json`` (``make build``, 784
tasks); the README's quick start and ``tests/fixtures/progress_two_targets.toml``
(4 float32 kernels, cpu and gfx942), each quiet and loaded (two
``python -c 'while True: pass'`` beside the build, killed after it), recorded
with ``boo-build build MANIFEST --out DIR`` at its default -j (2 cores here).

The replay runs doit's own dispatcher (``doit.control.TaskDispatcher``) on a
simulated clock, driven the way doit's parallel runner (``MRunner.run_tasks``)
drives it: ``-j`` workers, each finished task handing its worker the next task
the dispatcher gives out. Only the tasks' durations are recorded, not run.
Replayed with the estimator the recorded build ran, the lines come out as the
build printed them (781 of 783 tasks finish in the same place, 709 of 782
estimates within 2 s of the logged ones).
"""

from __future__ import annotations

import argparse
import heapq
import io
import json
import math
import random
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from boo_build.build import durations  # noqa: E402

LINE = re.compile(r"^(?P<t>\d+\.\d+) \[(?P<done>\d+)/(?P<total>\d+)(?:, ~(?P<m>\d+)m(?P<s>\d+)s left)?\] "
                  r"(?P<status>.{10}) (?P<name>\S+)")
DEFAULT_FIXTURE = ROOT / "tests" / "fixtures" / "progress_default_build.json"
FROM = 0.10  # estimates are judged from this share of the tasks done on


# ------------------------------------------------------------ the build log
def read_log(path: Path) -> tuple[float, float | None, list[dict]]:
    """(start, end or None, finished-task lines with their time, counts and estimate)."""
    start, end, lines = None, None, []
    for raw in Path(path).read_text().splitlines():
        if raw.startswith("START "):
            start = float(raw.split()[1])
        elif raw.startswith("END "):
            end = float(raw.split()[1])
        elif (m := LINE.match(raw)):
            shown = int(m["m"]) * 60 + int(m["s"]) if m["m"] is not None else None
            lines.append({"t": float(m["t"]), "done": int(m["done"]), "total": int(m["total"]),
                          "shown": shown, "status": m["status"].strip(), "name": m["name"]})
    if start is None:
        raise SystemExit(f"{path}: no START line")
    return start, end, lines


def judge(points: list[tuple[int, int, float | None, float]], slack_s: float = 1.0) -> dict:
    """Worst ratio, max(shown/true, true/shown), between shown and true time left over
    (done, total, shown, true) points from ``FROM`` of the tasks on. A point within
    ``slack_s`` of the truth counts as right: the line shows whole seconds."""
    worst, at, n = 1.0, None, 0
    for done, total, shown, true in points:
        if shown is None or done < FROM * total:
            continue
        n += 1
        if abs(shown - true) <= slack_s:
            continue
        r = max(shown / true, true / shown) if shown > 0 and true > 0 else float("inf")
        if r > worst:
            worst, at = r, (done, total, shown, true)
    return {"worst": worst, "at": at, "points": n}


def evaluate_log(path: Path) -> dict:
    start, end, lines = read_log(path)
    if end is None:
        raise SystemExit(f"{path}: no END line (the build has not finished)")
    pts = [(ln["done"], ln["total"], ln["shown"], end - ln["t"]) for ln in lines]
    return {"total_s": end - start, **judge(pts), "series": pts}


# ---------------------------------------------------------------- the graph
def graph(manifests: list[Path]) -> list[tuple[str, list[str], bool]]:
    """(task name, task_dep, has actions) of the build graph, as the CLI makes it on this machine;
    task_dep with the tasks doit adds for the targets a task's file_dep names."""
    from boo_build.build.creators import task_creators
    from boo_build.build.tasks import BuildConfig

    with tempfile.TemporaryDirectory() as out:
        creators = task_creators(BuildConfig(manifests=tuple(manifests), out_dir=Path(out)))
        found, file_deps, made_by = [], [], {}
        for creator, fn in creators.items():
            base = creator.removeprefix("task_")
            made = fn()
            for d in [made] if isinstance(made, dict) else list(made or ()):
                name = f"{base}:{d['name']}" if "name" in d else base
                found.append((name, list(d.get("task_dep", ())), bool(d.get("actions"))))
                file_deps.append([str(f) for f in d.get("file_dep", ())])
                made_by.update({str(t): name for t in d.get("targets", ())})
    # doit adds a task_dep on the task whose target a task reads (a select waits for
    # its benchmark's record): appended, as doit's TaskControl does
    for (name, deps, _), files in zip(found, file_deps):
        deps.extend(dict.fromkeys(made_by[f] for f in files if f in made_by and made_by[f] not in deps))
    return found


def _doit_tasks(graph_tasks: list[tuple[str, list[str], bool]]) -> dict:
    from doit.task import Task

    return {name: Task(name, [(lambda: None, (), {})] if acts else None, task_dep=list(deps))
            for name, deps, acts in graph_tasks}


def drive(tasks: dict, selected: list[str], jobs: int, on_start, next_done) -> None:
    """doit's ``MRunner.run_tasks`` over its ``TaskDispatcher``, every task run (a cold
    build), with the time kept by the caller: ``on_start(node)`` as a worker takes a
    task, ``next_done()`` -> the node that finishes next."""
    from doit.control import TaskDispatcher

    dispatcher = TaskDispatcher(tasks, {}, selected)
    hold, free = object(), 0

    def next_job(completed):
        nonlocal free
        try:
            node = dispatcher.generator.send(completed)
        except StopIteration:
            return None
        if node == "hold on":
            free += 1
            return hold
        node.run_status = "run"
        return node

    workers = 0
    for _ in range(jobs):
        job = next_job(None)
        if job is None:
            break
        workers += 1
        if job is not hold:
            on_start(job)
    while workers:
        node = next_done()
        node.run_status = "successful"
        n_free, free = free + 1, 0
        completed = node
        for _ in range(n_free):
            job = next_job(completed)
            completed = None
            if job is None:
                workers -= 1
            elif job is not hold:
                on_start(job)


def reconstruct(graph_tasks: list[tuple[str, list[str], bool]], log: Path, jobs: int,
                first: dict[str, float]) -> tuple[dict[str, float], float]:
    """Each task's wall seconds in a logged build: doit's dispatcher, driven by the log's
    finishes in their order, says which task each freed worker took, so when each task
    started. ``first``: seconds of the tasks that started with the build (their records'),
    since the log does not say when that was. Returns (seconds by task, first start)."""
    _, end, lines = read_log(log)
    finished = {ln["name"]: ln["t"] for ln in lines}
    tasks = _doit_tasks(graph_tasks)
    order = iter(lines)
    nodes: dict = {}
    started: dict[str, float | None] = {}
    instant: list = []
    now: float | None = None  # None: the build's first tasks

    def on_start(node):
        nodes[node.task.name] = node
        started[node.task.name] = now
        if not node.task.actions:  # a barrier: done as soon as it is taken
            instant.append(node)

    def next_done():
        nonlocal now
        if instant:
            return instant.pop(0)
        ln = next(order, None)
        if ln is None:  # the page, unprinted by builds before it was counted, ends the run
            now, name = end, next(n for n in started if n.startswith("page:"))
        else:
            now, name = ln["t"], ln["name"]
        return nodes[name]

    drive(tasks, ["build"], jobs, on_start, next_done)
    t0 = min(finished[n] - first.get(n, 0.0) for n, t in started.items() if t is None)
    secs = {n: finished.get(n, end) - (t0 if t is None else t) for n, t in started.items() if tasks[n].actions}
    return secs, t0


def from_finishes(graph_tasks: list[tuple[str, list[str], bool]], log: Path, jobs: int,
                  recorded: dict[str, float]) -> tuple[dict[str, float], float]:
    """Each task's wall seconds where ``reconstruct`` cannot replay the build's order (doit
    gave out tasks in an order this graph does not reproduce): a record's own seconds
    (exports, compiles), else its finish minus the latest of its dependencies' finishes
    and the finish ``jobs`` lines before its own (a worker was free by then at the
    latest). Returns (seconds by task, the build's start)."""
    start, end, lines = read_log(log)
    if end is None:
        raise SystemExit(f"{log}: no END line (the build has not finished)")
    finished = {ln["name"]: ln["t"] for ln in lines}
    order = [ln["name"] for ln in lines]
    at = {name: i for i, name in enumerate(order)}
    deps = {name: ds for name, ds, _ in graph_tasks}

    def done(name: str) -> float:  # a barrier is done when its dependencies are
        if name in finished:
            return finished[name]
        return max((done(d) for d in deps.get(name, ())), default=start)

    secs = {}
    for name, ds, acts in graph_tasks:
        if not acts:
            continue
        if name in recorded:
            secs[name] = recorded[name]
            continue
        t = finished.get(name, end)
        i = at.get(name, len(order))
        free = finished[order[i - jobs]] if i >= jobs else start
        secs[name] = max(0.0, t - max([free] + [done(d) for d in ds]))
    return secs, start


def make_fixture(manifests: list[Path], out_dir: Path, log: Path, jobs: int, seconds_from: Path | None = None,
                 order_from_log: bool = False) -> dict:
    """The fixture: the current graph, each task's wall seconds in the logged build.
    ``seconds_from``: a fixture written by the code the logged build ran, whose seconds
    to take (the reconstruction needs the graph's order as the build had it)."""
    _, end, _ = read_log(log)
    g = graph(manifests)
    if seconds_from:
        old = json.loads(Path(seconds_from).read_text())
        secs = {name: s for name, s, _ in old["tasks"] if s is not None}
        t0 = end - old["total_s"]
    elif order_from_log:
        secs, t0 = from_finishes(g, log, jobs, dict(durations.record_durations(out_dir)))
    else:
        secs, t0 = reconstruct(g, log, jobs, dict(durations.record_durations(out_dir)))
    index = {name: i for i, (name, _, _) in enumerate(g)}
    tasks = [[name, round(secs[name], 3) if acts else None, [index[d] for d in deps]] for name, deps, acts in g]
    import os

    from machine import cpu_model  # benchmarks/ is on sys.path when run as a script

    return {"about": f"a cold build of {', '.join(Path(m).name for m in manifests)} at -j {jobs} on "
                     f"{os.cpu_count()} cores ({cpu_model()}): each task's wall seconds (null: a barrier) and its "
                     "task_dep (indices); benchmarks/build_progress.py",
            "jobs": jobs, "selected": ["build"], "total_s": round(end - t0, 1), "tasks": tasks}


# ------------------------------------------------------------------- replay
class SimClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Lines(io.StringIO):
    """The reporter's output, each line with the simulated time it was written."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__()
        self.clock, self.timed = clock, []

    def write(self, s: str) -> int:
        for line in s.splitlines():
            if line.strip():
                self.timed.append((self.clock.now, line))
        return super().write(s)


def replay(fixture: dict, reporter_class, *, scale: float = 1.0, noise: float = 0.0, seed: int = 0,
           slack_s: float = 1.0) -> dict:
    """Run the fixture's graph through doit's dispatcher on ``fixture['jobs']`` simulated
    workers and ``reporter_class`` (a ProgressReporter); each task's seconds times
    ``scale`` and times a log-uniform factor within ``exp(+-noise)``. Returns the total,
    each printed line's (done, total, shown, true time left) and the lines."""
    rng = random.Random(seed)
    names = [t[0] for t in fixture["tasks"]]
    tasks = _doit_tasks([(name, [names[i] for i in deps], secs is not None) for name, secs, deps in fixture["tasks"]])
    seconds = {name: secs * scale * math.exp(rng.uniform(-noise, noise))
               for name, secs, _ in fixture["tasks"] if secs is not None}
    clock = SimClock()
    out = Lines(clock)
    rep = reporter_class(out, {}, clock=clock)
    rep.initialize(tasks, list(fixture["selected"]))
    running: list = []

    def on_start(node):
        rep.execute_task(node.task)
        heapq.heappush(running, (clock.now + seconds.get(node.task.name, 0.0), len(rep_seq), node))
        rep_seq.append(node)

    def next_done():
        clock.now, _, node = heapq.heappop(running)
        rep.add_success(node.task)  # doit's runner reports it before handing out the next task
        return node

    rep_seq: list = []
    drive(tasks, list(fixture["selected"]), int(fixture["jobs"]), on_start, next_done)
    rep.complete_run()
    total = clock.now
    points = []
    for t, line in out.timed:
        m = LINE.match(f"{t:.6f} {line}")
        if m:
            shown = int(m["m"]) * 60 + int(m["s"]) if m["m"] is not None else None
            points.append((int(m["done"]), int(m["total"]), shown, total - t))
    return {"total_s": total, **judge(points, slack_s), "series": points, "lines": [line for _, line in out.timed]}


def kernel_benches(pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """A kernel's benchmark, ``bench:<bundle>/<target>/<kernel>``, for each kernel whose
    candidates and torch eager a build benchmarked as tasks of their own (graphs before
    per-kernel benchmarks, such as the default build's fixture): their seconds summed.
    A kernel's benchmark times the same candidates in paired rounds; the sum keeps the
    large kernels' (tens of seconds) apart from the small ones' the newer builds recorded.
    Only for a target and size (``durations._size_class``) with no kernel's benchmark
    recorded: a recorded one says better what a kernel's benchmark takes (the two-target
    build's, loaded, ran 2x off with the default build's small sums beside its own)."""
    recorded = {durations.task_keys(name)[3] for name, _ in pairs
                if durations.task_keys(name)[-1] == "bench+kernel"}
    sums: dict[str, float] = {}
    for name, secs in pairs:
        stage, _, rest = name.partition(":")
        where, _, subject = rest.rpartition("/")
        parts = subject.partition("@")[0].partition("+")[0].removesuffix("-eager").split("-")
        mask = max((i for i, p in enumerate(parts) if re.fullmatch(r"m\d+", p)), default=None)
        if stage != "bench" or mask is None or mask == len(parts) - 1 and "-eager" not in subject:
            continue  # not a benchmark, or already a kernel's
        kernel = f"bench:{where}/{'-'.join(parts[:mask + 1])}"
        if durations.task_keys(kernel)[3] not in recorded:
            sums[kernel] = sums.get(kernel, 0.0) + secs
    return list(sums.items())


def _show(name: str, res: dict) -> None:
    at = res["at"]
    where = f" at {at[0]}/{at[1]}: shown {at[2]:.0f} s, true {at[3]:.0f} s" if at else ""
    print(f"{name}: total {res['total_s']:.0f} s; worst ratio from {FROM:.0%} of the tasks on "
          f"{res['worst']:.2f} over {res['points']} lines{where}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prior", help="write boo_build/build/durations.json from a build's records")
    p.add_argument("out", type=Path, nargs="?", help="the build's --out folder")
    p.add_argument("--fixture", type=Path, action="append",
                   help="take each task's wall seconds from fixtures instead (repeat: all of them)")
    p.add_argument("--log", type=Path, help="its timed log: each task's wall seconds (else the records')")
    p.add_argument("--manifest", type=Path, action="append", help="with --log: default manifests/default.toml")
    p.add_argument("-j", "--jobs", type=int, default=2, help="with --log: the build's -j")
    p.add_argument("--to", type=Path, default=durations.PRIOR_FILE)
    f = sub.add_parser("fixture", help="a replay fixture from a build's records and timed log")
    f.add_argument("out", type=Path)
    f.add_argument("log", type=Path)
    f.add_argument("--manifest", type=Path, action="append", help="default: manifests/default.toml")
    f.add_argument("-j", "--jobs", type=int, default=2)
    f.add_argument("--to", type=Path, default=DEFAULT_FIXTURE)
    f.add_argument("--order-from-log", action="store_true",
                   help="each task's seconds from the log's finishes (from_finishes), where the graph does not "
                        "reproduce the build's order")
    f.add_argument("--seconds-from", type=Path,
                   help="take each task's seconds from this fixture (written by the code the build ran) and the "
                        "graph from the current code")
    e = sub.add_parser("evaluate", help="how a timed build log's estimates compare with the time left")
    e.add_argument("log", type=Path)
    e.add_argument("--series", action="store_true", help="print every line's shown and true time left")
    r = sub.add_parser("replay", help="replay a fixture through the current progress reporter")
    r.add_argument("fixture", type=Path, nargs="?", default=DEFAULT_FIXTURE)
    r.add_argument("--scale", type=float, default=1.0, help="every task this many times as long")
    r.add_argument("--noise", type=float, default=0.0, help="each task times a factor within exp(+-noise)")
    r.add_argument("--series", action="store_true")
    ns = ap.parse_args(argv)

    if ns.cmd == "prior":
        if ns.fixture:
            pairs = [(name, secs) for fx in ns.fixture for name, secs, _ in json.loads(fx.read_text())["tasks"]
                     if secs is not None]
            pairs += kernel_benches(pairs)
        elif ns.out is None:
            ap.error("prior: give a build's folder (OUT) or --fixture")
        elif ns.log:  # every task's wall seconds (validations and benchmarks record none)
            secs, _ = reconstruct(graph(ns.manifest or [ROOT / "manifests" / "default.toml"]), ns.log, ns.jobs,
                                  dict(durations.record_durations(ns.out)))
            pairs = list(secs.items())
        else:
            pairs = durations.record_durations(ns.out)
        data = durations.prior_document(pairs)
        ns.to.write_text(json.dumps(data, indent=0) + "\n")
        print(f"{ns.to}: {len(data['seconds'])} keys")
    elif ns.cmd == "fixture":
        fx = make_fixture(ns.manifest or [ROOT / "manifests" / "default.toml"], ns.out, ns.log, ns.jobs,
                          ns.seconds_from, ns.order_from_log)
        body = ",\n".join(json.dumps(t, separators=(",", ":")) for t in fx.pop("tasks"))
        head = json.dumps(fx, indent=1)[:-2]
        ns.to.write_text(f'{head},\n "tasks": [\n{body}\n]}}\n')
        print(f"{ns.to}: {len(json.loads(ns.to.read_text())['tasks'])} tasks")
    elif ns.cmd == "evaluate":
        res = evaluate_log(ns.log)
        _show(str(ns.log), res)
        if ns.series:
            for done, total, shown, true in res["series"]:
                print(f"{done}/{total} shown {shown} true {true:.0f}")
    else:
        from boo_build.build.progress import ProgressReporter

        fx = json.loads(ns.fixture.read_text())
        res = replay(fx, ProgressReporter.for_jobs(fx["jobs"]), scale=ns.scale, noise=ns.noise)
        _show(f"replay x{ns.scale:g}" + (f" noise {ns.noise:g}" if ns.noise else ""), res)
        if ns.series:
            for done, total, shown, true in res["series"]:
                print(f"{done}/{total} shown {shown} true {true:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
