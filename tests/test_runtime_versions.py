"""Which iree-base-runtime loads a bundle: the pack step records the compiler
and the runtime range (``pack.RUNTIME_RANGE``), ``open_bundle`` refuses an
older runtime by name before any kernel loads and warns about a newer one,
and bundles written before the field existed still open.

Two other runtimes from PyPI run in subprocesses (``pip install --target``,
once per session, about 20 s here): 3.12.0, the oldest that loads the pinned
compiler's modules, and 3.11.0, the newest below it (it fails creating a VM
context: "required module 'hal' version mismatch").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from helpers import REPO, assert_close, rewrite, write_decision

from boo_build.loader import BundleFormatError, RuntimeTooOld, UntestedRuntimeWarning, open_bundle, read_archive
from boo_build.loader.format import RUNTIME_FIELD
from boo_build.loader.native import runtime_version
from boo_build.loader.versions import iree_release
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.pack import RUNTIME_RANGE, pack_from_report, read_index, runtime_requirements
from boo_build.stages.reference import reference
from boo_build.stages.torch_modules import sample_args
from boo_build.targets import catalogue

# Packed before the iree_runtime field existed (`boo-build build
# fixtures/pre-runtime-fields.toml --no-bench`, iree-compile 3.13.0); keep as is.
PRE_FIELD = REPO / "tests" / "fixtures" / "pre-runtime-fields-0.1.0.tar.zst"
OLDEST, BELOW = "3.12.0", "3.11.0"


def _run_kernel(bundle, key: str) -> None:
    sig = KernelSignature.parse(key)
    args = sample_args(sig, seed=5)
    for i, (out, ref) in enumerate(zip(bundle.run(key, *args), reference(sig, args))):
        assert_close(out, ref, sig.dtype, f"{key} output {i}")


# ----------------------------------------------------- bundles before the field
def test_bundle_without_the_field_still_opens():
    index = read_index(PRE_FIELD)
    assert RUNTIME_FIELD not in index and index["format_version"] == 1  # really a pre-change bundle
    b = open_bundle(PRE_FIELD, device="local-task")
    (key,) = b.keys()
    _run_kernel(b, key)
    assert b.stats()[key]["hits"] == 1


# ----------------------------------------------------------- the pack step
@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The fixture's kernel packed by the graph's pack step (a build report),
    with the compiler version from the existing toolchain detection."""
    from boo_build.build.toolchain import Toolchain

    root = tmp_path_factory.mktemp("recorded")
    old = read_archive(PRE_FIELD)
    (key, k), = old.index["kernels"].items()
    sig = KernelSignature.from_json(k["signature"])
    te = k["targets"]["cpu"]
    vmfb = root / "vmfb" / "cpu" / f"{ModuleId(sig, te['selected']).key}.vmfb"
    vmfb.parent.mkdir(parents=True)
    vmfb.write_bytes(old.members[te["impls"][te["selected"]]["member"]])
    toolchain = Toolchain.detect(root)
    report = {
        "format": "boo-build-report", "format_version": 1, "manifest": "pre-runtime-fields.toml",
        "bundle": {"name": "recorded", "version": "0.1.0", "targets": ["cpu"]},
        "toolchain": {"compiler": toolchain.compiler, **toolchain.versions},
        "targets": {"cpu": {"flags": list(catalogue()["cpu"].flags), "driver": "local-task"}},
        "benchmarks": "skipped (--no-bench)",
        "kernels": [{"key": key, "signature": k["signature"], "targets": {"cpu": {
            "status": "available", "selected": te["selected"], "selection_reason": "only one",
            "impls": {te["selected"]: {"validation": {"status": "passed"}, "bench": None}}}}}],
    }
    (root / "build-report.json").write_text(json.dumps(report))
    write_decision(root, "cpu", sig, te["selected"], "only one")
    return pack_from_report(root / "build-report.json", root, root / "recorded-0.1.0.tar.zst")


def test_pack_records_compiler_and_runtime_range(recorded):
    from importlib.metadata import version

    field = read_index(recorded)[RUNTIME_FIELD]
    compiler = iree_release(field["compiler"])
    # the compiler that built the modules: iree-compile --version, here the pinned package's
    assert compiler == iree_release(version("iree-base-compiler"))
    assert (field["min"], field["max_tested"]) == RUNTIME_RANGE[compiler[:2]] == (OLDEST, "3.13.0")


def test_runtime_requirements_of_other_compilers():
    assert runtime_requirements("IREE compiler version 3.13.0rc20261016 @ 89ece87 | LLVM version 24.0.0git") == {
        "compiler": "3.13.0rc20261016", "min": OLDEST, "max_tested": "3.13.0"}
    # a compiler release nobody measured: its own runtime release only
    assert runtime_requirements("IREE compiler version 3.14.0rc20261201 @ 0123abc") == {
        "compiler": "3.14.0rc20261201", "min": "3.14.0", "max_tested": "3.14.0"}
    assert runtime_requirements("IREE (https://iree.dev): custom build") is None  # no field, no check


# ------------------------------------------------- the check, this runtime
def _with_field(src: Path, dst: Path, **field) -> Path:
    def edit(ix):
        ix[RUNTIME_FIELD] = {**ix[RUNTIME_FIELD], **field}
    return rewrite(src, dst, index=edit)


def test_recorded_bundle_opens_with_this_runtime(recorded):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UntestedRuntimeWarning for the pinned runtime
        b = open_bundle(recorded, device="local-task")
    _run_kernel(b, b.keys()[0])


def test_runtime_older_than_the_bundle_needs_is_refused_at_open(recorded, tmp_path):
    have = runtime_version()
    major, minor, _ = iree_release(have)
    need = f"{major}.{minor + 1}.0"
    path = _with_field(recorded, tmp_path / "needs-newer.tar.zst", min=need, max_tested=need)
    with pytest.raises(RuntimeTooOld) as e:
        open_bundle(path, device="local-task")
    msg = str(e.value)
    for part in (str(path), f"iree-base-runtime {need} or newer", f"this process has iree-base-runtime {have}",
                 f"pip install 'iree-base-runtime>={need},<={need}'", f"iree-base-compiler=={major}.{minor}.0"):
        assert part in msg, (part, msg)


def test_runtime_newer_than_tested_warns_and_runs(recorded, tmp_path):
    major, minor, _ = iree_release(runtime_version())
    older = f"{major}.{minor - 1}.0"
    path = _with_field(recorded, tmp_path / "tested-older.tar.zst", min=older, max_tested=older)
    with pytest.warns(UntestedRuntimeWarning, match=rf"newer than any tested.*iree-base-runtime=={older}"):
        b = open_bundle(path, device="local-task")
    _run_kernel(b, b.keys()[0])


def test_malformed_field_is_a_format_error(recorded, tmp_path):
    path = _with_field(recorded, tmp_path / "bad.tar.zst", min="twelve")
    with pytest.raises(BundleFormatError, match=rf"{path}.*{RUNTIME_FIELD}.*'twelve'"):
        open_bundle(path, device="local-task")


# --------------------------------------------- other runtimes, subprocesses
@pytest.fixture(scope="session")
def runtimes(tmp_path_factory) -> dict[str, Path]:
    """iree-base-runtime OLDEST and BELOW, each pip-installed into its own folder."""
    out = {}
    for v in (OLDEST, BELOW):
        d = tmp_path_factory.mktemp(f"iree-base-runtime-{v}")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               "--no-deps", "--only-binary=:all:", "--target", str(d), f"iree-base-runtime=={v}"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"pip install iree-base-runtime=={v}: {proc.stderr[-2000:]}"
        out[v] = d
    return out


_PROBE = textwrap.dedent('''
    import importlib.util, sys
    from boo_build.loader import RuntimeTooOld, open_bundle
    from boo_build.loader.native import runtime_version
    where = importlib.util.find_spec("iree._runtime_libs").origin
    print("RUNTIME", runtime_version(), where.startswith(sys.argv[2]))
    try:
        b = open_bundle(sys.argv[1], device="local-task")
    except RuntimeTooOld as e:
        print("REFUSED", "iree._runtime_libs._runtime" in sys.modules)  # before loading the runtime?
        print(e)
        sys.exit(0)
    import torch
    from boo_build.signature import KernelSignature
    from boo_build.dtypes import tolerance
    (key,) = b.keys()
    sig = KernelSignature.parse(key)
    torch.manual_seed(0)
    x, w, bias = (torch.randn(s) for (_, s, _) in sig.inputs())
    y, mean, rstd = b.native_layer_norm(x, sig.normalized_shape, w, bias, sig.eps)
    ref = torch.nn.functional.layer_norm(x.double(), sig.normalized_shape, w.double(), bias.double(), sig.eps)
    tol = tolerance(sig.dtype)
    assert bool(((y.double() - ref).abs() <= tol.atol + tol.rtol * ref.abs()).all()), (y - ref).abs().max()
    from iree._runtime_libs import _runtime
    print("RAN", _runtime.__file__.startswith(sys.argv[2]))
''')


def _probe(runtime_dir: Path, bundle: Path) -> list[str]:
    env = dict(os.environ)
    # first on the path, ahead of the venv's own iree-base-runtime
    env["PYTHONPATH"] = os.pathsep.join([str(runtime_dir)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(bundle), str(runtime_dir)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


@pytest.mark.slow
def test_oldest_supported_runtime_runs_a_kernel(runtimes, recorded):
    lines = _probe(runtimes[OLDEST], recorded)
    assert lines[0].startswith(f"RUNTIME {OLDEST}") and lines[0].endswith(" True"), lines
    assert lines[-1] == "RAN True", lines


def test_runtime_below_the_range_is_refused_at_open(runtimes, recorded):
    lines = _probe(runtimes[BELOW], recorded)
    assert lines[0].startswith(f"RUNTIME {BELOW}") and lines[0].endswith(" True"), lines
    assert lines[1] == "REFUSED False", lines  # refused before the runtime (or any kernel) was loaded
    msg = "\n".join(lines[2:])
    for part in (str(recorded), f"iree-base-runtime {OLDEST} or newer", f"this process has iree-base-runtime {BELOW}",
                 f"pip install 'iree-base-runtime>={OLDEST},<=3.13.0'", f"iree-base-compiler=={BELOW}"):
        assert part in msg, (part, msg)
