"""One registration of every op's ``boo::`` torch ops, from each op's description (``TorchOps``).

Each op with entry points has two custom ops, ``boo::<op>`` (its forward) and
``boo::<op>_backward`` (the combined backward of the gradients asked for), with
ATen's arguments plus the bundle's token (``Bundle.token``), so that autograd,
``torch.compile`` and ``torch.export`` see one op per call. Their bodies call the
op's entry points (``entries``) below the autograd key; fake implementations
compute results from shapes and dtypes only, so symbolic sizes trace; the
forward's autograd formula calls the backward op with ATen's output mask; the
backward's own is torch's eager backward differentiated (no kernels for second
derivatives); autocast runs them in float32 where torch runs ATen's op so. An op
with the fused residual form (``TorchOps.residual_forward``: layer norm, RMS norm) has
two more, ``boo::add_<op>`` and ``boo::add_<op>_backward``, made alike (``_register``'s
``residual``): the forward takes the residual after the input and returns h after out,
the backward takes ``grad_h`` before eps.

What differs from op to op is data in its ``TorchOps``: the two schemas (their
argument names say what each argument is: ``input``, ``grad_out``, the op's
parameters, its statistics, ``output_mask``, ``eps``, ``bundle``; the rest are
its shape arguments), the entry points, the statistics' shape, torch's eager
backward for second derivatives, and the few gradients ATen's backward does not
give (``extra_grads``: RMS norm's differentiable rstd, a group norm bias without a
weight). Adding an op adds its description, not a copy of this.

Imports torch when first used (``registered``), never at ``import boo_build.loader``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .. import ops


def _names(schema_args: Sequence[str]) -> tuple[str, ...]:
    return tuple(a.rsplit(" ", 1)[1] for a in schema_args)


@dataclass(frozen=True)
class TorchOps:
    """An op's ``boo::`` torch ops, described.

    ``forward_args`` / ``backward_args``: the schema's arguments before ``str bundle``,
    in ATen's order (``"Tensor? weight"``). ``params``: the forward's parameter
    tensors, in gradient order after the input (``("weight", "bias")``); ``gated_by``:
    for each parameter gradient, the parameter whose presence it needs (group
    norm's bias gradient needs the weight: ATen's backward takes no bias).
    ``forward(bundle, *forward args)`` and ``backward(bundle, *backward args but
    eps, eps=)``: the entry points; ``stats_shape(input, args)``: the statistics'
    shape from the forward's arguments by name; ``eager_backward(args, mask, gy,
    x, stats, params)``: torch's backward for second derivatives;
    ``stats_differentiable``: a statistic's gradient reaches the input
    (``extra_grads(saved, grads, need)`` then adds it: ``saved`` and ``grads`` by
    name, the input's and parameters' gradients so far, updated in place)."""

    op: str
    forward_args: tuple[str, ...]
    backward_args: tuple[str, ...]
    params: tuple[str, ...]
    forward: Callable[..., Any]
    backward: Callable[..., Any]
    stats_shape: Callable[[Any, Mapping[str, Any]], tuple]
    eager_backward: Callable[..., tuple]
    gated_by: tuple[str, ...] = ()
    stats_differentiable: bool = False
    extra_grads: Callable[[Mapping[str, Any], dict[str, Any], Mapping[str, bool]], None] | None = None
    # the fused residual form's entry points (``add_layer_norm`` & co.): the forward takes
    # ``residual`` after the input, the backward ``grad_h`` before eps; None: the op has none
    residual_forward: Callable[..., Any] | None = None
    residual_backward: Callable[..., Any] | None = None

    @property
    def description(self) -> ops.Op:
        return ops.get(self.op)

    @property
    def gates(self) -> tuple[str, ...]:
        return self.gated_by or self.params

    def output_mask(self, need: Mapping[str, bool], given: Mapping[str, Any]) -> list[bool]:
        """The backward's ``output_mask`` (ATen's order: input, then ``params``) for the
        gradients autograd needs (``need``, by argument name), a parameter's only where
        the tensor gating it is given (``given``, by name; None: absent)."""
        return [bool(need.get("input"))] + [bool(need.get(p)) and given.get(g) is not None
                                            for p, g in zip(self.params, self.gates)]

    def mask_bits(self, output_mask: Sequence[bool]) -> int:
        """``output_mask`` as the kernels' gradient mask (``ops.base``'s bits)."""
        return sum(bit for bit, on in zip(self.description.grads, output_mask) if on)

    def residual_args(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The fused residual ops' arguments: the forward's with ``residual`` after the
        input, the backward's with ``grad_h`` before its last (eps)."""
        f, b = self.forward_args, self.backward_args
        return (f[:1] + ("Tensor residual",) + f[1:], b[:-1] + ("Tensor? grad_h",) + b[-1:])

    def forward_schema(self, residual: bool = False) -> str:
        """The forward op's schema: -> (out, *stats); ``boo::add_<op>``'s (``residual``): -> (out, h, *stats)."""
        args = self.residual_args()[0] if residual else self.forward_args
        outs = ", ".join(["Tensor"] * (1 + residual + len(self.description.stats)))
        return f"({', '.join(args)}, str bundle) -> ({outs})"


def _register(d: TorchOps, by_token: Callable[[str], Any], residual: bool = False) -> None:
    """Register ``d``'s forward op and its backward op (``residual``: the fused residual form's,
    ``boo::add_<op>``: ``h = x + residual``, then the norm of h, returning (out, h, *stats);
    autograd hands its backward the gradients of out and of h, ``grad_h`` being h's other users'
    (the next residual), and the backward op returns ``dh = norm_backward(grad_out) + grad_h``,
    the gradient of both the input and the residual, with the weight's and bias's, in one
    kernel; without grad_h, the plain backward of h)."""
    import torch

    from . import autograd as ag

    op = d.description
    name = f"add_{op.name}" if residual else op.name
    fwd_args, bwd_args = d.residual_args() if residual else (d.forward_args, d.backward_args)
    fwd_entry, bwd_entry = (d.residual_forward, d.residual_backward) if residual else (d.forward, d.backward)
    assert fwd_entry is not None and bwd_entry is not None  # residual: only where the op has the form
    lead = 2 if residual else 1  # outputs before the statistics: out (and h)
    fwd_names, bwd_names = _names(fwd_args), _names(bwd_args)
    stats = tuple(op.stats)
    fwd_schema = d.forward_schema(residual)
    # the forward's arguments that are neither tensors autograd tracks nor the bundle: handed on to the backward
    fwd_tensors = ("input", "residual", *d.params) if residual else ("input", *d.params)
    shape_args = tuple(n for n in fwd_names if n not in fwd_tensors and n != "eps")

    def forward_body(*args):
        *rest, bundle = args
        out = fwd_entry(by_token(bundle), *rest)
        x = rest[0]
        return (*out[:lead], *(ag.stats_like(op, x, s) for s in out[lead:]))

    fwd = torch.library.custom_op(f"boo::{name}", forward_body, mutates_args=(), schema=fwd_schema)

    @fwd.register_fake
    def _(*args):
        named = dict(zip(fwd_names, args))
        x = named["input"]
        st, sd = d.stats_shape(x, named), ag.stats_dtype(op, x.dtype)
        return (*(ag.empty(x) for _ in range(lead)), *(x.new_empty(st, dtype=sd) for _ in stats))

    def setup(ctx, inputs, output):
        named = dict(zip(fwd_names, inputs))
        if not d.stats_differentiable:
            ctx.mark_non_differentiable(*output[lead:])  # as ATen's
        ctx.set_materialize_grads(False)
        # the backward's input: the forward's (the fused form's: h, output[1], as stored)
        ctx.save_for_backward(output[1] if residual else named["input"], *(named[p] for p in d.params),
                              *output[lead:])
        ctx.args = {n: named[n] for n in shape_args}
        eps = named.get("eps")
        ctx.eps, ctx.bundle = op.none_eps if eps is None else eps, inputs[-1]

    def backward(ctx, grad_out, *grad_rest):
        grad_h, grad_stats = (grad_rest[0], grad_rest[1:]) if residual else (None, grad_rest)
        saved = dict(zip(("input", *d.params, *stats), ctx.saved_tensors))
        need = dict(zip(fwd_names, ctx.needs_input_grad))
        if residual:
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
        elif need["input"]:  # only h's other users (None without the fused form): the sum passes theirs on
            grads["input"] = grad_h
        if d.extra_grads is not None:
            d.extra_grads({**saved, **ctx.args, "grad_out": grad_out,
                           **{f"grad_{s}": g for s, g in zip(stats, grad_stats)}}, grads, need)
        if residual:
            grads["residual"] = grads["input"] if ctx.needs_input_grad[1] else None
            if not ctx.needs_input_grad[0]:
                grads["input"] = None
        return tuple(grads.get(n) for n in fwd_names) + (None,)

    fwd.register_autograd(backward, setup_context=setup)
    _register_backward(d, f"boo::{name}_backward", bwd_args, bwd_entry, shape_args, by_token)
    ag.register_autocast(fwd, op.autocast_aten)
    if d.residual_forward is not None and not residual:
        _register(d, by_token, residual=True)


def _register_backward(d: TorchOps, name: str, schema_args: tuple[str, ...], entry: Callable[..., Any],
                       shape_args: tuple[str, ...], by_token: Callable[[str], Any]) -> None:
    """Register the backward op ``name`` of ``d`` (its arguments ``schema_args``, eps last; its
    body the entry point ``entry``): a fake implementation from shapes, and second derivatives
    through torch's eager backward, plus ``grad_h`` where the op takes one (the fused residual
    form: the input gradient is the norm's plus grad_h)."""
    import torch

    from . import autograd as ag

    op, stats = d.description, tuple(d.description.stats)
    names = _names(schema_args)
    tensors = tuple(n for n, a in zip(names, schema_args) if a.startswith("Tensor"))
    schema = f"({', '.join(schema_args)}, str bundle) -> Tensor[]"

    def body(*args):
        *rest, eps, bundle = args
        grads = entry(by_token(bundle), *rest, eps=eps)
        return [g for g in grads if g is not None]

    bwd = torch.library.custom_op(name, body, mutates_args=(), schema=schema)

    @bwd.register_fake
    def _(*args):
        named = dict(zip(names, args))
        gates = [named[g] for g in d.gates]
        ts = (named["input"], *(named[p] if p in named else named[g] for p, g in zip(d.params, d.gates)))
        return [ag.empty(t) for t, a in zip(ts, ag.asked(named["output_mask"], *gates)) if a]

    def setup(ctx, inputs, output):
        named = dict(zip(names, inputs))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*(named[n] for n in tensors))
        ctx.args = {n: named[n] for n in shape_args}
        asked = ag.asked(named["output_mask"], *(named[g] for g in d.gates))
        ctx.mask = d.mask_bits(asked)

    def backward_backward(ctx, grads):
        args, mask = ctx.args, ctx.mask

        def eager(*saved):
            named = dict(zip(tensors, saved))
            outs = d.eager_backward(args, mask, named["grad_out"], named["input"], tuple(named[s] for s in stats),
                                    tuple(named[p] for p in d.params if p in named))
            gh = named.get("grad_h")
            return outs if gh is None or not mask & op.grads[0] else (outs[0] + gh, *outs[1:])

        positions = tuple(names.index(n) for n in tensors)
        g = iter(ag.second_order(ctx, eager, grads, positions))
        return tuple(next(g) if n in tensors else None for n in names) + (None,)

    bwd.register_autograd(backward_backward, setup_context=setup)


@functools.cache
def registered(by_token: Callable[[str], Any]):
    """Every op's ``boo::`` torch ops registered (once), their bodies finding bundles with
    ``by_token`` (``Bundle.by_token``) -> torch."""
    import torch

    from . import entries

    for d in entries.torch_ops():
        _register(d, by_token)
    return torch


__all__ = ["TorchOps", "registered"]
