"""Whether a module computes a norm the kernels compute, found by its math, never by
its class's name: one definition for ``loader.nn.replace_norms``, the compile backend's
graph pass (``loader/norm_pass.py``) and the trace recorder (``boo_build.trace``), which
must agree on what is swapped, served and recorded.

Most models write their norms by hand, in a small class of their own (Llama's, Qwen's,
Mistral's, Gemma's and T5's RMS norms; ConvNeXt's and Cohere's layer norms). Such a
class is a *candidate* (``is_candidate``): not one of torch's own classes, with a
``weight`` Parameter and a numeric eps attribute. ``norm_form`` then checks the rest of
its form (one tensor in, nothing held but the weight and a bias) and probes its math:
its ``forward``, run in eval mode on a small random input with a non-zero mean and on
random parameters put in place of its own (``torch.func.functional_call``: nothing of
the model changes, no hook of it runs, the process's random stream is left as it was),
must give an RMS norm's or a layer norm's output over the weight's shape within the
validation tolerance. Each condition it fails is named apart.

Imports torch (every caller runs torch models).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .dtypes import TOLERANCES

EPS_NAMES = ("variance_epsilon", "eps", "epsilon")  # where such classes keep eps (Llama's; Gemma's, T5's...)
PROBE_ROWS = (3, 5)  # the probe input's leading dims
PROBE_MEAN = 1.5  # its offset: a mean-subtracting class then differs from an RMS norm by far
# the input dtypes a forward is run in to learn the output dtype it gives for each (Llama's
# returns the promotion of weight and input, Gemma's the input's, T5's its weight's if half)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# the reasons' leading words (docs/torch.md lists them; tests match them)
GATED = "a gate multiplies the output"
MORE_INPUTS = "forward takes more than the input"
SUBTRACTS_MEAN = "subtracts the mean"
PER_HEAD = "per-head weight"
NOT_A_NORM = "its output is not a norm's"
GATE_NAMES = ("gate", "z", "g", "gating")  # an extra forward argument by one of these names is a gate

# torch's own norms no kernel computes: never swapped, never served (their statistics are
# per channel over the batch or per instance, or across channels)
BATCH_NORM = "a batch norm: its statistics are over the batch (running statistics in eval mode)"
INSTANCE_NORM = "an instance norm: its statistics are per channel of each sample"
LOCAL_RESPONSE_NORM = "a local response norm: it normalizes across neighbouring channels"
NEVER = {"_BatchNorm": BATCH_NORM, "_InstanceNorm": INSTANCE_NORM, "LocalResponseNorm": LOCAL_RESPONSE_NORM,
         "CrossMapLRN2d": LOCAL_RESPONSE_NORM}


def never_served(m: torch.nn.Module) -> str | None:
    """Why a module of torch's own norm classes that no kernel computes is never swapped
    or served (BatchNorm, InstanceNorm, LocalResponseNorm), else None."""
    for cls in type(m).__mro__:
        if cls.__module__.startswith("torch.nn.") and cls.__name__ in NEVER:
            return NEVER[cls.__name__] + ": no kernel computes it, it is never swapped"
    return None


def eps_of(m: torch.nn.Module) -> float | None:
    """The module's eps (``variance_epsilon``, ``eps`` or ``epsilon``), None where none is a number."""
    for name in EPS_NAMES:
        v = getattr(m, name, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def is_torch_class(cls: type) -> bool:
    """One of torch's own classes (swapped by class where it is a norm, or never)."""
    return cls.__module__ == "torch" or cls.__module__.startswith("torch.")


def is_candidate(m: torch.nn.Module) -> bool:
    """Whether ``m`` may be a norm written by hand, to be probed: not one of torch's own
    classes, with a ``weight`` Parameter and a numeric eps attribute."""
    cls = type(m)
    return (not is_torch_class(cls) and not cls.__module__.startswith("boo_build.")  # ours: already swapped
            and isinstance(getattr(m, "weight", None), torch.nn.Parameter) and eps_of(m) is not None)


@dataclass(frozen=True)
class NormForm:
    """What ``norm_form`` found of a module."""

    op: str | None  # "rms_norm" or "layer_norm" where it computes one (problems empty), else None
    eps: float | None  # its eps attribute, None where it has no number there
    normalized_shape: tuple[int, ...]  # its weight's shape: the dims it normalizes over
    bias: bool  # a layer norm adding its bias Parameter
    weight_offset: float  # an RMS norm scaling by offset + weight (Gemma's: 1.0), read from its output
    # the dtype its forward returns for an input of each dtype it was run in (its parameters as they are)
    out_dtypes: tuple[tuple[torch.dtype, torch.dtype], ...]
    problems: tuple[str, ...]  # each condition it fails, named apart; () where it computes ``op``

    @property
    def ok(self) -> bool:
        return not self.problems

    def out_dtype(self, x: torch.dtype) -> torch.dtype | None:
        """The dtype the module returns for an input of dtype ``x``, None where not probed."""
        return dict(self.out_dtypes).get(x)

    def why(self) -> str:
        return "; ".join(self.problems)


def norm_form(m: torch.nn.Module) -> NormForm:
    """Whether ``m`` computes a norm a kernel computes, over its weight's shape: an RMS norm
    ``x * rsqrt(mean(x**2) + eps) * (offset + weight)`` (Llama's form, offset 0; Gemma's,
    offset 1: the offset is read from the output, never assumed from a name) or a layer
    norm ``(x - mean) * rsqrt(var + eps) * weight (+ bias)``. Its form first: a ``weight``
    Parameter, a numeric eps (``EPS_NAMES``), a bias Parameter of the weight's shape if
    any and no other parameter, no buffers, no submodules, a forward of the input alone.
    Then, only where all of that holds, its math on a probe (the module docstring), and
    the dtype it returns for inputs of each of ``DTYPES``."""
    problems: list[str] = []
    w = getattr(m, "weight", None)
    b = getattr(m, "bias", None)
    eps = eps_of(m)
    if not isinstance(w, torch.nn.Parameter):
        problems.append("it has no `weight` Parameter")
    if eps is None:
        problems.append(f"it has no numeric eps ({', '.join(f'`{n}`' for n in EPS_NAMES)})")
    bias = isinstance(b, torch.nn.Parameter)
    if isinstance(b, torch.nn.Parameter) and isinstance(w, torch.nn.Parameter) and b.shape != w.shape:
        problems.append(f"its bias {list(b.shape)} is not of its weight's shape {list(w.shape)}")
    others = [n for n, _ in m.named_parameters() if n not in ("weight", "bias")]
    if others:
        problems.append(f"it holds parameters besides weight and bias ({', '.join(others)})")
    buffers = [n for n, _ in m.named_buffers()]
    if buffers:
        problems.append(f"it holds buffers ({', '.join(buffers)}): it keeps state a kernel does not")
    children = [n for n, _ in m.named_children()]
    if children:
        problems.append(f"it holds submodules ({', '.join(children)}): its forward may do more than a norm")
    if type(m).forward is torch.nn.Module.forward:
        problems.append("it defines no forward")
    else:
        extra = _extra_arguments(m)
        if extra:
            gate = any(n.lstrip("*").split("=")[0] in GATE_NAMES for n in extra.split(", ")[1:])
            problems.append(f"{GATED if gate else MORE_INPUTS} (forward({extra}))")
    shape = tuple(w.shape) if isinstance(w, torch.nn.Parameter) else ()
    if problems:
        return NormForm(None, eps, shape, bias, 0.0, (), tuple(problems))
    assert isinstance(w, torch.nn.Parameter) and eps is not None
    return _probe(m, w, b if bias else None, eps)


def _extra_arguments(m: torch.nn.Module) -> str:
    """forward's parameters as written (``hidden_states, gate``) where it takes more
    than one positional input, else "": the module swapped in takes the input alone."""
    try:
        params = list(inspect.signature(m.forward).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): nothing says it takes more
        return ""
    P = inspect.Parameter
    if len(params) == 1 and params[0].kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
        return ""
    star: dict[object, str] = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}
    return ", ".join(star.get(p.kind, "") + p.name + ("=..." if p.default is not P.empty else "") for p in params)


class _Forward(torch.nn.Module):
    """Holds the probed module and calls its ``forward``, not ``__call__``: the model's
    own hooks never see the probe (``functional_call`` calls what it is given)."""

    def __init__(self, m: torch.nn.Module):
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor) -> Any:
        return self.m.forward(x)


def _run(m: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor) -> Any:
    """``m.forward(x)`` in eval mode with ``params`` in place of its own (all restored after)."""
    modes = [(mod, mod.training) for mod in m.modules()]
    m.eval()
    try:
        with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
            return torch.func.functional_call(_Forward(m), {f"m.{k}": v for k, v in params.items()}, (x,),
                                              strict=False)
    finally:
        for mod, training in modes:
            mod.training = training


def _probe(m: torch.nn.Module, w: torch.Tensor, b: torch.Tensor | None, eps: float) -> NormForm:
    shape, dt = tuple(w.shape), w.dtype

    def form(op: str | None, problem: str = "", offset: float = 0.0, out=()) -> NormForm:
        return NormForm(op, eps, shape, b is not None and op == "layer_norm", offset, tuple(out),
                        (problem,) if problem else ())

    if w.device.type == "meta":
        return form(None, "its weight is on the meta device: its math cannot be checked (load the weights first)")
    g = torch.Generator().manual_seed(0)  # its own: the process's random stream is left as it was
    x64 = torch.randn(PROBE_ROWS + shape, generator=g, dtype=torch.float64) + PROBE_MEAN
    # probe parameters: the module's own may be all ones or zeros, which hides a form
    w64 = 0.5 + torch.rand(shape, generator=g, dtype=torch.float64)
    b64 = torch.rand(shape, generator=g, dtype=torch.float64) - 0.5
    params = {"weight": w64.to(dt).to(w.device)}
    if b is not None:
        params["bias"] = b64.to(b.dtype).to(b.device)
    x = x64.to(dt).to(w.device)
    where = f"a {list(x.shape)} {str(dt).removeprefix('torch.')} input"
    try:
        y = _run(m, params, x)
    except Exception as e:  # noqa: BLE001 - any failure is the answer: it is left
        return form(None, f"its forward raised on {where}: {type(e).__name__}: {e}")
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(x.shape):
        return form(None, "its forward does not return one tensor of the input's shape")
    out_dtypes = []
    for d in DTYPES:  # the dtype it returns for each input dtype (where its forward takes one)
        try:
            yd = y if d == dt else _run(m, params, x64.to(d).to(w.device))
        except Exception:  # noqa: BLE001 - an input dtype it refuses: no entry
            continue
        if isinstance(yd, torch.Tensor):
            out_dtypes.append((d, yd.dtype))
    op, problem, offset = _which_norm(y.double().cpu(), x.double().cpu(), params["weight"].double().cpu(),
                                      params["bias"].double().cpu() if b is not None else None, eps, dt, where)
    return form(op, problem, offset, out_dtypes if op else ())


def normalized(v: torch.Tensor, dims: Sequence[int], centred: bool, eps: float) -> torch.Tensor:
    """The normalized value of ``v`` over ``dims`` before any weight: an RMS norm's, or a layer
    norm's (``centred``: the mean subtracted first); the reference the probes compare with."""
    v = v - v.mean(dims, keepdim=True) if centred else v
    return v * torch.rsqrt(v.pow(2).mean(dims, keepdim=True) + eps)


def _which_norm(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, eps: float,
                dt: torch.dtype, where: str) -> tuple[str | None, str, float]:
    """(op, "", offset) where ``out`` is that norm's output on (x, w, b) within the tolerance of
    ``dt``; else (None, how it differs, 0.0)."""
    dims = tuple(range(-w.dim(), 0))
    tol = TOLERANCES.get(str(dt).removeprefix("torch."), TOLERANCES["float32"])

    def fits(ref: torch.Tensor) -> bool:
        scale = float(ref.pow(2).mean().sqrt())
        return bool(((out - ref).abs() <= tol.atol * scale + tol.rtol * ref.abs()).all())

    rms_hat, ln_hat = normalized(x, dims, False, eps), normalized(x, dims, True, eps)
    if b is None:
        # out = rms_hat * (offset + w): the least-squares offset, then the plainest number near it that
        # fits (rounded to 0-4 decimals: 1.0 for Gemma's, not 0.9997 from a bfloat16 output)
        fit = float(((out - rms_hat * w) * rms_hat).sum() / rms_hat.pow(2).sum())
        for digits in range(5):
            offset = round(fit, digits) + 0.0  # + 0.0: no -0.0
            if math.isfinite(offset) and fits(rms_hat * (offset + w)):
                return "rms_norm", "", offset
        if fits(ln_hat * w):
            return "layer_norm", "", 0.0
    elif fits(ln_hat * w + b):
        return "layer_norm", "", 0.0
    shift = 0.0 if b is None else b
    if fits(ln_hat * (1 + w) + shift):
        return None, f"{SUBTRACTS_MEAN} and scales by 1 + weight: no kernel computes that", 0.0
    if b is not None and (fits(rms_hat * w + b) or fits(rms_hat * w)):
        return None, "an RMS norm beside a bias Parameter: no RMS norm kernel adds a bias", 0.0
    if b is not None and fits(ln_hat * w):
        return None, "it holds a bias its output does not add", 0.0
    if w.dim() > 1:  # normalized over the last dim only, scaled by a weight of more dims
        last = (-1,)
        for centred in (False, True):
            if fits(normalized(x, last, centred, eps) * w + (0.0 if b is None or not centred else b)):
                return None, (f"{PER_HEAD}: it normalizes over its last dim only, with a weight of shape "
                              f"{list(w.shape)} (a kernel normalizes over its weight's shape)"), 0.0
    error = min(float((out - rms_hat * w).abs().max()), float((out - ln_hat * w - shift).abs().max()))
    return None, (f"{NOT_A_NORM} (RMS or layer norm) with its weight and eps over {list(w.shape)}: max error "
                  f"{error:.3g} against the nearer on {where} of mean {PROBE_MEAN}"), 0.0


__all__ = ["BATCH_NORM", "DTYPES", "INSTANCE_NORM", "LOCAL_RESPONSE_NORM", "EPS_NAMES", "GATED", "MORE_INPUTS", "NOT_A_NORM", "NormForm", "PER_HEAD", "SUBTRACTS_MEAN",
           "PROBE_MEAN", "eps_of", "is_candidate", "is_torch_class", "never_served", "norm_form", "normalized"]
