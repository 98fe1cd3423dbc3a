"""RMS norm with a weight offset (Gemma's ``x * rsqrt(mean(x**2) + eps) * (1 + weight)``):
the signature field and its key, manifest errors, the bundle format, the loader's calls
and fallbacks, and a Gemma causal LM traced, built and swapped, trained eagerly and
under ``torch.compile`` at a size the trace never saw.

The model is transformers' ``GemmaForCausalLM`` (tiny config, random weights) where
transformers is installed, else a look-alike written as transformers writes Gemma
(its ``GemmaRMSNorm`` is ``helpers.GemmaRMSNorm``); the test's id says which ran."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from helpers import GemmaRMSNorm, assert_close, boo, compiles, errors_of

from boo_build.errors import SignatureError
from boo_build.loader import BundleFormatError, KernelNotFound, open_bundle
from boo_build.loader import format as bundle_format
from boo_build.loader.nn import RMSNorm, replace_norms
from boo_build.signature import KernelSignature
from boo_build.trace import record_norms

HIDDEN, HEADS, LAYERS, VOCAB = 64, 2, 2, 96
TRACED = ((2, 8), (1, 6))  # (batch, seq) the trace runs: two sizes, so the entries are dynamic
UNTRACED = (3, 5)


def _sig(**kw) -> KernelSignature:
    fields = dict(op="rms_norm", input_shape=(2, 8, 64), normalized_shape=(64,), dtype="bfloat16", mask=6,
                  eps=1e-6, bias=False, weight_offset=1.0)
    return KernelSignature(**{**fields, **kw})


# ------------------------------------------------------------ the signature
def test_the_offset_is_part_of_the_key_and_the_json():
    s = _sig()
    assert s.key == "rms_norm-bf16-2x8x64-n64-w-eps1em06-off1.0-m6"
    assert KernelSignature.parse(s.key) == s and KernelSignature.from_json(s.to_json()) == s
    assert _sig(weight_offset=-0.5).key.endswith("-offn0.5-m6") and _sig(weight_offset=2).weight_offset == 2.0
    assert KernelSignature.parse(_sig(weight_offset=-0.5).key).weight_offset == -0.5
    plain = _sig(weight_offset=0)
    assert "off" not in plain.key and "weight_offset" not in plain.to_json()  # as before the field existed
    assert plain != s and plain.key != s.key  # kernels of another offset never serve a call
    with pytest.raises(SignatureError, match="not canonical"):
        KernelSignature.parse("rms_norm-bf16-2x8x64-n64-w-eps1em06-off1-m6")
    for bad, why in ((float("nan"), "finite"), ("1", "a number"), (True, "a number")):
        with pytest.raises(SignatureError, match=why):
            _sig(weight_offset=bad)
    with pytest.raises(SignatureError, match="layer_norm takes no weight_offset"):
        KernelSignature("layer_norm", (2, 64), (64,), "float32", 1, weight_offset=1.0)
    with pytest.raises(SignatureError, match="needs a weight"):
        _sig(affine=False, mask=2)


def test_manifest_errors_name_a_bad_offset(tmp_path):
    entry = '[[kernels]]\nop = "{op}"\ninput_shape = [8, 64]\nweight_offset = {off}\n'
    (err,) = errors_of(tmp_path, entry.format(op="layer_norm", off=1.0))
    assert "layer_norm takes no weight_offset" in err and "remove it" in err, err
    (err,) = errors_of(tmp_path, entry.format(op="rms_norm", off='"one"'))
    assert "weight_offset must be a number" in err and "'one'" in err, err
    (err,) = errors_of(tmp_path, entry.format(op="rms_norm", off="inf"))
    assert "weight_offset must be a finite number" in err, err
    (err,) = errors_of(tmp_path, entry.format(op="rms_norm", off=1.0) + "affine = false\nmasks = [1, 2]\n")
    assert "weight_offset 1.0 needs a weight (affine = true)" in err, err


# ------------------------------------------------------------ the model
class _Layer(torch.nn.Module):
    """One decoder layer as Gemma's: norm, attention, residual; norm, gated GELU MLP, residual."""

    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = GemmaRMSNorm(HIDDEN), GemmaRMSNorm(HIDDEN)
        self.qkv, self.o = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False), torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate_up = torch.nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN, bias=False)

    def forward(self, h):
        b, s, _ = h.shape
        q, k, v = self.qkv(self.input_layernorm(h)).view(b, s, 3, HEADS, -1).transpose(1, 3).unbind(2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.o(a.transpose(1, 2).reshape(b, s, HIDDEN))
        gate, up = self.gate_up(self.post_attention_layernorm(h)).chunk(2, dim=-1)
        return h + self.down(torch.nn.functional.gelu(gate, approximate="tanh") * up)


class GemmaLikeForCausalLM(torch.nn.Module):
    """Gemma's causal LM, small: scaled embeddings, the layers, a final norm, tied head."""

    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(_Layer() for _ in range(LAYERS))
        self.norm = GemmaRMSNorm(HIDDEN)

    def forward(self, input_ids, labels):
        h = self.embed_tokens(input_ids) * torch.tensor(math.sqrt(HIDDEN), dtype=self.embed_tokens.weight.dtype)
        for layer in self.layers:
            h = layer(h)
        logits = self.norm(h) @ self.embed_tokens.weight.t()
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())


def _which() -> str:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "lookalike"
    return "transformers"


def _model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    if _which() == "transformers":
        from transformers import GemmaConfig, GemmaForCausalLM

        model = GemmaForCausalLM(GemmaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=1, head_dim=HIDDEN // HEADS, max_position_embeddings=64,
            attn_implementation="eager"))
    else:
        model = GemmaLikeForCausalLM()
    with torch.no_grad():  # trained norm weights: Gemma's start at zeros, which would hide the offset
        for m in model.modules():
            if type(m).__name__ == "GemmaRMSNorm":
                m.weight.normal_(0, 0.3)
    return model.to(dtype)


def _loss(model, batch: int, seq: int) -> torch.Tensor:
    ids = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(batch * 100 + seq))
    out = model(input_ids=ids, labels=ids)
    return out if isinstance(out, torch.Tensor) else out.loss


DTYPES = (torch.float32, torch.bfloat16)


@pytest.fixture(scope="module")
@compiles
def gemma_bundle(tmp_path_factory) -> Path:
    """The model's norms traced at two sizes (float32 and bfloat16 training steps), the
    manifest written (dynamic entries only) and built for the CPU."""
    tmp = tmp_path_factory.mktemp("gemma")
    with record_norms(rms_classes=["GemmaRMSNorm"], source="test_gemma") as rec:
        for dt in DTYPES:
            model = _model(dt)
            for size in TRACED:
                _loss(model, *size).backward()
    text = rec.write(tmp / "gemma.toml", name="gemma-norms", targets=["cpu"], static=0)
    assert "weight_offset = 1.0" in text and not rec.unrecorded, (text, rec.unrecorded)
    boo("build", str(tmp / "gemma.toml"), "--out", str(tmp / "out"), "--no-bench", "-q", cwd=tmp)
    return tmp / "out" / "gemma-norms-0.1.0.tar.zst"


def _check_against(model, ref, dtype: str, what: str) -> None:
    loss, ref_loss = _loss(model, *UNTRACED), _loss(ref, *UNTRACED)
    loss.backward()
    ref_loss.backward()
    assert_close(loss.detach(), ref_loss.detach(), dtype, f"{what} loss")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, dtype, f"{what} grad of {name}")
    model.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)


@pytest.mark.build
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # transformers' own, where it is installed
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: f"{_which()}-{str(d).removeprefix('torch.')}")
def test_gemma_trains_through_offset_kernels_eagerly_and_compiled(gemma_bundle, dtype):
    b = open_bundle(gemma_bundle, device="local-task")
    assert b.index["format_version"] == bundle_format.OFFSET_FORMAT_VERSION == 4
    model, ref = _model(dtype), _model(dtype)
    report = replace_norms(model, b, rms_classes=["GemmaRMSNorm"])
    assert len(report.replaced) == 2 * LAYERS + 1 and not report.left, report
    assert all(isinstance(m, RMSNorm) and m.weight_offset == 1.0 for m in model.modules()
               if isinstance(m, torch.nn.RMSNorm))
    name = str(dtype).removeprefix("torch.")
    _check_against(model, ref, name, "eager")
    eager = b.stats(totals=True)
    assert eager["misses"] == 0 and eager["dynamic_hits"] == 2 * (2 * LAYERS + 1), eager  # forward, backward

    compiled = torch.compile(model)
    _check_against(compiled, ref, name, "compiled")
    after = b.stats(totals=True)
    assert after["misses"] == 0 and after["dynamic_hits"] == 2 * eager["dynamic_hits"], after
    code = "bf16" if dtype == torch.bfloat16 else "f32"
    assert {k for k, v in b.stats().items() if v["hits"]} == {
        f"rms_norm-{code}-BATCHxSEQx64-n64-w-eps1em06-off1.0-m{m}" for m in (1, 6)}


# ------------------------------------------------------------ the bundle and the loader
@pytest.mark.build
def test_older_loaders_refuse_an_offset_bundle_and_calls_need_their_offset(gemma_bundle, monkeypatch):
    b = open_bundle(gemma_bundle, device="local-task")
    x, w = torch.randn(3, 5, 64), torch.randn(64) * 0.3
    # a call without the offset is another norm: no kernel of this bundle serves it
    with pytest.raises(KernelNotFound, match="rms_norm-f32-3x5x64-n64-w-eps1em06-m1"):
        b.fused_rms_norm(x, [64], w, 1e-6)
    y, rstd = b.fused_rms_norm(x, [64], w, 1e-6, 1.0)
    gemma = GemmaRMSNorm(64)
    with torch.no_grad():
        gemma.weight.copy_(w)
        assert_close(y, gemma(x), "float32", "offset forward")
    # a dtype no kernel takes runs torch's op with the same offset math (fallback="eager")
    h = x.half()
    with torch.no_grad():
        gemma.half()
        y16, _ = b.with_fallback("eager").fused_rms_norm(h, [64], w.half(), 1e-6, 1.0)
        assert_close(y16, gemma(h), "float16", "fallback forward")
        hr = h.clone().requires_grad_()
    with torch.enable_grad():
        wr = gemma.weight
        gy = torch.randn_like(h)
        dx, dw = torch.autograd.grad(gemma(hr), (hr, wr), gy)
    _, rstd16 = b.with_fallback("eager").fused_rms_norm(h, [64], w.half(), 1e-6, 1.0)
    gx, gw = b.with_fallback("eager").fused_rms_norm_backward(gy, h, [64], rstd16, w.half(), (True, True), 1.0,
                                                              eps=1e-6)
    assert_close(gx, dx, "float16", "fallback input gradient")
    assert_close(gw, dw, "float16", "fallback weight gradient")
    with pytest.raises(ValueError, match="weight_offset must be a finite number"):
        b.fused_rms_norm(x, [64], w, 1e-6, float("nan"))
    # a loader that reads formats 1-3 (before weight offsets) refuses it, naming the upgrade
    monkeypatch.setattr(bundle_format, "READABLE_VERSIONS", (1, 2, 3))
    with pytest.raises(BundleFormatError, match="format version 4 is not supported.*upgrade boo-build"):
        open_bundle(gemma_bundle)


def test_nn_rmsnorm_with_an_offset_starts_at_the_identity_scale():
    m = RMSNorm(8, eps=1e-6, weight_offset=1.0)
    assert torch.equal(m.weight, torch.zeros(8)) and "weight_offset=1.0" in repr(m)
    assert torch.equal(RMSNorm(8).weight, torch.ones(8)) and "weight_offset" not in repr(RMSNorm(8))
    with pytest.raises(ValueError, match="needs a weight"):
        RMSNorm(8, weight_offset=1.0, elementwise_affine=False)
    assert copy.deepcopy(m).weight_offset == 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_implementation_and_variant_scales_by_offset_plus_weight(dtype):
    """Each export's torch code (both implementations; the CPU ``lanes`` forward, the GPU
    ``fused`` backward), run in torch, against the float64 reference of ``offset + weight``;
    and the plain norm's result is not within tolerance of it (the offset is not lost)."""
    from boo_build.ops.base import FUSED, LANES
    from boo_build.signature import ModuleId
    from boo_build.stages.reference import reference
    from boo_build.stages.torch_modules import make_module, sample_args

    for mask, variant in ((1, ""), (1, LANES), (6, ""), (6, FUSED), (2, FUSED), (4, "")):
        sig = _sig(dtype=dtype, mask=mask, input_shape=(4, 64))
        args = sample_args(sig, seed=1)
        expected = reference(sig, args)
        plain = reference(sig.replace(weight_offset=0.0), args)
        for impl in ("aten", "manual"):
            if variant and impl == "aten":
                continue
            with torch.no_grad():
                got = make_module(ModuleId(sig, impl), variant)(*args)
            for g, e in zip(got, expected):
                assert_close(g, e, dtype, f"{sig.key} {impl}+{variant}")
            if mask != 4:  # the weight gradient alone does not depend on the weight
                assert not torch.allclose(got[0].double(), plain[0], rtol=0.05, atol=0.05), (sig.key, impl, variant)
