"""The typed bundle format (boo_build/loader/format.py): exact JSON round
trips (written indexes, the old fixture, unknown and absent fields), the same
bytes as before the typed classes, read-only records, and check_index's
refusals with where the problem is."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from boo_build.loader import open_bundle
from boo_build.loader.archive import read_archive
from boo_build.loader.errors import BundleFormatError
from boo_build.loader.format import (
    INDEX_NAME,
    SPLIT_FORMAT_VERSION,
    BundleIndex,
    CandidateRecord,
    ImplRecord,
    KernelRecord,
    Status,
    TargetRecord,
    check_index,
)
from boo_build.loader.split_format import RECORDS_NAME
from boo_build.signature import KernelSignature
from boo_build.stages.pack import canonical_json, kernel_record, pack_bundle, packed_impl
from boo_build.targets import catalogue

FIXTURE = Path(__file__).parent / "fixtures" / "pre-runtime-fields-0.1.0.tar.zst"
SIGS = (KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 1),
        KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 14),
        KernelSignature("rms_norm", (3, 37), (37,), "bfloat16", 1, bias=False),
        KernelSignature("rms_norm", (3, 37), (37,), "bfloat16", 6, bias=False))
# sha256 of bundle.json as pack.py wrote it before the index was typed (same inputs as _pack), and since
# reasons have kinds (the same index with each reason's kind beside its text)
BUNDLE_JSON_SHA256 = "f71d2459c1b8fd2cda6e75bebbf5e232a2acc923afb27a96800e51f425914e1b"
BUNDLE_JSON_WITH_KINDS_SHA256 = "4b44eff10589560e2e18b37a356a04e8ae2798801f1789cc535f96c26eaba2aa"
KIND_FIELDS = ("reason_kind", "rejected_kinds", "eager_rejected_kind", "kind")


def _without_kinds(obj):
    if isinstance(obj, dict):
        return {k: _without_kinds(v) for k, v in obj.items() if k not in KIND_FIELDS}
    return [_without_kinds(v) for v in obj] if isinstance(obj, list) else obj


def _pack(root: Path, **kw) -> Path:
    """A bundle of fake vmfbs: available and unavailable entries, rejected impls, records."""
    root.mkdir(parents=True, exist_ok=True)
    kernels, vmfbs = [], {}
    for i, sig in enumerate(SIGS):
        vm = {}
        for impl, n in (("aten", i), ("manual", i + 50)):
            vm[impl] = root / f"{impl}{i}.vmfb"
            vm[impl].write_bytes(bytes([n]) * (100 + n))

        def aten(target):
            return packed_impl(vmfbs, target, sig, "aten", vm["aten"],
                               validation={"status": "passed", "max_error": 1e-6}, benchmark={"median_us": 3.5})

        arts = {"aten": aten("cpu"), "manual": packed_impl(vmfbs, "cpu", sig, "manual", vm["manual"])}
        cpu = TargetRecord.available("aten" if i % 2 else "manual", arts, "fastest")
        gfx = (TargetRecord.unavailable("not run: no device (gfx942)", {"aten": "compile failed: boom"}) if i % 2
               else TargetRecord.available("aten", {"aten": aten("gfx942")}, ""))
        kernels.append(kernel_record(sig, {"cpu": cpu, "gfx942": gfx}))
    cat = catalogue("x86_64")
    args = dict(name="t-norms", version="0.1.0", targets=[cat["cpu"], cat["gfx942"]], provenance={})
    if kw.pop("one_target", True):
        args["targets"] = [cat["cpu"]]
        kernels = [kernel_record(k.signature, {"cpu": k.targets["cpu"]}) for k in kernels]
    args.update(kw)
    return pack_bundle(root / "out", kernels=kernels, vmfbs=vmfbs, **args)


def _index_bytes(path: Path) -> bytes:
    """The index's bytes: ``bundle.json`` (formats 1-4), ``records.json`` (format 5)."""
    a = read_archive(path)
    return a.members[RECORDS_NAME if a.header is not None else INDEX_NAME]


def _round_trips(raw: bytes) -> None:
    d = json.loads(raw)
    typed = BundleIndex.from_json(d)
    assert typed.to_json() == d
    assert canonical_json(typed.to_json()) == raw  # byte for byte
    assert BundleIndex.from_json(typed.to_json()) == typed


def test_written_and_old_indexes_round_trip_exactly(tmp_path):
    _round_trips(_index_bytes(FIXTURE))  # written before the iree_runtime field: it stays absent
    assert "iree_runtime" not in json.loads(_index_bytes(FIXTURE))
    _round_trips(_index_bytes(_pack(tmp_path / "a", one_target=False, csv_bytes=b"a\n",
                                    compiler="IREE compiler version 3.13.0 @ abc")))
    _round_trips(_index_bytes(_pack(tmp_path / "b")))


def test_pack_writes_the_bytes_it_wrote_before_the_typed_index(tmp_path):
    d = json.loads(_index_bytes(_pack(tmp_path)))
    assert d["format_version"] == SPLIT_FORMAT_VERSION == 5  # every bundle written now
    raw = canonical_json({**d, "format_version": 1})  # as the version written before the split
    assert hashlib.sha256(raw).hexdigest() == BUNDLE_JSON_WITH_KINDS_SHA256
    # the kinds are all that changed: without them, the bytes of before
    assert hashlib.sha256(canonical_json(_without_kinds(json.loads(raw)))).hexdigest() == BUNDLE_JSON_SHA256


def test_unknown_and_absent_fields_are_kept(tmp_path):
    d = json.loads(_index_bytes(_pack(tmp_path)))
    d["future"] = {"x": [1, 2]}
    d.pop("csv")
    d.pop("provenance")
    key = sorted(d["kernels"])[0]
    k = d["kernels"][key]
    k["note"] = "kept"
    del k["functions"]
    te = k["targets"]["cpu"]
    te["measured"] = {"device": "CPU", "bytes": 10}
    del te["reason"], te["reason_kind"]  # a reason and its kind: one field
    m = te["impls"][te["selected"]]
    m["extra"] = 1
    del m["validation"]
    d["targets"]["cpu"]["new"] = True
    typed = BundleIndex.from_json(d)
    assert typed.to_json() == d
    assert typed.csv is None and "csv" in typed.absent and typed.extra["future"]["x"] == (1, 2)
    assert typed.kernels[key].targets["cpu"].extra["measured"]["bytes"] == 10


CANDIDATES = {  # a target entry's optional "candidates", as the build writes them
    "aten": {"median_s": 2.0e-05, "min_s": 1.9e-05, "status": "slower", "reason": "slower: 20.0 us vs 10.0 us"},
    "manual": {"median_s": 3.1e-05, "min_s": 3.0e-05, "status": "slower", "reason": "slower: 31.0 us vs 10.0 us"},
    "manual@local-sync": {"median_s": 1.0e-05, "min_s": 0.9e-05, "status": "selected", "reason": ""},
    "manual+nosd": {"median_s": None, "min_s": None, "status": "failed",
                    "reason": "validation failed: max error 0.05"},
}


def test_mode_and_candidates_round_trip_and_stay_absent(tmp_path):
    raw = _index_bytes(_pack(tmp_path))
    d = json.loads(raw)
    key = SIGS[0].key
    te = d["kernels"][key]["targets"]["cpu"]
    rec = BundleIndex.from_json(d).kernels[key].targets["cpu"]
    # a bundle that explores nothing has neither field, and writes none back
    assert "mode" not in te and "candidates" not in te and rec.mode is None and rec.candidates is None
    assert canonical_json(BundleIndex.from_json(d).to_json()) == raw
    te["mode"] = "local-sync"
    te["candidates"] = CANDIDATES
    typed = BundleIndex.from_json(d)
    assert typed.to_json() == d and canonical_json(typed.to_json()) == canonical_json(d)
    rec = typed.kernels[key].targets["cpu"]
    assert rec.mode == "local-sync" and rec.candidates["manual@local-sync"].status == "selected"
    assert rec.candidates["manual+nosd"].median_s is None
    assert all(isinstance(c, CandidateRecord) for c in rec.candidates.values())
    assert "mode" not in rec.extra and "candidates" not in rec.extra  # typed fields, not unknown ones
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.candidates["aten"].status = "selected"  # read-only like the rest
    with pytest.raises(TypeError):
        rec.candidates["aten"] = rec.candidates["manual"]
    # the writer's constructor gives the same entry
    cands = {c: CandidateRecord.from_json(v) for c, v in CANDIDATES.items()}
    made = TargetRecord.available(rec.selected, rec.impls, rec.reason, rec.rejected, mode="local-sync",
                                  candidates=cands)
    assert made == rec and made.to_json() == te
    # a candidate read without times writes none back; one made by the writer names both (null when unmeasured)
    bare = {"status": "not run", "reason": "no device"}
    assert CandidateRecord.from_json(bare).to_json() == bare
    # (made by hand from text, its kind comes from its words: none known here)
    assert CandidateRecord("not run", "no device").to_json() == {**bare, "median_s": None, "min_s": None,
                                                                 "kind": "unknown"}
    assert CandidateRecord.from_json({**bare, "min_s": 2e-6}).compared_s == 2e-6
    gone = TargetRecord.unavailable("every candidate failed", {"aten": "failed"}, candidates=cands)
    assert TargetRecord.from_json(gone.to_json()) == gone and "mode" not in gone.to_json()


def test_records_are_typed_and_read_only(tmp_path):
    ix = read_archive(_pack(tmp_path)).bundle_index
    key = SIGS[0].key
    te = ix.kernels[key].targets["cpu"]
    assert te.status is Status.AVAILABLE and te.status == "available" and json.dumps(te.status) == '"available"'
    assert isinstance(ix.kernels[key], KernelRecord) and ix.kernels[key].signature == SIGS[0]
    assert isinstance(te.selected_impl, ImplRecord) and te.selected_impl.size == 150
    with pytest.raises(dataclasses.FrozenInstanceError):
        te.selected = "aten"
    with pytest.raises(TypeError):
        te.impls["other"] = te.selected_impl
    with pytest.raises(TypeError):
        te.selected_impl.validation["status"] = "failed"
    assert ix.counts() == {"cpu": {"available": 4, "unavailable": 0}}
    # with_entry gives a new index, the old one unchanged
    new = ix.with_entry(key, "cpu", TargetRecord.unavailable("measured on X: none", measured={"bytes": 1}))
    assert not new.kernels[key].targets["cpu"].is_available and ix.kernels[key].targets["cpu"].is_available
    assert new.to_json()["kernels"][key]["targets"]["cpu"] == {
        "status": "unavailable", "reason": "measured on X: none", "reason_kind": "none-available", "rejected": {},
        "measured": {"bytes": 1}}


@pytest.mark.parametrize("change, message", [
    (lambda d, k: k["targets"]["cpu"].update(status="maybe"), "kernel {key} target cpu: unknown status 'maybe'"),
    (lambda d, k: k["targets"].update(nowhere=k["targets"]["cpu"]), "kernel {key} names unknown target 'nowhere'"),
    (lambda d, k: k["targets"]["cpu"].update(selected="other"),
     "kernel {key} target cpu: selected impl 'other' has no entry"),
    (lambda d, k: k["targets"]["cpu"]["impls"]["manual"].update(size=3), "has 150 bytes, the index says 3"),
    (lambda d, k: k["targets"]["cpu"]["impls"]["manual"].update(member="kernels/x.vmfb"),
     "member kernels/x.vmfb named by the index is missing"),
    (lambda d, k: k["targets"]["cpu"]["impls"]["manual"].pop("sha256"), "malformed bundle.json: KeyError: 'sha256'"),
    (lambda d, k: d["targets"]["cpu"].update(flags=3), "malformed bundle.json: TypeError"),
    (lambda d, k: k["targets"]["cpu"].update(mode=3), "kernel {key} target cpu: mode must be a driver name, got 3"),
    (lambda d, k: k["targets"]["cpu"].update(candidates=["aten"]), "malformed bundle.json: TypeError"),
])
def test_check_index_says_what_and_where(tmp_path, change, message):
    a = read_archive(_pack(tmp_path))
    d = json.loads(_index_bytes(a.path))
    key = SIGS[0].key
    change(d, d["kernels"][key])
    with pytest.raises(BundleFormatError) as e:
        check_index(d, a.members, "b.tar.zst")
    assert str(e.value).startswith("b.tar.zst: ") and message.format(key=key) in str(e.value)


def test_the_loader_reads_the_typed_index(tmp_path):
    b = open_bundle(_pack(tmp_path), device="local-task")
    assert b.keys() == sorted(s.key for s in SIGS) and b.name == "t-norms" and b.version == "0.1.0"
    info = b.info()
    assert info["targets"]["cpu"]["available"] == 4 and info["format_version"] == 5
    assert info["kernels"][SIGS[1].key]["cpu"] == {"status": "available", "selected": "aten"}


def test_info_shows_candidates_and_the_compared_speed_up(tmp_path):
    import io

    from helpers import rewrite

    from boo_build.cli import info

    key = SIGS[0].key
    csv_bytes = (f"key,target,eager_median_us,selected\n{key},cpu,25.0,manual@local-sync\n").encode()
    plain = _pack(tmp_path / "a", csv_bytes=csv_bytes)
    before = io.StringIO()
    assert info.cmd_info(plain, out=before) == 0
    assert "candidates (" not in before.getvalue() and "winner " not in before.getvalue()  # nothing new without them

    def add(d):
        te = d["kernels"][key]["targets"]["cpu"]
        te.update(selected="manual", mode="local-sync", candidates=CANDIDATES, timing={
            "rounds": 12, "ties": 0, "remeasured": [], "busy": False,
            "eager": {"a": "manual@local-sync", "b": "eager", "ratio": 0.4, "q1": 0.38, "q3": 0.42, "n": 12,
                      "noise": 0.02, "verdict": "faster", "confirmed": None}})
    moded = rewrite(plain, tmp_path / "moded.tar.zst", index=add)
    out = io.StringIO()
    assert info.cmd_info(moded, out=out) == 0
    text = out.getvalue()
    assert "manual @local-sync" in text
    # the figure the selection compared (paired rounds), not one of bench.csv's medians (25.0 us / 10.0 us)
    assert "speed-up over torch eager: 2.50x (2.45-2.55, 12 rounds): faster than torch eager" in text
    assert "winner " not in text and "x torch eager (" not in text
    assert "candidates (4), median:" in text
    lines = [ln.strip() for ln in text.splitlines()]
    tried = lines[lines.index("candidates (4), median:") + 1:][:4]
    assert [ln.split()[0] for ln in tried] == ["manual@local-sync", "aten", "manual", "manual+nosd"]  # fastest first
    assert tried[1].endswith("slower: 20.0 us vs 10.0 us") and tried[3].startswith("manual+nosd")
    assert "failed: validation failed: max error 0.05" in tried[3] and tried[3].split()[1] == "-"
    # every other kernel's lines are as before
    assert len(text.splitlines()) == len(before.getvalue().splitlines()) + 6
