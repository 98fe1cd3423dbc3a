"""How torch module classes are named to users, which spelling of
``rms_classes`` names a class, whether a module of such a class computes
what it would be swapped for, and where torch's autocast runs an op in
float32: one definition for the loader (``loader.nn.replace_norms``, its
custom ops) and the trace recorder (``boo_build.trace``), which must agree.
Imports torch (both callers run torch models)."""

from __future__ import annotations

import inspect
import math
from typing import Iterable, NamedTuple, Sequence

import torch

from .dtypes import TOLERANCES


def autocast_devices(aten_ops: Sequence[str]) -> frozenset[str]:
    """Device types where torch has an autocast kernel for each of ``aten_ops``
    (CUDA, which ROCm shares): there torch runs them in float32, and so do the
    custom ops standing in for them (and the trace records what they run)."""
    return frozenset(d for d in ("cuda",) if aten_ops and all(
        torch._C._dispatch_has_kernel_for_dispatch_key(a, "Autocast" + d.upper()) for a in aten_ops))


def class_label(cls: type) -> str:
    """A class as users write it: ``torch.nn.LayerNorm`` (not
    ``torch.nn.modules.normalization.LayerNorm``), else ``module.Qualname``."""
    if getattr(torch.nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def spelling_of(cls: type, spellings: Iterable[type | str]) -> type | str | None:
    """The first of ``spellings`` (a class, its name, its qualified name,
    ``module.Class``) that names ``cls``, else None."""
    names = (cls.__name__, cls.__qualname__, class_label(cls), f"{cls.__module__}.{cls.__qualname__}")
    for s in spellings:
        if s is cls if isinstance(s, type) else s in names:
            return s
    return None


# ---------------------------------------------------------------- look-alikes
# A class named in ``rms_classes`` is not torch's: before a module of it is swapped
# for ``torch.nn.RMSNorm`` (or recorded as one), its form and its math are checked.
EPS_NAMES = ("variance_epsilon", "eps")  # where such classes keep eps (Llama's; Gemma's and others')
PROBE_ROWS = (3, 5)  # the probe input's leading dims
PROBE_MEAN = 1.5  # its offset: a mean-subtracting class then differs by far
SUBTRACTS_MEAN = "subtracts the mean (a layer norm, not an RMS norm)"
ONE_PLUS_WEIGHT = "scales by 1 + weight"
GATED = "forward takes more than the input"


class RmsForm(NamedTuple):
    """What ``rms_form`` found of a module named in ``rms_classes``."""

    eps: float | None  # its eps (``variance_epsilon``, else ``eps``), None where it has no number there
    problems: tuple[str, ...]  # each condition it fails, named apart; () where an RMS norm computes as it does
    # the weight offset its output shows (Gemma's 1 + weight: 1.0), 0.0 for Llama's form
    weight_offset: float = 0.0


def rms_form(m: torch.nn.Module) -> RmsForm:
    """Whether ``m`` computes an RMS norm, ``x * rsqrt(mean(x**2) + eps) * (offset +
    weight)`` (Llama's form, offset 0; Gemma's, offset 1), and takes only the input: a
    ``weight`` Parameter, a numeric eps (``variance_epsilon`` or ``eps``), a forward of
    one argument, and, on a small random input with a non-zero mean in the weight's
    dtype and on its device, an output within the validation tolerance of that math
    for the offset the output shows (found from it, never assumed from a name). Each
    failed condition is named apart; the math is checked only where the rest holds,
    and then against the forms look-alikes have, to say which it is (``SUBTRACTS_MEAN``)."""
    problems = []
    w = getattr(m, "weight", None)
    if not isinstance(w, torch.nn.Parameter):
        problems.append("it has no `weight` Parameter")
    eps = None
    for name in EPS_NAMES:
        v = getattr(m, name, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            eps = float(v)
            break
    if eps is None:
        problems.append(f"it has no numeric eps (`{EPS_NAMES[0]}` or `{EPS_NAMES[1]}`)")
    if type(m).forward is torch.nn.Module.forward:
        problems.append("it defines no forward")
    else:
        extra = _extra_arguments(m)
        if extra:
            problems.append(f"{GATED} (forward({extra}))")
    offset = 0.0
    if not problems:
        assert isinstance(w, torch.nn.Parameter) and eps is not None
        why, offset = _math_problem(m, w, eps)
        if why:
            problems.append(why)
    return RmsForm(eps, tuple(problems), offset)


def _extra_arguments(m: torch.nn.Module) -> str:
    """forward's parameters as written (``hidden_states, gate``) where it takes more
    than one positional input, else "": the swapped module's forward takes the input alone."""
    try:
        params = list(inspect.signature(m.forward).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): nothing says it takes more
        return ""
    P = inspect.Parameter
    if len(params) == 1 and params[0].kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
        return ""
    star: dict[object, str] = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}
    return ", ".join(star.get(p.kind, "") + p.name + ("=..." if p.default is not P.empty else "") for p in params)


def _math_problem(m: torch.nn.Module, w: torch.Tensor, eps: float) -> tuple[str, float]:
    """("", the weight offset) where ``m``'s output on a probe is an RMS norm's
    with its weight and eps, scaled by ``offset + weight``; else (how it differs, 0.0)."""
    if w.device.type == "meta":
        return "its weight is on the meta device: its math cannot be checked (load the weights first)", 0.0
    shape, dt = tuple(w.shape), w.dtype
    g = torch.Generator().manual_seed(0)  # its own: the process's random stream is left as it was
    x64 = torch.randn(PROBE_ROWS + shape, generator=g, dtype=torch.float64) + PROBE_MEAN
    # a probe weight in [0.5, 1.5): the module's own may be all ones or zeros, which hides a form
    w64 = 0.5 + torch.rand(shape, generator=g, dtype=torch.float64)
    x = x64.to(dt).to(w.device)
    probe = w64.to(dt).to(w.device)
    from torch.nn.utils.stateless import _reparametrize_module  # torch.func.functional_call's, without the hooks

    try:
        with torch.no_grad(), torch.autocast(w.device.type, enabled=False), \
                _reparametrize_module(m, {"weight": probe}):
            y = m.forward(x)  # forward, not __call__: the model's hooks see no probe
    except Exception as e:  # noqa: BLE001 - any failure is the answer: it is left
        return (f"its forward raised on a {list(x.shape)} {str(dt).removeprefix('torch.')} input: "
                f"{type(e).__name__}: {e}"), 0.0
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(x.shape):
        return "its forward does not return one tensor of the input's shape", 0.0
    xr, wr = x.double().cpu(), probe.double().cpu()  # the values the module was given
    dims = tuple(range(-len(shape), 0))
    xm = xr - xr.mean(dims, keepdim=True)
    rms_hat = xr * torch.rsqrt(xr.pow(2).mean(dims, keepdim=True) + eps)
    ln_hat = xm * torch.rsqrt(xm.pow(2).mean(dims, keepdim=True) + eps)
    out = y.double().cpu()
    tol = TOLERANCES.get(str(dt).removeprefix("torch."), TOLERANCES["float32"])

    def fits(ref: torch.Tensor) -> bool:
        scale = float(ref.pow(2).mean().sqrt())
        return bool(((out - ref).abs() <= tol.atol * scale + tol.rtol * ref.abs()).all())

    # out = rms_hat * (offset + w): the least-squares offset, then the plainest number near it that
    # fits (rounded to 0-4 decimals: 1.0 for Gemma's, not 0.9997 from a bfloat16 output)
    fit = float(((out - rms_hat * wr) * rms_hat).sum() / rms_hat.pow(2).sum())
    for digits in range(5):
        offset = round(fit, digits) + 0.0  # + 0.0: no -0.0
        if math.isfinite(offset) and fits(rms_hat * (offset + wr)):
            return "", offset
    forms = {SUBTRACTS_MEAN: ln_hat * wr, f"{SUBTRACTS_MEAN} and {ONE_PLUS_WEIGHT}": ln_hat * (1 + wr)}
    for why, ref in forms.items():
        if fits(ref):
            return why, 0.0
    error = float((out - rms_hat * wr).abs().max())
    return (f"its output is not an RMS norm's with its weight and eps, scaled by weight or by a constant plus "
            f"weight (max error {error:.3g} against F.rms_norm on a {list(x.shape)} "
            f"{str(dt).removeprefix('torch.')} input of mean {PROBE_MEAN})"), 0.0


# ---------------------------------------------------------------- function calls
# replace_norms swaps modules; a norm the model writes as a function call
# (``F.layer_norm``, ``torch.ops.aten.native_group_norm``, a subclass of torch's
# norm whose forward calls one) has no module to swap. How to serve one, per op:
SERVE_CALLS = {
    "layer_norm": ("hold a boo_build.loader.nn.LayerNorm in the model instead, or call "
                   "torch.ops.boo.layer_norm(x, normalized_shape, weight, bias, eps, bundle.token())[0]"),
    "rms_norm": ("hold a boo_build.loader.nn.RMSNorm in the model instead, or call "
                 "torch.ops.boo.rms_norm(x, normalized_shape, weight, eps, weight_offset, bundle.token())[0]"),
    "group_norm": ("hold a boo_build.loader.nn.GroupNorm in the model instead, or call "
                   "torch.ops.boo.group_norm(x, weight, bias, N, C, HxW, groups, eps, bundle.token())[0]"),
}


class FunctionCalls(NamedTuple):
    """The norm calls a recording saw made through one function (``boo_build.trace``'s
    ``Recording.function_calls``), which ``replace_norms`` cannot swap."""

    source: str  # how the model wrote them: "F.layer_norm", "aten.native_group_norm", ...
    op: str
    calls: int  # forward calls
    keys: tuple[str, ...]  # the kernel signatures they would run

    def __str__(self) -> str:
        sigs = f"{len(self.keys)} kernel signature{'s' if len(self.keys) > 1 else ''}"
        return (f"{self.source}: {self.calls} call{'s' if self.calls != 1 else ''} ({sigs}) are function calls, "
                f"not modules: replace_norms cannot swap them; to serve them, {SERVE_CALLS[self.op]}")


__all__ = ["class_label", "spelling_of", "rms_form", "RmsForm", "EPS_NAMES", "FunctionCalls", "SERVE_CALLS"]
