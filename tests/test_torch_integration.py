"""Torch integration: the ``boo`` custom ops under torch.compile (Inductor) and
torch.export, ``replace_norms``, inference and autocast, dynamic batch sizes,
a clean interpreter exit, and the README example. Real kernels, width 10
(and the README's 768), a couple of layers: Inductor compiles cost seconds."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys

import pytest
import torch
from helpers import (
    F32_EPS,
    LOOKALIKES,
    REPO,
    CohereLayerNorm,
    GemmaRMSNorm,
    LayerNorm1P,
    LlamaRMSNorm,
    RMSNormGated,
    _ln,
    _rms32,
    assert_close,
    compiles,
    with_extra_kernels,
)
from torch._dynamo.testing import CompileCounterWithBackend

from boo_build.loader import nn as boo_nn
from boo_build.loader import open_bundle
from boo_build.signature import KernelSignature

W = 10
# Kernels besides the session's (static float32 4x6x10, every mask the tests use):
EXTRA = [
    (KernelSignature("layer_norm", (4, 6, W), (W,), "bfloat16", 1), "aten"),  # autocast
    (KernelSignature("rms_norm", (4, 6, W), (W,), "bfloat16", 1, eps=F32_EPS, bias=False), "aten"),
    (KernelSignature("layer_norm", ("rows", W), (W,), "float32", 1, max_elements=1 << 16), "manual"),  # any batch
    (KernelSignature("layer_norm", (8, 128, 768), (768,), "float32", 1), "manual"),  # the README example
    (KernelSignature("layer_norm", (8, 128, 768), (768,), "float32", 14), "manual"),
]
DYN = EXTRA[2][0]


@pytest.fixture(scope="module")
@compiles
def path(tmp_path_factory):
    """One CPU bundle: the session's kernels and EXTRA."""
    return with_extra_kernels(tmp_path_factory, EXTRA, "torch-norms")


class Net(torch.nn.Module):
    """Linear -> LayerNorm -> tanh -> Linear -> RMSNorm (eps None) -> Linear, width 10."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = (torch.nn.Linear(W, W) for _ in range(3))
        self.ln, self.rms = torch.nn.LayerNorm(W), torch.nn.RMSNorm(W)
        with torch.no_grad():  # non-trivial affine parameters
            for p in (self.ln.weight, self.ln.bias, self.rms.weight):
                p.add_(0.3 * torch.randn_like(p))

    def forward(self, x):
        return self.fc3(self.rms(self.fc2(torch.tanh(self.ln(self.fc1(x))))))


def _net(seed=0) -> Net:
    torch.manual_seed(seed)
    return Net()


def _grads_and_out(model, x, gy):
    model.zero_grad(set_to_none=True)
    y = model(x)
    (y * gy).sum().backward()
    return [y.detach()] + [p.grad for p in model.parameters() if p.requires_grad]


# ---------------------------------------------------------------- compile
def test_compile_fullgraph_trains_like_torch(path):
    """torch.compile(fullgraph=True), Inductor: outputs and gradients within 4x
    torch float32's own error against a float64 copy, the bundle's forward and
    ONE combined backward kernel per norm; with frozen norm weights, only the
    input-gradient kernels."""
    b = open_bundle(path, device="local-task")
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(1)
    x, gy = torch.randn(4, 6, W, generator=g), torch.randn(4, 6, W, generator=g)
    for frozen in (False, True):
        ref = _net()
        for m in (ref.ln, ref.rms):
            for p in m.parameters():
                p.requires_grad_(not frozen)
        f64, boo = copy.deepcopy(ref).double(), copy.deepcopy(ref)
        report = boo_nn.replace_norms(boo, b)
        assert [s.name for s in report.replaced] == ["ln", "rms"] and not report.left, report
        b.reset_stats()
        got = _grads_and_out(torch.compile(boo, fullgraph=True), x, gy)
        want = _grads_and_out(ref, x, gy)
        exact = _grads_and_out(f64, x.double(), gy.double())
        assert len(got) == len(want) == len(exact) == (1 + 6 if frozen else 1 + 9)
        for i, (o, t, e) in enumerate(zip(got, want, exact)):
            err_torch = (t.double() - e).abs().max().item()
            floor = torch.finfo(torch.float32).eps * e.abs().max().item()
            err = (o.double() - e).abs().max().item()
            assert err <= 4 * max(err_torch, floor), f"frozen={frozen} output {i}: {err:.3g} vs torch {err_torch:.3g}"
        masks = (2, 2) if frozen else (14, 6)
        assert b.stats() == {k.key: {"hits": 1, "misses": 0, "eager": 0}
                             for k in (_ln(1), _ln(masks[0]), _rms32(1), _rms32(masks[1]))}


def test_dynamic_batch_sizes_compile_once(path):
    """dynamic=True: symbolic batch sizes trace through the ops' fake
    implementations, one graph serves every size, the dynamic kernel runs."""
    b = open_bundle(path, device="local-task")
    torch._dynamo.reset()
    ref = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.LayerNorm(W))
    boo = copy.deepcopy(ref)
    boo_nn.replace_norms(boo, b)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(boo, backend=counter, dynamic=True, fullgraph=True)
    compiles = []
    with torch.no_grad():
        for batch in (2, 3, 5, 7):
            x = torch.randn(batch, 6, W)
            torch.testing.assert_close(compiled(x), ref(x), atol=1e-5, rtol=1e-5)
            compiles.append(counter.frame_count)
    assert compiles[0] >= 1 and compiles[1:] == compiles[:1] * 3, compiles  # no compile after the first size
    assert b.stats() == {DYN.key: {"hits": 4, "misses": 0, "eager": 0}}


def test_a_kernel_of_another_rank_serves_repeated_calls(path):
    """A 3-d call served by the 2-d dynamic kernel: its arguments and results are
    viewed in the kernel's shapes and back, on the checked first call and on the
    later ones that run from the call's key alone."""
    b = open_bundle(path, device="local-task")
    g = torch.Generator().manual_seed(4)
    x, w, bias = torch.randn(3, 5, W, generator=g), torch.randn(W, generator=g), torch.randn(W, generator=g)
    ref = torch.ops.aten.native_layer_norm(x, [W], w, bias, 1e-5)
    outs = [b.native_layer_norm(x, (W,), w, bias, 1e-5) for _ in range(3)]
    for out in outs:
        assert [tuple(o.shape) for o in out] == [(3, 5, W), (3, 5, 1), (3, 5, 1)]
        assert all(torch.equal(o, r) for o, r in zip(out, outs[0]))
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert b.stats() == {DYN.key: {"hits": 3, "misses": 0, "eager": 0}}


def test_export_holds_the_boo_ops(path):
    b = open_bundle(path, device="local-task")
    boo = _net()
    boo_nn.replace_norms(boo, b)
    x = torch.randn(4, 6, W)
    ep = torch.export.export(boo, (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"boo.layer_norm.default", "boo.rms_norm.default"} <= targets, targets
    b.reset_stats()
    torch.testing.assert_close(ep.module()(x), boo(x))
    assert b.stats()[_ln(1).key] == b.stats()[_rms32(1).key] == {"hits": 2, "misses": 0, "eager": 0}


# ------------------------------------------------------- inference, autocast
def test_inference_runs_forward_kernels_only(path):
    """no_grad and inference_mode: nothing saved for backward (no mean or rstd
    kept alive), only the forward kernels; grad mode saves them (the control)."""
    b = open_bundle(path, device="local-task")
    boo = _net()
    boo_nn.replace_norms(boo, b)
    x = torch.randn(4, 6, W)

    def run(mode):
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), mode():
            y = boo(x)
        return y, [t for t in saved if t.shape == (4, 6, 1)]  # the norms' statistics

    for mode in (torch.no_grad, torch.inference_mode):
        y, stats = run(mode)
        assert y.grad_fn is None and stats == []
    assert b.stats() == {_ln(1).key: {"hits": 2, "misses": 0, "eager": 0}, _rms32(1).key: {"hits": 2, "misses": 0, "eager": 0}}
    y, stats = run(torch.enable_grad)
    assert y.grad_fn is not None and len(stats) == 3  # layer norm's mean and rstd, RMS norm's rstd


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's own RMS norm, mixed
def test_autocast_gives_torch_dtypes(path):
    """CPU autocast (bfloat16): each norm gets and returns the dtypes torch's
    does (float32 in, float32 out; bfloat16 activations with float32 weights,
    bfloat16 out), the parameters' gradients stay float32."""
    b = open_bundle(path, device="local-task", fallback="eager")  # no bfloat16 backward kernels here

    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln0, self.fc1, self.ln1 = torch.nn.LayerNorm(W), torch.nn.Linear(W, W), torch.nn.LayerNorm(W)
            self.fc2, self.rms = torch.nn.Linear(W, W), torch.nn.RMSNorm(W)

        def forward(self, x):
            return self.rms(self.fc2(self.ln1(self.fc1(self.ln0(x)))))

    torch.manual_seed(0)
    ref = Mixed()
    boo = copy.deepcopy(ref)
    assert len(boo_nn.replace_norms(boo, b).replaced) == 3

    def dtypes(model):
        seen = []
        for m in (model.ln0, model.ln1, model.rms):
            m.register_forward_hook(lambda mod, args, out: seen.append((args[0].dtype, out.dtype)))
        x = torch.randn(4, 6, W, generator=torch.Generator().manual_seed(2))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
        y.float().square().sum().backward()
        return seen, y, [p.grad for p in model.parameters()]

    seen, y, grads = dtypes(boo)
    seen_ref, y_ref, grads_ref = dtypes(ref)
    assert seen == seen_ref == [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                (torch.bfloat16, torch.bfloat16)]
    assert y.dtype == y_ref.dtype == torch.bfloat16
    torch.testing.assert_close(y, y_ref, atol=0.05, rtol=0.05)
    assert [g.dtype for g in grads] == [g.dtype for g in grads_ref] == [torch.float32] * len(grads)
    # on CUDA torch's autocast runs both norms in float32 (no GPU here: the registration is what can be checked)
    assert all(torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCUDA")
               for op in ("aten::layer_norm", "aten::rms_norm", "boo::layer_norm", "boo::rms_norm"))
    bf16_ln, bf16_rms = EXTRA[0][0], EXTRA[1][0]
    s = b.stats()
    assert s[_ln(1).key]["hits"] == s[bf16_ln.key]["hits"] == s[bf16_rms.key]["hits"] == 1


# ----------------------------------------------------------- replace_norms
class NoEps(torch.nn.Module):  # named in rms_classes, but not of the Llama form
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(W))


class MyLayerNorm(torch.nn.LayerNorm):
    pass


def _zoo():
    torch.manual_seed(0)
    m = torch.nn.Module()
    m.fc = torch.nn.Linear(W, W)
    m.ln = torch.nn.LayerNorm(W)
    m.rms = torch.nn.RMSNorm(W)  # eps None: torch's default, for which the bundle has kernels
    m.rms_eps = torch.nn.RMSNorm(W, eps=1e-3)
    m.wide = torch.nn.LayerNorm(12)
    m.plain = torch.nn.LayerNorm(W, elementwise_affine=False)
    m.f64 = torch.nn.LayerNorm(W, dtype=torch.float64)
    m.sub = MyLayerNorm(W)
    m.llama = LlamaRMSNorm(W, eps=F32_EPS)
    m.blocks = torch.nn.ModuleList([m.llama])  # held twice: both places get the new module
    m.noeps = NoEps()
    m.ln.bias.requires_grad_(False)
    return m


def test_replace_norms_keeps_parameters_and_reports_what_it_left(path):
    b = open_bundle(path, device="local-task")
    m = _zoo()
    params = dict(m.named_parameters(remove_duplicate=False))
    opt = torch.optim.SGD(m.parameters(), lr=0.5)  # built before the swap
    report = boo_nn.replace_norms(m, b, rms_classes=[LlamaRMSNorm, "NoEps"])

    # the subclass of torch's LayerNorm is probed: its math is a layer norm's
    assert [(s.name, s.now.rsplit(".", 1)[1]) for s in report.replaced] == [
        ("ln", "LayerNorm"), ("rms", "RMSNorm"), ("sub", "LayerNorm"), ("llama", "RMSNorm")]
    left = {s.name: s.reason for s in report.left}
    assert set(left) == {"rms_eps", "wide", "plain", "f64", "noeps"}
    assert "eps 0.001" in left["rms_eps"] and "[10] float32" in left["rms_eps"]  # what it lacks, what it has
    assert "normalized shape [12]" in left["wide"] and "no weight" in left["plain"]
    assert "dtype float64" in left["f64"]
    assert left["noeps"] == ("named in rms_classes, but it has no numeric eps (`variance_epsilon`, `eps`, "
                             "`epsilon`); it defines no forward")
    assert "4 replaced, 5 left" in str(report) and "rms_eps" in str(report)
    # exactly what the kernels serve, per mask where they differ: the forward also has a bounded dynamic kernel
    assert report.replaced[0].serves == (
        "serves input shapes [rows, 10] (any leading dims, of any rank: [..., 10], at most 65536 elements), "
        "[4, 6, 10] for mask 1; input shape [4, 6, 10] for masks 2, 6, 14: a call of another shape "
        "raises KernelNotFound"), report

    # same Parameter objects, flags, eps; the Llama norm is one new module in both places
    assert dict(m.named_parameters(remove_duplicate=False)) == params
    assert all(p is params[n] for n, p in m.named_parameters(remove_duplicate=False))
    assert isinstance(m.ln, boo_nn.LayerNorm) and isinstance(m.rms, boo_nn.RMSNorm) and m.rms.eps is None
    assert not m.ln.bias.requires_grad and m.ln.weight.requires_grad
    assert isinstance(m.llama, boo_nn.RMSNorm) and m.blocks[0] is m.llama and m.llama.eps == F32_EPS
    assert m.llama.weight is params["llama.weight"]
    assert type(m.wide) is torch.nn.LayerNorm and type(m.sub) is boo_nn.LayerNorm
    assert m.sub.weight is params["sub.weight"] and m.sub.bias is params["sub.bias"]

    # the optimizer built before the swap trains the swapped norms, through the kernels
    x = torch.randn(4, 6, W)
    before = {n: p.detach().clone() for n, p in params.items()}
    opt.zero_grad()
    (m.llama(m.rms(m.ln(m.fc(x)))) * torch.randn(4, 6, W)).sum().backward()
    opt.step()
    for n in ("ln.weight", "rms.weight", "llama.weight", "fc.weight"):
        assert not torch.equal(params[n], before[n]), n
    assert torch.equal(params["ln.bias"], before["ln.bias"])  # frozen
    assert b.stats()[_ln(6).key] == {"hits": 1, "misses": 0, "eager": 0}  # input and weight gradients: the bias is frozen
    assert b.stats()[_rms32(6).key] == {"hits": 2, "misses": 0, "eager": 0}

    # fallback="eager": norms without kernels are replaced too, and run torch's op (counted as misses in the
    # stats of the bundle given, which the swapped norms share); a path is opened with it, as open_bundle does
    m = _zoo()
    report = boo_nn.replace_norms(m, b, fallback="eager")
    assert {s.name for s in report.left} == {"f64"}
    assert "no kernel" in next(s.note for s in report.replaced if s.name == "wide")
    assert m.wide.bundle.fallback == "eager" and b.fallback is None
    b.reset_stats()
    x = torch.randn(3, 12)
    with torch.no_grad():
        torch.testing.assert_close(m.wide(x), torch.nn.functional.layer_norm(x, (12,), m.wide.weight, m.wide.bias))
    assert b.stats(totals=True) == {"static_hits": 0, "dynamic_hits": 0, "misses": 1, "eager": 0}
    m = _zoo()
    report = boo_nn.replace_norms(m, str(path), fallback="eager")
    assert {s.name for s in report.left} == {"f64"} and m.wide.bundle.fallback == "eager"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_norm_form_names_what_each_lookalike_computes(dtype):
    from boo_build.probe import norm_form

    def found(m):
        f = norm_form(m)
        return f.op, f.eps, f.problems, f.weight_offset, f.bias

    dt = getattr(torch, dtype)
    for cls, why in LOOKALIKES.items():
        m = cls(W).to(dt)
        form = norm_form(m)
        assert len(form.problems) == 1 and form.problems[0].startswith(why) and form.op is None, (cls.__name__, form)
    assert found(LlamaRMSNorm(W, eps=1e-6).to(dt)) == ("rms_norm", 1e-6, (), 0.0, False)
    # Gemma's 1 + weight is an RMS norm with a weight offset, read from its output (its own
    # weight, zeros, would hide it: the probe's weight is random), whatever the class is called
    assert found(GemmaRMSNorm(W, eps=1e-6).to(dt)) == ("rms_norm", 1e-6, (), 1.0, False)
    # Cohere's subtracts the mean: a layer norm with a weight and no bias; torch's own, subclassed, with both
    assert found(CohereLayerNorm(W, eps=1e-6).to(dt)) == ("layer_norm", 1e-6, (), 0.0, False)
    assert found(MyLayerNorm(W, eps=1e-4).to(dt)) == ("layer_norm", 1e-4, (), 0.0, True)

    class Shifted(GemmaRMSNorm):  # another offset: found as well, not assumed to be 1
        def forward(self, x):
            out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
            return (out * (0.25 + self.weight.float())).type_as(x)
    assert found(Shifted(W, eps=1e-6).to(dt)) == ("rms_norm", 1e-6, (), 0.25, False)
    noeps = norm_form(NoEps())
    assert noeps.eps is None and noeps.problems == ("it has no numeric eps (`variance_epsilon`, `eps`, `epsilon`)",
                                                    "it defines no forward"), noeps
    # the dtype each returns per input dtype, as its code gives it (Llama: the promotion with its weight's)
    llama = norm_form(LlamaRMSNorm(W).to(dt))
    assert llama.out_dtype(torch.bfloat16) == torch.promote_types(torch.bfloat16, dt)
    assert norm_form(GemmaRMSNorm(W).to(dt)).out_dtype(torch.float16) == torch.float16


def test_replace_norms_leaves_lookalikes_and_swaps_what_computes_rms_norm(path):
    """Classes named in rms_classes whose math differs are left, each with its reason; the Llama
    form and torch.nn.RMSNorm still swap; Gemma's form needs kernels of its weight offset, which
    this bundle lacks. The check changes nothing: weights, random stream, hooks."""
    b = open_bundle(path, device="local-task")
    torch.manual_seed(0)
    m = torch.nn.Module()
    m.llama, m.torch_rms = LlamaRMSNorm(W, eps=F32_EPS), torch.nn.RMSNorm(W)
    m.gemma, m.ln1p, m.gated = GemmaRMSNorm(W, eps=F32_EPS), LayerNorm1P(W, eps=F32_EPS), RMSNormGated(W)
    with torch.no_grad():
        m.gemma.weight.add_(0.3)  # trained weights: the check does not depend on them
    weights = {n: p.detach().clone() for n, p in m.named_parameters()}
    seen = []
    for name in ("llama", "gemma", "ln1p"):
        getattr(m, name).register_forward_hook(lambda mod, a, out, name=name: seen.append(name))
    state = torch.random.get_rng_state()
    report = boo_nn.replace_norms(m, b, rms_classes=[LlamaRMSNorm, GemmaRMSNorm, LayerNorm1P, RMSNormGated])

    assert sorted(s.name for s in report.replaced) == ["llama", "torch_rms"], report
    left = {s.name: s.reason for s in report.left}
    assert left["gemma"].startswith(f"the bundle has no rms_norm kernel for normalized shape [{W}], float32, weight "
                                    f"only, eps {F32_EPS:g}, weight offset 1 on target cpu"), left
    assert type(m.gemma) is GemmaRMSNorm
    for name, cls in (("ln1p", LayerNorm1P), ("gated", RMSNormGated)):
        assert left[name].startswith("named in rms_classes, but " + LOOKALIKES[cls]), left
        assert type(getattr(m, name)) is cls  # left as it was
    assert isinstance(m.llama, boo_nn.RMSNorm) and m.llama.eps == F32_EPS
    assert all(torch.equal(p, weights[n]) for n, p in m.named_parameters()), "a weight changed"
    assert torch.equal(torch.random.get_rng_state(), state) and not seen  # no random draw, no hook call
    assert "2 replaced, 3 left" in str(report) and "subtracts the mean" in str(report)
    # what is left still computes its own math; what is swapped, torch's RMS norm
    x = torch.randn(4, 6, W) + 1
    with torch.no_grad():
        assert_close(m.llama(x), torch.nn.functional.rms_norm(x, (W,), m.llama.weight, F32_EPS), "float32")
        gemma = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + F32_EPS) * (1 + m.gemma.weight)
        assert_close(m.gemma(x), gemma, "float32")


# ------------------------------------------------------------------- exit
EXIT_SCRIPT = """
import torch
from torch.utils.checkpoint import checkpoint
from boo_build.loader import open_bundle
from boo_build.loader.native import runtime
from boo_build.loader.nn import replace_norms
if {show}:  # let the runtime report what is still alive at exit
    runtime().disable_leak_checker = lambda: None
b = open_bundle({path!r}, device="local-task")
model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.LayerNorm(10), torch.nn.RMSNorm(10))
replace_norms(model, b)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 6, 10, requires_grad=True)
for _ in range(2):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
kept = checkpoint(model, x, use_reentrant=True)  # a graph holding the model, never freed by Python
with torch.no_grad():
    view = model(x)[1:]  # a view of a kernel output, alive at exit
print(b.stats(totals=True)["static_hits"])
"""


def _python(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, cwd=REPO)


def test_clean_exit_after_training(path):
    """No leak report at exit, whatever the process still holds; the runtime
    objects really go: with the report on, only the devices kept on purpose
    (and their driver) are left."""
    quiet = _python(EXIT_SCRIPT.format(show=False, path=str(path)))
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip() == "12" and "nanobind" not in quiet.stderr, quiet.stderr
    shown = _python(EXIT_SCRIPT.format(show=True, path=str(path)))
    assert shown.returncode == 0, shown.stderr
    leaked = set(re.findall(r'leaked instance \S+ of type "[\w.]+\.(\w+)"', shown.stderr))
    assert leaked == {"HalDevice", "HalDriver"}, shown.stderr


# ------------------------------------------------------------------ README
def test_replace_norms_example_runs(path):
    page = (REPO / "docs" / "torch.md").read_text()
    m = re.search(r"<!-- example: replace_norms -->\s*```python\n(.*?)```", page, re.S)
    assert m, "docs/torch.md has no replace_norms example"
    proc = _python(m.group(1), env={"BOO_BUNDLE": str(path)}, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 replaced, 1 left" in proc.stdout, proc.stdout
    steps = [float(v) for v in re.findall(r"loss ([0-9.]+)", proc.stdout)]
    assert len(steps) == 2 and steps[1] < steps[0], proc.stdout  # trained, eagerly then compiled
    assert "'misses': 0" in proc.stdout and "'static_hits': 12" in proc.stdout, proc.stdout
    assert "nanobind" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_readme_compile_backend_example_runs(path):
    """The README's torch.compile(backend="boo") example, as written, on a bundle holding
    its kernels (8x128x768 float32 layer norm, masks 1 and 14)."""
    readme = (REPO / "README.md").read_text()
    m = re.search(r"<!-- example: compile backend -->\s*```python\n(.*?)```", readme, re.S)
    assert m, "README has no torch.compile backend example"
    proc = _python(m.group(1), env={"BOO_BUNDLE": str(path)}, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # both norms found (a module and a function call), both on the kernels
    assert "2 norms in 1 graph: 2 run the bundle's kernels, 0 the graph's code" in proc.stdout, proc.stdout
    assert "norm (LayerNorm)" in proc.stdout and "F.layer_norm" in proc.stdout, proc.stdout
    # explain's forward (2 calls), then 3 steps of 2 norms, forward and backward
    assert "'misses': 0" in proc.stdout and "'static_hits': 14" in proc.stdout, proc.stdout
