"""``torch.compile(backend="boo")`` against plain ``torch.compile`` (Inductor), in one run.

Two models, a training step (zero_grad, forward, backward, SGD step) and an
inference step (forward under ``no_grad``) each:

* the README quick start's model: x [8, 16, 64] -> Linear -> LayerNorm ->
  GELU -> Linear -> RMSNorm(eps 1e-6), MSE loss (module norms);
* a small GPT-style model with functional norms (``F.layer_norm`` in
  pre-norm blocks, written here): tokens [8, 64], width 128, 2 blocks of
  4-head attention and a 4x MLP, a final norm, cross-entropy over 256 tokens;
* a Llama-style model whose norms are classes written by hand: transformers'
  ``LlamaForCausalLM`` (its ``LlamaRMSNorm``: ``pow``/``mean``/``rsqrt``, found by
  its math), the same sizes (2 layers, 4 heads, 2 key-value heads, a 2x MLP), random
  weights, cross-entropy of its logits.

Variants, each on its own copy of the model (same weights): plain
``torch.compile`` (the baseline); ``backend="boo"`` with the bundle's default
decisions (a norm runs the kernels only where the bundle's records say they
beat torch.compile's code for the norm, timed by the build; torch eager where it
did not time it); and ``prefer_eager=False`` (the kernels wherever the bundle
holds them), with the add before a norm fused with it (the fused residual kernels,
the default) and, to compare, with ``fuse_adds=False`` (the add left to Inductor, the norm on
its plain kernels). Each variant's first step, its whole compile included, is timed
in a fresh process with an empty Inductor cache. The variants are timed in interleaved rounds
(round-robin, several steps each) so that other load hits all alike; the
table gives median step times, the speed ratio against the baseline (per
round: the baseline's round median over the variant's, then the median and
the range over rounds; above 1 = faster than plain torch.compile), the kernel
calls per step (the serving bundle's ``stats()``) and the first step's time.

The bundle is built here from the quick start's manifest plus the GPT model's
width-128 layer norm and the Llama model's RMS norm, each also in the fused residual
form (``boo-build build``, benchmarks included: its records decide), unless given ``--bundle``.

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/compile_backend.py [--rounds 9] [--steps 3]

``--quick``: the Llama-style model only, 2 rounds of 1 step after 1 warm-up, no first-call
processes, the bundle built without benchmarks (so the default decisions have no records to
read); the table goes to stdout only: a check that the script works, not a measurement.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import quickstart  # benchmarks/ is on sys.path when run as a script
from machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the quick start's kernels, the GPT-style model's layer norm and the Llama-style model's RMS norm
MANIFEST = quickstart.manifest().replace('name = "quickstart"', 'name = "compile-backend"') + """
[[kernels]]
op = "layer_norm"
input_shape = ["batch", "seq", 128]
masks = [1, 14]

[[kernels]]
op = "layer_norm"
input_shape = ["batch", "seq", 128]
residual = true
masks = [1, 14]

[[kernels]]
op = "rms_norm"
input_shape = ["batch", "seq", 128]
eps = 1e-6
masks = [1, 6]

[[kernels]]
op = "rms_norm"
input_shape = ["batch", "seq", 128]
eps = 1e-6
residual = true
masks = [1, 6]
"""

GPT_WIDTH, GPT_HEADS, GPT_LAYERS, GPT_VOCAB, GPT_SEQ, BATCH = 128, 4, 2, 256, 64, 8


def build_bundle(folder: Path, bench: bool = True) -> Path:
    manifest = folder / "compile-backend.toml"
    manifest.write_text(MANIFEST)
    out = folder / "out"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "boo_build.cli", "build", str(manifest), "--out", str(out),
                    *(() if bench else ("--no-bench",))], check=True, stdout=subprocess.DEVNULL)
    print(f"built the bundle in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return out / "compile-backend-0.1.0.tar.zst"


def quickstart_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
        torch.nn.Linear(64, 64), torch.nn.RMSNorm(64, eps=1e-6))


def gpt_model():
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads = heads
            self.ln1_w, self.ln1_b = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.zeros(d))
            self.ln2_w, self.ln2_b = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.zeros(d))
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            h = F.layer_norm(x, (d,), self.ln1_w, self.ln1_b, 1e-5)
            q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            h = F.layer_norm(x, (d,), self.ln2_w, self.ln2_b, 1e-5)
            return x + self.out(F.gelu(self.fc(h)))

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            d = GPT_WIDTH
            self.tok, self.pos = torch.nn.Embedding(GPT_VOCAB, d), torch.nn.Embedding(GPT_SEQ, d)
            self.blocks = torch.nn.ModuleList(Block(d, GPT_HEADS) for _ in range(GPT_LAYERS))
            self.lnf_w, self.lnf_b = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.zeros(d))
            self.head = torch.nn.Linear(d, GPT_VOCAB, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(F.layer_norm(x, (GPT_WIDTH,), self.lnf_w, self.lnf_b, 1e-5))

    torch.manual_seed(0)
    return GPT()


def llama_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lm = LlamaForCausalLM(LlamaConfig(
                vocab_size=GPT_VOCAB, hidden_size=GPT_WIDTH, intermediate_size=2 * GPT_WIDTH,
                num_hidden_layers=GPT_LAYERS, num_attention_heads=GPT_HEADS, num_key_value_heads=GPT_HEADS // 2,
                max_position_embeddings=GPT_SEQ, rms_norm_eps=1e-6, use_cache=False, attn_implementation="sdpa"))

        def forward(self, idx):
            return self.lm(input_ids=idx).logits

    return Logits()


CASES = 3


def cases():
    """(model name, model, input, loss of the output)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(BATCH, 16, 64, generator=g), torch.randn(BATCH, 16, 64, generator=g)
    idx = torch.randint(0, GPT_VOCAB, (BATCH, GPT_SEQ), generator=g)
    nxt = torch.randint(0, GPT_VOCAB, (BATCH, GPT_SEQ), generator=g)
    return [
        ("quick start model (module norms)", quickstart_model(), x, lambda y: F.mse_loss(y, target)),
        ("GPT-style model (functional norms)", gpt_model(), idx,
         lambda y: F.cross_entropy(y.reshape(-1, GPT_VOCAB), nxt.reshape(-1))),
        ("Llama-style model (norm classes written by hand)", llama_model(), idx,
         lambda y: F.cross_entropy(y.reshape(-1, GPT_VOCAB), nxt.reshape(-1))),
    ]


def steps_of(model, inp, loss_fn, backends: dict) -> dict:
    """variant -> (train step, inference step, its Backend or None), each variant on its own copy."""
    import torch

    out = {}
    for name, backend in backends.items():
        m = copy.deepcopy(model)
        run = torch.compile(m, backend=backend) if backend is not None else torch.compile(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)

        def train(run=run, opt=opt):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(run(inp))
            loss.backward()
            opt.step()
            return loss.detach()

        def infer(run=run):
            with torch.no_grad():
                return run(inp).sum()

        out[name] = (train, infer, backend)
    return out


def measure(steps: dict, rounds: int, per_round: int, warmup: int) -> tuple[dict, dict]:
    """(per-round step times, kernel calls per step) per variant, after a warm-up (compile included)."""
    times, hits = {n: [] for n in steps}, {}
    for name, (step, backend) in steps.items():
        for _ in range(1 + warmup):
            step().item()
    names = list(steps)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # each round another first: no order bias
            step = steps[name][0]
            ts = []
            for _ in range(per_round):
                t = time.perf_counter()
                step().item()  # read back, as a training loop does
                ts.append(time.perf_counter() - t)
            times[name].append(ts)
    # kernel calls: one more step per variant, alone. Two variants with the same bundle options share its
    # token, whose latest bundle counts both's calls: every bundle reset, then summed
    backends = [b for _, b in steps.values() if b is not None]
    for name, (step, backend) in steps.items():
        if backend is not None:
            for b in backends:
                b.serving()[0].reset_stats()
            step().item()
            hits[name] = sum(b.stats(totals=True)["static_hits"] + b.stats(totals=True)["dynamic_hits"]
                             for b in backends)
    return times, hits


def summary(times: dict, base: str) -> dict:
    """variant -> (median s/step, median speed ratio vs base, lowest, highest round ratio)."""
    out = {}
    for name, rounds in times.items():
        ratios = [statistics.median(b) / statistics.median(r) for b, r in zip(times[base], rounds)]
        flat = [t for r in rounds for t in r]
        out[name] = (statistics.median(flat), statistics.median(ratios), min(ratios), max(ratios))
    return out


VARIANTS = ("torch.compile (Inductor)", "backend=\"boo\"", "backend=\"boo\", prefer_eager=False",
            "backend=\"boo\", prefer_eager=False, fuse_adds=False")
PHASES = ("training step", "inference step")


def backends_for(path, open_bundle, Backend) -> dict:
    """variant -> its backend (None: plain torch.compile), each on its own bundle object:
    their kernel calls counted apart."""
    return {VARIANTS[0]: None, VARIANTS[1]: Backend(open_bundle(path)),
            VARIANTS[2]: Backend(open_bundle(path), prefer_eager=False),
            VARIANTS[3]: Backend(open_bundle(path), prefer_eager=False, fuse_adds=False)}


def first_call(path: Path, case: int, phase: str, variant: str) -> float:
    """Seconds of one variant's first step (its whole compile), in this fresh process."""
    import torch

    from boo_build.loader import open_bundle
    from boo_build.loader.backend import Backend

    _, model, inp, loss_fn = cases()[case]
    backend = backends_for(path, open_bundle, Backend)[variant]
    train, infer, _ = steps_of(model, inp, loss_fn, {variant: backend})[variant]
    step = train if phase == PHASES[0] else infer
    torch.compile(lambda t: (t * 2).sum())(torch.ones(4))  # Inductor's one-off start-up, not timed
    t = time.perf_counter()
    step().item()
    return time.perf_counter() - t


def first_calls(path: Path, tmp: Path) -> dict:
    """(case, phase, variant) -> first step seconds, each in a fresh process with an empty Inductor cache."""
    out = {}
    for case in range(CASES):
        for phase in PHASES:
            for variant in VARIANTS:
                cache = tempfile.mkdtemp(prefix="inductor-", dir=tmp)
                proc = subprocess.run([sys.executable, __file__, "--bundle", str(path), "--first-call",
                                       f"{case}:{phase}:{variant}"], capture_output=True, text=True, check=True,
                                      env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
                out[(case, phase, variant)] = float(proc.stdout.split()[-1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--first-call", help=argparse.SUPPRESS)  # CASE:PHASE:VARIANT, in a child process
    ap.add_argument("--bundle", type=Path, help="a bundle of the quick start's kernels and the width-128 norms")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=3, help="steps per round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "compile_backend.md")
    ap.add_argument("--quick", action="store_true", help="the Llama-style model only, 2 rounds of 1 step, no "
                    "first-call processes, a bundle built without benchmarks; the table to stdout only")
    ns = ap.parse_args()
    if ns.quick:
        ns.rounds, ns.steps, ns.warmup = 2, 1, 1
    if ns.first_call:
        case, phase, variant = ns.first_call.split(":", 2)
        print(first_call(ns.bundle, int(case), phase, variant))
        return 0
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="compile-backend-") as tmp:
        path = ns.bundle or build_bundle(Path(tmp), bench=not ns.quick)
        firsts = {} if ns.quick else first_calls(path, Path(tmp))
        import torch

        torch._dynamo.config.cache_size_limit = 64  # 4 variants x 2 phases compile each model's code
        from boo_build.loader import open_bundle
        from boo_build.loader.backend import Backend, Runs

        lines = ["# `torch.compile(backend=\"boo\")` against plain `torch.compile`", ""]
        lines.append(f"Machine: {platform.platform()}; CPU {cpu_model()}; {os.cpu_count()} logical CPUs; torch "
                     f"{torch.__version__}, {torch.get_num_threads()} threads; the bundle on its best device.")
        built = ("without benchmarks (--quick: no records, so the default decisions serve what is held)" if ns.quick
                 else "benchmarks included: its records decide `prefer_eager`")
        lines.append(f"Bundle: built here from the quick start's manifest plus a width-128 layer norm and RMS norm, "
                     f"plain and fused with the add ({built}). {ns.rounds} rounds of {ns.steps} "
                     "steps per variant, interleaved, after warm-up; one process. Speed ratio: plain "
                     "torch.compile's round median over the variant's (above 1: faster), the median and the "
                     "range over rounds; the variants take turns going first. First call: the first step, its whole "
                     "compile included, each in a fresh process with an empty Inductor cache (Inductor's one-off "
                     "start-up done before).")
        lines.append("")
        for case, (model_name, model, inp, loss_fn) in enumerate(cases()):
            if ns.quick and case != CASES - 1:
                continue  # the Llama-style model only
            for phase in PHASES:
                torch._dynamo.reset()
                made = steps_of(model, inp, loss_fn, backends_for(path, open_bundle, Backend))
                steps = {n: ((t if phase == PHASES[0] else i), b) for n, (t, i, b) in made.items()}
                times, hits = measure(steps, ns.rounds, ns.steps, ns.warmup)
                s = summary(times, VARIANTS[0])
                lines.append(f"## {model_name}: {phase}")
                lines.append("")
                lines.append("| variant | median ms | speed vs torch.compile (range) | norms on kernels | fused with "
                             "their add | kernel calls per step | first call s |")
                lines.append("|---|---:|---:|---:|---:|---:|---:|")
                for name, (med, r, lo, hi) in s.items():
                    b = steps[name][1]
                    on = "" if b is None else (f"{sum(d.runs is Runs.KERNEL for d in b.decisions)} of "
                                               f"{len(b.decisions)}")
                    fused = "" if b is None else str(sum(d.fused for d in b.decisions))
                    calls = "" if name not in hits else f"{hits[name]:.0f}"
                    first = firsts.get((case, phase, name))
                    lines.append(f"| {name} | {med * 1e3:.2f} | {r:.3f}x ({lo:.2f}-{hi:.2f}) | {on} | {fused} | "
                                 f"{calls} | {'' if first is None else f'{first:.1f}'} |")
                lines.append("")
                for name, (_, _, b) in made.items():
                    if b is not None:
                        reasons = sorted({f"{d.where}{f' [{d.source}]' * (d.source not in ('', d.where))}: "
                                          f"{d.runs.value}{' fused with its add' * d.fused} "
                                          f"({d.why.value})"
                                          for d in b.decisions})
                        lines.append(f"- {name}: " + "; ".join(reasons))
                lines.append("")
                print("\n".join(lines[-12:]), file=sys.stderr)
    lines.append(f"Load average (1 min): {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end, on "
                 f"{os.cpu_count()} CPUs.")
    text = "\n".join(lines) + "\n"
    print(text)
    if not ns.quick:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
