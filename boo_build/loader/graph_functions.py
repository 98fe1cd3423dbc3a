"""What replaces a norm in a compiled graph (``norm_pass.py``): plain functions in the graph,
which AOT autograd traces through to the ``boo::`` custom ops (one set for every spelling:
torch's functions and modules, modules written by hand, norms written inline), and the
fused residual form's (``boo_add_*``: the add before the norm and the norm, one kernel).

Imports torch.
"""

from __future__ import annotations

import math

import torch


# Plain functions in the graph: AOT autograd traces through them to the custom ops. The
# kernels take one dtype: parameters of another (float32 weights beside a bfloat16 input)
# are cast to the input's, whose kernel runs, as the nn modules do; ``out_dtype``: the
# dtype the replaced code gave (a norm written by hand may return its weight's), if other.
def _like(x, p, shape=None):
    if p is not None and shape is not None and tuple(p.shape) != tuple(shape):
        p = p.reshape(shape)  # a weight written inline as a view (ConvNeXt's ``w[:, None, None]``): its elements
    return p if p is None or p.dtype == x.dtype else p.to(x.dtype)


def _out(y, dtype):
    return y if dtype is None or y.dtype == dtype else y.to(dtype)


def _permuted(x, perm):
    """A norm over dims that are not the last (channels-first): those dims moved last, and the way back."""
    if perm is None:
        return x, None
    back = [0] * len(perm)
    for i, d in enumerate(perm):
        back[d] = i
    return x.permute(perm), back


def boo_layer_norm(input, normalized_shape, weight, bias, eps, bundle, native, out_dtype=None, perm=None):
    x, back = _permuted(input, perm)
    out = torch.ops.boo.layer_norm(x, normalized_shape, _like(x, weight, normalized_shape),
                                   _like(x, bias, normalized_shape), eps, bundle)
    if native:
        return out
    y = _out(out[0], out_dtype)
    return y if back is None else y.permute(back)


def boo_rms_norm(input, normalized_shape, weight, eps, bundle, native, weight_offset=0.0, out_dtype=None, perm=None):
    x, back = _permuted(input, perm)
    out = torch.ops.boo.rms_norm(x, normalized_shape, _like(x, weight, normalized_shape), eps, weight_offset, bundle)
    if native:
        return out
    y = _out(out[0], out_dtype)
    return y if back is None else y.permute(back)


def _with_sum(out, h, back):
    """A fused norm's results as the graph had them: (the norm's, as its plain function returns
    them; the sum h), each permuted back where the norm was over other dims than the last."""
    return out, (h if back is None else h.permute(back))


def boo_add_layer_norm(input, residual, normalized_shape, weight, bias, eps, bundle, native, out_dtype=None,
                       perm=None):
    """``input + residual`` then the layer norm of the sum, one kernel -> (the norm's results, the sum)."""
    x, back = _permuted(input, perm)
    r, _ = _permuted(residual, perm)
    y, h, *stats = torch.ops.boo.add_layer_norm(x, r, normalized_shape, _like(x, weight, normalized_shape),
                                                _like(x, bias, normalized_shape), eps, bundle)
    if native:
        return (y, *stats), h
    y = _out(y, out_dtype)
    return _with_sum(y if back is None else y.permute(back), h, back)


def boo_add_rms_norm(input, residual, normalized_shape, weight, eps, bundle, native, weight_offset=0.0,
                     out_dtype=None, perm=None):
    """``input + residual`` then the RMS norm of the sum, one kernel -> (the norm's results, the sum)."""
    x, back = _permuted(input, perm)
    r, _ = _permuted(residual, perm)
    y, h, *stats = torch.ops.boo.add_rms_norm(x, r, normalized_shape, _like(x, weight, normalized_shape), eps,
                                              weight_offset, bundle)
    if native:
        return (y, *stats), h
    y = _out(y, out_dtype)
    return _with_sum(y if back is None else y.permute(back), h, back)


def boo_group_norm(input, weight, bias, group, eps, bundle, native, out_dtype=None):
    shape = input.shape
    out = torch.ops.boo.group_norm(input, _like(input, weight), _like(input, bias), shape[0], shape[1],
                                   math.prod(shape[2:]), group, eps, bundle)
    return out if native else _out(out[0], out_dtype)


__all__ = ["boo_add_layer_norm", "boo_add_rms_norm", "boo_group_norm", "boo_layer_norm", "boo_rms_norm"]
