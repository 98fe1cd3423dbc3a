"""Bundle writer (pack.py), archive reader checks and the info/verify/diff CLI.

The session's kernel set (``built``: a handful of small kernels exported and
compiled once) is built by helpers.build_kernels, for the fixture in conftest.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import tarfile

import pytest
import zstandard
from helpers import CSV, KERNELS, PROVENANCE, _ln, _rms16, _rms32, flip_byte, rewrite, write_decision

from boo_build.cli import diff, info, main, verify
from boo_build.errors import PackError
from boo_build.loader.archive import read_archive
from boo_build.loader.errors import BundleFormatError
from boo_build.loader.format import EagerPreference, KernelRecord, TargetRecord
from boo_build.reasons import Kind
from boo_build.signature import ModuleId
from boo_build.stages.pack import (
    build_index,
    compress,
    entries_from_report,
    kernel_record,
    pack_bundle,
    pack_from_report,
    packed_impl,
    read_index,
    tar_bytes,
)
from boo_build.targets import catalogue


# ----------------------------------------------------------------- the writer
def test_reproducible_bytes(built, tmp_path):
    a = pack_bundle(tmp_path / "a", name="test-norms", version="1.2.3", targets=built.targets,
                    kernels=built.kernels, vmfbs=built.vmfbs, provenance=PROVENANCE, csv_bytes=CSV)
    # same inputs in another order, another folder, vmfbs copied elsewhere
    copies = {}
    for (key, impl), p in built.vmfb.items():
        q = tmp_path / "copy" / p.name
        q.parent.mkdir(exist_ok=True)
        q.write_bytes(p.read_bytes())
        copies[p] = q
    vmfbs: dict[str, bytes] = {}
    shuffled = [kernel_record(k.signature, {
        t: dataclasses.replace(e, impls=None if e.impls is None else {
            i: packed_impl(vmfbs, t, k.signature, i, copies[built.vmfb[(k.key, i)]],
                           validation=a.validation, benchmark=a.benchmark)
            for i, a in reversed(list(e.impls.items()))})
        for t, e in reversed(list(k.targets.items()))}) for k in reversed(built.kernels)]
    b = pack_bundle(tmp_path / "b", name="test-norms", version="1.2.3", targets=list(reversed(built.targets)),
                    kernels=shuffled, vmfbs=dict(reversed(list(vmfbs.items()))),
                    provenance=dict(reversed(list(PROVENANCE.items()))), csv_bytes=CSV)
    assert a.name == "test-norms-1.2.3.tar.zst"
    assert a.read_bytes() == b.read_bytes() == built.path.read_bytes()
    assert not list((tmp_path / "a").glob(".*.tmp"))  # no temporary left behind

    # one tar across the frames (format 5: a frame per member, zstd -dc | tar reads them as one)
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(a.read_bytes()), read_across_frames=True).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        infos = tf.getmembers()
    names = [ti.name for ti in infos]
    assert names[0] == "bundle.json" and names[-4:] == ["bench.csv", "records.json", "routes/cpu.json",
                                                        "routes/gfx942.json"]
    assert names[1:-4] == sorted(names[1:-4]) and all(n.startswith("kernels/") for n in names[1:-4])
    for ti in infos:
        assert (ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname) == (0, 0o644, 0, 0, "", "")
        assert ti.isreg()


def test_index_schema(built):
    ix = read_index(built.path)
    assert ix["format"] == "boo-bundle" and ix["format_version"] == 5
    assert (ix["name"], ix["version"], ix["csv"]) == ("test-norms", "1.2.3", "bench.csv")
    assert ix["provenance"] == PROVENANCE
    assert ix["targets"]["cpu"] == {"driver": "local-task", "arch": "x86-64-v3",
                                    "flags": list(catalogue()["cpu"].flags)}
    assert set(ix["kernels"]) == {s.key for s in KERNELS}
    ln1 = ix["kernels"][_ln(1).key]
    assert ln1["signature"] == _ln(1).to_json()
    assert ln1["functions"] == {"aten": ModuleId(_ln(1), "aten").func_name,
                                "manual": ModuleId(_ln(1), "manual").func_name}
    cpu = ln1["targets"]["cpu"]
    assert cpu["status"] == "available" and cpu["selected"] == "manual"
    m = cpu["impls"]["manual"]
    data = built.vmfb[(_ln(1).key, "manual")].read_bytes()
    assert m["member"] == f"kernels/cpu/{_ln(1).key}-manual.vmfb"
    assert (m["sha256"], m["size"]) == (hashlib.sha256(data).hexdigest(), len(data))
    assert m["validation"]["status"] == "passed" and m["benchmark"] == {"median_us": 16.0}
    gfx = ix["kernels"][_ln(2).key]["targets"]["gfx942"]
    # each reason's kind beside its text (reasons.py; this entry was made from text: kinds from its words)
    assert gfx == {"status": "unavailable", "reason": "compile failed: test", "reason_kind": "none-available",
                   "rejected": {"aten": "compile failed: test"}, "rejected_kinds": {"aten": "compile-failed"}}
    text = read_archive(built.path).members["bundle.json"].decode()
    assert "mtime" not in text and "time" not in json.dumps(ix["provenance"])


def test_pack_refuses_bad_inputs(built, tmp_path):
    kw = dict(targets=built.targets, kernels=built.kernels, vmfbs=built.vmfbs, provenance={}, csv_bytes=None)
    with pytest.raises(PackError, match="version '1.0' is not semver"):
        pack_bundle(tmp_path, name="x", version="1.0", **kw)
    with pytest.raises(PackError, match="bundle name"):
        pack_bundle(tmp_path, name="a/b", version="1.0.0", **kw)

    def pack(kernels, vmfbs):
        return pack_bundle(tmp_path, name="x", version="1.0.0", targets=built.targets, kernels=kernels,
                           vmfbs=vmfbs, provenance={})

    vm: dict[str, bytes] = {}
    path = built.vmfb[(_ln(2).key, "aten")]
    art = packed_impl(vm, "cpu", _ln(2), "aten", path)
    assert (art.member, vm[art.member]) == (f"kernels/cpu/{_ln(2).key}-aten.vmfb", path.read_bytes())
    bad = kernel_record(_ln(2), {"cpu": TargetRecord.available("manual", {"aten": art})})
    with pytest.raises(PackError, match="selected implementation 'manual' is not among its impls"):
        pack(kernels=[bad], vmfbs=vm)
    gfx = {"aten": packed_impl(vm, "gfx90a", _ln(2), "aten", path)}
    bad = kernel_record(_ln(2), {"gfx90a": TargetRecord.available("aten", gfx)})
    with pytest.raises(PackError, match="target gfx90a: target not in the bundle's targets"):
        pack(kernels=[bad], vmfbs=vm)
    # an unavailable entry needs a reason, and has no impls
    with pytest.raises(PackError, match="target cpu: unavailable without a reason"):
        pack(kernels=[kernel_record(_ln(2), {"cpu": TargetRecord.unavailable("")})], vmfbs=vm)
    with_impls = dataclasses.replace(TargetRecord.unavailable("compile failed: x"), impls={"aten": art})
    with pytest.raises(PackError, match="unavailable but has impls"):
        pack(kernels=[kernel_record(_ln(2), {"cpu": with_impls})], vmfbs=vm)
    # unknown implementations: packed, rejected, or in a record not made by kernel_record
    with pytest.raises(PackError, match="target cpu impl fast: unknown implementation"):
        packed_impl(vm, "cpu", _ln(2), "fast", path)
    with pytest.raises(PackError, match="target cpu impl aten@local-sync: unknown implementation"):
        packed_impl(vm, "cpu", _ln(2), "aten@local-sync", path)
    with pytest.raises(PackError, match="target cpu: unknown implementation 'fast'"):
        kernel_record(_ln(2), {"cpu": TargetRecord.available("aten", {"aten": art}, "", {"fast": "slower"})})
    raw = KernelRecord(_ln(2), {"cpu": TargetRecord.unavailable("compile failed: x", {"fast": "boom"})})
    with pytest.raises(PackError, match="target cpu: unknown implementation 'fast'"):
        pack(kernels=[raw], vmfbs=vm)
    # vmfbs: unreadable, empty, not given, not the bytes the record describes
    with pytest.raises(PackError, match="cannot read vmfb"):
        packed_impl(vm, "cpu", _ln(2), "aten", tmp_path / "nope.vmfb")
    (tmp_path / "empty.vmfb").write_bytes(b"")
    with pytest.raises(PackError, match="is empty"):
        packed_impl(vm, "cpu", _ln(2), "aten", tmp_path / "empty.vmfb")
    with pytest.raises(PackError, match="the vmfb is empty"):
        packed_impl(vm, "cpu", _ln(2), "aten", b"")
    good = kernel_record(_ln(2), {"cpu": TargetRecord.available("aten", {"aten": art})})
    with pytest.raises(PackError, match=f"impl aten: member {art.member} is not given"):
        pack(kernels=[good], vmfbs={})
    with pytest.raises(PackError, match="is not the vmfb its record describes"):
        pack(kernels=[good], vmfbs={art.member: b"other bytes"})
    with pytest.raises(PackError, match="given twice with different entries"):
        pack(kernels=[good, kernel_record(_ln(2), {"cpu": TargetRecord.available("aten", {"aten": art}, "why")})],
             vmfbs=vm)
    assert not list(tmp_path.glob("*.tar.zst"))
    # build_index: only the members the records name
    ix, members = build_index(name="x", version="1.0.0", targets=built.targets, kernels=[good], vmfbs=vm,
                              provenance={}, csv_bytes=None)
    assert set(members) == {art.member} and list(ix.kernels) == [_ln(2).key]


def test_pack_from_report(built, tmp_path):
    """The graph's entry point: a build report (boo_build.report.build_report) -> bundle."""
    sig_ok, sig_bad = _ln(2), _ln(6)
    report = {
        "format": "boo-build-report", "format_version": 1, "manifest": "/somewhere/norms.toml",
        "bundle": {"name": "norms", "version": "0.1.0", "targets": ["cpu"]},
        "toolchain": {"compiler": "IREE compiler version 3.13.0", "boo-build": "0.1.0", "torch": "2.13.0"},
        "targets": {"cpu": {"flags": list(catalogue()["cpu"].flags), "driver": "local-task"}},
        "benchmarks": "ran",
        "kernels": [
            {"key": sig_ok.key, "signature": sig_ok.to_json(), "targets": {"cpu": {
                "status": "available", "selected": "aten", "selection_reason": "only one passed",
                "rejected": {"manual": "validation failed: max error 1"},
                "impls": {"aten": {"validation": {"status": "passed"}, "bench": {"median_us": 3.0}},
                          "manual": {"validation": {"status": "failed"}, "bench": None}}}}},
            {"key": sig_bad.key, "signature": sig_bad.to_json(), "targets": {"cpu": {
                "status": "unavailable", "reason": "aten: compile failed: boom"}}},
        ],
    }
    rp = tmp_path / "build-report.json"
    rp.write_text(json.dumps(report))
    root = tmp_path / "norms"  # the build folder: the decisions (select records) and the session's vmfbs
    shutil.copytree(built.root / "vmfb", root / "vmfb")
    write_decision(root, "cpu", sig_ok, "aten", "only one passed",
                   {"manual": (Kind.VALIDATION_FAILED, "validation failed: max error 1")})
    write_decision(root, "cpu", sig_bad, None, "nothing works", {"aten": (Kind.COMPILE_FAILED, "compile failed: boom")})
    out = pack_from_report(rp, root, tmp_path / "norms-0.1.0.tar.zst", csv_path=tmp_path / "absent.csv")
    ix = read_index(out)
    assert ix["provenance"]["versions"] == {"boo-build": "0.1.0", "torch": "2.13.0"}
    assert ix["provenance"]["targets"]["cpu"]["flags"] == list(catalogue()["cpu"].flags)
    assert ix["provenance"]["manifest"] == "norms.toml"
    t = ix["kernels"][sig_ok.key]["targets"]["cpu"]
    assert (t["selected"], t["reason"], list(t["impls"])) == ("aten", "only one passed", ["aten"])
    assert t["impls"]["aten"]["benchmark"] == {"median_us": 3.0}
    assert t["rejected"] == {"manual": "validation failed: max error 1"}
    assert t["rejected_kinds"] == {"manual": "validation-failed"} and t["reason_kind"] == "fastest"
    bad = ix["kernels"][sig_bad.key]["targets"]["cpu"]
    assert (bad["status"], bad["reason"], bad["reason_kind"]) == ("unavailable", "aten: compile failed: boom",
                                                                   "none-available")
    targets, kernels, vmfbs = entries_from_report(report, root)
    assert targets[0].arch == "x86-64-v3"
    assert [k.key for k in kernels] == [sig_ok.key, sig_bad.key]
    assert set(vmfbs) == {t["impls"]["aten"]["member"]}
    assert vmfbs[t["impls"]["aten"]["member"]] == built.vmfb[(sig_ok.key, "aten")].read_bytes()
    # no select record: the pack task refuses, naming it
    (root / "select" / "cpu" / f"{sig_bad.key}.json").unlink()
    with pytest.raises(PackError, match=f"kernel {sig_bad.key} target cpu: no select record"):
        pack_from_report(rp, root, tmp_path / "again-0.1.0.tar.zst")


# ----------------------------------------------------------------- the reader
def test_truncated_bundle(built, tmp_path):
    data = built.path.read_bytes()
    for n in (len(data) - 7, len(data) // 2, 10, 3):
        p = tmp_path / f"t{n}.tar.zst"
        p.write_bytes(data[:n])
        with pytest.raises(BundleFormatError, match="truncated|corrupt|not a zstd"):
            read_archive(p)
    p = tmp_path / "flip.tar.zst"
    p.write_bytes(flip_byte(data))
    with pytest.raises(BundleFormatError, match="corrupt"):
        read_archive(p)
    p.write_bytes(b"hello, not a bundle")
    with pytest.raises(BundleFormatError, match="not a zstd file"):
        read_archive(p)
    with pytest.raises(BundleFormatError, match="cannot read"):
        read_archive(tmp_path / "absent.tar.zst")


def _ti(name, **kw):
    ti = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def test_unsafe_members_refused(built, tmp_path):
    cases = {
        "dotdot": ([(_ti("kernels/../../evil.vmfb", size=3), b"abc")], r"'\.\.'"),
        "absolute": ([(_ti("/etc/evil", size=3), b"abc")], "absolute"),
        "symlink": ([(_ti("kernels/link", type=tarfile.SYMTYPE, linkname="/etc/passwd"), None)], "is a link"),
        "hardlink": ([(_ti("kernels/hard", type=tarfile.LNKTYPE, linkname="bundle.json"), None)], "is a link"),
        "device": ([(_ti("kernels/dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3), None)], "device"),
    }
    for name, (extra, pattern) in cases.items():
        p = rewrite(built.path, tmp_path / f"{name}.tar.zst", extra=extra)
        with pytest.raises(BundleFormatError, match=pattern):
            read_archive(p)
        assert main(["verify", str(p)]) == 2


def test_format_version_and_limits(built, tmp_path):
    p = rewrite(built.path, tmp_path / "future.tar.zst", header=lambda h: h.update(format_version=7))
    with pytest.raises(BundleFormatError, match=r"format version 7 is not supported; this loader reads "
                                                r"format versions 1, 2, 3, 4, 5, 6 \(upgrade"):
        read_archive(p)
    p = rewrite(built.path, tmp_path / "other.tar.zst", header=lambda h: h.update(format="zip"))
    with pytest.raises(BundleFormatError, match="not a boo-bundle index"):
        read_archive(p)
    p = rewrite(built.path, tmp_path / "missing.tar.zst",
                members=lambda m: m.pop(f"kernels/cpu/{_ln(2).key}-aten.vmfb"))
    with pytest.raises(BundleFormatError, match="missing"):
        read_archive(p)
    with pytest.raises(BundleFormatError, match="over the limit"):
        read_archive(built.path, max_size=4096)
    # the index must come first
    a = read_archive(built.path)
    order = sorted(a.members.items())
    (tmp_path / "order.tar.zst").write_bytes(compress(tar_bytes(order)))
    with pytest.raises(BundleFormatError, match="first member"):
        read_archive(tmp_path / "order.tar.zst")


# ------------------------------------------------------------------------ CLI
def test_cli_info_and_verify(built, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert info.cmd_info(built.path, out=out) == 0
    text = out.getvalue()
    assert "test-norms 1.2.3" in text and _rms16(6).key in text
    assert "UNAVAILABLE\n        why: compile failed: test" in text and "available 9, unavailable 0" in text
    assert verify.cmd_verify(built.path, out=out, err=err) == 0

    member = f"kernels/cpu/{_ln(6).key}-aten.vmfb"
    bad = rewrite(built.path, tmp_path / "bad.tar.zst",
                  members=lambda m: m.__setitem__(member, flip_byte(m[member])))
    read_archive(bad)  # opening does not hash every member
    out, err = io.StringIO(), io.StringIO()
    assert verify.cmd_verify(bad, out=out, err=err) == 1
    assert f"MISMATCH {member}" in err.getvalue()
    assert err.getvalue().count("MISMATCH") == 1 and "FAILED" in out.getvalue()
    assert main(["info", str(tmp_path / "absent.tar.zst")]) == 2


def test_cli_diff(built, tmp_path):
    out = io.StringIO()
    assert diff.cmd_diff(built.path, built.path, out=out) == 0
    assert "no differences" in out.getvalue()

    kernels = built.entries(targets=("cpu",), keys={k.key for k in built.kernels} - {_rms32(6).key})
    changed, vmfbs = [], dict(built.vmfbs)
    for k in kernels:
        cpu = k.targets["cpu"]
        if k.key == _ln(1).key:  # selection change and a slower benchmark
            arts = {i: dataclasses.replace(a, benchmark={"median_us": 100.0}) for i, a in cpu.impls.items()}
            cpu = TargetRecord.available("aten", arts, "manual got slower")
        if k.key == _ln(2).key:  # different vmfb bytes
            other = tmp_path / "other.vmfb"
            other.write_bytes(built.vmfb[(_ln(6).key, "aten")].read_bytes())
            cpu = TargetRecord.available("aten", {"aten": packed_impl(vmfbs, "cpu", k.signature, "aten", other)})
        if k.key == _ln(14).key:  # torch eager beat the kernel in the new build
            cpu = TargetRecord.available(cpu.selected, cpu.impls, cpu.reason, cpu.rejected,
                                         prefer_eager=EagerPreference(eager_s=1e-5, kernel_s=2e-5, reason="faster"))
        if k.key == _ln(6).key:  # faster too, but its results failed validation
            cpu = TargetRecord.available(cpu.selected, cpu.impls, cpu.reason, cpu.rejected,
                                         eager_rejected="torch eager failed validation: grad_weight (seed0): off")
        changed.append(kernel_record(k.signature, {"cpu": cpu}))
    extra = _ln(4)
    changed.append(kernel_record(extra, {"cpu": TargetRecord.unavailable("export failed: nope")}))
    new = pack_bundle(tmp_path, name="test-norms", version="1.3.0", targets=[catalogue()["cpu"]],
                      kernels=changed, vmfbs=vmfbs, provenance=PROVENANCE, csv_bytes=None)
    out = io.StringIO()
    assert diff.cmd_diff(built.path, new, out=out) == 1
    text = out.getvalue()
    assert "version: 1.2.3 -> 1.3.0" in text and "target gfx942 removed" in text
    assert f"+ {extra.key}" in text and f"- {_rms32(6).key}" in text
    assert f"{_ln(1).key} on cpu: selection manual -> aten" in text
    assert f"{_ln(2).key} on cpu: aten vmfb changed" in text
    assert f"{_ln(14).key} on cpu: torch tensors now run torch eager" in text
    assert f"{_ln(1).key} on cpu: median_us 16 -> 100" in text and "slower" in text
    # why torch calls still run the kernel: in the index and in info
    te6 = read_index(new)["kernels"][_ln(6).key]["targets"]["cpu"]
    assert te6["eager_rejected"] == "torch eager failed validation: grad_weight (seed0): off"
    assert "prefer_eager" not in te6
    out = io.StringIO()
    assert info.cmd_info(new, out=out) == 0
    assert "torch tensors run the kernel: torch eager failed validation: grad_weight (seed0): off" in out.getvalue()


def test_cli_diff_reports_members_the_index_does_not_show(built, tmp_path):
    """Same index, other member bytes (the index keeps its checksums) or
    members added/removed: a difference, not "no differences"."""
    vmfb = next(m for m in read_archive(built.path).members if m.endswith(".vmfb"))
    cases = {
        "csv": (dict(members=lambda m: m.__setitem__("bench.csv", flip_byte(m["bench.csv"]))),
                "bench.csv changed (sha256"),
        "vmfb": (dict(members=lambda m: m.__setitem__(vmfb, flip_byte(m[vmfb]))), f"{vmfb} changed (sha256"),
        "removed": (dict(members=lambda m: m.pop("bench.csv"), index=lambda ix: ix.pop("csv")), "- bench.csv"),
        "added": (dict(members=lambda m: m.__setitem__("notes.txt", b"hello")), "+ notes.txt (5 B)"),
    }
    for name, (change, says) in cases.items():
        other = rewrite(built.path, tmp_path / f"{name}.tar.zst", **change)
        out = io.StringIO()
        assert diff.cmd_diff(built.path, other, out=out) == 1, (name, out.getvalue())
        text = out.getvalue()
        assert says in text and "no differences" not in text, (name, text)
        assert "bundle.json" not in text or name == "removed", (name, text)  # only the csv field left the index
