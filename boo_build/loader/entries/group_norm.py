"""Group norm's loader entry points (``Bundle.native_group_norm``,
``native_group_norm_backward``: ATen's arguments) and its ``boo::`` torch ops,
described (``torch_ops()``): the backward returns the gradients asked for, the
weight's and bias's only with a weight (ATen's backward takes no bias)."""

from __future__ import annotations

import math

from ...ops.base import DEFAULT_EPS
from ...ops.group_norm import GROUP_NORM
from .. import calls


def _check_sizes(input, N, C, HxW) -> None:
    """ATen's N, C, HxW must describe the input (ATen checks them too)."""
    shape = tuple(input.shape) if hasattr(input, "shape") else None
    if shape is None:
        return  # not an array: the checks name it
    if len(shape) < 2 or (shape[0], shape[1], math.prod(shape[2:])) != (N, C, HxW):
        raise ValueError(f"N={N}, C={C}, HxW={HxW} do not describe the input of shape {list(shape)} "
                         "(N = shape[0], C = shape[1], HxW = the product of the rest)")


def native_group_norm(bundle, input, weight, bias, N: int, C: int, HxW: int, group: int, eps: float = DEFAULT_EPS):
    """ATen's native_group_norm -> (out, mean, rstd); mean/rstd ``[N, group]`` in the
    input's dtype (as ATen's CPU kernel). Differentiable in ``out`` (``boo::group_norm``)."""
    _check_sizes(input, N, C, HxW)
    out = calls.forward(bundle, GROUP_NORM, input, group, weight, bias, eps, autograd=True)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    return torch.ops.boo.group_norm(input, weight, bias, N, C, HxW, int(group), float(eps), bundle.token())


def native_group_norm_backward(bundle, grad_out, input, mean, rstd, weight, N: int, C: int, HxW: int, group: int,
                               output_mask=(True, True, True), *, eps: float | None = None):
    """ATen's native_group_norm_backward -> (grad_input, grad_weight, grad_bias), None where
    not asked; the weight and bias gradients only with a weight (ATen's CPU kernel
    refuses them without one). ``eps`` as in ``native_layer_norm_backward``."""
    _check_sizes(input, N, C, HxW)
    # ATen's backward takes no bias: its gradient comes with the weight's form (wb kernels)
    out = calls.backward(bundle, GROUP_NORM, output_mask, grad_out, input, group, (mean, rstd), weight, weight, eps,
                         autograd=True)
    if out is not calls.AUTOGRAD:
        return out
    from ..library import registered  # the torch ops: only where autograd records a call

    torch = registered(bundle.by_token)
    from .. import autograd as ag

    m = [bool(v) for v in output_mask]
    return ag.spread(ag.asked(m, weight, weight), torch.ops.boo.group_norm_backward(
        grad_out, input, mean, rstd, weight, N, C, HxW, int(group), m, None if eps is None else float(eps),
        bundle.token()))


def _eager_backward(args, mask, gy, x, stats, params):
    mean, rstd = stats
    return GROUP_NORM.eager_backward(args["group"], mask, gy, x, mean, rstd, *params)


def _bias_without_weight(saved, grads, need) -> None:
    """A bias without a weight: its gradient is the sum of grad_out per channel."""
    gy = saved["grad_out"]
    if gy is None or not need["bias"] or saved["weight"] is not None:
        return
    dims = [0] + list(range(2, gy.dim()))
    grads["bias"] = gy.float().sum(dim=dims).to(saved["bias"].dtype)


ENTRY_POINTS = {"native_group_norm": native_group_norm, "native_group_norm_backward": native_group_norm_backward}


def torch_ops():
    """The ``boo::`` torch ops, described (``library.TorchOps``; made when they are registered)."""
    from ..library import TorchOps

    return TorchOps(
        op="group_norm",
        forward_args=("Tensor input", "Tensor? weight", "Tensor? bias", "SymInt N", "SymInt C", "SymInt HxW", "int group",
                      "float eps"),
        backward_args=("Tensor grad_out", "Tensor input", "Tensor mean", "Tensor rstd", "Tensor? weight", "SymInt N",
                       "SymInt C", "SymInt HxW", "int group", "bool[] output_mask", "float? eps"),
        params=("weight", "bias"),
        gated_by=("weight", "weight"),
        forward=native_group_norm,
        backward=native_group_norm_backward,
        stats_shape=lambda x, args: (args["N"], args["group"]),
        eager_backward=_eager_backward,
        extra_grads=_bias_without_weight,
    )
