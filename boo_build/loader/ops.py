"""The bundle's kernels as torch custom ops (namespace ``boo``), with their
autograd: the one place of the loader's autograd glue.

Imports torch: ``Bundle.native_layer_norm``, ``fused_rms_norm`` and their
``*_backward`` call through here when grad mode is on and a torch argument
requires grad, and ``boo_build.loader.nn``'s modules call the ops directly,
so ``torch.compile(model, fullgraph=True)`` (Inductor included) and
``torch.export`` see one opaque op per norm instead of IREE calls they
cannot trace.

    torch.ops.boo.layer_norm(input, normalized_shape, weight, bias, eps, bundle) -> (out, mean, rstd)
    torch.ops.boo.layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                      output_mask, eps, bundle) -> [the gradients asked for]
    torch.ops.boo.rms_norm(input, normalized_shape, weight, eps, bundle) -> (out, rstd)
    torch.ops.boo.rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask, eps,
                                    bundle) -> [the gradients asked for]

ATen's arguments and results (``native_layer_norm``, ``_fused_rms_norm`` and
their backwards), but for two points: a backward returns the list of the
gradients ``output_mask`` asks for (a weight or bias gradient only where
that tensor is given), in ATen's order, not a tuple holding undefined
tensors (custom ops cannot return those); and ``bundle`` names the bundle.

Which bundle (an op cannot take a ``Bundle`` object): ``bundle`` is a token,
``bundle_token(b)``, from a registry of the bundles open in this process
(weak: registering keeps no bundle alive; a module holding its bundle keeps
it, and its token, valid), or "" for the default bundle at the time of the
call (``set_default_bundle``, else the ``BOO_BUNDLE`` environment variable).
A graph captured by ``torch.compile`` or ``torch.export`` holds the token as
a constant: it runs in this process while that bundle is open; export a
model built on the default bundle ("") to run it wherever a default is set,
or bind the recorded token to a bundle there with ``bundle_token(b, token)``.

Fake (meta) implementations compute the results from the inputs' shapes
and dtypes only (mean/rstd in ``signature.default_stats_dtype``), so
symbolic sizes trace: with dynamic kernels in the bundle,
``torch.compile(..., dynamic=True)`` serves every batch size from one graph.

Autograd (``register_autograd``, forward / setup_context / backward):

* First derivatives run ONE bundle backward kernel (or its eager fallback)
  for exactly the gradients autograd needs (``ctx.needs_input_grad``): only
  the input gradient when the weights are frozen, only the weight (and bias)
  gradients when the input needs none. Under ``torch.no_grad()`` or
  ``torch.inference_mode()`` nothing is saved: only forward kernels run.
* Layer norm's mean and rstd are not differentiable (as ATen's). RMS norm's
  rstd is: its gradient reaches the input as ``-grad_rstd * rstd**3 * x / N``
  (torch ops; the kernels take grad_out only).
* Second derivatives (through a backward op) have no kernels: they
  differentiate torch's eager backward (the loader's eager fallback), as
  torch does, and fail where torch's do (layer norm's mean and rstd).

Autocast: on the CPU torch's layer_norm and rms_norm have no autocast
kernel (they run in the input's dtype, with float32 parameters if so given:
``nn`` casts the parameters to the input's dtype, whose kernel runs); on
CUDA (and ROCm) autocast runs them in float32, and so it runs the forward
ops (``register_autocast``).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
import weakref
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..signature import default_stats_dtype
from . import bundle as _bundle
from .bundle import Bundle, open_bundle, rms_default_eps

BUNDLE_ENV = "BOO_BUNDLE"

# ------------------------------------------------------------------ bundles
# The registry (documented cache): token -> open Bundle, both ways, weakly.
_BY_TOKEN: "weakref.WeakValueDictionary[str, Bundle]" = weakref.WeakValueDictionary()
_TOKENS: "weakref.WeakKeyDictionary[Bundle, str]" = weakref.WeakKeyDictionary()
_SERIAL = itertools.count(1)
_registry_lock = threading.Lock()

_default: Bundle | None = None
_default_lock = threading.Lock()


def bundle_token(bundle: Bundle, token: str | None = None) -> str:
    """The token the ops name ``bundle`` by in this process (registered on
    first use: ``name-version@target#n``). ``token``: bind that token instead
    (a graph recorded in another process), unless it names another open bundle."""
    if not isinstance(bundle, Bundle):
        raise TypeError(f"bundle must be a Bundle (open_bundle(...)), got {type(bundle).__name__}")
    have = _TOKENS.get(bundle)
    if have is not None and token in (None, have):
        return have
    with _registry_lock:
        if token is not None:
            if not token:
                raise ValueError('the token "" stands for the default bundle: use set_default_bundle')
            other = _BY_TOKEN.get(token)
            if other is not None and other is not bundle:
                raise ValueError(f"bundle token {token!r} already names {other!r}")
        else:
            token = _TOKENS.get(bundle) or f"{bundle.name}-{bundle.version}@{bundle.target.name}#{next(_SERIAL)}"
        _TOKENS[bundle] = token  # the latest binding is the one this bundle reports
        _BY_TOKEN[token] = bundle
        return token


def bundle_for(token: str) -> Bundle:
    """The bundle a token names; "" is the default bundle."""
    if not token:
        return default_bundle()
    b = _BY_TOKEN.get(token)
    if b is None:
        raise LookupError(f"no open bundle has token {token!r} in this process (a graph recorded with a bundle "
                          "that was closed, or in another process): open it and bind the token with "
                          f"boo_build.loader.ops.bundle_token(open_bundle(path), {token!r})")
    return b


def set_default_bundle(bundle: Bundle | str | os.PathLike | None) -> Bundle | None:
    """Bundle used by modules built without ``bundle=`` (and the ops' ""); a path is opened (best device)."""
    global _default
    with _default_lock:
        _default = bundle if bundle is None or isinstance(bundle, Bundle) else open_bundle(bundle)
        return _default


def default_bundle() -> Bundle:
    global _default
    with _default_lock:
        if _default is None:
            path = os.environ.get(BUNDLE_ENV)
            if not path:
                raise RuntimeError(
                    "no bundle: pass bundle= to the module, call boo_build.loader.set_default_bundle(...), "
                    f"or set {BUNDLE_ENV} to a bundle path")
            _default = open_bundle(path)
        return _default


# ----------------------------------------------------------------- helpers
_LN_BITS, _RMS_BITS = _bundle._LN_BITS, _bundle._RMS_BITS  # ATen's output_mask order


@functools.lru_cache(maxsize=None)
def _stats_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """ATen's dtype of mean/rstd for an input of ``dtype``."""
    return _bundle._torch_dtype(default_stats_dtype(op, str(dtype).removeprefix("torch.")))


def _stats_like(op: str, x: Tensor, t: Tensor) -> Tensor:
    """A kernel's statistics in the dtype the fake implementation promises
    (a bundle may hold only kernels built with other statistics dtypes)."""
    sd = _stats_dtype(op, x.dtype)
    return t if t.dtype == sd else t.to(sd)


def _stats_shape(x: Tensor, normalized_shape: Sequence[int]) -> tuple:
    shape = tuple(x.shape)  # symbolic sizes while tracing
    return shape[:len(shape) - len(normalized_shape)] + (1,) * len(normalized_shape)


def _asked(output_mask: Sequence[bool], *params: Tensor | None) -> list[bool]:
    """Which gradients a backward returns: those asked for, the parameters' only where given."""
    m = [bool(v) for v in output_mask]
    if len(m) != 1 + len(params):
        raise ValueError(f"output_mask must have {1 + len(params)} booleans, got {list(output_mask)!r}")
    return [m[0]] + [want and p is not None for want, p in zip(m[1:], params)]


def _spread(asked: Sequence[bool], grads: Sequence[Tensor]) -> tuple:
    it = iter(grads)
    return tuple(next(it) if a else None for a in asked)


def _empty(t: Tensor) -> Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format)


# The op bodies call the Bundle's entry points with autograd already handled:
# custom ops run their implementation below the autograd key, with grad mode
# off or no argument requiring grad, so the entry points take their kernel path.

# -------------------------------------------------------------- layer norm
@torch.library.custom_op("boo::layer_norm", mutates_args=())
def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Optional[Tensor], bias: Optional[Tensor],
               eps: float, bundle: str) -> tuple[Tensor, Tensor, Tensor]:
    out, mean, rstd = bundle_for(bundle).native_layer_norm(input, normalized_shape, weight, bias, eps)
    return out, _stats_like("layer_norm", input, mean), _stats_like("layer_norm", input, rstd)


@layer_norm.register_fake
def _(input, normalized_shape, weight, bias, eps, bundle):
    st, sd = _stats_shape(input, normalized_shape), _stats_dtype("layer_norm", input.dtype)
    return _empty(input), input.new_empty(st, dtype=sd), input.new_empty(st, dtype=sd)


def _layer_norm_setup(ctx, inputs, output):
    x, normalized_shape, weight, bias, eps, bundle = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)  # as ATen's
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.normalized_shape, ctx.eps, ctx.bundle = normalized_shape, eps, bundle


def _layer_norm_backward(ctx, grad_out, _grad_mean, _grad_rstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    need = ctx.needs_input_grad
    mask = [need[0], need[2], need[3]]
    gx = gw = gb = None
    if grad_out is not None and any(mask):
        gx, gw, gb = _spread(_asked(mask, weight, bias), torch.ops.boo.layer_norm_backward(
            grad_out, x, ctx.normalized_shape, mean, rstd, weight, bias, mask, ctx.eps, ctx.bundle))
    return gx, None, gw, gb, None, None


layer_norm.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)


@torch.library.custom_op("boo::layer_norm_backward", mutates_args=())
def layer_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], mean: Tensor,
                        rstd: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                        output_mask: Sequence[bool], eps: Optional[float], bundle: str) -> list[Tensor]:
    grads = bundle_for(bundle).native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight,
                                                          bias, output_mask, eps=eps)
    return [g for g in grads if g is not None]


@layer_norm_backward.register_fake
def _(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask, eps, bundle):
    return [_empty(t) for t, a in zip((input, weight, bias), _asked(output_mask, weight, bias)) if a]


def _layer_norm_backward_setup(ctx, inputs, output):
    grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask, _, _ = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(grad_out, x, mean, rstd, weight, bias)
    ctx.normalized_shape = _bundle._norm_shape(normalized_shape)
    ctx.mask = sum(bit for bit, a in zip(_LN_BITS, _asked(output_mask, weight, bias)) if a)


def _layer_norm_backward_backward(ctx, grads):
    ns, mask = ctx.normalized_shape, ctx.mask

    def eager(gy, x, mean, rstd, w, b):
        st = _bundle._stats_shape(tuple(x.shape), ns)
        return _bundle._eager_layer_norm_backward(ns, mask, gy, x, mean.reshape(st), rstd.reshape(st), w, b)

    g = _second_order(ctx, eager, grads, (0, 1, 3, 4, 5, 6))
    return g[0], g[1], None, g[2], g[3], g[4], g[5], None, None, None


layer_norm_backward.register_autograd(_layer_norm_backward_backward, setup_context=_layer_norm_backward_setup)


# ----------------------------------------------------------------- RMS norm
@torch.library.custom_op("boo::rms_norm", mutates_args=())
def rms_norm(input: Tensor, normalized_shape: Sequence[int], weight: Optional[Tensor], eps: Optional[float],
             bundle: str) -> tuple[Tensor, Tensor]:
    out, rstd = bundle_for(bundle).fused_rms_norm(input, normalized_shape, weight, eps)
    return out, _stats_like("rms_norm", input, rstd)


@rms_norm.register_fake
def _(input, normalized_shape, weight, eps, bundle):
    return _empty(input), input.new_empty(_stats_shape(input, normalized_shape),
                                          dtype=_stats_dtype("rms_norm", input.dtype))


def _rms_norm_setup(ctx, inputs, output):
    x, normalized_shape, weight, eps, bundle = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, weight, output[1])
    ctx.normalized_shape, ctx.bundle = normalized_shape, bundle
    ctx.eps = rms_default_eps() if eps is None else eps


def _rms_norm_backward(ctx, grad_out, grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    need = ctx.needs_input_grad
    gx = gw = None
    if grad_out is not None and (need[0] or need[2]):
        mask = [need[0], need[2]]
        gx, gw = _spread(_asked(mask, weight), torch.ops.boo.rms_norm_backward(
            grad_out, x, ctx.normalized_shape, rstd, weight, mask, ctx.eps, ctx.bundle))
    if grad_rstd is not None and need[0]:
        # rstd = (mean(x**2) + eps) ** -1/2, so d rstd / dx = -rstd**3 * x / N (float32, ATen's opmath)
        n = max(1, math.prod(ctx.normalized_shape))
        g = grad_rstd.float() * rstd.float().pow(3) * x.float() / -n
        gx = (g if gx is None else gx.float() + g).to(x.dtype)
    return gx, None, gw, None, None


rms_norm.register_autograd(_rms_norm_backward, setup_context=_rms_norm_setup)


@torch.library.custom_op("boo::rms_norm_backward", mutates_args=())
def rms_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], rstd: Tensor,
                      weight: Optional[Tensor], output_mask: Sequence[bool], eps: Optional[float],
                      bundle: str) -> list[Tensor]:
    grads = bundle_for(bundle).fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight,
                                                       output_mask, eps=eps)
    return [g for g in grads if g is not None]


@rms_norm_backward.register_fake
def _(grad_out, input, normalized_shape, rstd, weight, output_mask, eps, bundle):
    return [_empty(t) for t, a in zip((input, weight), _asked(output_mask, weight)) if a]


def _rms_norm_backward_setup(ctx, inputs, output):
    grad_out, x, normalized_shape, rstd, weight, output_mask, _, _ = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(grad_out, x, rstd, weight)
    ctx.normalized_shape = _bundle._norm_shape(normalized_shape)
    ctx.mask = sum(bit for bit, a in zip(_RMS_BITS, _asked(output_mask, weight)) if a)


def _rms_norm_backward_backward(ctx, grads):
    ns, mask = ctx.normalized_shape, ctx.mask

    def eager(gy, x, rstd, w):
        st = _bundle._stats_shape(tuple(x.shape), ns)
        return _bundle._eager_rms_norm_backward(ns, mask, gy, x, rstd.reshape(st), w)

    g = _second_order(ctx, eager, grads, (0, 1, 3, 4))
    return g[0], g[1], None, g[2], g[3], None, None, None


rms_norm_backward.register_autograd(_rms_norm_backward_backward, setup_context=_rms_norm_backward_setup)


def _second_order(ctx, eager, grads, positions) -> list:
    """Gradients of the saved tensors (the inputs at ``positions``) through
    torch's ``eager(*saved)`` (the asked gradients, in order), given the
    gradients of its outputs; None where ``ctx.needs_input_grad`` says none is needed."""
    need = [ctx.needs_input_grad[p] for p in positions]
    saved = ctx.saved_tensors
    create = torch.is_grad_enabled()  # backward(create_graph=True): keep the graph for higher orders
    with torch.enable_grad():
        ins = list(saved) if create else [None if t is None else t.detach().requires_grad_(n)
                                          for t, n in zip(saved, need)]
        outs = eager(*ins)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wanted = [t for t, n in zip(ins, need) if n]
        got = (torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True,
                                   create_graph=create)
               if pairs and wanted else [None] * len(wanted))
    it = iter(got)
    return [next(it) if n else None for n in need]


# Autocast: where torch runs its norms in float32 (an autocast kernel for
# aten::layer_norm / aten::rms_norm: CUDA, which ROCm shares), so do the ops.
AUTOCAST_FLOAT32 = frozenset(d for d in ("cuda",) if all(
    torch._C._dispatch_has_kernel_for_dispatch_key(a, "Autocast" + d.upper()) for a in ("aten::layer_norm",
                                                                                       "aten::rms_norm")))
for _device in AUTOCAST_FLOAT32:
    torch.library.register_autocast(layer_norm, _device, torch.float32)
    torch.library.register_autocast(rms_norm, _device, torch.float32)


# ------------------------------------------------ the Bundle's entry points
# Bundle.native_layer_norm & co. with autograd recording: the same ops.
def native_layer_norm(bundle: Bundle, input, normalized_shape, weight, bias, eps):
    return torch.ops.boo.layer_norm(input, _bundle._norm_shape(normalized_shape), weight, bias, float(eps),
                                    bundle_token(bundle))


def native_layer_norm_backward(bundle: Bundle, grad_out, input, normalized_shape, mean, rstd, weight, bias,
                               output_mask, eps):
    mask = [bool(v) for v in output_mask]
    return _spread(_asked(mask, weight, bias), torch.ops.boo.layer_norm_backward(
        grad_out, input, _bundle._norm_shape(normalized_shape), mean, rstd, weight, bias, mask,
        None if eps is None else float(eps), bundle_token(bundle)))


def fused_rms_norm(bundle: Bundle, input, normalized_shape, weight, eps):
    return torch.ops.boo.rms_norm(input, _bundle._norm_shape(normalized_shape), weight,
                                  None if eps is None else float(eps), bundle_token(bundle))


def fused_rms_norm_backward(bundle: Bundle, grad_out, input, normalized_shape, rstd, weight, output_mask, eps):
    mask = [bool(v) for v in output_mask]
    return _spread(_asked(mask, weight), torch.ops.boo.rms_norm_backward(
        grad_out, input, _bundle._norm_shape(normalized_shape), rstd, weight, mask,
        None if eps is None else float(eps), bundle_token(bundle)))


__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward", "bundle_token", "bundle_for",
           "set_default_bundle", "default_bundle", "BUNDLE_ENV", "AUTOCAST_FLOAT32"]
