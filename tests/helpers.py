"""Helpers shared by the test files (a plain module: pytest collects nothing here).

The fixtures that use them live in conftest.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import zstandard

from boo_build.dtypes import tolerance
from boo_build.errors import ManifestError
from boo_build.loader.archive import read_archive
from boo_build.loader.format import BundleIndex, CandidateRecord, EagerPreference, KernelRecord, TargetRecord
from boo_build.loader.split_format import RECORDS_NAME, Frame
from boo_build.manifest.reader import Manifest, load_manifest
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.pack import (
    FrameWriter,
    canonical_json,
    compress,
    kernel_record,
    pack_bundle,
    packed_impl,
    tar_bytes,
    tar_member,
)
from boo_build.targets import catalogue

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def compiles(fixture_function):
    """Mark a fixture function as one that compiles (iree-compile, a build): the tests
    using it are marked ``build`` (conftest.py). Put it under ``@pytest.fixture``."""
    fixture_function.boo_builds = True
    return fixture_function


# ------------------------------------------------------------ the boo-build CLI
def env() -> dict:
    """os.environ with the venv's console scripts first on PATH."""
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    return e


def boo(*args: str, cwd: Path, check: bool = True, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the boo-build console script; with check, a non-zero exit fails with its output."""
    proc = subprocess.run([str(BIN / "boo-build"), *args], cwd=cwd, env={**env(), **(extra_env or {})},
                          capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"boo-build {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def boo_main(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``boo`` run in this process (``boo_build.cli.main``, what the console script calls)
    from folder ``cwd``: its exit status and what it printed, without starting Python and
    importing torch again (seconds a process). The console script itself is run by ``boo``."""
    import contextlib

    from boo_build.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's refusals
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(here)
    proc = subprocess.CompletedProcess(["boo-build", *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"boo-build {' '.join(args)} exited {code}\n{proc.stdout}\n{proc.stderr}")
    return proc


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: str, what: str = "") -> None:
    """A loader output against its reference, within the dtype's tolerance."""
    tol = tolerance(dtype)
    o, r = out.double(), ref.double()
    assert o.shape == r.shape, f"{what}: shape {tuple(o.shape)} != {tuple(r.shape)}"
    scale = max(1.0, r.abs().max().item())
    err = (o - r).abs()
    bound = tol.atol * scale + tol.rtol * r.abs()
    assert bool((err <= bound).all()), f"{what}: max error {err.max().item():.3g} (atol {tol.atol}, rtol {tol.rtol})"


# One small layer-norm kernel (float32 4x6x10, forward, manual): a build of seconds
TINY_MANIFEST = """
[bundle]
name = "tiny"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shape = [4, 6, 10]
dtype = "float32"
masks = [1]
impls = ["manual"]
"""


# ------------------------------------------- the session's kernels and bundle
# (the ``built`` fixture in conftest.py; tests/test_bundle.py tests the writer)
F32_EPS = 1.1920928955078125e-07  # torch's rms_norm eps=None


def _ln(mask, **kw):
    return KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", mask, **kw)


def _rms16(mask):
    return KernelSignature("rms_norm", (3, 37), (37,), "bfloat16", mask, bias=False)


def _rms32(mask):
    return KernelSignature("rms_norm", (4, 6, 10), (10,), "float32", mask, eps=F32_EPS, bias=False)


# signature -> (impls to build, selected)
KERNELS = {
    _ln(1): (("aten", "manual"), "manual"),
    _ln(2): (("aten",), "aten"),
    _ln(6): (("aten",), "aten"),
    _ln(14): (("aten",), "aten"),
    _rms16(1): (("aten",), "aten"),
    _rms16(6): (("manual",), "manual"),
    _rms32(1): (("aten",), "aten"),
    _rms32(2): (("aten",), "aten"),
    _rms32(6): (("aten",), "aten"),
}
PROVENANCE = {"versions": {"boo-build": "0.1.0", "torch": "2.13.0", "iree-turbine": "3.9.0",
                           "iree-base-compiler": "3.13.0"},
              "targets": {"cpu": {"flags": list(catalogue()["cpu"].flags)}}}
CSV = b"key,target,impl,median_us\nx,cpu,aten,1.0\n"


@dataclass
class Built:
    root: Path
    vmfb: dict[tuple[str, str], Path]  # (signature key, impl) -> file
    targets: list
    kernels: list[KernelRecord]
    vmfbs: dict[str, bytes]  # member path -> vmfb bytes, of every record in kernels
    path: Path  # the main bundle: cpu + a (fake) gfx942 target

    def entries(self, targets=("cpu", "gfx942"), keys=None) -> list[KernelRecord]:
        """The kernels' records on ``targets`` only (their vmfbs: ``self.vmfbs``)."""
        out = []
        for k in self.kernels:
            if keys is None or k.key in keys:
                out.append(kernel_record(k.signature, {t: e for t, e in k.targets.items() if t in targets}))
        return out

    def impls_for(self, target: str, sig: KernelSignature, vmfbs: dict[str, bytes]) -> dict:
        """The CPU records of ``sig``'s impls packed again for ``target`` (their
        vmfbs added to ``vmfbs``): a record's member path names its target."""
        cpu = next(k for k in self.kernels if k.key == sig.key).targets["cpu"]
        return {i: packed_impl(vmfbs, target, sig, i, self.vmfb[(sig.key, i)],
                               validation=m.validation, benchmark=m.benchmark) for i, m in cpu.impls.items()}


def _compile_all(root: Path) -> dict[tuple[str, str], Path]:
    from boo_build.files import write_atomic
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir

    flags = catalogue()["cpu"].flags
    mids = [ModuleId(sig, impl) for sig, (impls, _) in KERNELS.items() for impl in impls]
    texts = {mid: export_mlir(mid) for mid in mids}  # in-process: one at a time

    def comp(mid):
        res = compile_mlir(texts[mid], flags)
        assert res.ok, f"{mid.key}: {res.error}"
        path = root / "vmfb" / "cpu" / f"{mid.key}.vmfb"
        write_atomic(path, res.vmfb)
        return (mid.signature.key, mid.impl), path

    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as ex:
        return dict(ex.map(comp, mids))


def _entries(vmfb) -> tuple[list[KernelRecord], dict[str, bytes]]:
    out, vmfbs = [], {}
    for sig, (impls, selected) in KERNELS.items():
        def rec(target, i):
            return packed_impl(vmfbs, target, sig, i, vmfb[(sig.key, i)],
                               validation={"status": "passed", "max_error": 1e-6},
                               benchmark={"median_us": 10.0 + len(i)})

        cpu = TargetRecord.available(selected, {i: rec("cpu", i) for i in impls}, f"fastest validated ({selected})")
        # gfx942: never loaded on this machine; the forward one reuses a CPU vmfb.
        gfx = (TargetRecord.available(selected, {selected: rec("gfx942", selected)}, "only one")
               if sig.key == _ln(1).key else
               TargetRecord.unavailable("compile failed: test", {"aten": "compile failed: test"}))
        out.append(kernel_record(sig, {"cpu": cpu, "gfx942": gfx}))
    return out, vmfbs


_BUILT: Built | None = None
_BUILT_LOCK = threading.Lock()


def build_kernels(tmp_path_factory) -> Built:
    """The session's kernels and main bundle (built once across test files)."""
    global _BUILT
    with _BUILT_LOCK:
        if _BUILT is None:
            root = tmp_path_factory.mktemp("kernels")
            vmfb = _compile_all(root)
            cat = catalogue()
            targets = [cat["cpu"], cat["gfx942"]]
            kernels, vmfbs = _entries(vmfb)
            path = pack_bundle(root / "out", name="test-norms", version="1.2.3", targets=targets,
                               kernels=kernels, vmfbs=vmfbs, provenance=PROVENANCE, csv_bytes=CSV)
            _BUILT = Built(root, vmfb, targets, kernels, vmfbs, path)
        return _BUILT


# ------------------------------------------- the session's group-norm build
# (the ``gn_built`` fixture in conftest.py: tests/test_group_norm.py's build, and
# every group-norm mask for tests/test_layouts.py)
GN_MANIFEST = """\
commands = [
    "groupnorm -n 2 -c 4 -H 0 -W 3 -g 2 -F 1",   # the first entry's forward (one spatial dim)
]

[bundle]
name = "gn-test"
version = "0.1.0"
targets = ["cpu"]

# float32, one spatial dim: every mask (the manual implementation; both for 1 and 14)
[[kernels]]
op = "group_norm"
input_shape = [2, 4, 3]
groups = 2
masks = [1, 2, 4, 6, 8, 10, 12, 14]
impls = ["manual"]

[[kernels]]
op = "group_norm"
input_shape = [2, 4, 3]
groups = 2
masks = [1, 14]
impls = ["aten"]

# float16, three spatial dims, groups == C (instance norm)
[[kernels]]
op = "group_norm"
input_shape = [2, 4, 2, 2, 3]
groups = 4
dtype = "float16"
masks = [1, 14]

# bfloat16, groups == 1
[[kernels]]
op = "group_norm"
input_shape = [3, 6, 2, 2]
groups = 1
dtype = "bfloat16"
masks = [1, 14]

# the other affine forms: neither weight nor bias; a weight only
[[kernels]]
op = "group_norm"
input_shape = [2, 4, 3]
groups = 2
affine = false
masks = [1, 2]
impls = ["manual"]

[[kernels]]
op = "group_norm"
input_shape = [2, 4, 3]
groups = 2
bias = false
masks = [1, 6]
impls = ["manual"]

# any batch: the conv net's norms below (the aten forward does not export with a
# dynamic batch: its decomposition's as_strided wants static sizes)
[[kernels]]
op = "group_norm"
input_shape = ["batch", 8, 6, 6]
groups = 4
masks = [1, 14]
impls = ["manual"]
"""


def build_group_norms(tmp_path_factory) -> Path:
    """``GN_MANIFEST`` built by ``boo-build build`` (validated, not benchmarked:
    bench.csv still has a row per kernel; the benchmarks would triple the build's
    time, tests/test_benchmark.py covers them) -> its output folder."""
    return build_unbenchmarked(tmp_path_factory, "gn", GN_MANIFEST)


def build_unbenchmarked(tmp_path_factory, name: str, manifest: str) -> Path:
    """``manifest`` built by ``boo-build build --no-bench`` in a folder of its own (every kernel
    validated against the reference, or the build fails) -> its output folder."""
    d = tmp_path_factory.mktemp(name)
    (d / f"{name}.toml").write_text(manifest)
    proc = subprocess.run([str(BIN / "boo-build"), "build", f"{name}.toml", "--out", "out", "-q", "--no-bench"],
                          cwd=d, env=env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every kernel validated against the reference
    return d / "out"


def with_extra_kernels(tmp_path_factory, extra, name: str) -> Path:
    """A CPU bundle ``name``-0.1.0 of the session's kernels and ``extra``, (signature,
    impl) pairs exported and compiled here (one impl each, recorded as validated)."""
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir
    from boo_build.targets import dynamic_flags

    built = build_kernels(tmp_path_factory)
    root = tmp_path_factory.mktemp(name)
    cpu = catalogue()["cpu"]
    entries, vmfbs = built.entries(targets=("cpu",)), dict(built.vmfbs)
    mids = [ModuleId(sig, impl) for sig, impl in extra]
    texts = {mid: export_mlir(mid) for mid in mids}  # in-process: one at a time

    def comp(mid):
        res = compile_mlir(texts[mid], cpu.flags + dynamic_flags(cpu, mid.signature.is_dynamic))
        assert res.ok, f"{mid.key}: {res.error}"
        return res.vmfb

    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as ex:
        compiled = list(ex.map(comp, mids))
    for (sig, impl), vmfb in zip(extra, compiled):
        art = packed_impl(vmfbs, "cpu", sig, impl, vmfb, validation={"status": "passed"}, benchmark={"median_us": 1.0})
        entries.append(kernel_record(sig, {"cpu": TargetRecord.available(impl, {impl: art}, "only one")}))
    return pack_bundle(root / "out", name=name, version="0.1.0", targets=[cpu], kernels=entries, vmfbs=vmfbs,
                       provenance=PROVENANCE, csv_bytes=CSV)


# ------------------------------------------- the compile backend's kernels
# (tests/test_compile_backend.py and tests/test_inline_norms.py: one bundle, built once a session)
BW, BC, BL, BG = 8, 4, 3, 2  # the norms' width; the group norm's channels, length and groups
BMAX = 1 << 16


def backend_sigs() -> list[tuple[KernelSignature, str]]:
    """Dynamic ``[batch, seq, 8]`` kernels: float32 layer norms (affine: 1, 14, 2; plain: 1, 2),
    RMS norms of eps 1e-6 (1, 6, 2; Gemma's offset 1.0: 1, 6; bfloat16: 1, 6), a group norm."""
    out = []
    for m in (1, 14, 2):
        out.append((KernelSignature("layer_norm", ("batch", "seq", BW), (BW,), "float32", m, max_elements=BMAX),
                    "aten"))
        out.append((KernelSignature("group_norm", ("batch", BC, BL), (), "float32", m, groups=BG, max_elements=BMAX),
                    "manual"))
    for m in (1, 6, 2):
        out.append((KernelSignature("rms_norm", ("batch", "seq", BW), (BW,), "float32", m, eps=1e-6, bias=False,
                                    max_elements=BMAX), "aten"))
    for m in (1, 6):
        for dtype, offset in (("float32", 1.0), ("bfloat16", 0.0)):
            out.append((KernelSignature("rms_norm", ("batch", "seq", BW), (BW,), dtype, m, eps=1e-6, bias=False,
                                        weight_offset=offset, max_elements=BMAX), "aten"))
    for m in (1, 2):
        out.append((KernelSignature("layer_norm", ("batch", "seq", BW), (BW,), "float32", m, affine=False, bias=False,
                                    max_elements=BMAX), "aten"))
    return out


_BACKEND: Path | None = None


def backend_bundle(tmp_path_factory) -> Path:
    """The bundle of ``backend_sigs`` and the session's kernels (built once across test files)."""
    global _BACKEND
    with _BUILT_LOCK:
        built = _BACKEND
    if built is None:
        built = with_extra_kernels(tmp_path_factory, backend_sigs(), "compile-backend")
        with _BUILT_LOCK:
            _BACKEND = built
    return built


def write_decision(root: Path, target: str, sig: KernelSignature, impl: str | None, reason: str,
                   rejected: dict | None = None, kind=None, measured: bool = True) -> Path:
    """A select record (``stages/select.py``) in build folder ``root``: ``impl`` shipped
    (None: nothing) for ``reason``, ``rejected`` {module: (kind, text)}; what the pack
    task reads beside a hand-made build report."""
    from boo_build.files import write_json
    from boo_build.layout import Layout
    from boo_build.reasons import Kind, Reason
    from boo_build.stages.select import SelectRecord
    from boo_build.stages.selection import Decision, Selection

    why = {i: Reason(k, text) for i, (k, text) in (rejected or {}).items()}
    sel = Selection(impl, measured, Reason(kind or (Kind.FASTEST if impl else Kind.NONE_AVAILABLE), reason), why)
    path = Layout(Path(root).parent, Path(root).name).select(target, sig.key)
    write_json(path, SelectRecord(sig.key, target, Decision(sel, dict(why))).to_json())
    return path


# ------------------------------------------------------ changed bundle copies
def rewrite(src: Path, dst: Path, *, members=None, index=None, extra=(), header=None) -> Path:
    """Copy of a bundle with members and/or the index changed (index checksums kept).
    A format-5 source stays format 5 (``split_copy``): ``index`` edits its records
    (the header and routes follow them), ``header`` its header, last; an older one
    stays one zstd frame with ``bundle.json`` first."""
    a = read_archive(src)
    ix = json.loads(a.members[RECORDS_NAME] if a.header is not None else a.members["bundle.json"])
    if index:
        index(ix)
    mem = {k: v for k, v in a.members.items() if k != "bundle.json" and k not in a.parts}
    if members:
        members(mem)
    if a.header is not None:
        dst.write_bytes(split_copy(ix, mem, extra, header))
        return dst
    mem["bundle.json"] = canonical_json(ix)
    order = [("bundle.json", mem.pop("bundle.json"))] + sorted(mem.items())
    raw = tar_bytes(order)
    if extra:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for name, data in order:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            for ti, data in extra:
                tf.addfile(ti, io.BytesIO(data) if data is not None else None)
        raw = buf.getvalue()
    dst.write_bytes(compress(raw))
    return dst


class _AnyFrame(dict):
    """Frames by member, a made-up one for a member not written (a test's missing member)."""

    def __missing__(self, key):
        return Frame(0, 1, 0)


def split_copy(records: dict, members: dict, extra=(), header=None) -> bytes:
    """A format-5 bundle of the records JSON ``records`` (written as given) and
    ``members`` (member -> bytes, written as given: a changed vmfb keeps its
    recorded sha256), laid out as pack.py writes it; ``extra``: (TarInfo, data)
    members added after them; ``header``: an edit of the header's JSON, last."""
    w = FrameWriter(3)
    w.at = _AnyFrame()
    w.modules({n: d for n, d in members.items() if n.startswith("kernels/")})  # pack's order
    for name, data in sorted(members.items(), key=lambda m: (m[0] == "bench.csv", m[0])):
        if not name.startswith("kernels/"):
            w.member(name, data)
    for ti, data in extra:
        w.add(ti.name, ti.tobuf(tarfile.PAX_FORMAT) + (data or b"") + bytes(-len(data or b"") % 512))
    blob = w.finish(BundleIndex.from_json(records), canonical_json(records))
    if header is None:
        return blob
    d = zstandard.ZstdDecompressor().decompressobj()
    head = json.loads(d.decompress(blob)[512:].rstrip(b"\0"))  # the header frame: one tar block, bundle.json
    header(head)
    # frames count their offsets from the header's end: a new header leaves them right
    return compress(tar_member("bundle.json", canonical_json(head))) + d.unused_data


def flip_byte(data: bytes, at: int | None = None) -> bytes:
    b = bytearray(data)
    at = len(b) // 2 if at is None else at
    b[at] ^= 0x5A
    return bytes(b)


def with_modes(src, dst, modes: dict[str, str], candidates=None):
    """A copy of bundle ``src`` whose cpu entries of ``modes``' kernels name that mode
    (written through the typed index, as the build writes it). ``candidates``:
    ``format.CandidateRecord`` objects or their JSON, by candidate."""
    if candidates is not None:
        candidates = {c: r if isinstance(r, CandidateRecord) else CandidateRecord.from_json(r, f"candidate {c}")
                      for c, r in candidates.items()}
    ix = read_archive(src).bundle_index
    for key, mode in modes.items():
        te = ix.kernels[key].targets["cpu"]
        ix = ix.with_entry(key, "cpu", dataclasses.replace(te, mode=mode, candidates=candidates))
    new = ix.to_json()
    return rewrite(src, dst, index=lambda d: (d.clear(), d.update(new)))


def with_prefer_eager(src, dst, keys):
    """A copy of bundle ``src`` whose cpu entries of ``keys`` say torch eager beat the kernel."""
    ix = read_archive(src).bundle_index
    for key in keys:
        te = ix.kernels[key].targets["cpu"]
        pref = EagerPreference(eager_s=1e-5, kernel_s=2e-5, reason="torch eager faster on the build machine")
        ix = ix.with_entry(key, "cpu", dataclasses.replace(te, prefer_eager=pref))
    new = ix.to_json()
    return rewrite(src, dst, index=lambda d: (d.clear(), d.update(new)))


# ----------------------------------------- a small kernel set, vmfb bytes only
# (validation, benchmarks, devices: compiled for cpu once per process)
CPU_TARGET = catalogue()["cpu"]


def ln(dtype, mask, shape=(4, 6, 10), norm=(10,)):
    return KernelSignature("layer_norm", shape, norm, dtype, mask)


def rms(dtype, mask, shape=(3, 37), norm=(37,)):
    return KernelSignature("rms_norm", shape, norm, dtype, mask, eps=1e-6, bias=False)


# (module id, planted error) -> compiled for cpu
GOOD = [
    ModuleId(ln("float32", 1), "manual"),
    ModuleId(ln("float16", 1), "manual"),
    ModuleId(ln("bfloat16", 1), "manual"),
    ModuleId(ln("float32", 14, (3, 37), (37,)), "aten"),
    ModuleId(ln("bfloat16", 6, (3, 37), (37,)), "manual"),
    ModuleId(rms("float16", 1), "aten"),
    ModuleId(rms("bfloat16", 6), "manual"),
]
PLANTED = [
    ModuleId(ln("float32", 1), "manual"),
    ModuleId(rms("float16", 1), "manual"),
]

_SET_LOCK = threading.Lock()
_SET: dict[tuple[str, bool], bytes] = {}


def kernel_set() -> dict[tuple[str, bool], bytes]:
    """(module key, planted) -> vmfb bytes for GOOD and PLANTED, built once per process."""
    from boo_build.stages import torch_modules as modules
    from boo_build.stages.compile import compile_mlir
    from boo_build.stages.export import export_mlir

    with _SET_LOCK:
        if _SET:
            return _SET
        jobs = []
        with ThreadPoolExecutor(max_workers=2) as pool:
            for mid in GOOD:
                jobs.append(((mid.key, False), pool.submit(compile_mlir, export_mlir(mid), CPU_TARGET.flags)))
            for mid in PLANTED:
                with pytest.MonkeyPatch.context() as mp:
                    mp.setenv(modules.PLANT_ERROR_ENV, "1")
                    mlir = export_mlir(mid)
                jobs.append(((mid.key, True), pool.submit(compile_mlir, mlir, CPU_TARGET.flags)))
            for key, fut in jobs:
                res = fut.result()
                assert res.ok, f"{key}: {res.error}"
                _SET[key] = res.vmfb
        return _SET


# ------------------------------------------------------------------ manifests
BUNDLE = """\
[bundle]
name = "test-bundle"
version = "1.2.3"
targets = ["cpu", "gfx942"]
"""
ENTRY = 'op = "layer_norm"\ninput_shape = [8, 128, 768]\n'


def write(tmp_path: Path, body: str, name: str = "m.toml", bundle: bool = True) -> Path:
    p = tmp_path / name
    p.write_text((BUNDLE if bundle else "") + textwrap.dedent(body))
    return p


def load(tmp_path: Path, body: str, **kw) -> Manifest:
    return load_manifest(write(tmp_path, body), **kw)


def errors_of(tmp_path: Path, body: str, name: str = "m.toml", bundle: bool = True, **kw) -> list[str]:
    p = write(tmp_path, body, name, bundle)
    with pytest.raises(ManifestError) as e:
        load_manifest(p, **kw)
    err = e.value
    assert str(err) == "\n".join(err.errors)
    for line in err.errors:
        assert line.startswith(str(p)), line
    return err.errors


def one_error(tmp_path, body, **kw) -> str:
    errs = errors_of(tmp_path, body, **kw)
    assert len(errs) == 1, errs
    return errs[0]


def keys(m: Manifest) -> list[str]:
    return [k.signature.key for k in m.kernels]


# ---------------------------------------- RMS norm classes of other libraries
# (rms_classes: tests/test_torch_integration.py, tests/test_trace.py)
class _WeightAndVarianceEpsilon(torch.nn.Module):
    """What Llama's, Cohere's and Qwen's norm classes hold: a weight of ones, a ``variance_epsilon``."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps


class LlamaRMSNorm(_WeightAndVarianceEpsilon):
    """RMS norm as Hugging Face's Llama writes it."""

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


# Written as transformers writes them (no network). Gemma's scales by 1 + weight (an RMS
# norm with a weight offset, served by offset kernels); the others compute something else
# than an RMS norm, or take more than the input.
class GemmaRMSNorm(torch.nn.Module):
    """Gemma's: eps named ``eps``, the weight stored as an offset from 1 (zeros at init)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class CohereLayerNorm(_WeightAndVarianceEpsilon):
    """Cohere's: a ``variance_epsilon``, but it subtracts the mean: a layer norm without a bias."""

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h - h.mean(-1, keepdim=True)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.to(torch.float32) * h).to(dtype)


class RMSNormGated(LlamaRMSNorm):
    """Qwen3-Next's gated norm: Llama's math, then a gate the forward takes too."""

    def forward(self, hidden_states, gate):
        return super().forward(hidden_states) * torch.nn.functional.silu(gate.float()).to(hidden_states.dtype)


class LayerNorm1P(torch.nn.Module):
    """Nemotron's (Megatron's zero-centred gamma): a layer norm scaling by 1 + weight, written out."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(torch.zeros(dim)), torch.nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h - h.mean(-1, keepdim=True)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1 + self.weight.float()) + self.bias.float()).to(x.dtype)


# look-alikes: the reason each is left with begins so (probe.norm_form); Cohere's is a layer norm
LOOKALIKES = {LayerNorm1P: "subtracts the mean and scales by 1 + weight",
              RMSNormGated: "a gate multiplies the output (forward(hidden_states, gate))"}
