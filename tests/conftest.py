"""Fixtures shared by the loader's test files (a file may define its own
``built`` or ``bundle`` for another purpose; pytest takes the nearer one), and
the test markers (pyproject.toml declares them):

* ``build``: the test runs iree-compile or a build, itself or through a fixture.
  ``pytest -m "not build"`` runs the rest, the unit tests, in well under a
  minute. A fixture that builds is decorated ``@compiles`` (helpers.py): every
  test using it is marked at collection. The marks are checked while the suite
  runs: a test or fixture that starts ``iree-compile``, or ``boo-build
  build``/``bench``, without its mark fails, naming itself.
* ``slow``: takes seconds without building (torch.compile, Dask clusters,
  ``boo-build measure``).
* ``gpu``: needs a GPU the loader can open (CUDA or HIP). Where none is, such
  tests are deselected, not skipped (counted apart, never as passed), and the
  summary says how many and why.
* ``vulkan``: runs kernels on Mesa's software Vulkan GPU (lavapipe). Where it is
  absent they are deselected alike, the summary line saying what to install;
  under ``CI=true`` (``.ci/run`` installs it) they fail instead.
"""

import os
import shlex
import subprocess
from pathlib import Path

import pytest

# helpers.py holds asserts too: rewrite them as in the test files
pytest.register_assert_rewrite("helpers")

# The tests' builds time no torch.compile baseline (an Inductor compile per kernel and size, seconds each)
# unless a test asks with --compile-budget (tests/test_report_page.py's build times it for every CPU kernel)
os.environ.setdefault("BOO_COMPILE_BUDGET", "0")
# nor tuned lowering configurations (two more compiles and candidates per kernel): tests/test_tuning.py asks
os.environ.setdefault("BOO_TUNE", "0")

from helpers import backend_bundle, build_group_norms, build_kernels, compiles  # noqa: E402

from boo_build.loader import open_bundle  # noqa: E402


@pytest.fixture(scope="session")
@compiles
def built(tmp_path_factory):
    """The session's compiled kernels and their bundle (helpers.build_kernels)."""
    return build_kernels(tmp_path_factory)


@pytest.fixture(scope="session")
@compiles
def gn_built(tmp_path_factory):
    """The session's group-norm build (helpers.GN_MANIFEST): its output folder."""
    return build_group_norms(tmp_path_factory)


@pytest.fixture(scope="session")
@compiles
def backend_built(tmp_path_factory):
    """The compile backend's bundle (helpers.backend_bundle): tests/test_compile_backend.py's and
    tests/test_inline_norms.py's dynamic width-8 kernels."""
    return backend_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def bundle(built):
    return open_bundle(built.path, device="local-task")


# ----------------------------------------------------------------- markers
_BUILD_COMMANDS = ("build", "bench")
_builds_started = [0]  # iree-compile and boo-build build/bench processes started by this process
_gpu_deselected: list[str] = []
_vulkan_deselected: list[str] = []


def is_build_command(args) -> bool:
    """Whether a process started with ``args`` compiles: iree-compile (not ``--version``), or
    ``boo-build build|bench``; a shell's ``-c`` script is read for them too."""
    argv = shlex.split(args) if isinstance(args, str) else [str(a) for a in (args or ())]
    if not argv:
        return False
    name = Path(argv[0]).name
    if name in ("bash", "sh") and "-c" in argv[1:-1]:
        script = argv[argv.index("-c", 1) + 1]
        return any(is_build_command(line) for line in script.replace(";", "\n").splitlines() if line.strip())
    if name == "iree-compile":
        return "--version" not in argv  # asking its version (the toolchain's detection) compiles nothing
    # (asking a command's help builds nothing)
    return (name == "boo-build" and len(argv) > 1 and argv[1] in _BUILD_COMMANDS
            and not {"-h", "--help"} & set(argv[2:]))


def _watch_builds() -> None:
    """Count every process this test process starts that compiles (subprocess.Popen sees them all:
    ``compile_mlir``'s iree-compile, the CLI's builds)."""
    start = subprocess.Popen.__init__

    def init(self, args, *rest, **kw):
        if is_build_command(args):
            _builds_started[0] += 1
        start(self, args, *rest, **kw)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]


def _gpu_present() -> bool:
    if os.environ.get("BOO_TEST_GPU") == "0":
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no usable torch GPU
        return False


def _lavapipe_present() -> bool:
    """Whether Mesa's software Vulkan GPU (lavapipe) is here: the ``vulkan`` tests' device."""
    from boo_build.loader.devices import vulkan_devices

    return any(d.arch == "llvmpipe" for d in vulkan_devices())


VULKAN_SETUP = "apt-get install mesa-vulkan-drivers libvulkan1 (as root; .ci/run does)"


def _uses_build_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(getattr(defs[-1].func, "boo_builds", False)
                                    for defs in info.name2fixturedefs.values() if defs)


def pytest_configure(config):
    _watch_builds()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _uses_build_fixture(item):
            item.add_marker(pytest.mark.build)
    vulkan = [item for item in items if item.get_closest_marker("vulkan")]
    if vulkan and not _lavapipe_present():
        if os.environ.get("CI") == "true":  # CI installs it: the tests must run, so they fail without it
            for item in vulkan:
                item.add_marker(pytest.mark.usefixtures("_no_lavapipe"))
        else:
            _vulkan_deselected.extend(item.nodeid for item in vulkan)
            config.hook.pytest_deselected(items=vulkan)
            items[:] = [item for item in items if not item.get_closest_marker("vulkan")]
    if any(item.get_closest_marker("gpu") for item in items) and not _gpu_present():
        gpu = [item for item in items if item.get_closest_marker("gpu")]
        _gpu_deselected.extend(item.nodeid for item in gpu)
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]


@pytest.fixture
def _no_lavapipe():
    pytest.fail(f"CI=true but no Vulkan device lavapipe here: {VULKAN_SETUP}")


# Under pytest-xdist (``make test`` runs two workers) each worker collects and deselects; the
# controller, which writes the summary, gathers their lists as they finish
@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", {})
    for mine, theirs in ((_vulkan_deselected, out.get("vulkan_deselected", ())),
                         (_gpu_deselected, out.get("gpu_deselected", ()))):
        mine.extend(n for n in theirs if n not in mine)


def pytest_sessionfinish(session):
    out = getattr(session.config, "workeroutput", None)
    if out is not None:  # an xdist worker: hand its lists to the controller
        out["vulkan_deselected"] = list(_vulkan_deselected)
        out["gpu_deselected"] = list(_gpu_deselected)


def pytest_terminal_summary(terminalreporter):
    if _vulkan_deselected:
        terminalreporter.write_line(f"{len(_vulkan_deselected)} vulkan test(s) deselected: no software Vulkan GPU "
                                    f"here; to run them: {VULKAN_SETUP}")
    if _gpu_deselected:
        terminalreporter.write_line(f"{len(_gpu_deselected)} gpu test(s) deselected: no GPU the loader can open here "
                                    "(they run where torch sees a CUDA or HIP device)")


_UNMARKED = pytest.StashKey[list]()
_STARTED = pytest.StashKey[int]()
_current: list = [None]  # the test being run (a session fixture's setup happens inside one)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = _builds_started[0]
    yield
    item = _current[0]
    if item is not None and _builds_started[0] > before and not getattr(fixturedef.func, "boo_builds", False):
        item.stash.setdefault(_UNMARKED, []).append(
            f"fixture {fixturedef.argname!r} compiles: decorate it @compiles (helpers.py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_STARTED] = _builds_started[0]
    _current[0] = item
    try:
        yield
    finally:
        _current[0] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.when != "teardown":
        return
    why = list(item.stash.get(_UNMARKED, []))  # a fixture that compiles, undecorated: whoever uses it
    if item.get_closest_marker("build") and not why:
        return
    if _builds_started[0] > item.stash.get(_STARTED, _builds_started[0]) and not why:
        why.append("it compiles (iree-compile, or boo-build build/bench): mark it @pytest.mark.build")
    if why:
        rep.outcome = "failed"
        rep.longrepr = f"{item.nodeid} is not marked build, but " + "; ".join(why)
