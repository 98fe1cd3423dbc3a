"""records: the one atomic writer, canonical record JSON, status enums; not_run: one wording."""

from __future__ import annotations

import json
import os
import stat

import pytest

from boo_build import files, records
from boo_build.records import BenchStatus, CompileStatus, ExportStatus, ValidationStatus
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages import not_run

SIG = KernelSignature.parse("layer_norm-f32-4x6x10-n10-wb-m1")
MID = ModuleId(SIG, "manual")


def test_write_atomic_fsyncs_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    path = tmp_path / "sub" / "rec.json"
    files.write_atomic(path, b"data")
    assert events == ["fsync", "replace"]
    assert path.read_bytes() == b"data"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["rec.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "rec.json"
    path.write_bytes(b"old")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        files.write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["rec.json"]


def test_record_json_is_canonical_and_statuses_are_plain_strings(tmp_path):
    rec = {"status": CompileStatus.OK, "b": 1, "a": [ValidationStatus.NOT_RUN], "run_id": "r", "seconds": 1.5}
    path = tmp_path / "r.json"
    files.write_json(path, rec)
    text = path.read_text()
    assert text == json.dumps({"a": ["not run"], "b": 1, "run_id": "r", "seconds": 1.5, "status": "ok"},
                              sort_keys=True, indent=1) + "\n"
    back = files.read_json(path)
    assert records.stable_record(back) == {"a": ["not run"], "b": 1, "status": "ok"}
    assert records.stable_record(None) is None
    assert files.read_json(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{")
    assert files.read_json(tmp_path / "bad.json") is None
    assert ExportStatus.UNAVAILABLE == "unavailable" and BenchStatus.SKIPPED == "skipped"


def test_not_run_records_have_one_wording():
    v = not_run.validation(MID.key, "gfx942", not_run.no_device("gfx942")).to_json()
    assert (v["status"], v["reason"]) == ("not run", "not run: no device (gfx942)")
    k = not_run.bench(MID.key, "gfx942", "why").to_json()
    assert (k["subject"], k["signature"], k["status"], k["reason"]) == (MID.key, SIG.key, "not run", "why")
    e = not_run.bench(f"{SIG.key}-eager", "gfx942", "why").to_json()
    assert (e["subject"], e["signature"]) == ("eager", SIG.key)
    s = not_run.skipped_bench(MID.key, "cpu", "failed").to_json()
    assert (s["status"], s["reason"], s["reps"], s["median_s"]) == ("skipped", "not validated: failed", 0, None)
    assert not_run.skipped_bench(MID.key, "cpu", None).reason == "not validated: no record"
    assert not_run.not_compiled("failed") == "not compiled: failed"
    assert not_run.not_compiled(None) == "not compiled: no record"
