"""How long each task of the graph is expected to take, before it runs.

A fresh clone has no history of its own, so the package ships a prior
(``durations.json``): the median wall seconds per kind of task in cold
builds on 2 shared cores (``-j 2``) of the default manifest, the README's
quick start and a 4-kernel two-target manifest. Most tasks take
about a second, but a few GPU compiles take minutes (the bfloat16 width-768
combined backward on gfx1100 and gfx1201), and neither the mean of a stage nor
the tasks seen so far know which: the kind of task does.

A task's kind is read from its name (``tasks`` documents the names), from the
most specific key to the least:

    <stage>/<target>/<size>/<op>/<dtype>/m<mask>/<s|d>/<impl>[+<variant>][@<mode>]
    <stage>/<target>/<size>/<op>/<dtype>/m<mask>/<s|d>
    <stage>/<target>/<size>/<op>/<dtype>
    <stage>/<target>/<size>
    <stage>/<target>
    <stage>
    page/<s|d>  (``task_keys``' ``dynamic``)

(``s``/``d``: static or dynamic dims; ``-`` for export's target; ``eager`` is
torch eager's benchmark; ``<size>``: ``small`` or ``large`` normalized dims,
``_size_class``; a kernel's benchmark, ``bench:<bundle>/<target>/<signature>``,
has the stage ``bench+kernel``, its impl the mask.) ``expected`` answers with the first key the prior
holds. The progress line (``progress``) scales these by what it measures as
the build runs; the graph (``tasks``) starts the longest first.

``benchmarks/build_progress.py prior OUT --log LOG`` rebuilds the table from
a build: the wall seconds of each task, from its timed log (validations and
benchmarks write no ``seconds``), or else from the records' ``seconds``
(``record_durations``: exports and compiles). The shipped table is
``prior --fixture F`` for the quiet builds that ``tests/test_progress.py``
replays: ``progress_default_build.json``, ``progress_quickstart_quiet.json``,
``progress_two_targets_quiet.json`` (``tests/fixtures/``). The first predates
per-kernel benchmarks: its benchmarks of each candidate and torch eager, summed
per kernel, stand in for a kernel's benchmark where no build recorded one of
that target and size (``build_progress.kernel_benches``: the large kernels).
Pure Python (stdlib only): the graph imports it at load time.
"""

from __future__ import annotations

import json
import math
import statistics
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["PAGE_CELL_S", "PAGE_PRIOR_CELLS", "PRIOR_FILE", "expected", "load_prior", "prior_document", "prior_table", "record_durations", "task_keys"]

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
    if stage == "bench" and parts[-1] == mask and not (eager or plus or at):
        # a kernel's benchmark (every candidate and torch eager in paired rounds) is
        # another kind of task than a candidate's alone (older graphs): its own keys,
        # so neither's median stands in for the other's
        stage = "bench+kernel"
    impl = "eager" if eager else parts[-1]
    impl += (plus + variant) + (at + mode)
    size = _size_class(parts[3])
    head = f"{stage}/{target}/{size}"
    return [f"{head}/{op}/{dtype}/{mask}/{dims}/{impl}", f"{head}/{op}/{dtype}/{mask}/{dims}",
            f"{head}/{op}/{dtype}", head, f"{stage}/{target}", stage]


SMALL_N = 256  # normalized elements: at most this, a small kernel (``_size_class``)
# The report page draws a row per kernel and target: on top of its prior, recorded on bundles of up to
# PAGE_PRIOR_CELLS such cells, this much per cell beyond. Quiet, the default manifest's page (252 cells)
# took 4.8 s where the quick start's (4) took 1.8-2.4 s: with the prior alone the last lines showed a
# third of the time left.
PAGE_CELL_S = 0.01
PAGE_PRIOR_CELLS = 8


def _size_class(normalized: str) -> str:
    """``small`` or ``large`` from a module key's ``n<dims>`` part (``n64``, ``n42x32``).
    A kernel's validation and benchmark take time with its size: the default
    manifest's 4096-wide RMS norm validates in 5 s, a 64-wide one in 0.05 s, and a
    key without the size made the first the prior of the second (the quick start's
    estimate 3x the time left)."""
    try:
        n = math.prod(int(d) for d in normalized.removeprefix("n").split("x"))
    except ValueError:
        return "large"
    return "small" if n <= SMALL_N else "large"


def task_keys(name: str, dynamic: bool | None = None) -> list[str]:
    """A task's prior keys, most specific first (the module docstring's list).
    ``dynamic``: for a page, whether its bundle holds a kernel of dynamic dims
    (``dynamic_bundles``): the page draws each one's timings by size, so a bundle
    of static kernels draws in about 1 s and one of dynamic kernels in 2-3 s
    (``page/s``, ``page/d``), quiet; unknown: ``page`` alone."""
    stage, _, rest = name.partition(":")
    if stage == "page" and dynamic is not None:
        return [f"page/{'d' if dynamic else 's'}", stage]
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


def dynamic_bundles(names: Iterable[str]) -> dict[str, bool]:
    """bundle -> whether it holds a kernel of dynamic dims, from the exports among task ``names``."""
    found: dict[str, bool] = {}
    for name in names:
        stage, _, rest = name.partition(":")
        if stage == "export":
            keys = task_keys(name)
            bundle = rest.split("/", 1)[0]
            found[bundle] = found.get(bundle, False) or (len(keys) > 3 and keys[1].endswith("/d"))
    return found


def expected(name: str, prior: Mapping[str, float] | None = None, dynamic: bool | None = None) -> float | None:
    """The prior's seconds for task ``name`` (the most specific key it holds), or None.
    ``dynamic``: ``task_keys``'."""
    table = load_prior() if prior is None else prior
    for key in task_keys(name, dynamic):
        if key in table:
            return table[key]
    return None


def _round(seconds: float) -> float:
    """Three significant digits: the table stays small and its diffs readable."""
    return float(f"{seconds:.3g}")


def prior_table(durations: Iterable[tuple[str, float]]) -> dict[str, float]:
    """key -> median seconds over (task name, seconds) pairs, at every key level.
    A specific key equal (to 10%) to its parent's is left out: the parent answers."""
    durations = list(durations)
    dynamic = dynamic_bundles(name for name, _ in durations)
    samples: dict[str, list[float]] = {}
    for name, secs in durations:
        bundle = name.partition(":")[2].split("/", 1)[0]
        for key in task_keys(name, dynamic.get(bundle)):
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
