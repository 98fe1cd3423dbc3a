"""The ``boo::add_<op>`` torch ops: an op's fused residual form (``h = x + residual``,
then the norm of h) as a forward and a combined backward custom op, from the op's
description (``library.TorchOps``, its ``residual_forward``/``residual_backward`` entry
points), registered by ``library.registered`` beside the plain ones.

The forward returns (out, h, *stats); autograd hands its backward the gradients of out
and of h (``grad_h``: h's other users, the next residual), and the backward op returns
``dh = norm_backward(grad_out) + grad_h``, the gradient of both the input and the
residual, with the weight's and bias's, in one kernel (without grad_h, the plain backward
of h). What the plain ops do otherwise, these do alike: fake implementations from shapes,
statistics non-differentiable unless the op's are (RMS norm's rstd: ``extra_grads``),
second derivatives through torch's eager backward, autocast in float32.

Imports torch: imported by ``library`` when it registers the ops.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import autograd as ag


def _names(schema_args) -> tuple[str, ...]:
    return tuple(a.rsplit(" ", 1)[1] for a in schema_args)


def register_residual(d: Any, by_token: Callable[[str], Any]) -> None:
    """Register ``boo::add_<op>`` and ``boo::add_<op>_backward`` for ``d`` (a ``library.TorchOps``
    whose ``residual_forward`` is set), their bodies finding bundles with ``by_token``."""
    op = d.description
    name = f"add_{op.name}"
    f_args, b_args = d.residual_args()
    fwd_names, bwd_names = _names(f_args), _names(b_args)
    stats = tuple(op.stats)
    fwd_schema, bwd_schema = d.residual_schemas()
    fwd_tensors = ("input", "residual", *d.params)
    shape_args = tuple(n for n in fwd_names if n not in fwd_tensors and n != "eps")
    bwd_tensors = tuple(n for n, a in zip(bwd_names, b_args) if a.startswith("Tensor"))

    def forward_body(*args):
        *rest, bundle = args
        out = d.residual_forward(by_token(bundle), *rest)
        x = rest[0]
        return (out[0], out[1], *(ag.stats_like(op, x, s) for s in out[2:]))

    fwd = torch.library.custom_op(f"boo::{name}", forward_body, mutates_args=(), schema=fwd_schema)

    @fwd.register_fake
    def _(*args):
        named = dict(zip(fwd_names, args))
        x = named["input"]
        st, sd = d.stats_shape(x, named), ag.stats_dtype(op, x.dtype)
        return (ag.empty(x), ag.empty(x), *(x.new_empty(st, dtype=sd) for _ in stats))

    def setup(ctx, inputs, output):
        named = dict(zip(fwd_names, inputs))
        if not d.stats_differentiable:
            ctx.mark_non_differentiable(*output[2:])  # as ATen's
        ctx.set_materialize_grads(False)
        # the backward's input is h (output[1]), as stored
        ctx.save_for_backward(output[1], *(named[p] for p in d.params), *output[2:])
        ctx.args = {n: named[n] for n in shape_args}
        eps = named.get("eps")
        ctx.eps, ctx.bundle = op.none_eps if eps is None else eps, inputs[-1]

    def backward(ctx, grad_out, grad_h, *grad_stats):
        saved = dict(zip(("input", *d.params, *stats), ctx.saved_tensors))
        need = dict(zip(fwd_names, ctx.needs_input_grad))
        need["input"] = bool(need["input"] or need["residual"])  # one gradient reaches both
        grads: dict[str, Any] = dict.fromkeys(("input", *d.params))
        if grad_out is not None:
            mask = d.output_mask(need, saved)
            if any(mask):
                given = {**saved, **ctx.args, "grad_out": grad_out, "output_mask": mask, "eps": ctx.eps,
                         "grad_h": grad_h if mask[0] else None}
                outs = getattr(torch.ops.boo, f"{name}_backward")(*(given[n] for n in bwd_names), ctx.bundle)
                asked = ag.asked(mask, *(saved[g] for g in d.gates))
                grads.update(zip(("input", *d.params), ag.spread(asked, outs)))
        elif need["input"]:  # only h's other users: the sum passes their gradient on
            grads["input"] = grad_h
        if d.extra_grads is not None:
            d.extra_grads({**saved, **ctx.args, "grad_out": grad_out,
                           **{f"grad_{s}": g for s, g in zip(stats, grad_stats)}}, grads, need)
        dh = grads["input"]
        by_name = {**grads, "input": dh if ctx.needs_input_grad[0] else None,
                   "residual": dh if ctx.needs_input_grad[1] else None}
        return tuple(by_name.get(n) for n in fwd_names) + (None,)

    fwd.register_autograd(backward, setup_context=setup)

    def backward_body(*args):
        *rest, eps, bundle = args
        grads = d.residual_backward(by_token(bundle), *rest, eps=eps)
        return [g for g in grads if g is not None]

    bwd = torch.library.custom_op(f"boo::{name}_backward", backward_body, mutates_args=(), schema=bwd_schema)

    @bwd.register_fake
    def _(*args):
        named = dict(zip(bwd_names, args))
        gates = [named[g] for g in d.gates]
        ts = (named["input"], *(named[p] if p in named else named[g] for p, g in zip(d.params, d.gates)))
        return [ag.empty(t) for t, a in zip(ts, ag.asked(named["output_mask"], *gates)) if a]

    def backward_setup(ctx, inputs, output):
        named = dict(zip(bwd_names, inputs))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*(named[n] for n in bwd_tensors))
        ctx.args = {n: named[n] for n in shape_args}
        asked = ag.asked(named["output_mask"], *(named[g] for g in d.gates))
        ctx.mask = d.mask_bits(asked)

    def backward_backward(ctx, grads):
        args, mask = ctx.args, ctx.mask

        def eager(*saved):
            named = dict(zip(bwd_tensors, saved))
            outs = d.eager_backward(args, mask, named["grad_out"], named["input"], tuple(named[s] for s in stats),
                                    tuple(named[p] for p in d.params if p in named))
            gh = named.get("grad_h")
            if gh is None or not mask & op.grads[0]:
                return outs
            return (outs[0] + gh, *outs[1:])

        positions = tuple(bwd_names.index(n) for n in bwd_tensors)
        g = iter(ag.second_order(ctx, eager, grads, positions))
        return tuple(next(g) if n in bwd_tensors else None for n in bwd_names) + (None,)

    bwd.register_autograd(backward_backward, setup_context=backward_setup)
    ag.register_autocast(fwd, op.autocast_aten)


__all__ = ["register_residual"]
