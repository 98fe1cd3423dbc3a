"""Every bundle format version this loader reads opens and runs, and format 5
(loader/split_format.py: a zstd frame per member, a small header first, the
records and each target's routes apart) is read a part at a time, refusing a
changed byte in whatever it reads before using it.

The fixtures are bundles built before format 5, one per older version (each
tests/fixtures/*.toml says how), compiled for the CPU: no build here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
import zstandard
from helpers import flip_byte

from boo_build.loader import bundle_file, open_bundle, read_archive, verify_members
from boo_build.loader import format as bundle_format
from boo_build.loader import frames as frames_module
from boo_build.loader.errors import BundleError, BundleFormatError, BundleIntegrityError
from boo_build.loader.format import KernelRecord, TargetSpec
from boo_build.loader.split_format import RECORDS_NAME, route_json, routes_name
from boo_build.signature import KernelSignature
from boo_build.stages.pack import compress, tar_member, write_bundle
from boo_build.targets import catalogue

FIXTURES = Path(__file__).parent / "fixtures"
OLD = {1: FIXTURES / "pre-runtime-fields-0.1.0.tar.zst", 2: FIXTURES / "format-v2-0.1.0.tar.zst",
       3: FIXTURES / "format-v3-0.1.0.tar.zst", 4: FIXTURES / "format-v4-0.1.0.tar.zst"}


def _run(b, version: int) -> float:
    """The one kernel of fixture ``version``'s bundle on a call it serves: its largest error against torch."""
    g = torch.Generator().manual_seed(version)
    if version == 3:
        x, w, bias = torch.randn(2, 4, 3, 3, generator=g), torch.randn(4, generator=g), torch.randn(4, generator=g)
        y = b.native_group_norm(x, w, bias, 2, 4, 9, 2, 1e-5)[0]
        ref = torch.nn.functional.group_norm(x, 2, w, bias, 1e-5)
    elif version == 4:
        x, w = torch.randn(2, 8, generator=g), torch.randn(8, generator=g)
        y = b.fused_rms_norm(x, [8], w, 1e-5, 1.0)[0]
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * (1.0 + w)  # Gemma's
    else:  # 1: static 2x8; 2: dynamic BATCHx8, at 5 rows
        x = torch.randn(2 if version == 1 else 5, 8, generator=g)
        w, bias = torch.randn(8, generator=g), torch.randn(8, generator=g)
        y = b.native_layer_norm(x, [8], w, bias, 1e-5)[0]
        ref = torch.nn.functional.layer_norm(x, [8], w, bias, 1e-5)
    assert b.stats(totals=True)["static_hits"] + b.stats(totals=True)["dynamic_hits"] == 1
    return float((y - ref).abs().max())


def _split(version: int, dst: Path) -> Path:
    """Fixture ``version``'s bundle written again, as every bundle is now (format 5)."""
    a = read_archive(OLD[version])
    vmfbs = {m.member: a.members[m.member] for *_, m in a.bundle_index.impl_records()}
    return write_bundle(dst, a.bundle_index, vmfbs, a.members.get("bench.csv"))


def test_every_readable_version_has_a_bundle_here():
    """A version added to READABLE_VERSIONS needs its fixture (the ones written now: any bundle built,
    and a bundle with fused residual kernels, tests/test_residual.py's)."""
    written_now = {bundle_format.SPLIT_FORMAT_VERSION, bundle_format.RESIDUAL_FORMAT_VERSION}
    assert sorted({*OLD, *written_now}) == sorted(bundle_format.READABLE_VERSIONS)
    assert all(read_archive(p).index["format_version"] == v for v, p in OLD.items())


@pytest.mark.parametrize("version", sorted(OLD))
def test_every_readable_version_opens_and_runs_and_reads_as_format_5(version, tmp_path):
    old = open_bundle(OLD[version], device="local-task")
    assert old.index["format_version"] == version and version in bundle_format.READABLE_VERSIONS
    assert type(old._source).__name__ == "WholeBundleFile"
    assert _run(old, version) < 1e-5
    new = open_bundle(_split(version, tmp_path / "new.tar.zst"), device="local-task")
    assert type(new._source).__name__ == "SplitBundleFile" and new.index["format_version"] == 5
    assert _run(new, version) < 1e-5
    # the same routing either way: the routes are a function of the records
    a, b = old._table, new._table
    assert a.kernels.keys() == b.kernels.keys() and a.unavailable == b.unavailable
    for key, k in a.kernels.items():
        kb = b.kernels[key]
        assert (k.impl, k.member, k.function, k.sha256, k.size, k.mode, k.prefer_eager, k.by_rows) == (
            kb.impl, kb.member, kb.function, kb.sha256, kb.size, kb.mode, kb.prefer_eager, kb.by_rows)
    # the records are the whole index, as the older bundle held it (but the version)
    assert {**new.index, "format_version": version} == old.index
    assert new.info()["kernels"] == old.info()["kernels"] and new.name == old.name == OLD[version].name.rsplit("-", 1)[0]


def test_format_5_is_reproducible_and_one_tar_across_its_frames(tmp_path):
    p, q = _split(2, tmp_path / "a.tar.zst"), _split(2, tmp_path / "b.tar.zst")
    assert p.read_bytes() == q.read_bytes()
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(p.read_bytes()), read_across_frames=True).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        names = tf.getnames()
    kernel = next(n for n in names if n.endswith(".vmfb"))
    assert names == ["bundle.json", kernel, "bench.csv", RECORDS_NAME, routes_name("cpu")]
    a = read_archive(p)
    assert a.parts == {RECORDS_NAME, routes_name("cpu")} and a.size == len(raw)
    header = json.loads(a.members["bundle.json"])
    assert set(header) == {"format", "format_version", "name", "version", "csv", "iree_runtime", "targets",
                           "records", "routes", "frames"}
    (entry,) = json.loads(a.members[routes_name("cpu")])["kernels"].values()
    assert set(entry) == {"impl", "member", "function", "sha256", "size", "frame"} and entry["member"] == kernel
    assert route_json(a.bundle_index, "cpu")["kernels"] == {k: {f: v for f, v in e.items() if f != "frame"}
                                                          for k, e in {next(iter(a.index["kernels"])): entry}.items()}


def _two_targets(tmp_path) -> tuple[Path, str]:
    """Fixture 2's kernel for cpu and, the same module, for gfx942: a bundle of two targets' routes."""
    a = read_archive(OLD[2])
    ix = a.bundle_index
    (key, k), = ix.kernels.items()
    te = k.targets["cpu"]
    impls = {i: dataclasses.replace(m, member=m.member.replace("/cpu/", "/gfx942/")) for i, m in te.impls.items()}
    kernels = {key: KernelRecord(k.signature, {"cpu": te, "gfx942": dataclasses.replace(te, impls=impls)},
                                 k.functions)}
    gfx = catalogue()["gfx942"]
    ix = dataclasses.replace(ix, kernels=kernels, targets={**ix.targets, "gfx942": TargetSpec(gfx.driver, gfx.arch,
                                                                                                gfx.flags)})
    vmfbs = {m.member: a.members[te.impls[i].member] for i, m in [*te.impls.items(), *impls.items()]}
    return write_bundle(tmp_path / "two.tar.zst", ix, vmfbs, a.members.get("bench.csv")), key


def test_open_reads_the_header_and_its_targets_routes_a_module_at_its_first_use(tmp_path, monkeypatch):
    path, key = _two_targets(tmp_path)
    read: list[str] = []
    real = bundle_file.read_frame
    monkeypatch.setattr(bundle_file, "read_frame", lambda fd, start, z, u, p, what: (read.append(what),
                                                                                       real(fd, start, z, u, p, what))[1])
    b = open_bundle(path, device="local-task")
    assert read == [f"member {routes_name('cpu')}"]  # the header came first (frames.split_head), then cpu's routes
    assert _run(b, 2) < 1e-5
    assert read[1:] == [f"member kernels/cpu/{key}-aten.vmfb"]
    b.load(key)
    assert len(read) == 2  # loaded once
    assert b.info()["targets"]["gfx942"]["available"] == 1
    assert read[2:] == [f"member {RECORDS_NAME}"]  # the records only when asked; gfx942's routes never


def test_a_targets_modules_share_frames_each_read_alone(tmp_path):
    """Three modules of one target in one frame (pack.MODULE_FRAME): each loads from its
    place in it, checked; a changed byte in that frame refuses each of them."""
    a = read_archive(OLD[1])
    (key, k), = a.bundle_index.kernels.items()
    te = k.targets["cpu"]
    kernels, vmfbs = {}, {}
    for n in (2, 3, 4):
        sig = KernelSignature("layer_norm", (n, 8), (8,), "float32", 1)
        impls = {i: dataclasses.replace(m, member=m.member.replace(key, sig.key)) for i, m in te.impls.items()}
        kernels[sig.key] = KernelRecord(sig, {"cpu": dataclasses.replace(te, impls=impls)}, k.functions)
        vmfbs.update({m.member: a.members[te.impls[i].member] for i, m in impls.items()})
    path = write_bundle(tmp_path / "three.tar.zst", dataclasses.replace(a.bundle_index, kernels=kernels), vmfbs)
    frames = _frames_of(path)
    assert len(frames) == 5  # header, the three modules, records, routes, the tar's end
    got = json.loads(read_archive(path).members[routes_name("cpu")])["kernels"]
    assert len({tuple(e["frame"][:3]) for e in got.values()}) == 1 and sorted(e["frame"][3] for e in got.values())[0] == 0
    b = open_bundle(path, device="local-task")
    for key in kernels:
        b.load(key)
    data = path.read_bytes()
    start, end = frames[1]
    (tmp_path / "bad.tar.zst").write_bytes(flip_byte(data, (start + end) // 2))
    for key in kernels:
        assert _outcome(tmp_path / "bad.tar.zst", key) == "load"


def _frames_of(path: Path) -> list[tuple[int, int]]:
    """(start, end) of each zstd frame of a file."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        d = zstandard.ZstdDecompressor().decompressobj()
        d.decompress(data[pos:])
        end = len(data) - len(d.unused_data)
        out.append((pos, end))
        pos = end
    return out


def _outcome(path: Path, key: str) -> str:
    """Where the loader refuses a bundle: at open, at the kernel's load, at info(); "none"."""
    try:
        b = open_bundle(path, device="local-task")
    except BundleError:
        return "open"
    try:
        b.load(key)
    except (BundleFormatError, BundleIntegrityError):
        return "load"
    try:
        b.info()
    except BundleFormatError:
        return "info"
    return "none"


def test_a_changed_byte_is_refused_before_what_it_touches_is_used(tmp_path):
    """Each frame's first, middle and last (checksum) byte changed in turn: open_bundle
    refuses the header's and the routes' at open, a module's before it loads, the
    records' when they are read; read_archive (info, verify, publish...) every one."""
    path = _split(2, tmp_path / "b.tar.zst")
    key = next(iter(read_archive(path).index["kernels"]))
    where = ["open", "load", "none", "info", "open", "none"]  # header, vmfb, bench.csv, records, routes, tar end
    frames = _frames_of(path)
    assert len(frames) == len(where)
    data = path.read_bytes()
    for (start, end), expect in zip(frames, where):
        for at in (start, (start + end) // 2, end - 1):
            bad = tmp_path / f"flip{at}.tar.zst"
            bad.write_bytes(flip_byte(data, at))
            assert _outcome(bad, key) == expect, (at, expect)
            with pytest.raises(BundleFormatError):
                read_archive(bad)
    # cut short or with bytes after it: refused at open (the header says where the file ends)
    for cut in (data[:-1], data[:frames[1][1]], data + b"\0"):
        (tmp_path / "cut.tar.zst").write_bytes(cut)
        with pytest.raises(BundleFormatError, match="truncated or corrupt"):
            open_bundle(tmp_path / "cut.tar.zst", device="local-task")


def _reframed(path: Path, member: str, at: int) -> bytes:
    """The bundle with one byte of ``member`` changed on purpose, the first from byte ``at``
    on whose change compresses to the same size: its frame made again (a valid zstd frame,
    its checksum right), every offset holding."""
    data = path.read_bytes()
    for start, end in _frames_of(path):
        chunk = zstandard.ZstdDecompressor().decompress(data[start:end])
        if frames_module.is_tar_end(chunk):
            break
        held = {n: d for n, d, _ in frames_module.members_of(chunk, str(path), "a frame")}
        if member in held:
            body = bytearray(held[member])
            for pos in range(at, len(body)):
                for v in (1, 2, 4, 8, 16, 32):
                    body[pos] ^= v
                    new = compress(b"".join(tar_member(n, bytes(body) if n == member else d) for n, d in held.items()))
                    if len(new) == end - start:
                        return data[:start] + new + data[end:]
                    body[pos] ^= v
    raise AssertionError(f"no same-size change of {member} from byte {at}")


def test_a_member_changed_on_purpose_is_refused_by_its_sha256(tmp_path):
    """Valid frames, offsets right, one byte of a member changed: a module is refused
    before it loads, the routes at open, the records when read, by their sha256."""
    path = _split(2, tmp_path / "b.tar.zst")
    a = read_archive(path)
    key = next(iter(a.index["kernels"]))
    vmfb = next(m for m in a.members if m.endswith(".vmfb"))
    bad = tmp_path / "bad.tar.zst"
    bad.write_bytes(_reframed(path, vmfb, 100))
    assert _outcome(bad, key) == "load"
    with pytest.raises(BundleIntegrityError, match=f"member {vmfb} of .* is corrupt: sha256"):
        open_bundle(bad, device="local-task").load(key)
    bad.write_bytes(_reframed(path, routes_name("cpu"), 20))
    with pytest.raises(BundleFormatError, match="routes/cpu.json is corrupt: its sha256 is not the header's"):
        open_bundle(bad, device="local-task")
    bad.write_bytes(_reframed(path, RECORDS_NAME, 50))
    assert _outcome(bad, key) == "info"
    with pytest.raises(BundleFormatError, match="records.json is corrupt: its sha256 is not the header's"):
        open_bundle(bad, device="local-task").info()
    # info, verify, diff, publish (read_archive): the index's parts refused, the module named by verify
    for member in (routes_name("cpu"), RECORDS_NAME):
        bad.write_bytes(_reframed(path, member, 30))
        with pytest.raises(BundleFormatError, match=f"member {member} is not the one the header names"):
            read_archive(bad)
    bad.write_bytes(_reframed(path, vmfb, 30))
    assert [m for m, *_ in verify_members(read_archive(bad))] == [vmfb]


def test_an_older_loader_reads_the_header_alone_and_refuses_it(tmp_path, monkeypatch):
    """A loader of formats 1-4 reads the first zstd frame as the whole tar (``read_to_iter``
    stops at its end): it finds bundle.json, the header, and refuses its version with the upgrade."""
    path = _split(1, tmp_path / "b.tar.zst")
    with open(path, "rb") as f:
        first = b"".join(zstandard.ZstdDecompressor().read_to_iter(f))
    with tarfile.open(fileobj=io.BytesIO(first), mode="r|") as tf:
        names = [(ti.name, json.loads(tf.extractfile(ti).read())["format_version"]) for ti in tf]
    assert names == [("bundle.json", 5)]
    # this loader, told it reads only 1-4 and made to read the file as one stream, says the same
    monkeypatch.setattr(bundle_format, "READABLE_VERSIONS", (1, 2, 3, 4))
    monkeypatch.setattr(frames_module, "split_head", lambda *a: None)
    monkeypatch.setattr("boo_build.loader.archive.split_head", lambda *a: None)
    with pytest.raises(BundleFormatError, match=r"format version 5 is not supported; .* \(upgrade boo-build"):
        read_archive(path)


def test_format_5_limits(tmp_path):
    path = _split(2, tmp_path / "b.tar.zst")
    size = read_archive(path).size
    with pytest.raises(BundleFormatError, match=f"decompresses to {size} bytes, over the limit of {size - 1}"):
        open_bundle(path, max_size=size - 1)
    with pytest.raises(BundleFormatError, match="over the limit"):
        read_archive(path, max_size=size - 1)
    assert read_archive(path, max_size=size).size == size
    # a format-5 index in one frame (not as boo-build packs it) is refused, saying so
    a = read_archive(path)
    whole = tmp_path / "whole.tar.zst"
    members = [("bundle.json", a.members["bundle.json"])] + sorted((n, d) for n, d in a.members.items()
                                                                    if n != "bundle.json")
    from boo_build.stages.pack import tar_bytes

    whole.write_bytes(compress(tar_bytes(members)))
    with pytest.raises(BundleFormatError, match="holds each member in a zstd frame of its own"):
        read_archive(whole)
    with pytest.raises(BundleFormatError, match="holds each member in a zstd frame of its own"):
        open_bundle(whole)
