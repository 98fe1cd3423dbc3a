"""Typed reasons: every status is decided by a reason's kind, never by its words.

A bundle written before kinds (tests/fixtures/pre-kinds-0.1.0.tar.zst) opens,
gets each reason's kind from its words once, and is written back as it was.
A bundle whose reasons are reworded keeps every status: the page's cells,
the candidates' statuses, ``info``'s lines, where torch calls go."""

from __future__ import annotations

import ast
import dataclasses
import json
import pickle
from pathlib import Path

import pytest
from helpers import REPO, rewrite

from boo_build.loader import read_archive
from boo_build.loader.format import BundleIndex, TargetRecord
from boo_build.reasons import Kind, Reason, legacy_kind
from boo_build.report.page import from_bundle
from boo_build.report.page_data import cell_state, impl_failures
from boo_build.stages.pack import canonical_json
from boo_build.stages.routing import torch_calls_text
from boo_build.stages.selection import Decision, candidate_status

PRE_KINDS = REPO / "tests" / "fixtures" / "pre-kinds-0.1.0.tar.zst"
M1, M14 = "layer_norm-f32-2x8-n8-wb-m1", "layer_norm-f32-2x8-n8-wb-m14"


def test_a_reason_is_its_text_with_a_kind():
    r = Reason(Kind.SLOWER, "slower: 2.0 us vs 1.0 us (aten)")
    assert r == "slower: 2.0 us vs 1.0 us (aten)" and r.kind is Kind.SLOWER and r.text == str(r)
    assert json.dumps({"x": r}) == '{"x": "slower: 2.0 us vs 1.0 us (aten)"}'
    back = pickle.loads(pickle.dumps(r))  # Dask and copies keep the kind
    assert back == r and back.kind is Kind.SLOWER
    assert Reason.from_json(r.to_json()).kind is Kind.SLOWER
    with pytest.raises(ValueError, match="unknown reason kind 'faster'"):
        Reason.from_json({"kind": "faster", "text": "x"})


def test_a_bundle_written_before_kinds_opens_with_them_and_writes_back_as_it_was():
    a = read_archive(PRE_KINDS)
    ix = a.bundle_index
    assert canonical_json(ix.to_json()) == a.members["bundle.json"]  # nothing added on the way through
    cpu1, gfx14 = ix.kernels[M1].targets["cpu"], ix.kernels[M14].targets["gfx942"]
    assert cpu1.reason.kind is Kind.FASTEST
    assert {i: r.kind for i, r in cpu1.rejected.items()} == {
        "aten+nosd": Kind.SLOWER, "manual": Kind.VALIDATION_FAILED, "manual+nosd": Kind.VALIDATION_FAILED}
    assert {c.status for n, c in cpu1.candidates.items() if c.reason.kind is Kind.VALIDATION_FAILED} == {"failed"}
    assert cpu1.candidates["aten@local-sync"].reason.kind is Kind.SELECTED
    assert gfx14.reason.kind is Kind.MODELLED
    assert {r.kind for r in gfx14.rejected.values()} == {Kind.NOT_COMPILED}  # ranked out by the model: no failure
    # the page from it: the failed validations listed, the variant the model left out not a failure
    data = from_bundle(PRE_KINDS)
    assert [(k.key, t, i) for k, t, i, _ in impl_failures(data, "validation")] == [
        (M1, "cpu", "manual"), (M1, "cpu", "manual+nosd")]
    assert impl_failures(data, "build") == []
    assert {t: cell_state(c).state for k in data.kernels if k.key == M14 for t, c in k.cells.items()} == {
        "cpu": "passed", "gfx942": "not run"}


def _reworded(d):
    """Every reason text of an index replaced by other words; the kinds kept."""
    for k in d["kernels"].values():
        for te in k["targets"].values():
            if te.get("reason"):
                te["reason"] = "ZZ " + te["reason"][::-1]
            te["rejected"] = {i: "ZZ " + r[::-1] for i, r in (te.get("rejected") or {}).items()}
            if te.get("eager_rejected"):
                te["eager_rejected"] = "ZZ"
            for c in (te.get("candidates") or {}).values():
                if c["reason"]:
                    c["reason"] = "ZZ " + c["reason"][::-1]


def test_rewording_a_reason_changes_no_status(tmp_path):
    """A bundle whose reasons were reworded (kinds recorded) shows the same states,
    candidate statuses and torch routing: consumers read kinds, not words."""
    src = read_archive(PRE_KINDS).bundle_index
    with_kinds = src.to_json()
    for k in with_kinds["kernels"].values():  # as a bundle written now: each reason with its kind
        for t, te in k["targets"].items():
            rec = TargetRecord.from_json(te)
            cands = None if rec.candidates is None else {
                n: dataclasses.replace(c, legacy=False) for n, c in rec.candidates.items()}
            k["targets"][t] = dataclasses.replace(rec, legacy=False, candidates=cands).to_json()
    assert "reason_kind" in with_kinds["kernels"][M1]["targets"]["cpu"]
    plain = rewrite(PRE_KINDS, tmp_path / "kinds.tar.zst", index=lambda d: (d.clear(), d.update(with_kinds)))
    reworded = json.loads(json.dumps(with_kinds))
    _reworded(reworded)
    other = rewrite(PRE_KINDS, tmp_path / "reworded.tar.zst", index=lambda d: (d.clear(), d.update(reworded)))

    def states(path):
        data = from_bundle(path)
        cells = {(k.key, t): cell_state(c).state for k in data.kernels for t, c in k.cells.items()}
        fails = {kind: [(k.key, t, i) for k, t, i, _ in impl_failures(data, kind)] for kind in ("build", "validation")}
        ix = BundleIndex.from_json(read_archive(path).index)
        cands = {(key, t, n): (c.status, candidate_status(c.reason) if n != te.selected and c.reason else c.status)
                 for key, k in ix.kernels.items() for t, te in k.targets.items()
                 for n, c in (te.candidates or {}).items()}
        routes = {(key, t): Decision.from_target_record(te).torch_calls for key, k in ix.kernels.items()
                  for t, te in k.targets.items()}
        return cells, fails, cands, routes

    assert states(plain) == states(other)
    assert states(other)[1]["validation"]  # the failures are still found, by kind


def test_eager_routing_reads_the_kind():
    failed = Reason(Kind.EAGER_FAILED, "anything")
    unvalidated = Reason(Kind.EAGER_NOT_VALIDATED, "anything")
    assert torch_calls_text(None, failed) == "the kernel (torch eager fails validation)"
    assert torch_calls_text(None, unvalidated) == "the kernel (torch eager not validated)"


@pytest.mark.parametrize("text, kind", [
    ("compile failed: x", Kind.COMPILE_FAILED), ("export unavailable: y", Kind.EXPORT_UNAVAILABLE),
    ("least modelled traffic is manual+fused's (...): not compiled", Kind.NOT_COMPILED),
    ("failed validation: z", Kind.VALIDATION_FAILED), ("validation error: w", Kind.VALIDATION_ERROR),
    ("not validated (not run: no device)", Kind.NOT_VALIDATED), ("slower: 2 us vs 1 us (aten)", Kind.SLOWER),
    ("within 3% of manual (...): default manual kept", Kind.DEFAULT_KEPT), ("not selected: x", Kind.NOT_SELECTED),
    ("default until measured: not run: no device (gfx942)", Kind.UNMEASURED),
    ("torch eager not validated (it was faster: ...)", Kind.EAGER_NOT_VALIDATED),
    ("torch eager failed validation: ...", Kind.EAGER_FAILED), ("words nobody wrote", Kind.UNKNOWN)])
def test_legacy_words_map_to_kinds(text, kind):
    assert legacy_kind(text) is kind


def test_no_reason_is_read_by_its_words_outside_the_legacy_mapping():
    """The rule, checked on the source: ``legacy_kind`` (reasons.py) is the only place a
    reason's text is matched; nothing else calls it, or startswith on a reason."""
    pkg = REPO / "boo_build"
    callers = []
    for path in sorted(pkg.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name == "legacy_kind" and path.name != "reasons.py":
                    callers.append(str(path.relative_to(REPO)))
                if name == "startswith" and isinstance(node.func, ast.Attribute):
                    target = ast.unparse(node.func.value)
                    if "reason" in target or "rejected" in target or target in ("why", "r"):
                        callers.append(f"{path.relative_to(REPO)}: {ast.unparse(node)}")
    assert callers == [], callers


def test_the_fixture_is_what_its_manifest_says():
    ix = json.loads(read_archive(PRE_KINDS).members["bundle.json"])
    assert ix["name"] == "pre-kinds" and sorted(ix["kernels"]) == [M1, M14]
    assert not any(k in json.dumps(ix) for k in ('"reason_kind"', '"rejected_kinds"', '"kind"'))
    assert Path(str(PRE_KINDS).replace("-0.1.0.tar.zst", ".toml")).is_file()
