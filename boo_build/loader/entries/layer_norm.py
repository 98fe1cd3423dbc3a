"""Layer norm's loader entry points (``Bundle.native_layer_norm``,
``native_layer_norm_backward``: ATen's arguments) and its ``boo::`` torch ops,
described (``torch_ops()``)."""

from __future__ import annotations

from ...ops.base import DEFAULT_EPS
from ...ops.layer_norm import LAYER_NORM
from .. import calls


def native_layer_norm(bundle, input, normalized_shape, weight=None, bias=None, eps: float = DEFAULT_EPS):
    """ATen's native_layer_norm -> (out, mean, rstd); mean/rstd in the stats dtype (float32).
    Differentiable in ``out`` (through the ``boo::layer_norm`` op)."""
    out = calls.forward(bundle, LAYER_NORM, input, normalized_shape, weight, bias, eps, autograd=True)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    return torch.ops.boo.layer_norm(input, calls.norm_shape(normalized_shape), weight, bias, float(eps),
                                    bundle.token())


def native_layer_norm_backward(bundle, grad_out, input, normalized_shape, mean, rstd, weight=None, bias=None,
                               output_mask=(True, True, True), *, eps: float | None = None):
    """ATen's native_layer_norm_backward -> (grad_input, grad_weight, grad_bias), None where not asked.

    ``eps`` (not an ATen argument) only picks between kernels built for
    different eps; without it any eps matches (it does not enter the math).
    """
    out = calls.backward(bundle, LAYER_NORM, output_mask, grad_out, input, normalized_shape, (mean, rstd), weight,
                         bias, eps, autograd=True)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    from .. import autograd as ag

    m = [bool(v) for v in output_mask]
    return ag.spread(ag.asked(m, weight, bias), torch.ops.boo.layer_norm_backward(
        grad_out, input, calls.norm_shape(normalized_shape), mean, rstd, weight, bias, m,
        None if eps is None else float(eps), bundle.token()))


def _eager_backward(args, mask, gy, x, stats, params):
    ns = calls.norm_shape(args["normalized_shape"])
    st = calls.stats_shape(tuple(x.shape), ns)
    mean, rstd = stats
    return LAYER_NORM.eager_backward(ns, mask, gy, x, mean.reshape(st), rstd.reshape(st), *params)


ENTRY_POINTS = {"native_layer_norm": native_layer_norm, "native_layer_norm_backward": native_layer_norm_backward}


def torch_ops():
    """The ``boo::`` torch ops, described (``library.TorchOps``; made when they are registered)."""
    from ..library import TorchOps

    return TorchOps(
        op="layer_norm",
        forward_args=("Tensor input", "SymInt[] normalized_shape", "Tensor? weight", "Tensor? bias", "float eps"),
        backward_args=("Tensor grad_out", "Tensor input", "SymInt[] normalized_shape", "Tensor mean", "Tensor rstd",
                       "Tensor? weight", "Tensor? bias", "bool[] output_mask", "float? eps"),
        params=("weight", "bias"),
        forward=native_layer_norm,
        backward=native_layer_norm_backward,
        stats_shape=lambda x, args: calls.stats_shape(tuple(x.shape), args["normalized_shape"]),
        eager_backward=_eager_backward,
    )
