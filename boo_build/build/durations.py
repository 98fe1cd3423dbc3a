"""How long each task of the graph is expected to take, before it runs.

A fresh clone has no history of its own, so the package ships a prior
(``durations.json``): the median wall seconds per kind of task in a cold
build of the default manifest on 2 shared cores (``-j 2``). Most tasks take
about a second, but a few GPU compiles take minutes (the bfloat16 width-768
combined backward on gfx1100 and gfx1201), and neither the mean of a stage nor
the tasks seen so far know which: the kind of task does.

A task's kind is read from its name (``tasks`` documents the names), from the
most specific key to the least:

    <stage>/<target>/<op>/<dtype>/m<mask>/<s|d>/<impl>[+<variant>][@<mode>]
    <stage>/<target>/<op>/<dtype>/m<mask>/<s|d>
    <stage>/<target>/<op>/<dtype>
    <stage>/<target>
    <stage>

(``s``/``d``: static or dynamic dims; ``-`` for export's target; ``eager`` is
torch eager's benchmark.) ``expected`` answers with the first key the prior
holds. The progress line (``progress``) scales these by what it measures as
the build runs; the graph (``tasks``) starts the longest first.

``benchmarks/build_progress.py prior OUT --log LOG`` rebuilds the table from
a build: the wall seconds of each task, from its timed log (validations and
benchmarks write no ``seconds``), or else from the records' ``seconds``
(``record_durations``: exports and compiles). The shipped table is
``prior --fixture tests/fixtures/progress_default_build.json``: the build
that ``tests/test_progress.py`` replays.
Pure Python (stdlib only): the graph imports it at load time.
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["PRIOR_FILE", "expected", "load_prior", "prior_document", "prior_table", "record_durations", "task_keys"]

PRIOR_FILE = Path(__file__).with_name("durations.json")
TARGETED = ("compile", "validate", "bench")  # stages whose task names carry a target
EAGER_SUFFIX = "-eager"  # layout.EAGER_SUFFIX (layout imports the signature module; this stays stdlib only)


def _module_keys(stage: str, target: str, subject: str) -> list[str]:
    """Keys of a module-level subject (module key, ``+variant``, ``@mode``, or ``<sig>-eager``)."""
    base, at, mode = subject.partition("@")
    eager = base.endswith(EAGER_SUFFIX)
    if eager:
        base = base.removesuffix(EAGER_SUFFIX)
    base, plus, variant = base.partition("+")
    parts = base.split("-")
    if len(parts) < 6:
        return [f"{stage}/{target}", stage]
    op, dtype, shape = parts[0], parts[1], parts[2]
    mask = next((p for p in reversed(parts) if p[:1] == "m" and p[1:].isdigit()), "m?")
    dims = "d" if any(c.isalpha() for c in shape.replace("x", "")) else "s"
    impl = "eager" if eager else parts[-1]
    impl += (plus + variant) + (at + mode)
    return [f"{stage}/{target}/{op}/{dtype}/{mask}/{dims}/{impl}", f"{stage}/{target}/{op}/{dtype}/{mask}/{dims}",
            f"{stage}/{target}/{op}/{dtype}", f"{stage}/{target}", stage]


def task_keys(name: str) -> list[str]:
    """A task's prior keys, most specific first (the module docstring's list)."""
    stage, _, rest = name.partition(":")
    parts = rest.split("/")
    if stage == "export" and len(parts) >= 2:
        return _module_keys(stage, "-", parts[-1])
    if stage in TARGETED and len(parts) >= 3:
        return _module_keys(stage, parts[-2], parts[-1])
    return [stage]


@lru_cache(maxsize=4)
def load_prior(path: Path = PRIOR_FILE) -> Mapping[str, float]:
    """key -> seconds; empty when the file is missing or unreadable (no prior, no harm)."""
    try:
        data = json.loads(Path(path).read_text())
        return {str(k): float(v) for k, v in data["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def expected(name: str, prior: Mapping[str, float] | None = None) -> float | None:
    """The prior's seconds for task ``name`` (the most specific key it holds), or None."""
    table = load_prior() if prior is None else prior
    for key in task_keys(name):
        if key in table:
            return table[key]
    return None


def _round(seconds: float) -> float:
    """Three significant digits: the table stays small and its diffs readable."""
    return float(f"{seconds:.3g}")


def prior_table(durations: Iterable[tuple[str, float]]) -> dict[str, float]:
    """key -> median seconds over (task name, seconds) pairs, at every key level.
    A specific key equal (to 10%) to its parent's is left out: the parent answers."""
    samples: dict[str, list[float]] = {}
    for name, secs in durations:
        for key in task_keys(name):
            samples.setdefault(key, []).append(float(secs))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    out: dict[str, float] = {}
    for key in sorted(medians, key=lambda k: k.count("/")):
        parent = key.rsplit("/", 1)[0] if "/" in key else None
        near = next((out[p] for p in _ancestors(key) if p in out), None) if parent else None
        if near is not None and abs(medians[key] - near) <= 0.1 * near:
            continue
        out[key] = _round(medians[key])
    return dict(sorted(out.items()))


def _ancestors(key: str) -> list[str]:
    parts = key.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def record_durations(out_dir: Path) -> list[tuple[str, float]]:
    """(task name, seconds) of every stage record under ``out_dir`` (a build's --out):
    exports, compiles, validations and benchmarks, as their records timed them."""
    found = []
    for root in sorted(p for p in Path(out_dir).iterdir() if p.is_dir() and (p / "mlir").is_dir()):
        bundle = root.name
        globs = [("export", "mlir/*.export.json", ".export.json"), ("compile", "vmfb/*/*.compile.json", ".compile.json"),
                 ("validate", "validate/*/*.json", ".json"), ("bench", "bench/*/*.json", ".json")]
        for stage, pattern, suffix in globs:
            for path in sorted(root.glob(pattern)):
                try:
                    secs = json.loads(path.read_text()).get("seconds")
                except (OSError, ValueError):
                    continue
                if not isinstance(secs, (int, float)):
                    continue
                subject = path.name.removesuffix(suffix)
                where = subject if stage == "export" else f"{path.parent.name}/{subject}"
                found.append((f"{stage}:{bundle}/{where}", float(secs)))
    return found


def prior_document(durations: Iterable[tuple[str, float]]) -> dict:
    """The prior file's content from (task name, seconds) pairs of a build."""
    return {"about": "median seconds per kind of task (boo_build/build/durations.py); "
                     "regenerate: benchmarks/build_progress.py prior OUT --log LOG",
            "seconds": prior_table(durations)}
