"""Bundle writer (pack.py), archive reader checks and the info/verify/diff CLI.

The session's kernel set (``built``: a handful of small kernels exported and
compiled once) is built by helpers.build_kernels, for the fixture in conftest.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest
import zstandard

from boo_build import bundle_cli
from boo_build.loader.bundle import BundleFormatError, read_archive
from boo_build.pack import (
    ImplArtifact, KernelEntry, PackError, TargetEntry, compress, entries_from_report,
    pack_bundle, pack_from_report, read_index, tar_bytes,
)
from boo_build.signature import ModuleId
from boo_build.targets import catalogue

from helpers import CSV, KERNELS, PROVENANCE, _ln, _rms16, _rms32, flip_byte, rewrite


# ----------------------------------------------------------------- the writer
def test_reproducible_bytes(built, tmp_path):
    a = pack_bundle(tmp_path / "a", name="test-norms", version="1.2.3", targets=built.targets,
                    kernels=built.kernels, provenance=PROVENANCE, csv_bytes=CSV)
    # same inputs in another order, another folder, vmfbs copied elsewhere
    copies = {}
    for (key, impl), p in built.vmfb.items():
        q = tmp_path / "copy" / p.name
        q.parent.mkdir(exist_ok=True)
        q.write_bytes(p.read_bytes())
        copies[p] = q
    shuffled = [KernelEntry(k.signature, {
        t: TargetEntry(e.selected, e.reason, {i: ImplArtifact(copies[a.vmfb], a.validation, a.benchmark)
                                              for i, a in e.impls.items()}, e.rejected)
        for t, e in reversed(list(k.targets.items()))}) for k in reversed(built.kernels)]
    b = pack_bundle(tmp_path / "b", name="test-norms", version="1.2.3", targets=list(reversed(built.targets)),
                    kernels=shuffled, provenance=dict(reversed(list(PROVENANCE.items()))), csv_bytes=CSV)
    assert a.name == "test-norms-1.2.3.tar.zst"
    assert a.read_bytes() == b.read_bytes() == built.path.read_bytes()
    assert not list((tmp_path / "a").glob(".*.tmp"))  # no temporary left behind

    raw = zstandard.ZstdDecompressor().decompress(a.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        infos = tf.getmembers()
    names = [ti.name for ti in infos]
    assert names[0] == "bundle.json" and names[-1] == "bench.csv"
    assert names[1:-1] == sorted(names[1:-1]) and all(n.startswith("kernels/") for n in names[1:-1])
    for ti in infos:
        assert (ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname) == (0, 0o644, 0, 0, "", "")
        assert ti.isreg()


def test_index_schema(built):
    ix = read_index(built.path)
    assert ix["format"] == "boo-bundle" and ix["format_version"] == 1
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
    assert gfx == {"status": "unavailable", "reason": "compile failed: test",
                   "rejected": {"aten": "compile failed: test"}}
    text = read_archive(built.path).members["bundle.json"].decode()
    assert "mtime" not in text and "time" not in json.dumps(ix["provenance"])


def test_pack_refuses_bad_inputs(built, tmp_path):
    kw = dict(targets=built.targets, kernels=built.kernels, provenance={}, csv_bytes=None)
    with pytest.raises(PackError, match="version '1.0' is not semver"):
        pack_bundle(tmp_path, name="x", version="1.0", **kw)
    with pytest.raises(PackError, match="bundle name"):
        pack_bundle(tmp_path, name="a/b", version="1.0.0", **kw)
    art = ImplArtifact(built.vmfb[(_ln(2).key, "aten")])
    bad = KernelEntry(_ln(2), {"cpu": TargetEntry.available({"aten": art}, "manual")})
    with pytest.raises(PackError, match="selected implementation 'manual'"):
        pack_bundle(tmp_path, name="x", version="1.0.0", targets=built.targets, kernels=[bad], provenance={})
    bad = KernelEntry(_ln(2), {"gfx90a": TargetEntry.available({"aten": art}, "aten")})
    with pytest.raises(PackError, match="gfx90a"):
        pack_bundle(tmp_path, name="x", version="1.0.0", targets=built.targets, kernels=[bad], provenance={})
    with pytest.raises(PackError, match="reason"):
        TargetEntry.unavailable("")
    missing = KernelEntry(_ln(2), {"cpu": TargetEntry.available({"aten": tmp_path / "nope.vmfb"}, "aten")})
    with pytest.raises(PackError, match="cannot read vmfb"):
        pack_bundle(tmp_path, name="x", version="1.0.0", targets=built.targets, kernels=[missing], provenance={})
    assert not list(tmp_path.glob("*.tar.zst"))


def test_pack_from_report(built, tmp_path):
    """The graph's entry point: a build report (boo_build.report) -> bundle."""
    root = built.root
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
    out = pack_from_report(rp, root, tmp_path / "norms-0.1.0.tar.zst", csv_path=tmp_path / "absent.csv")
    ix = read_index(out)
    assert ix["provenance"]["versions"] == {"boo-build": "0.1.0", "torch": "2.13.0"}
    assert ix["provenance"]["targets"]["cpu"]["flags"] == list(catalogue()["cpu"].flags)
    assert ix["provenance"]["manifest"] == "norms.toml"
    t = ix["kernels"][sig_ok.key]["targets"]["cpu"]
    assert (t["selected"], t["reason"], list(t["impls"])) == ("aten", "only one passed", ["aten"])
    assert t["impls"]["aten"]["benchmark"] == {"median_us": 3.0}
    assert t["rejected"] == {"manual": "validation failed: max error 1"}
    assert ix["kernels"][sig_bad.key]["targets"]["cpu"]["status"] == "unavailable"
    targets, _ = entries_from_report(report, root)
    assert targets[0].arch == "x86-64-v3"


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
        assert bundle_cli.cmd_verify(p, out=io.StringIO(), err=io.StringIO()) == 2


def test_format_version_and_limits(built, tmp_path):
    p = rewrite(built.path, tmp_path / "future.tar.zst", index=lambda ix: ix.update(format_version=3))
    with pytest.raises(BundleFormatError, match=r"format version 3 is not supported; this loader reads "
                                                r"format versions 1, 2 \(upgrade"):
        read_archive(p)
    p = rewrite(built.path, tmp_path / "other.tar.zst", index=lambda ix: ix.update(format="zip"))
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
    assert bundle_cli.cmd_info(built.path, out=out, err=err) == 0
    text = out.getvalue()
    assert "test-norms 1.2.3" in text and _rms16(6).key in text
    assert "UNAVAILABLE: compile failed: test" in text and "available 9, unavailable 0" in text
    assert bundle_cli.cmd_verify(built.path, out=out, err=err) == 0

    member = f"kernels/cpu/{_ln(6).key}-aten.vmfb"
    bad = rewrite(built.path, tmp_path / "bad.tar.zst",
                  members=lambda m: m.__setitem__(member, flip_byte(m[member])))
    read_archive(bad)  # opening does not hash every member
    out, err = io.StringIO(), io.StringIO()
    assert bundle_cli.cmd_verify(bad, out=out, err=err) == 1
    assert f"MISMATCH {member}" in err.getvalue()
    assert err.getvalue().count("MISMATCH") == 1 and "FAILED" in out.getvalue()
    assert bundle_cli.cmd_info(tmp_path / "absent.tar.zst", out=out, err=err) == 2


def test_cli_diff(built, tmp_path):
    out = io.StringIO()
    assert bundle_cli.cmd_diff(built.path, built.path, out=out) == 0
    assert "no differences" in out.getvalue()

    kernels = built.entries(targets=("cpu",), keys={k.key for k in built.kernels} - {_rms32(6).key})
    changed = []
    for k in kernels:
        cpu = k.targets["cpu"]
        if k.key == _ln(1).key:  # selection change and a slower benchmark
            arts = {i: ImplArtifact(a.vmfb, a.validation, {"median_us": 100.0}) for i, a in cpu.impls.items()}
            cpu = TargetEntry.available(arts, "aten", "manual got slower")
        if k.key == _ln(2).key:  # different vmfb bytes
            other = tmp_path / "other.vmfb"
            other.write_bytes(built.vmfb[(_ln(6).key, "aten")].read_bytes())
            cpu = TargetEntry.available({"aten": other}, "aten")
        if k.key == _ln(14).key:  # torch eager beat the kernel in the new build
            cpu = TargetEntry.available(cpu.impls, cpu.selected, cpu.reason, cpu.rejected,
                                        prefer_eager={"eager_s": 1e-5, "kernel_s": 2e-5, "reason": "faster"})
        if k.key == _ln(6).key:  # faster too, but its results failed validation
            cpu = TargetEntry.available(cpu.impls, cpu.selected, cpu.reason, cpu.rejected,
                                        eager_rejected="torch eager failed validation: grad_weight (seed0): off")
        changed.append(KernelEntry(k.signature, {"cpu": cpu}))
    extra = _ln(4)
    changed.append(KernelEntry(extra, {"cpu": TargetEntry.unavailable("export failed: nope")}))
    new = pack_bundle(tmp_path, name="test-norms", version="1.3.0", targets=[catalogue()["cpu"]],
                      kernels=changed, provenance=PROVENANCE, csv_bytes=None)
    out = io.StringIO()
    assert bundle_cli.cmd_diff(built.path, new, out=out) == 1
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
    assert bundle_cli.cmd_info(new, out=out) == 0
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
        assert bundle_cli.cmd_diff(built.path, other, out=out) == 1, (name, out.getvalue())
        text = out.getvalue()
        assert says in text and "no differences" not in text, (name, text)
        assert "bundle.json" not in text or name == "removed", (name, text)  # only the csv field left the index
