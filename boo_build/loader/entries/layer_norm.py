"""Layer norm's loader entry points (``Bundle.native_layer_norm``,
``native_layer_norm_backward``: ATen's arguments; ``add_layer_norm``,
``add_layer_norm_backward``: the fused residual form, x + residual then the norm)
and its ``boo::`` torch ops, described (``torch_ops()``)."""

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


def add_layer_norm(bundle, input, residual, normalized_shape, weight=None, bias=None, eps: float = DEFAULT_EPS):
    """``h = input + residual``, then native_layer_norm of h, in one kernel -> (out, h, mean, rstd):
    h in the input's dtype, the statistics and out from h as stored. Differentiable in ``out``
    and ``h`` (through the ``boo::add_layer_norm`` op): input and residual get one gradient."""
    out = calls.residual_forward(bundle, LAYER_NORM, input, residual, normalized_shape, weight, bias, eps,
                                 autograd=True)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    return torch.ops.boo.add_layer_norm(input, residual, calls.norm_shape(normalized_shape), weight, bias,
                                        float(eps), bundle.token())


def add_layer_norm_backward(bundle, grad_out, input, normalized_shape, mean, rstd, weight=None, bias=None,
                            output_mask=(True, True, True), grad_h=None, *, eps: float | None = None):
    """``add_layer_norm``'s backward -> (grad_input, grad_weight, grad_bias), None where not asked;
    ``input`` is the forward's h, ``grad_input`` is ``dh = norm_backward(grad_out) + grad_h``, the
    gradient of both the input and the residual; ``grad_h``: the gradient h gets from its other
    users (None: it has none, the plain backward of h). ``eps`` as ``native_layer_norm_backward``'s."""
    out = calls.residual_backward(bundle, LAYER_NORM, output_mask, grad_out, input, normalized_shape, (mean, rstd),
                                  weight, bias, grad_h, eps, autograd=True)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    from .. import autograd as ag

    m = [bool(v) for v in output_mask]
    return ag.spread(ag.asked(m, weight, bias), torch.ops.boo.add_layer_norm_backward(
        grad_out, input, calls.norm_shape(normalized_shape), mean, rstd, weight, bias, m, grad_h,
        None if eps is None else float(eps), bundle.token()))


def _eager_backward(args, mask, gy, x, stats, params):
    ns = calls.norm_shape(args["normalized_shape"])
    st = calls.stats_shape(tuple(x.shape), ns)
    mean, rstd = stats
    return LAYER_NORM.eager_backward(ns, mask, gy, x, mean.reshape(st), rstd.reshape(st), *params)


ENTRY_POINTS = {"native_layer_norm": native_layer_norm, "native_layer_norm_backward": native_layer_norm_backward,
                "add_layer_norm": add_layer_norm, "add_layer_norm_backward": add_layer_norm_backward}


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
        residual_forward=add_layer_norm,
        residual_backward=add_layer_norm_backward,
    )
