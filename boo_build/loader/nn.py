"""Drop-in ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm`` / ``torch.nn.GroupNorm`` running a
bundle's kernels, and ``replace_norms`` to swap them into an existing model.

Same constructor arguments as torch's modules (they are subclasses, so
``state_dict``, ``reset_parameters`` and ``isinstance`` checks carry over),
plus ``bundle``: a ``Bundle``, a bundle path, or None for the default bundle
at the time of the call (``set_default_bundle``, else the ``BOO_BUNDLE``
environment variable).

The forward is one custom op (``torch.ops.boo.layer_norm`` / ``rms_norm`` /
``group_norm``, ``loader/custom_ops.py``), so ``torch.compile(model, fullgraph=True)`` and
``torch.export`` trace it without a graph break, and the compiled graph runs
the bundle's kernels (eager inference calls the bundle directly, sparing the
op's dispatch: ``_direct``). Its autograd runs ONE combined backward kernel for
exactly the gradients autograd needs: only the input gradient when the
weights are frozen, only the weight (and bias) gradients when the input
needs none; under ``no_grad``/``inference_mode`` only the forward kernel.
Parameters of another dtype than the input (float32 weights with bfloat16
activations, as under CPU autocast) are cast to the input's dtype, whose
kernel runs, and gradients come back in the parameters' dtype, as with
torch's norms (which on the CPU compute such calls in the input's dtype).
A kernel missing from the bundle raises ``KernelNotFound`` unless the
bundle was opened with ``fallback="eager"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple

import torch
import torch.nn.functional as F

from .. import dtypes
from .. import ops as op_registry
from ..errors import SignatureError
from ..probe import NormForm, is_candidate, never_served, norm_form
from ..shapes import DEFAULT_MAX_ELEMENTS
from ..signature import KernelSignature
from ..torch_classes import FunctionCalls, class_label, spelling_of
from . import custom_ops, torch_path
from .bundle import FALLBACKS, Bundle, open_bundle
from .custom_ops import BUNDLE_ENV, default_bundle, set_default_bundle
from .lookup import family_key

_torch_runs = torch_path.runs  # read per call: a module global, not an attribute of one


def _resolve(bundle: Any) -> Bundle | None:
    if bundle is None or isinstance(bundle, Bundle):
        return bundle
    return open_bundle(bundle)


def _direct(x: torch.Tensor) -> bool:
    """Whether to call the bundle's entry point rather than the op: eager
    inference (no autograd to record, no tracer, no autocast running the op in
    float32), where the op's dispatch would only add its cost (more than a small
    kernel's whole call; docs/cpu-performance.md)."""
    return (not torch.is_grad_enabled() and type(x) is torch.Tensor and not torch.compiler.is_compiling()
            and not (x.device.type in custom_ops.AUTOCAST_FLOAT32 and torch.is_autocast_enabled(x.device.type)))


def _like(x: torch.Tensor, p: torch.Tensor | None) -> torch.Tensor | None:
    """A parameter in the input's dtype (the kernels take one dtype), unless
    autocast runs the op in float32 on this device (it casts both itself)."""
    if p is None or p.dtype == x.dtype or (x.device.type in custom_ops.AUTOCAST_FLOAT32
                                           and torch.is_autocast_enabled(x.device.type)):
        return p
    return p.to(x.dtype)


# A leaf of ``torch.fx.symbolic_trace``: its dtype test cannot run on the tracer's
# proxies, so a traced graph calls it (then the op), deciding at run time as eager does.
torch.fx.wrap("_like")


def _group_sizes(x: torch.Tensor) -> tuple:
    """ATen's (N, C, HxW) of a group norm's input (symbolic sizes while tracing)."""
    hw = 1
    for d in x.shape[2:]:
        hw = hw * d
    return x.shape[0], x.shape[1], hw


torch.fx.wrap("_group_sizes")  # as ``_like``: a traced graph calls it


class _BundleAttr:
    """``bundle``: the module's Bundle (None: the default), and the token the
    op names it by (``custom_ops.bundle_token``), kept together; and, for a
    module ``replace_norms`` put where a norm written by hand was, the output
    dtype that norm's forward gave per input dtype where it differs from the
    input's (``probe.NormForm.out_dtypes``: Llama's returns the promotion of
    weight and input, T5's its weight's), so the swap returns what it did."""

    _boo_out_dtypes: dict | None = None  # a class default: torch's own modules made ours in place have none

    def _as_swapped(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        to = self._boo_out_dtypes.get(x.dtype) if self._boo_out_dtypes else None
        return y if to is None or to == y.dtype else y.to(to)

    @property
    def bundle(self) -> Bundle | None:
        return self._boo_bundle

    @bundle.setter
    def bundle(self, value: Bundle | str | os.PathLike | None) -> None:
        b = _resolve(value)
        self._boo_bundle, self._boo_token = b, ("" if b is None else custom_ops.bundle_token(b))
        torch_path.forget(self)  # decisions of another bundle

    def _apply(self, fn, recurse=True):
        torch_path.forget(self)  # its parameters' dtype or device may change: decide again
        return super()._apply(fn, recurse)  # type: ignore[misc]  # torch.nn.Module's, after this mixin

    def _bundle_repr(self) -> str:
        b = self._boo_bundle
        return f", bundle={b.name}-{b.version}" if b is not None else ", bundle=default"


class LayerNorm(_BundleAttr, torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` whose forward and backward run bundle kernels."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, bundle: Bundle | str | os.PathLike | None = None):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias,
                         device=device, dtype=dtype)
        self.bundle = bundle  # type: ignore[assignment]  # the setter takes a path too; mypy checks the getter's type

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        if _torch_runs(self, input, w, b):  # a size the bundle sends to torch eager (torch_path.runs)
            return F.layer_norm(input, self.normalized_shape, w, b, self.eps)
        w, b = _like(input, w), _like(input, b)
        if _direct(input):
            y = custom_ops.bundle_for(self._boo_token).native_layer_norm(input, self.normalized_shape, w, b,
                                                                         self.eps)[0]
        else:
            y = torch.ops.boo.layer_norm(input, self.normalized_shape, w, b, self.eps, self._boo_token)[0]
        return self._as_swapped(input, y) if self._boo_out_dtypes else y

    def extra_repr(self) -> str:
        return super().extra_repr() + self._bundle_repr()


class RMSNorm(_BundleAttr, torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward and backward run bundle kernels.

    ``weight_offset`` (default 0, keyword only): the output scales by ``weight_offset
    + weight`` instead of ``weight``, in float32 before the cast to the input's dtype:
    Gemma's RMS norm is ``RMSNorm(dim, eps, weight_offset=1.0)`` with its weight
    (initialized to zeros, as Gemma's, where ``reset_parameters`` runs with an
    offset). The kernels must be built with the same offset (the manifest's
    ``weight_offset``)."""

    weight_offset: float = 0.0  # a class default: torch's RMSNorm made ours in place (replace_norms) has none

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None, *, weight_offset: float = 0.0,
                 bundle: Bundle | str | os.PathLike | None = None):
        self.weight_offset = _offset_checked(weight_offset, elementwise_affine)
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine,
                         device=device, dtype=dtype)
        self.bundle = bundle  # type: ignore[assignment]  # the setter takes a path too; mypy checks the getter's type

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.weight_offset and self.weight is not None:  # offset + 0 is the identity scale, as ones are without
            torch.nn.init.zeros_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # eps None: torch's default (float32's epsilon), resolved by the entry point
        w = self.weight
        if not self.weight_offset and _torch_runs(self, x, w, None):  # as LayerNorm's (torch has no offset)
            return F.rms_norm(x, self.normalized_shape, w, self.eps)
        w = _like(x, w)
        if _direct(x):
            y = custom_ops.bundle_for(self._boo_token).fused_rms_norm(x, self.normalized_shape, w, self.eps,
                                                                      self.weight_offset)[0]
        else:
            y = torch.ops.boo.rms_norm(x, self.normalized_shape, w, self.eps, self.weight_offset, self._boo_token)[0]
        return self._as_swapped(x, y) if self._boo_out_dtypes else y

    def extra_repr(self) -> str:
        off = f", weight_offset={self.weight_offset}" if self.weight_offset else ""
        return super().extra_repr() + off + self._bundle_repr()


def _offset_checked(offset: Any, affine: bool) -> float:
    """A weight offset ``RMSNorm`` takes (``Op.offset_problem``), as a float; ValueError naming it."""
    problem = op_registry.get("rms_norm").offset_problem(offset, affine)
    if problem:
        raise ValueError(problem)
    return float(offset)


class GroupNorm(_BundleAttr, torch.nn.GroupNorm):
    """``torch.nn.GroupNorm`` whose forward and backward run bundle kernels (an
    input of another memory format, channels-last, is made contiguous: the kernels'
    layout; the output is contiguous)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bundle: Bundle | str | os.PathLike | None = None):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, device=device, dtype=dtype)
        self.bundle = bundle  # type: ignore[assignment]  # the setter takes a path too; mypy checks the getter's type

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        if _torch_runs(self, input, w, b):  # as LayerNorm's
            return F.group_norm(input, self.num_groups, w, b, self.eps)
        w, b = _like(input, w), _like(input, b)
        x = input.contiguous()
        n, c, hw = _group_sizes(x)
        if _direct(x):
            return custom_ops.bundle_for(self._boo_token).native_group_norm(x, w, b, n, c, hw, self.num_groups,
                                                                            self.eps)[0]
        return torch.ops.boo.group_norm(x, w, b, n, c, hw, self.num_groups, self.eps, self._boo_token)[0]

    def extra_repr(self) -> str:
        return super().extra_repr() + self._bundle_repr()


# ---------------------------------------------------------------- swapping
# torch's norm classes -> (the op they are, the class they become)
_SWAPS = {torch.nn.LayerNorm: ("layer_norm", LayerNorm), torch.nn.RMSNorm: ("rms_norm", RMSNorm),
          torch.nn.GroupNorm: ("group_norm", GroupNorm)}


class _Groups(NamedTuple):
    """A group norm's form where the other norms give a normalized shape."""
    channels: int
    groups: int


def _probes(op: str, form) -> list[dict]:
    """Signature fields that stand for every input a norm of ``form`` (a normalized
    shape, or ``_Groups``) may get, as ``family_key`` compares them (a group norm:
    each rank its kernels take)."""
    if isinstance(form, _Groups):
        return [dict(input_shape=(1, form.channels) + (1,) * k, normalized_shape=(), groups=form.groups)
                for k in range(4)]
    return [dict(input_shape=form, normalized_shape=form)]

@dataclass(frozen=True)
class Swapped:
    """A norm ``replace_norms`` replaced."""

    name: str  # its qualified name in the model ("" for the model itself)
    was: str  # its class before
    now: str  # its class now
    note: str = ""  # what to know about it (missing backward kernels, the eager fallback)
    serves: str = ""  # which input sizes the bundle's kernels serve, and what a call of another size does


@dataclass(frozen=True)
class Left:
    """A norm ``replace_norms`` left as it was, and why."""

    name: str
    was: str
    reason: str


@dataclass(frozen=True)
class ReplaceReport:
    """What ``replace_norms`` did: every norm it found, replaced or left with its reason;
    given a recording of the model's calls, the norm calls it cannot swap (``function_calls``)."""

    bundle: str
    replaced: tuple[Swapped, ...]
    left: tuple[Left, ...]
    function_calls: tuple[FunctionCalls, ...] = ()  # calls through functions: no module to swap

    def __str__(self) -> str:
        head = f"replace_norms with {self.bundle}: {len(self.replaced)} replaced, {len(self.left)} left"
        if self.function_calls:
            head += f", {len(self.function_calls)} function{'s' if len(self.function_calls) > 1 else ''} not swappable"
        lines = [head]
        lines += [f"  replaced {s.name or '(model)'}: {s.was} -> {s.now}" + (f" ({s.note})" if s.note else "")
                  + (f"; {s.serves}" if s.serves else "") for s in self.replaced]
        lines += [f"  left     {s.name or '(model)'}: {s.was}: {s.reason}" for s in self.left]
        lines += [f"  not swappable {f}" for f in self.function_calls]
        return "\n".join(lines)


def _form(op: str, normalized_shape: tuple[int, ...], dtype: str | None, affine: bool, bias: bool,
          eps: float, offset: float = 0.0) -> str:
    what = ("weight and bias" if bias else "weight only") if affine else "no weight"
    shape = (f"{normalized_shape.groups} groups of {normalized_shape.channels} channels"
             if isinstance(normalized_shape, _Groups) else f"normalized shape {list(normalized_shape)}")
    return f"{shape}, {dtype or 'any dtype'}, {what}, eps {eps:g}" + (f", weight offset {offset:g}" if offset else "")


def _family_masks(op: str, normalized_shape, kinds: Iterable[str], affine: bool, bias: bool,
                  eps: float, offset: float = 0.0) -> dict[str, int]:
    """``family_key`` -> mask, of every kernel that would serve a norm of this form in
    one of the dtypes ``kinds`` at some input shape (the loader's own matching)."""
    out: dict[str, int] = {}
    for dt in kinds:
        for mask in op_registry.get(op).masks:
            try:
                probes = [KernelSignature(op, dtype=dt, mask=mask, eps=eps, affine=affine, bias=bias,
                                          weight_offset=offset, **f) for f in _probes(op, normalized_shape)]
            except SignatureError:  # a mask this form has no kernels for (a weight gradient without weights)
                continue
            out.update((family_key(p), mask) for p in probes)
    return out


def _kernel_masks(bundle: Bundle, op: str, normalized_shape: tuple[int, ...], dtype: str, affine: bool,
                  bias: bool, eps: float, offset: float = 0.0) -> set[int]:
    """Masks of the bundle's kernels on its target that serve a norm of this
    form at some input shape."""
    want = _family_masks(op, normalized_shape, (dtype,), affine, bias, eps, offset)
    return {want[k] for k in map(family_key, bundle.signatures()) if k in want}


def _check(bundle: Bundle, op: str, normalized_shape: tuple[int, ...], params: list[torch.Tensor],
           affine: bool, bias: bool, eps: float, offset: float = 0.0) -> tuple[str, str]:
    """(why the norm must stay, or ""; a note for a replaced one)."""
    device = bundle.target.torch_device_type  # where the bundle's calls take tensors
    for p in params:
        if p.device.type != device:
            return (f"its parameters are on {p.device}, the bundle runs on {bundle.device.uri} "
                    f"(target {bundle.target.name}): move the model first"), ""
    kinds = dtypes.NAMES  # what kernels take
    if params:
        name = str(params[0].dtype).removeprefix("torch.")
        if name not in dtypes.NAMES:
            return f"dtype {name}: the kernels take {', '.join(dtypes.NAMES)}", ""
        kinds = (name,)
    found = {dt: _kernel_masks(bundle, op, normalized_shape, dt, affine, bias, eps, offset) for dt in kinds}
    forward = [dt for dt, m in found.items() if 1 in m]
    if not forward:
        form = _form(op, normalized_shape, kinds[0] if params else None, affine, bias, eps, offset)
        widths = sorted({f"{list(s.normalized_shape or s.param_shape)} {s.dtype}"
                         + (f" offset {s.weight_offset:g}" if s.weight_offset else "") for s in bundle.signatures()
                         if s.op == op and s.is_forward})
        why = (f"the bundle has no {op} kernel for {form} on target {bundle.target.name}"
               f" (its {op} kernels: {', '.join(widths) or 'none'})")
        if bundle.fallback == "eager":
            return "", f"no kernel: torch's op runs (fallback='eager'), counted as misses; {why}"
        return why, ""
    if bundle.prefer_eager and torch_path.all_to_torch(bundle, _family_masks(op, normalized_shape, forward, affine,
                                                                             bias, eps, offset)):
        return torch_path.LEFT_TO_TORCH, ""
    backward = sorted(set().union(*(found[dt] for dt in forward)) - {1})
    if not backward:
        return "", ("no backward kernels: training raises KernelNotFound" if bundle.fallback is None
                    else "no backward kernels: training runs torch's backward (fallback='eager')")
    return "", ""


def _shape_form(s: KernelSignature) -> tuple[str, bool]:
    """(the input shapes kernel ``s`` takes, as a user reads them; whether it takes
    every input of its normalized shape: any leading dims, flattened, at the default bound)."""
    shape = "[" + ", ".join(str(d) for d in s.input_shape) + "]"
    if not s.is_dynamic:
        return shape, False
    n = len(s.normalized_shape)
    lead = s.input_shape[:len(s.input_shape) - n]
    bounded = s.max_elements != DEFAULT_MAX_ELEMENTS
    limit = f", at most {s.max_elements} elements" if bounded else ""
    if n and all(isinstance(d, str) for d in lead) and len(set(lead)) == len(lead):  # KernelSignature.bind
        tail = ", ".join(str(d) for d in s.normalized_shape)
        return f"{shape} (any leading dims, of any rank: [..., {tail}]{limit})", not bounded
    names = ", ".join(dict.fromkeys(d for d in s.input_shape if isinstance(d, str)))
    return f"{shape} (any {names}{limit})", False


def _serves(bundle: Bundle, op: str, normalized_shape: tuple[int, ...], params: list[torch.Tensor], affine: bool,
            bias: bool, eps: float, offset: float = 0.0) -> str:
    """Exactly which input shapes the bundle's kernels for this norm take, per mask
    where they differ (a dynamic kernel: its named dims any size, all its leading
    dims where they are all named; a static one: its shape), and what a call of
    another shape does."""
    kinds = (str(params[0].dtype).removeprefix("torch."),) if params else dtypes.NAMES
    want = _family_masks(op, normalized_shape, kinds, affine, bias, eps, offset)
    found: dict[int, list[KernelSignature]] = {}
    for s in bundle.signatures():
        served = want.get(family_key(s))
        if served is not None:
            found.setdefault(served, []).append(s)
    if 1 not in found:  # no forward kernel: the note says what runs
        return ""
    forms: dict[int, dict[str, bool]] = {}
    for mask, sigs in found.items():
        # dynamic kernels first, then the static shapes by rank and size
        for sig in sorted(sigs, key=lambda s: (not s.is_dynamic, len(s.input_shape), str(s.input_shape))):
            text, every = _shape_form(sig)
            forms.setdefault(mask, {})[text] = every
    if all(any(f.values()) for f in forms.values()):  # every mask: any input of this normalized shape
        shape = ", ".join(str(d) for d in normalized_shape)
        return f"serves any input [..., {shape}] (dynamic kernels)"
    by_forms: dict[tuple[str, ...], list[int]] = {}
    for mask in sorted(forms):
        by_forms.setdefault(tuple(forms[mask]), []).append(mask)
    dynamic = any(s.is_dynamic for sigs in found.values() for s in sigs)

    def listed(texts: tuple[str, ...]) -> str:
        head = "input shape" + ("s" if len(texts) > 1 else "")
        more = f" and {len(texts) - 4} more" if len(texts) > 4 else ""
        return f"{head} {', '.join(texts[:4])}{more}"

    if len(by_forms) == 1:
        what = listed(next(iter(by_forms)))
    else:
        what = "; ".join(f"{listed(texts)} for mask{'s' if len(ms) > 1 else ''} {', '.join(map(str, ms))}"
                         for texts, ms in by_forms.items())
    other = ("raises KernelNotFound" if bundle.fallback is None
             else "runs torch's op (fallback='eager', counted as a miss)")
    return f"serves {'' if dynamic else 'only '}{what}: a call of another shape {other}"


def replace_norms(model: torch.nn.Module, bundle: Bundle | str | os.PathLike | None = None, *,
                  fallback: str | None = None, rms_classes: Iterable[type | str] = (), auto: bool = True,
                  recording: Any = None) -> ReplaceReport:
    """Replace, in place, every norm of ``model`` a kernel computes with this module's
    ``LayerNorm`` / ``RMSNorm`` / ``GroupNorm`` running ``bundle``'s kernels: torch's own
    ``torch.nn.LayerNorm``, ``torch.nn.RMSNorm`` and ``torch.nn.GroupNorm``, and the norms
    written by hand that their math shows to be RMS or layer norms (Llama's, Qwen's,
    Gemma's, T5's...; ``probe.norm_form``). Returns a ``ReplaceReport`` of the norms
    replaced and of those left, each with its reason; a replaced one's ``serves`` says
    exactly which input shapes the bundle's kernels take, per mask where they differ (a
    dynamic kernel's named dims any size; a static kernel its shape), and what a call of
    another shape does.

    torch's classes become ours in place: a replaced norm keeps its ``Parameter`` objects
    (an optimizer built before keeps working), their ``requires_grad``, device and dtype,
    its eps (None stays torch's default), hooks and training mode.

    A norm written by hand (``probe.is_candidate``: a module of a class not torch's own,
    subclasses of torch's norms included, with a ``weight`` Parameter and a numeric eps,
    ``variance_epsilon``, ``eps`` or ``epsilon``) is probed: its form (the input alone in,
    nothing held but the weight and a bias) and its math (its forward in eval mode, on a
    small input with a non-zero mean and random parameters in place of its own: nothing
    of the model changes, none of its hooks runs) must be an RMS norm's, ``x * rsqrt(
    mean(x**2) + eps) * (offset + weight)`` (the offset, Llama's 0 or Gemma's 1, read from
    the output), or a layer norm's, with its weight and, if it has one, its bias, over
    its weight's shape, within the validation tolerance. One that passes is replaced by
    an ``RMSNorm`` (with that ``weight_offset``) or a ``LayerNorm`` over its weight's
    shape, holding the same Parameters (a new module: hooks on the old one are not
    carried over), which returns the dtype the old forward returned for each input dtype
    (its kernel runs in the input's dtype, the parameters cast to it, as torch's modules
    do). One that fails is left, its reason naming each condition it fails ("subtracts
    the mean and scales by 1 + weight", "a gate multiplies the output", "per-head
    weight"...). torch's batch, instance and local response norms are never swapped
    (left, saying so).

    ``bundle``: a ``Bundle``, a path, or None for the default bundle.
    ``fallback``: as in ``open_bundle``; "eager" also replaces norms with no
    kernel (torch's op runs, counted as misses); None replaces only norms the
    bundle has a forward kernel for (their parameters' dtype, normalized
    shape, affine form and eps, on the bundle's device), and keeps an open
    bundle's own fallback.

    ``rms_classes``: classes (or class names) probed whatever they hold (a class
    without a numeric eps is left, saying so, where ``auto`` would pass it by).
    ``auto=False``: probe only those; other candidates are left, named, unprobed.

    ``recording``: a ``boo_build.trace.Recording`` of the model's calls
    (``with record_norms() as rec: model(x)``): the report then lists the norm
    calls made through functions (``F.layer_norm``, ``torch.ops.aten.*``), which
    have no module to swap, and how to serve them (``function_calls``).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    if not isinstance(auto, bool):
        raise TypeError(f"auto must be True or False, got {auto!r}")
    if bundle is None:
        b = default_bundle()
    elif isinstance(bundle, Bundle):
        b = bundle
    else:
        b = open_bundle(bundle, fallback=fallback)
    if fallback is not None:
        b = b.with_fallback(fallback)
    rms_classes = tuple(rms_classes)
    parents: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for _, parent in model.named_modules(remove_duplicate=False):
        for attr, child in parent._modules.items():
            if child is not None:
                parents.setdefault(id(child), []).append((parent, attr))

    replaced: list[Swapped] = []
    left: list[Left] = []
    for name, m in list(model.named_modules()):
        cls = type(m)
        was = class_label(cls)
        named = bool(rms_classes) and spelling_of(cls, rms_classes) is not None
        if isinstance(m, (LayerNorm, RMSNorm, GroupNorm)):
            left.append(Left(name, was, "already a boo_build.loader.nn module"))
        elif cls in _SWAPS:
            op, ours = _SWAPS[cls]
            # group norm: its channels and groups stand where the others' normalized shape does
            ns = _Groups(m.num_channels, m.num_groups) if cls is torch.nn.GroupNorm else tuple(m.normalized_shape)
            eps = m.eps if m.eps is not None else op_registry.get(op).none_eps
            params = [p for p in (m.weight, getattr(m, "bias", None)) if p is not None]
            why, note = _check(b, op, ns, params, m.weight is not None, getattr(m, "bias", None) is not None, eps)
            if why:
                left.append(Left(name, was, why))
                continue
            m.__class__ = ours
            m.bundle = b
            serves = _serves(b, op, ns, params, m.weight is not None, getattr(m, "bias", None) is not None, eps)
            replaced.append(Swapped(name, was, class_label(m.__class__), note, serves))
        elif (never := never_served(m)) is not None:
            left.append(Left(name, was, never))
        elif named or (auto and is_candidate(m)):
            form = norm_form(m)  # not torch's class: its form and math are checked before it is swapped
            why = (("named in rms_classes, but " if named else "probed: ") + form.why() if not form.ok
                   else "the model itself: swap it where it is held" if not name else "")
            note = ""
            if not why:
                why, note = _check(b, form.op or "", form.normalized_shape, _params(m, form), True, form.bias,
                                   form.eps or 0.0, form.weight_offset)
            if why:
                left.append(Left(name, was, why))
                continue
            new = _swapped(m, form, b)
            for parent, attr in parents.get(id(m), ()):
                setattr(parent, attr, new)
            serves = _serves(b, form.op or "", form.normalized_shape, _params(m, form), True, form.bias,
                             form.eps or 0.0, form.weight_offset)
            replaced.append(Swapped(name, was, class_label(type(new)), note, serves))
        elif isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.GroupNorm)):
            base = next(c.__name__ for c in _SWAPS if isinstance(m, c))
            left.append(Left(name, was, f"a subclass of torch.nn.{base}: its forward may differ" + (
                "" if base == "GroupNorm" or not auto else " (without a weight and an eps it is not probed)")))
        elif is_candidate(m):  # auto=False
            left.append(Left(name, was, "not probed (auto=False): a weight and an eps, it may be a norm written "
                                        "by hand; name its class in rms_classes to probe it"))
    calls = tuple(recording.function_calls()) if recording is not None else ()
    return ReplaceReport(repr(b), tuple(replaced), tuple(left), calls)


def _params(m: torch.nn.Module, form: NormForm) -> list[torch.Tensor]:
    return [m.weight] + ([m.bias] if form.bias else [])


def _swapped(m: torch.nn.Module, form: NormForm, b: Bundle) -> torch.nn.Module:
    """The module replacing ``m``, a norm written by hand of ``form``: ours, over its
    weight's shape, holding its Parameters, returning the dtypes its forward returned."""
    assert form.eps is not None
    new: LayerNorm | RMSNorm
    if form.op == "rms_norm":
        new = RMSNorm(form.normalized_shape, eps=form.eps, weight_offset=form.weight_offset, device="meta", bundle=b)
    else:
        new = LayerNorm(form.normalized_shape, eps=form.eps, bias=form.bias, device="meta", bundle=b)
        if form.bias:
            new.bias = m.bias
    new.weight = m.weight  # the same Parameters
    new.train(m.training)
    new._boo_out_dtypes = {i: o for i, o in form.out_dtypes if i != o} or None
    return new


# the default bundle's functions and variable are documented here too (docs/torch.md): users import them from nn
__all__ = ["BUNDLE_ENV", "GroupNorm", "LayerNorm", "Left", "RMSNorm", "ReplaceReport", "Swapped", "default_bundle",
           "replace_norms", "set_default_bundle"]
