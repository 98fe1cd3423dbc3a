"""RMS norm's loader entry points (``Bundle.fused_rms_norm``, ``fused_rms_norm_backward``:
ATen's arguments, then ``weight_offset``; ``add_rms_norm``, ``add_rms_norm_backward``: the
fused residual form, x + residual then the norm) and its ``boo::`` torch ops, described
(``torch_ops()``). rstd is differentiable, as ATen's: its gradient reaches the input as
``-grad_rstd * rstd**3 * x / N`` (torch ops; the kernels take grad_out only).

``weight_offset`` (default 0): the output scales by ``weight_offset + weight``, added
and multiplied in float32 and then cast to the input's dtype, as Gemma's norms compute
``x * rsqrt(mean(x**2) + eps) * (1 + weight)``; the weight's gradient is that of
``weight_offset + weight``. Served by kernels built with the same offset (the
signature's ``weight_offset``)."""

from __future__ import annotations

import math

from ...ops.rms_norm import RMS_NORM
from .. import calls


def fused_rms_norm(bundle, input, normalized_shape, weight=None, eps: float | None = None,
                   weight_offset: float = 0.0):
    """ATen's _fused_rms_norm -> (out, rstd); eps None is float32's epsilon, as in torch.
    Differentiable in ``out`` and ``rstd``, as ATen's. ``weight_offset``: see the module."""
    eps = RMS_NORM.none_eps if eps is None else eps
    out = calls.forward(bundle, RMS_NORM, input, normalized_shape, weight, None, eps, autograd=True,
                        offset=weight_offset)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    return torch.ops.boo.rms_norm(input, calls.norm_shape(normalized_shape), weight, float(eps),
                                  float(weight_offset), bundle.token())


def fused_rms_norm_backward(bundle, grad_out, input, normalized_shape, rstd, weight=None,
                            output_mask=(True, True), weight_offset: float = 0.0, *, eps: float | None = None):
    """ATen's _fused_rms_norm_backward -> (grad_input, grad_weight), None where not asked.
    ``eps`` as in ``native_layer_norm_backward``; ``weight_offset`` as the forward's."""
    out = calls.backward(bundle, RMS_NORM, output_mask, grad_out, input, normalized_shape, (rstd,), weight, None,
                         eps, autograd=True, offset=weight_offset)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    from .. import autograd as ag

    m = [bool(v) for v in output_mask]
    return ag.spread(ag.asked(m, weight), torch.ops.boo.rms_norm_backward(
        grad_out, input, calls.norm_shape(normalized_shape), rstd, weight, m, float(weight_offset),
        None if eps is None else float(eps), bundle.token()))


def add_rms_norm(bundle, input, residual, normalized_shape, weight=None, eps: float | None = None,
                 weight_offset: float = 0.0):
    """``h = input + residual``, then _fused_rms_norm of h, in one kernel -> (out, h, rstd), as
    ``add_layer_norm`` (vLLM's ``fused_add_rms_norm``, returning h rather than writing it over
    the residual). Differentiable in ``out``, ``h`` and ``rstd`` (``boo::add_rms_norm``)."""
    eps = RMS_NORM.none_eps if eps is None else eps
    out = calls.residual_forward(bundle, RMS_NORM, input, residual, normalized_shape, weight, None, eps,
                                 autograd=True, offset=weight_offset)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    return torch.ops.boo.add_rms_norm(input, residual, calls.norm_shape(normalized_shape), weight, float(eps),
                                      float(weight_offset), bundle.token())


def add_rms_norm_backward(bundle, grad_out, input, normalized_shape, rstd, weight=None, output_mask=(True, True),
                          weight_offset: float = 0.0, grad_h=None, *, eps: float | None = None):
    """``add_rms_norm``'s backward -> (grad_input, grad_weight), as ``add_layer_norm_backward``'s
    (``input``: the forward's h; ``grad_h``: the gradient h gets from its other users, or None)."""
    out = calls.residual_backward(bundle, RMS_NORM, output_mask, grad_out, input, normalized_shape, (rstd,), weight,
                                  None, grad_h, eps, autograd=True, offset=weight_offset)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    from .. import autograd as ag

    m = [bool(v) for v in output_mask]
    return ag.spread(ag.asked(m, weight), torch.ops.boo.add_rms_norm_backward(
        grad_out, input, calls.norm_shape(normalized_shape), rstd, weight, m, float(weight_offset), grad_h,
        None if eps is None else float(eps), bundle.token()))


def _eager_backward(args, mask, gy, x, stats, params):
    ns = calls.norm_shape(args["normalized_shape"])
    (rstd,) = stats
    return RMS_NORM.eager_backward(RMS_NORM.with_offset(ns, args["weight_offset"]), mask, gy, x,
                                   rstd.reshape(calls.stats_shape(tuple(x.shape), ns)), *params)


def _rstd_grad(saved, grads, need) -> None:
    """rstd = (mean(x**2) + eps) ** -1/2, so d rstd / dx = -rstd**3 * x / N (float32, ATen's opmath)."""
    g_rstd = saved["grad_rstd"]
    if g_rstd is None or not need["input"]:
        return
    x, rstd = saved["input"], saved["rstd"]
    n = max(1, math.prod(saved["normalized_shape"]))
    g = g_rstd.float() * rstd.float().pow(3) * x.float() / -n
    gx = grads["input"]
    grads["input"] = (g if gx is None else gx.float() + g).to(x.dtype)


ENTRY_POINTS = {"fused_rms_norm": fused_rms_norm, "fused_rms_norm_backward": fused_rms_norm_backward,
                "add_rms_norm": add_rms_norm, "add_rms_norm_backward": add_rms_norm_backward}


def torch_ops():
    """The ``boo::`` torch ops, described (``library.TorchOps``; made when they are registered)."""
    from ..library import TorchOps

    return TorchOps(
        op="rms_norm",
        forward_args=("Tensor input", "SymInt[] normalized_shape", "Tensor? weight", "float? eps",
                      "float weight_offset"),
        backward_args=("Tensor grad_out", "Tensor input", "SymInt[] normalized_shape", "Tensor rstd", "Tensor? weight",
                       "bool[] output_mask", "float weight_offset", "float? eps"),
        params=("weight",),
        forward=fused_rms_norm,
        backward=fused_rms_norm_backward,
        stats_shape=lambda x, args: calls.stats_shape(tuple(x.shape), args["normalized_shape"]),
        eager_backward=_eager_backward,
        stats_differentiable=True,
        extra_grads=_rstd_grad,
        residual_forward=add_rms_norm,
        residual_backward=add_rms_norm_backward,
    )
