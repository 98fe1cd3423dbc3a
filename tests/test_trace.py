"""boo_build.trace and ``boo-build trace``: a model's norm calls -> the manifest
of their kernels -> a bundle that serves the swapped model with no miss."""

from __future__ import annotations

import copy
import sys
import textwrap
import threading
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    F32_EPS,
    LOOKALIKES,
    REPO,
    GemmaRMSNorm,
    LayerNorm1P,
    LlamaRMSNorm,
    RMSNormGated,
    assert_close,
    boo,
    boo_main,
    compiles,
)

from boo_build.loader import open_bundle
from boo_build.loader.nn import replace_norms
from boo_build.manifest import parse_toml
from boo_build.ops.base import FORWARD
from boo_build.signature import KernelSignature
from boo_build.trace import DEFAULT_TARGETS, RecordedCall, from_misses, plan, record_norms
from boo_build.trace.manifest_text import manifest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "trace"
sys.path.insert(0, str(FIXTURES))
import trace_model  # noqa: E402

TRACED_SIZES = ("2x5", "3x4")
THIRD = (4, 7)  # never traced


def _keys(rec) -> dict[str, int]:
    return {c.signature.key: c.calls for c in rec.calls}


def _ln(shape, mask, dtype="float32", res=False):
    return KernelSignature("layer_norm", shape, (16,), dtype, mask, residual=res).key


def _rms(shape, mask, eps=1e-6, dtype="float32", res=False):
    return KernelSignature("rms_norm", shape, (16,), dtype, mask, eps=eps, bias=False, residual=res).key


# ------------------------------------------------------------ the whole workflow
@pytest.fixture(scope="module")
@compiles
def traced(tmp_path_factory):
    """``boo-build trace`` of the training script at two sizes, then ``boo-build build`` for cpu."""
    tmp = tmp_path_factory.mktemp("trace")
    out = tmp / "model.toml"
    # --no-fuse-adds: the plain kernels only (the fused form's trace and build: tests/test_hand_written_norms.py)
    proc = boo("trace", "--out", str(out), "--targets", "cpu", "--static", "1", "--no-fuse-adds",
               "--rms-class", "trace_model.LlamaRMSNorm", str(FIXTURES / "train.py"), *TRACED_SIZES, cwd=tmp)
    build = boo("build", str(out), "--out", str(tmp / "out"), "--no-bench", "-q", cwd=tmp)
    return out, proc, tmp / "out" / "train-norms-0.1.0.tar.zst", build


def test_trace_writes_a_manifest_that_builds_and_serves_a_new_size(traced):
    out, proc, bundle_path, _ = traced
    assert "step 2x5 loss" in proc.stdout and "step 3x4 loss" in proc.stdout  # the script ran, with its argv
    assert f"wrote {out}" in proc.stdout and _ln((2, 5, 16), 14) in proc.stdout, proc.stdout
    text = out.read_text()
    m = parse_toml(text, out)
    assert m.bundle.name == "train-norms" and m.bundle.targets == ("cpu",)
    # per norm family (two LayerNorm + F.layer_norm; RMSNorm + the Llama class): dynamic + the top static shape
    assert sorted(s.key for s in m.signatures) == sorted(
        [_ln(("batch", "seq", 16), k) for k in (1, 14)] + [_ln((2, 5, 16), k) for k in (1, 14)]
        + [_rms(("batch", "seq", 16), k) for k in (1, 6)] + [_rms((2, 5, 16), k) for k in (1, 6)])
    assert text.startswith("# Recorded by boo-build trace") and "# 6 recorded calls: mask 1 x3, mask 14 x3" in text

    bundle = open_bundle(bundle_path, device="local-task", prefer_eager=False)
    torch.manual_seed(0)
    ref = trace_model.Model()
    boo_model = copy.deepcopy(ref)
    report = replace_norms(boo_model, bundle, rms_classes=["trace_model.LlamaRMSNorm"])
    assert sorted(s.name for s in report.replaced) == ["ln1", "ln2", "out_norm", "rms"] and not report.left, report
    assert all(s.serves == "serves any input [..., 16] (dynamic kernels)" for s in report.replaced), report
    loss_ref, grads_ref = trace_model.train_step(ref, *THIRD)
    loss_boo, grads_boo = trace_model.train_step(boo_model, *THIRD)
    totals = bundle.stats(totals=True)
    assert totals["misses"] == 0 and totals["eager"] == 0, totals
    # the 4 swapped norms' forward and backward, through the dynamic kernels (F.layer_norm stays torch's)
    assert totals["dynamic_hits"] == 8 and totals["static_hits"] == 0, totals
    assert_close(torch.tensor(loss_boo), torch.tensor(loss_ref), "float32", "loss")
    assert grads_boo.keys() == grads_ref.keys()
    for name in grads_ref:
        assert_close(grads_boo[name], grads_ref[name], "float32", name)


def test_from_misses_writes_what_the_bundle_lacked(traced, tmp_path):
    """A deployed model on a bundle opened with fallback="eager": what it missed becomes a manifest."""
    _, _, bundle_path, _ = traced
    b = open_bundle(bundle_path, device="local-task", fallback="eager")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16, eps=1e-3))  # no kernel has eps 1e-3
    report = replace_norms(model, b)
    assert "fallback='eager'" in str(report) and "serves" not in str(report), report
    model(torch.randn(2, 3, 16)).sum().backward()
    b.native_layer_norm(torch.randn(2, 16, dtype=torch.float64), (16,), None, None, 1e-5)  # no kernel takes it
    rec = from_misses(b)
    # the forward missed; layer norm's backward kernels take any eps (it reads the saved rstd): a hit
    assert _keys(rec) == {KernelSignature("layer_norm", (2, 3, 16), (16,), "float32", 1, eps=1e-3).key: 1}
    assert [u.source for u in rec.unrecorded] == ["layer_norm:dtype=float64"]
    path = tmp_path / "missing.toml"
    rec.write(path, name="missing", targets=["cpu"])
    assert sorted(s.key for s in parse_toml(path.read_text(), path).signatures) == sorted(_keys(rec))


# ------------------------------------------------------------ what is recorded
def _record(model, fn, **kw):
    with record_norms(rms_classes=[trace_model.LlamaRMSNorm], **kw) as rec:
        fn(model)
    return rec


def test_frozen_weights_record_input_gradient_masks():
    torch.manual_seed(0)
    model = trace_model.Model()
    for p in [*model.ln1.parameters(), *model.ln2.parameters(), model.rms.weight, model.final_weight,
              model.final_bias, model.out_norm.weight]:
        p.requires_grad_(False)
    rec = _record(model, lambda m: trace_model.train_step(m, 2, 5))
    # ln2 and rms follow a residual add: the fused form; ln2's sum is used again (the next residual): its
    # backward takes grad_h; rms's is not: the plain backward of the sum
    s = (2, 5, 16)
    assert _keys(rec) == {_ln(s, 1): 2, _ln(s, 2): 2, _ln(s, 1, res=True): 1, _ln(s, 2, res=True): 1,
                          _rms(s, 1): 1, _rms(s, 1, res=True): 1, _rms(s, 2): 2}


def test_inference_records_forward_masks_only():
    torch.manual_seed(0)
    model = trace_model.Model()
    tokens, _ = trace_model.batch(3, 4)

    def infer(m):
        with torch.no_grad():
            m(tokens)
        with torch.inference_mode():
            m(tokens)

    s = (3, 4, 16)
    assert _keys(_record(model, infer)) == {_ln(s, 1): 4, _ln(s, 1, res=True): 2, _rms(s, 1): 2,
                                            _rms(s, 1, res=True): 2}
    # without fusion: the plain kernels of every norm
    assert _keys(_record(model, infer, fuse_adds=False)) == {_ln(s, 1): 6, _rms(s, 1): 4}


def test_eps_none_records_torchs_default_and_bfloat16_records_bfloat16():
    torch.manual_seed(0)
    model = trace_model.Model(rms_eps=None).to(torch.bfloat16)
    keys = _keys(_record(model, lambda m: trace_model.train_step(m, 2, 5)))
    # nn.RMSNorm(eps=None): float32's epsilon, for a bfloat16 input too (F.rms_norm's default)
    assert keys[_rms((2, 5, 16), 6, eps=F32_EPS, dtype="bfloat16")] == 1
    assert keys[_rms((2, 5, 16), 6, dtype="bfloat16")] == 1  # the Llama class, computing in float32
    assert keys[_ln((2, 5, 16), 14, dtype="bfloat16")] == 2
    assert keys[_ln((2, 5, 16), 14, dtype="bfloat16", res=True)] == 1  # ln2, after the residual add
    assert all(KernelSignature.parse(k).dtype == "bfloat16" for k in keys)


def test_functional_and_aten_calls_and_the_swapped_modules_dtype():
    """Every spelling of a norm is recorded once, in the dtype the swapped
    module's kernel runs in: float32 weights with a bfloat16 input (CPU autocast's
    mix) ask for the bfloat16 kernel."""
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    w = torch.randn(16)
    with record_norms() as rec:
        F.layer_norm(x.float(), [16], eps=1e-3)
        torch.layer_norm(x.float(), [16])
        torch.ops.aten.native_layer_norm(x.float(), [16], None, None, 1e-5)
        torch.ops.aten.native_layer_norm.default(x.float(), [16], None, None, 1e-5)
        F.rms_norm(x.float(), [16], None, 1e-6)
        torch.ops.aten._fused_rms_norm(x.float(), [16], None, 1e-6)
        torch.nn.LayerNorm(16)(x.float())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            F.layer_norm(x, [16], w, None)  # float32 weight: the swapped module casts it to bfloat16
        F.layer_norm(torch.randn(2, 16, dtype=torch.float64), [16])  # no kernel takes float64
    ln = lambda shape, eps=1e-5, dtype="float32", affine=False, bias=False: KernelSignature(  # noqa: E731
        "layer_norm", shape, (16,), dtype, FORWARD, eps=eps, affine=affine, bias=bias).key
    rms = KernelSignature("rms_norm", (3, 16), (16,), "float32", FORWARD, eps=1e-6, affine=False, bias=False).key
    assert _keys(rec) == {ln((3, 16), 1e-3): 1, ln((3, 16)): 3, rms: 2,
                          ln((3, 16), affine=True, bias=True): 1, ln((3, 16), dtype="bfloat16", affine=True): 1}
    sources = {c.signature.key: c.sources for c in rec.calls}
    assert sources[ln((3, 16))] == ("torch.layer_norm", "aten.native_layer_norm")
    assert sources[ln((3, 16), affine=True, bias=True)] == ("torch.nn.LayerNorm",)
    assert [(u.source, u.calls) for u in rec.unrecorded] == [("F.layer_norm", 1)]
    assert "float64" in rec.unrecorded[0].reason


def test_results_are_bit_identical_and_nothing_stays_installed():
    from torch.nn.modules import module as mm

    def state():
        return (torch._C._len_torch_function_stack(), len(mm._global_forward_hooks),
                len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks_always_called),
                torch._dynamo.eval_frame._stance.stance, F.layer_norm, F.rms_norm, torch.nn.LayerNorm.forward)

    import torch._dynamo  # noqa: F401  (what set_stance changes)

    before = state()
    torch.manual_seed(0)
    model = trace_model.Model()
    twin = copy.deepcopy(model)
    loss, grads = trace_model.train_step(model, 2, 5)
    with record_norms(rms_classes=["LlamaRMSNorm"]) as rec:
        loss2, grads2 = trace_model.train_step(twin, 2, 5)
        assert state() != before  # the mode, the hooks and the stance are on inside
    assert state() == before
    assert loss2 == loss and grads.keys() == grads2.keys() and all(torch.equal(grads[k], grads2[k]) for k in grads)
    n = len(rec)
    trace_model.train_step(twin, 3, 4)
    assert len(rec) == n > 0  # nothing recorded outside the context


def test_torchs_transformer_fast_path_runs_as_without_the_recorder():
    """nn.TransformerEncoderLayer's inference fast path (one fused op, no norm module
    called) is taken under the recorder as without it, as the swapped model takes it:
    nothing recorded, results bit for bit; in training its two LayerNorms are recorded."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    x = torch.randn(3, 5, 16)
    layer.eval()
    with torch.no_grad():
        ref = layer(x)
        with record_norms() as rec:
            out = layer(x)
    assert torch.equal(out, ref) and len(rec) == 0
    layer.train()
    with record_norms() as rec:
        layer(x.requires_grad_()).sum().backward()
    assert _keys(rec) == {_ln((3, 5, 16), 1): 2, _ln((3, 5, 16), 14): 2}


@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_other_threads_are_not_recorded_and_compiled_code_runs_eagerly():
    torch.manual_seed(0)
    model = trace_model.Model()
    tokens, _ = trace_model.batch(2, 3)
    compiled = torch.compile(model)
    with record_norms(rms_classes=["LlamaRMSNorm"]) as rec:
        t = threading.Thread(target=lambda: model(tokens))
        t.start()
        t.join()
        assert len(rec) == 0
        with torch.no_grad():
            compiled(tokens)  # torch.compile'd: run eagerly while recording, so every norm is seen
    s = (2, 3, 16)
    assert _keys(rec) == {_ln(s, 1): 2, _ln(s, 1, res=True): 1, _rms(s, 1): 1, _rms(s, 1, res=True): 1}


class _CountedGemma(GemmaRMSNorm):
    runs = 0

    def forward(self, x):
        type(self).runs += 1
        return super().forward(x)


class _Mixed(torch.nn.Module):
    """A Llama norm, Gemma's (a weight offset), two look-alikes, a torch LayerNorm and an
    F.layer_norm call, width 10."""

    def __init__(self):
        super().__init__()
        self.llama = LlamaRMSNorm(10, eps=F32_EPS)
        self.gemma, self.ln1p, self.gated = _CountedGemma(10), LayerNorm1P(10), RMSNormGated(10)
        self.ln = torch.nn.LayerNorm(10)

    def forward(self, x):
        h = self.ln1p(self.gemma(self.llama(x)))
        h = self.gated(h, x)
        return self.ln(F.layer_norm(h, [10]))


def test_lookalikes_are_checked_before_recording_and_function_calls_are_listed(built):
    torch.manual_seed(0)
    model = _Mixed()
    twin = copy.deepcopy(model)
    x = torch.randn(4, 6, 10) + 1
    ref = model(x.clone().requires_grad_())
    ref.sum().backward()
    _CountedGemma.runs = 0
    with record_norms(rms_classes=[LlamaRMSNorm, _CountedGemma, LayerNorm1P, RMSNormGated]) as rec:
        for _ in range(2):
            out = twin(x.clone().requires_grad_())
            out.sum().backward()
    assert torch.equal(out, ref)  # the checks change nothing the model computes
    assert _CountedGemma.runs == 2 + 3  # the model's two calls; the probe (once per module): its math, two more dtypes
    unrecorded = {u.source.rsplit(".", 1)[1]: u for u in rec.unrecorded}
    assert sorted(unrecorded) == ["LayerNorm1P", "RMSNormGated"], rec.unrecorded
    for name, cls in (("LayerNorm1P", LayerNorm1P), ("RMSNormGated", RMSNormGated)):
        u = unrecorded[name]
        assert u.calls == 2 and u.reason.startswith("named in rms_classes, but " + LOOKALIKES[cls]), u
        assert u.reason.endswith("(replace_norms leaves it)") and ";" not in u.reason  # one condition failed
    rms = KernelSignature("rms_norm", (4, 6, 10), (10,), "float32", 1, eps=F32_EPS, bias=False).key
    gemma = KernelSignature("rms_norm", (4, 6, 10), (10,), "float32", 1, eps=1e-6, bias=False, weight_offset=1).key
    ln_f = KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 1, affine=False, bias=False).key
    ln_m = KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 1).key
    assert {k: n for k, n in _keys(rec).items() if k.endswith("-m1")} == {rms: 2, gemma: 2, ln_f: 2, ln_m: 2}
    assert gemma.endswith("-off1.0-m1") and gemma.replace("-m1", "-m6") in _keys(rec)  # its backward too
    (fc,) = rec.function_calls()
    assert (fc.source, fc.op, fc.calls, fc.keys) == ("F.layer_norm", "layer_norm", 2, (ln_f,))
    assert ("not swappable F.layer_norm: 2 calls (1 kernel signature) are function calls, not modules: "
            "replace_norms cannot swap them; to serve them, hold a boo_build.loader.nn.LayerNorm") in rec.table()

    # replace_norms with the recording: the same list, beside what it swapped and left
    report = replace_norms(twin, open_bundle(built.path, device="local-task"),
                           rms_classes=[LlamaRMSNorm, _CountedGemma, LayerNorm1P, RMSNormGated], recording=rec)
    assert sorted(s.name for s in report.replaced) == ["llama", "ln"] and len(report.left) == 3, report
    # the bundle has no kernel of Gemma's offset: left, and why (the trace above recorded what to build)
    assert any(s.name == "gemma" and "weight offset 1" in s.reason for s in report.left), report
    assert report.function_calls == (fc,) and f"  not swappable {fc}" in str(report)
    assert "2 replaced, 3 left, 1 function not swappable" in str(report)
    assert replace_norms(copy.deepcopy(model), open_bundle(built.path, device="local-task")).function_calls == ()


# ------------------------------------------------------------ the manifest
def _calls(*items):
    return [RecordedCall(KernelSignature.parse(k), n, ("test",)) for k, n in items]


def test_dynamic_modes_and_the_most_called_static_shapes():
    calls = _calls(*[(_ln((b, 8, 16), 14), b) for b in (1, 2, 3, 4, 5, 6)], (_ln((2, 16), 1), 7))
    auto = plan(calls)
    assert [(e.input_shape, e.masks) for e in auto] == [
        (("batch", "seq", 16), (14,)), ((2, 16), (1,)), ((3, 8, 16), (14,)), ((4, 8, 16), (14,)),
        ((5, 8, 16), (14,)), ((6, 8, 16), (14,))]
    assert [e.input_shape for e in plan(calls, "always", static=0)] == [("batch", 16), ("batch", "seq", 16)]
    assert len(plan(calls, "never")) == 7 and not any(e.is_dynamic for e in plan(calls, "never"))
    text = manifest(calls, targets=["cpu"], static=2)
    keys = {s.key for s in parse_toml(text).signatures}
    assert keys == {_ln(("batch", "seq", 16), 14), _ln((6, 8, 16), 14), _ln((5, 8, 16), 14), _ln((2, 16), 1)}
    assert tomllib.loads(text)["bundle"]["targets"] == ["cpu"]
    assert tomllib.loads(manifest(calls))["bundle"]["targets"] == list(DEFAULT_TARGETS)


def test_default_targets_are_the_default_manifests():
    data = tomllib.loads((REPO / "manifests" / "default.toml").read_text())
    assert tuple(data["bundle"]["targets"]) == DEFAULT_TARGETS


def test_merge_adds_only_what_the_old_manifest_lacks(tmp_path):
    old = tmp_path / "old.toml"
    old.write_text(textwrap.dedent("""\
        # my manifest: keep this comment
        commands = ["layernorm -X 2x8x16 -F 1 -m 1"]   # the forward at 2x8x16, as a MIOpen line

        [bundle]
        name = "mine"
        version = "1.0.0"
        targets = ["cpu"]

        [[kernels]]
        op = "layer_norm"
        input_shape = ["b", "s", 16]   # other names: still any size
        dtype = ["float32", "bf16"]
        masks = [14]
        """))
    calls = _calls((_ln((2, 8, 16), 1), 3), (_ln((2, 8, 16), 14), 3), (_ln((3, 8, 16), 14), 1),
                   (_ln((3, 8, 16), 1), 1), (_rms((2, 8, 16), 1), 2))
    text = manifest(calls, merge=old, static=1)
    assert text.startswith(old.read_text().rstrip("\n"))
    new = {s.key for s in parse_toml(text).signatures} - {s.key for s in parse_toml(old.read_text()).signatures}
    # the forward's dynamic kernel and the RMS norm: the 2x8x16 forward is a command line, and the
    # dynamic backward (other names) and the static 2x8x16 one are served by the float32 one of the
    # old entry's dtype list
    assert new == {_ln(("batch", "seq", 16), 1), _rms((2, 8, 16), 1)}
    assert "\n# Added by boo-build trace" in text
    assert manifest(_calls((_ln((2, 8, 16), 1), 1)), merge=old) == old.read_text()  # nothing to add


# ------------------------------------------------------------ the CLI's failures
SCRIPTS = {
    "raises.py": """\
        import torch
        torch.nn.functional.layer_norm(torch.randn(2, 16), [16])
        def fail():
            raise ValueError("the script's own error")
        fail()
        """,
    "nonorm.py": "import torch\nprint(torch.ones(2).sum().item())\n",
    "two.py": """\
        import torch
        for rows in (2, 3):
            torch.nn.functional.layer_norm(torch.randn(rows, 16), [16])
        """,
}


def _script(tmp_path, name):
    p = tmp_path / name
    p.write_text(textwrap.dedent(SCRIPTS[name]))
    return p


def test_a_script_that_raises_still_writes_what_was_recorded(tmp_path):
    out = tmp_path / "m.toml"
    proc = boo_main("trace", "--out", str(out), "--targets", "cpu", str(_script(tmp_path, "raises.py")),
                    cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc
    assert "ValueError: the script's own error" in proc.stderr and 'in fail' in proc.stderr, proc.stderr
    assert "runpy" not in proc.stderr and "the script raised" in proc.stderr
    assert [s.key for s in parse_toml(out.read_text()).signatures] == [
        KernelSignature("layer_norm", (2, 16), (16,), "float32", 1, affine=False, bias=False).key]
    assert list(tmp_path.glob(".m.toml.*")) == []


def test_no_norm_call_writes_nothing(tmp_path):
    out = tmp_path / "m.toml"
    proc = boo_main("trace", "--out", str(out), str(_script(tmp_path, "nonorm.py")), cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "made no norm call: nothing written" in proc.stderr, proc
    assert "2.0" in proc.stdout and not out.exists()


def test_unknown_rms_class_and_unwritable_out(tmp_path):
    train = str(FIXTURES / "train.py")
    out = tmp_path / "m.toml"
    # a module.Class that names no class: refused before the script runs
    proc = boo_main("trace", "--out", str(out), "--rms-class", "trace_model.NoSuchNorm", train, cwd=tmp_path,
                    check=False)
    assert proc.returncode == 2 and "module 'trace_model' has no class 'NoSuchNorm'" in proc.stderr, proc
    assert "step" not in proc.stdout and not out.exists()
    # a bare name no module of the script has: known only after it ran, nothing written
    proc = boo_main("trace", "--out", str(out), "--targets", "cpu", "--rms-class", "LlamaRMSNorn", train, "2x3",
                    cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "--rms-class LlamaRMSNorn: no module of that class ran" in proc.stderr, proc
    assert not out.exists()
    # an --out that cannot be written (under a file, not a folder: refused even to root): before the script runs
    (tmp_path / "afile").write_text("x")
    proc = boo_main("trace", "--out", str(tmp_path / "afile" / "m.toml"), train, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "cannot write in" in proc.stderr, proc
    assert "step" not in proc.stdout and (tmp_path / "afile").read_text() == "x"


# ------------------------------------------------------------ replace_norms' report
def test_report_says_which_sizes_a_static_bundle_serves(built):
    """The session bundle holds static kernels only: the report says so, and what another size does."""
    for fallback, other in ((None, "raises KernelNotFound"),
                            ("eager", "runs torch's op (fallback='eager', counted as a miss)")):
        b = open_bundle(built.path, device="local-task", fallback=fallback)
        report = replace_norms(torch.nn.Sequential(torch.nn.LayerNorm(10)), b)
        (swapped,) = report.replaced
        assert swapped.serves == f"serves only input shape [4, 6, 10]: a call of another shape {other}", report
        assert swapped.serves in str(report)


@pytest.mark.slow
def test_the_recorder_imports_torch_only():
    """It runs in the application's process: no compiler, iree-turbine, doit or loader runtime; and the
    loader never imports it."""
    import subprocess

    code = ("import sys, boo_build.trace\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('doit', 'iree', 'dask')"
            " or m.startswith('boo_build.loader') or m.startswith('boo_build.stages'))\n"
            "assert not bad, bad\nassert 'torch' in sys.modules\n"
            "import boo_build.cli.trace\n"  # the CLI's package reads the loader's errors, nothing heavier
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('doit', 'iree', 'dask'))\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    from test_architecture import PACKAGE, import_graph

    graph = import_graph(PACKAGE)
    assert not [m for m in graph if m.startswith("boo_build.loader") and any(
        d.startswith("boo_build.trace") for d in graph[m])]


def test_merge_on_the_command_line(tmp_path):
    old = tmp_path / "old.toml"
    old.write_text('# keep me\n[bundle]\nname = "mine"\nversion = "1.0.0"\ntargets = ["cpu"]\n\n'
                   '[[kernels]]\nop = "layer_norm"\ninput_shape = [2, 16]\naffine = false\nmasks = [1]\n')
    out = tmp_path / "new.toml"
    proc = boo_main("trace", "--out", str(out), "--merge", str(old), "--static", "0",
                    str(_script(tmp_path, "two.py")), cwd=tmp_path)
    assert f"added to {old} and wrote {out}" in proc.stdout, proc.stdout
    text = out.read_text()
    assert text.startswith(old.read_text()) and old.read_text().startswith("# keep me")
    m = parse_toml(text, out)
    assert m.bundle.name == "mine" and sorted(s.key for s in m.signatures) == sorted(
        KernelSignature("layer_norm", shape, (16,), "float32", 1, affine=False, bias=False).key
        for shape in ((2, 16), ("batch", 16)))


# ------------------------------------------------------------ group norm
class ConvNet(torch.nn.Module):
    """Two ``nn.GroupNorm`` (one without affine parameters) and an ``F.group_norm``
    call in forward, of the first one's kernel form (its recorded sources are both)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.gn1 = torch.nn.GroupNorm(2, 8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.gn2 = torch.nn.GroupNorm(4, 8, affine=False)
        self.w = torch.nn.Parameter(1 + 0.1 * torch.randn(8))
        self.b = torch.nn.Parameter(0.1 * torch.randn(8))
        self.head = torch.nn.Linear(8 * 4 * 4, 5)
        with torch.no_grad():  # affine parameters away from 1 and 0
            self.gn1.weight.add_(0.1 * torch.randn(8))
            self.gn1.bias.add_(0.1 * torch.randn(8))

    def forward(self, x):
        h = F.silu(self.gn1(self.conv1(x)))
        h = F.silu(self.gn2(self.conv2(h)))
        h = F.group_norm(h, 2, self.w, self.b)
        return self.head(h.flatten(1))


def _conv_step(model, n, seed=0, lr=0.1):
    """One SGD step on a batch of ``n`` 3x4x4 images: (loss, gradients by parameter name)."""
    g = torch.Generator().manual_seed(seed)
    x, target = torch.randn(n, 3, 4, 4, generator=g), torch.randint(0, 5, (n,), generator=g)
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    return loss.item(), grads


def _gn(shape, mask, groups=2, affine=True, eps=1e-5, dtype="float32"):
    return KernelSignature("group_norm", shape, (), dtype, mask, groups=groups, eps=eps, affine=affine,
                           bias=affine).key


def _gn_record(model, fn):
    with record_norms() as rec:
        fn(model)
    return rec


@pytest.fixture(scope="module")
@compiles
def gn_traced(tmp_path_factory):
    """The conv net recorded training at batches 2 and 4, its manifest (dynamic
    entries only: 4 kernels) built for cpu."""
    tmp = tmp_path_factory.mktemp("gn_trace")
    torch.manual_seed(0)
    rec = _gn_record(ConvNet(), lambda m: [_conv_step(m, n) for n in (2, 4)])
    out = tmp / "gn.toml"
    rec.write(out, name="gn-trace", targets=["cpu"], static=0)
    boo("build", str(out), "--out", str(tmp / "out"), "--no-bench", "-q", cwd=tmp)
    return rec, out, tmp / "out" / "gn-trace-0.1.0.tar.zst"


def test_group_norm_is_recorded_and_its_bundle_trains_a_new_batch_size(gn_traced):
    rec, out, bundle_path = gn_traced
    want = {}
    for n in (2, 4):
        want |= {_gn((n, 8, 4, 4), 1): 2, _gn((n, 8, 4, 4), 14): 2,  # gn1 and F.group_norm
                 _gn((n, 8, 4, 4), 1, groups=4, affine=False): 1, _gn((n, 8, 4, 4), 2, groups=4, affine=False): 1}
    assert _keys(rec) == want and not rec.unrecorded
    assert {c.signature.key: set(c.sources) for c in rec.calls}[_gn((2, 8, 4, 4), 14)] == {
        "torch.nn.GroupNorm", "F.group_norm"}
    text = out.read_text()
    assert sorted(s.key for s in parse_toml(text, out).signatures) == sorted(
        [_gn(("batch", 8, 4, 4), m) for m in (1, 14)] + [_gn(("batch", 8, 4, 4), m, 4, False) for m in (1, 2)])
    entries = tomllib.loads(text)["kernels"]
    assert [(e["groups"], "normalized_shape" in e) for e in entries] == [(2, False), (4, False)]
    assert "# any batch size; recorded at 2 shapes: [2, 8, 4, 4] x4, [4, 8, 4, 4] x4" in text

    bundle = open_bundle(bundle_path, device="local-task", prefer_eager=False)
    torch.manual_seed(0)
    ref = ConvNet()
    boo_model = copy.deepcopy(ref)
    report = replace_norms(boo_model, bundle)
    assert [s.name for s in report.replaced] == ["gn1", "gn2"] and not report.left, report
    # dynamic in the batch only: the spatial sizes are the kernels' own
    assert all(s.serves == "serves input shape [batch, 8, 4, 4] (any batch): a call of another shape raises "
               "KernelNotFound" for s in report.replaced), report
    loss_ref, grads_ref = _conv_step(ref, 3, seed=1)
    loss_boo, grads_boo = _conv_step(boo_model, 3, seed=1)
    totals = bundle.stats(totals=True)
    assert totals["misses"] == 0 and totals["eager"] == 0, totals
    # the 2 swapped norms' forward and backward, through the dynamic kernels (F.group_norm stays torch's)
    assert totals["dynamic_hits"] == 4 and totals["static_hits"] == 0, totals
    assert_close(torch.tensor(loss_boo), torch.tensor(loss_ref), "float32", "loss")
    assert grads_boo.keys() == grads_ref.keys() and "gn1.weight" in grads_ref
    for name in grads_ref:
        assert_close(grads_boo[name], grads_ref[name], "float32", name)
    # other spatial dims: no kernel (the batch only is dynamic); with fallback="eager" a miss,
    # which from_misses turns into the static group-norm signature
    b = open_bundle(bundle_path, device="local-task", fallback="eager")
    norm = copy.deepcopy(ref.gn2)
    assert [s.name for s in replace_norms(norm, b).replaced] == [""]
    norm(torch.randn(2, 8, 2, 2))
    assert _keys(from_misses(b)) == {_gn((2, 8, 2, 2), 1, 4, False): 1}


def test_group_norm_masks_follow_what_requires_grad():
    torch.manual_seed(0)
    model = ConvNet()
    for p in (model.gn1.weight, model.gn1.bias, model.w, model.b):
        p.requires_grad_(False)
    # frozen weights: the input gradient only (mask 2), as the swapped module's backward asks
    assert _keys(_gn_record(model, lambda m: _conv_step(m, 2))) == {
        _gn((2, 8, 4, 4), 1): 2, _gn((2, 8, 4, 4), 2): 2,
        _gn((2, 8, 4, 4), 1, 4, False): 1, _gn((2, 8, 4, 4), 2, 4, False): 1}
    # an input that needs no gradient (a frozen first conv): gn1's weight and bias gradients only
    for p in model.conv1.parameters():
        p.requires_grad_(False)
    for p in (model.gn1.weight, model.gn1.bias):
        p.requires_grad_(True)
    keys = _keys(_gn_record(model, lambda m: _conv_step(m, 2)))
    assert keys[_gn((2, 8, 4, 4), 12)] == 1 and keys[_gn((2, 8, 4, 4), 2)] == 1  # gn1; F.group_norm
    x = torch.randn(3, 3, 4, 4)

    def infer(m):
        with torch.no_grad():
            m(x)
        with torch.inference_mode():
            m(x)

    assert _keys(_gn_record(model, infer)) == {_gn((3, 8, 4, 4), 1): 4, _gn((3, 8, 4, 4), 1, 4, False): 2}


def test_group_norm_spellings_and_the_swapped_modules_dtype():
    x = torch.randn(2, 8, 3)
    w = torch.randn(8)
    with record_norms() as rec:
        F.group_norm(x, 4, eps=1e-3)
        torch.group_norm(x, 4)
        torch.native_group_norm(x, None, None, 2, 8, 3, 4, 1e-5)
        torch.ops.aten.group_norm(x, 4)
        torch.ops.aten.native_group_norm.default(x, None, None, 2, 8, 3, 4, 1e-5)
        torch.nn.GroupNorm(4, 8)(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # float32 weights: cast to the bfloat16 input's dtype
            torch.nn.GroupNorm(2, 8)(x.bfloat16())
            F.group_norm(x.bfloat16(), 2, w)  # weight only
        F.group_norm(x.double(), 4)  # no kernel takes float64
        F.group_norm(torch.randn(1, 8, 1, 1, 1, 2), 4)  # 4 spatial dims: no kernel
    assert _keys(rec) == {_gn((2, 8, 3), 1, 4, False, eps=1e-3): 1, _gn((2, 8, 3), 1, 4, False): 4,
                          _gn((2, 8, 3), 1, 4): 1, _gn((2, 8, 3), 1, dtype="bfloat16"): 1,
                          KernelSignature("group_norm", (2, 8, 3), (), "bfloat16", 1, groups=2, bias=False).key: 1}
    sources = {c.signature.key: c.sources for c in rec.calls}
    assert sources[_gn((2, 8, 3), 1, 4, False)] == (
        "torch.group_norm", "torch.native_group_norm", "aten.group_norm", "aten.native_group_norm")
    assert [(u.source, u.calls) for u in rec.unrecorded] == [("F.group_norm", 1), ("F.group_norm", 1)]
    assert {"float64" in u.reason or "0 to 3 spatial dims" in u.reason for u in rec.unrecorded} == {True}


def test_group_norm_entries_dynamic_by_batch_and_merge(tmp_path):
    calls = _calls((_gn((2, 8, 4, 4), 14), 3), (_gn((4, 8, 4, 4), 14), 1), (_gn((2, 8, 6, 6), 1), 2),
                   (_gn((2, 8, 4, 4), 14, groups=4), 1))
    # a batch seen at two sizes: a dynamic batch; other spatial dims or groups: their own (static) entries
    assert [(e.input_shape, e.groups, e.masks) for e in plan(calls, static=1)] == [
        (("batch", 8, 4, 4), 2, (14,)), ((2, 8, 4, 4), 2, (14,)), ((2, 8, 6, 6), 2, (1,)), ((2, 8, 4, 4), 4, (14,))]
    assert {e.input_shape for e in plan(calls, "always", static=0)} == {
        ("batch", 8, 4, 4), ("batch", 8, 6, 6)}
    old = tmp_path / "old.toml"
    old.write_text(textwrap.dedent("""\
        commands = ["groupnorm -n 2 -c 8 -H 6 -W 6 -g 2 -F 1 -m 1"]

        [bundle]
        name = "mine"
        version = "1.0.0"
        targets = ["cpu"]

        [[kernels]]
        op = "group_norm"
        input_shape = ["n", 8, 4, 4]   # another name: still any batch
        groups = 2
        masks = [14]
        """))
    text = manifest(calls, merge=old, static=1)
    new = {s.key for s in parse_toml(text).signatures} - {s.key for s in parse_toml(old.read_text()).signatures}
    assert new == {_gn((2, 8, 4, 4), 14, groups=4)}
    assert manifest(calls[:3], merge=old) == old.read_text()
