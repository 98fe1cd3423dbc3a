"""The body every op's ATen-style loader entry point shares (pure Python).

An entry point (``Bundle.native_layer_norm`` & co.) checks a call's arrays
through the checks of the ``Bundle`` it is bound to (``bundle.checks``:
``loader/call_checks.py``), builds the call's ``KernelSignature``, and runs the kernel
(``dispatch``) or, opened with ``fallback="eager"``, the op's torch fallback.
torch tensors or numpy arrays go in, the same kind comes out; neither
library is imported here. A call that autograd records (grad mode on, a
torch argument requiring grad) goes to the op's custom ops instead
(``library``), whose bodies call back here with autograd handled.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, NamedTuple

from ..ops.base import (
    BIAS_GRAD,
    DEFAULT_EPS,
    FORWARD,
    INPUT_GRAD,
    WEIGHT_GRAD,
    norm_shape,  # noqa: F401  (re-exported: the entry points' helper)
)
from .tensors import arrays_of

# What ``forward``/``backward`` return for a call autograd records (a sentinel).
AUTOGRAD = object()


def wants_grad(*tensors) -> bool:
    """Whether autograd records the call: grad mode on and a torch argument that
    requires grad (numpy arrays never do)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(genexpr): this runs on every call
        if getattr(t, "requires_grad", False):
            return True
    return False


def stats_shape(shape: tuple[int, ...], normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    """ATen's layout of mean/rstd: the leading dims, then a 1 per normalized dim."""
    n = len(normalized_shape)
    return shape[:len(shape) - n] + (1,) * n


def call_layout(op, shape: tuple[int, ...], param) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(weight shape, statistics shape) of a call of ``op`` on an input of ``shape``
    with the op's shape parameter ``param`` (``Op.call_param``: a normalized shape,
    group norm's groups); ValueError where they do not fit (``Op.call_fields``)."""
    f = op.call_fields(shape, param)
    ns, groups = f.get("normalized_shape", ()), f.get("groups")
    return op.param_shape(shape, ns, groups), op.stats_shape(shape, ns, groups)


def as_stats(arrays, t, sig, layout: tuple | None = None):
    """Statistics in the kernel's layout and dtype (``layout``: its (shape, dtype),
    ``Bundle.stats_layout``), a reshape or cast only where it differs (a torch
    reshape costs even to the same shape); ``t`` is contiguous (checked)."""
    shape, dtype = layout or (sig.stats_shape, sig.stats_dtype)
    if t.shape != shape:
        t = arrays.contiguous(t.reshape(shape))
    c = arrays.cast(t, dtype)
    return t if c is t else arrays.contiguous(c)


def spread(mask: int, outs, bits) -> tuple:
    """The gradients a kernel returned, None where ``mask`` did not ask (ATen's form)."""
    if len(outs) == len(bits):  # every gradient asked
        return tuple(outs)
    it = iter(outs)
    return tuple([next(it) if mask & bit else None for bit in bits])


def backward_mask(op, output_mask, params: dict) -> int:
    """The mask of an ATen-style backward call: ``output_mask`` (one boolean per
    gradient, ``op.grads`` order), a parameter's gradient only where it is given."""
    m = output_mask if type(output_mask) in (tuple, list) else list(output_mask)
    bits = op.grads
    if len(m) != len(bits):
        raise ValueError(f"output_mask must have {len(bits)} booleans, got {output_mask!r}")
    mask = 0
    for bit, want in zip(bits, m):  # a loop, not sum(genexpr): this runs on every call
        if want and (bit == INPUT_GRAD or params[bit] is not None):
            mask |= bit
    return mask


# ------------------------------------------------------------ zero-size input
# No kernel has a zero dim: an input with no elements gets torch's results
# (ATen's on the CPU) without one: empty outputs; the statistics of rows of
# zero elements (there are rows when a normalized dim is 0) are the op's
# (``zero_size_stat``: mean 0, rstd NaN), in the stats dtype non-empty calls
# return; weight and bias gradients, sums over no rows, are zeros of the
# weight's shape. ATen's shapes and dtypes throughout (torch 2.13, float32,
# float16, bfloat16, both ops, forward and backward) but one: a half-precision
# layer norm's mean and rstd are float32, where ATen's CPU kernel gives the
# input's dtype. float32 is what the loader returns for a non-empty call, what
# the custom ops' fake implementations promise, and what ATen's meta function
# (torch.compile's) and its GPU kernels give: a batch's statistics do not
# change dtype with its size (docs/loader.md, "Arrays, autograd, edge inputs").
def zero_size_forward(op, arrays, x, ns) -> tuple:
    shape, dt = tuple(x.shape), arrays.dtype_name(x)
    sd, st = op.default_stats_dtype(dt), call_layout(op, shape, ns)[1]
    y = arrays.full(shape, 0, dt, x)
    return (y,) + tuple(arrays.full(st, op.zero_size_stat(name), sd, x) for name in op.stats)


def zero_size_grads(op, arrays, x, ns, mask: int) -> tuple:
    dt = arrays.dtype_name(x)
    ps = call_layout(op, tuple(x.shape), ns)[0]
    return tuple(arrays.full(tuple(x.shape) if bit == INPUT_GRAD else ps, 0, dt, x) if mask & bit else None
                 for bit in op.grads)


# ------------------------------------------------------- calls no kernel serves
class EagerCall(NamedTuple):
    """What an op's ``eager_forward`` reads of a ``KernelSignature``, for a call
    no signature describes (``Unserved``): the same field names, the call's
    values as given (``eps`` as the caller passed it, ``dtype`` any dtype's name)."""
    op: str
    input_shape: tuple[int, ...]
    normalized_shape: tuple[int, ...]
    dtype: str
    mask: int
    eps: Any
    affine: bool
    bias: bool
    stats_dtype: str  # the op's ``default_stats_dtype`` of ``dtype``
    stats_shape: tuple[int, ...]
    groups: int | None = None
    param: Any = None  # the call's shape parameter as ``Op.call_param`` gives it (eager_backward's first argument)
    weight_offset: float = 0.0  # RMS norm's (the weight scales as offset + weight)

    @property
    def is_forward(self) -> bool:
        return self.mask == FORWARD


class Unserved(Exception):
    """A call no kernel can serve that torch's op may take: an eps the signatures
    refuse (not positive, not finite, a bool) or a dtype no kernel takes (float64,
    ...). Raised by ``CallChecks.prepare``/``prepare_backward`` once the call's
    other checks are done, and handed to ``Bundle.unserved``: ``error`` (the
    loader's message, as without a fallback) unless ``fallback="eager"``; with it
    ``refusal`` where another check refused the call (torch refuses it too: a
    weight of another dtype or shape, mixed kinds...), else torch's op.

    ``key``: what ``stats()`` counts the call under, ``"{op}:{reason}={value}"``
    (``layer_norm:dtype=float64``, ``rms_norm:eps=-0.5``; no signature key has a
    ``:``). Without a ``refusal``, the checked arrays: ``x``, ``w`` and ``b`` as
    given (a bias without a weight gets no stand-in weight), contiguous; a
    backward call's ``gy`` and ``stats`` too (``prepare_backward``)."""

    def __init__(self, error: Exception, key: str, arrays, call: EagerCall | None = None, x=None, w=None, b=None,
                 refusal: Exception | None = None):
        super().__init__(str(error))
        self.error, self.key, self.arrays, self.refusal = error, key, arrays, refusal
        self.call: Any = call
        self.x, self.w, self.b = x, w, b
        self.gy: Any = None
        self.stats: tuple = ()


# ---------------------------------------------------------------- the bodies
def forward(bundle, op, input, normalized_shape, weight, bias, eps, autograd: bool = False, offset=0.0):
    """A forward call -> (y, *stats); with ``autograd``, ``AUTOGRAD`` where autograd
    records it (``wants_grad``: the entry point calls the op's custom op). ``offset``:
    RMS norm's weight offset."""
    known = bundle.checks.plan_call(op.name, FORWARD, eps, normalized_shape, input, weight, bias, offset=offset)
    plan = known[1]
    if plan is not None:  # a key checked before: torch eager (as the build found faster) or the kernel
        route = plan.route
        if route is not None and not (plan.grad and sys.modules["torch"].is_grad_enabled()):
            return route.run(input, weight, bias)
    if autograd and wants_grad(input, weight, bias):
        return AUTOGRAD
    try:
        arrays, sig, ns, x, w, b = bundle.checks.prepare(op.name, input, normalized_shape, weight, bias, eps,
                                                         FORWARD, known, offset)
    except Unserved as e:  # no kernel takes its eps or dtype: torch's op (fallback="eager"), else the error
        return unserved_forward(bundle, op, e)
    if sig is None:
        return zero_size_forward(op, arrays, x, ns)
    # prepare gives a bias only with a weight (a stand-in of ones where none was given)
    args = (x,) if w is None else (x, w) if b is None else (x, w, b)
    return bundle.dispatch(sig, arrays, lambda _: args, op.eager_forward, lambda: (sig, x, w, b))


def backward(bundle, op, output_mask, grad_out, input, normalized_shape, stats: tuple, weight, bias,
             eps: float | None, autograd: bool = False, offset=0.0):
    """A backward call (``output_mask``: one boolean per gradient, ``op.grads``
    order) -> the gradients in that order, None where not asked (or where the
    parameter is not given: ``backward_mask``); with ``autograd``, ``AUTOGRAD`` where
    autograd records it (as ``forward``). ``eps`` only picks between kernels
    built for different eps (it does not enter the math)."""
    eps = DEFAULT_EPS if eps is None else eps
    # the key holds the output mask as given (with which parameters are given, it
    # decides the kernel's mask): a checked key runs without working the mask out again
    om = output_mask if type(output_mask) is tuple else tuple(output_mask)
    known = bundle.checks.plan_call(op.name, om, eps, normalized_shape, input, weight, bias, grad_out, stats, offset)
    plan = known[1]
    if plan is not None:  # as forward's
        route = plan.route
        if route is not None and not (plan.grad and sys.modules["torch"].is_grad_enabled()):
            return route.run(grad_out, input, stats, weight, bias)
    mask = backward_mask(op, om, params_of(weight, bias))
    if mask == 0:
        return no_grads(op)
    if autograd and wants_grad(grad_out, input, *stats, weight, bias):
        return AUTOGRAD
    try:
        arrays, sig, ns, gy, x, stats, w, b = bundle.checks.prepare_backward(
            op, mask, grad_out, input, normalized_shape, stats, weight, bias, eps, known, offset)
    except Unserved as e:  # as forward's
        return unserved_backward(bundle, op, mask, e)
    if sig is None:
        return zero_size_grads(op, arrays, x, ns, mask)

    return _dispatch_backward(bundle, op, sig, sig, arrays, ns, gy, x, stats, w, b, (), op.eager_backward)


def _dispatch_backward(bundle, op, sig, ks_sig, arrays, ns, gy, x, stats, w, b, extra: tuple, eager):
    """A checked backward call of ``sig`` run as ``ks_sig`` (the fused residual form's, with
    ``extra``: grad_h), its arguments in the kernel's calling convention, or ``eager`` on ATen's."""
    def args(ks):
        layout = bundle.checks.stats_layout(ks)
        out = [gy, x]
        for t in stats:
            out.append(as_stats(arrays, t, ks, layout))
        if ks.takes_weight:
            out.append(w)
        return (*out, *extra)

    outs = bundle.dispatch(ks_sig, arrays, args, eager, lambda: (
        op.with_offset(ns, sig.weight_offset), sig.mask, gy, x, *(as_stats(arrays, t, sig) for t in stats), w, b,
        *extra))
    return spread(sig.mask, outs, op.grads)


# ------------------------------------------------- the fused residual form
# ``x + residual``, then the norm (``KernelSignature.residual``): the checks are the
# plain call's, on the input, and the residual's (or grad_h's) own against the input
# (the same kind, device, dtype and shape: a mixed-dtype add is not a fused signature).
@functools.lru_cache(maxsize=256)
def residual_of(sig):
    """The fused residual signature of a plain one (a cache: ``Bundle.dispatch`` memoizes
    routes by the signature's identity, which this keeps for equal signatures)."""
    return sig.replace(residual=True)


def _check_like(bundle, name: str, t, input):
    """``t`` (the residual, grad_h) checked against the call's input: contiguous."""
    arrays = arrays_of("input", input)
    dt = arrays.dtype_name(input) or arrays.dtype_text(input)
    try:
        return bundle.checks.check_array(name, t, dt, tuple(input.shape), arrays=arrays)
    except TypeError as e:
        if arrays.owns(t) and "dtype" in str(e):
            raise TypeError(f"{e}: {name} and input must have one dtype (a mixed-dtype add is not a fused "
                            f"kernel: cast one, or add them and call the plain norm)") from None
        raise


def residual_forward(bundle, op, input, residual, normalized_shape, weight, bias, eps, autograd: bool = False,
                     offset=0.0):
    """A fused residual forward call -> (y, h, *stats), ``h = input + residual`` in the
    input's dtype; with ``autograd``, ``AUTOGRAD`` where autograd records it."""
    if autograd and wants_grad(input, residual, weight, bias):
        return AUTOGRAD
    r = _check_like(bundle, "residual", residual, input)
    try:
        arrays, sig, ns, x, w, b = bundle.checks.prepare(op.name, input, normalized_shape, weight, bias, eps,
                                                         FORWARD, None, offset)
    except Unserved as e:  # no kernel takes its eps or dtype: torch's add and op (fallback="eager"), else the error
        if bundle.fallback != "eager" or e.refusal is not None:
            return unserved_forward(bundle, op, e)  # raises
        h = e.arrays.eager(lambda x, r: (x + r,), (e.x, r), str(e.error))[0]
        e.x = e.arrays.contiguous(h)
        y, *stats = unserved_forward(bundle, op, e)
        return (y, h, *stats)
    if sig is None:
        h = x + r
        y, *stats = zero_size_forward(op, arrays, h, ns)
        return (y, h, *stats)
    rsig = residual_of(sig)
    args = (x, r) if w is None else (x, r, w) if b is None else (x, r, w, b)
    return bundle.dispatch(rsig, arrays, lambda _: args, _residual_eager_forward(op), lambda: (rsig, x, r, w, b))


def residual_backward(bundle, op, output_mask, grad_out, h, normalized_shape, stats: tuple, weight, bias, grad_h,
                      eps: float | None, autograd: bool = False, offset=0.0):
    """A fused residual backward call -> the gradients in ``op.grads`` order, the input's
    ``dh = norm_backward(grad_out) + grad_h`` (the gradient of both x and residual). Without
    ``grad_h``, or without the input gradient asked, the plain backward of ``h`` (``backward``)."""
    om = output_mask if type(output_mask) is tuple else tuple(output_mask)
    mask = backward_mask(op, om, params_of(weight, bias))
    if grad_h is None or not mask & INPUT_GRAD:
        return backward(bundle, op, om, grad_out, h, normalized_shape, stats, weight, bias, eps, autograd, offset)
    if autograd and wants_grad(grad_out, h, *stats, weight, bias, grad_h):
        return AUTOGRAD
    eps = DEFAULT_EPS if eps is None else eps
    gh = _check_like(bundle, "grad_h", grad_h, h)
    try:
        arrays, sig, ns, gy, x, stats, w, b = bundle.checks.prepare_backward(
            op, mask, grad_out, h, normalized_shape, stats, weight, bias, eps, None, offset)
    except Unserved as e:  # as the forward's
        if bundle.fallback != "eager" or e.refusal is not None:
            return unserved_backward(bundle, op, mask, e)  # raises
        dh, *rest = unserved_backward(bundle, op, mask, e)
        return (e.arrays.eager(lambda a, b: (a + b,), (dh, gh), str(e.error))[0], *rest)
    if sig is None:
        dh, *rest = zero_size_grads(op, arrays, x, ns, mask)
        return (dh + gh, *rest)
    return _dispatch_backward(bundle, op, sig, residual_of(sig), arrays, ns, gy, x, stats, w, b, (gh,),
                              _residual_eager_backward(op))


@functools.cache
def _residual_eager_forward(op):
    """torch's add, then the op's eager forward: (sig, x, residual, w, b) -> (y, h, *stats)."""
    def run(sig, x, r, w, b):
        h = x + r
        y, *stats = op.eager_forward(sig, h, w, b)
        return (y, h, *stats)
    return run


@functools.cache
def _residual_eager_backward(op):
    """The op's eager backward, then grad_h added to the input gradient (autograd's accumulation)."""
    def run(*args):
        dh, *rest = op.eager_backward(*args[:-1])
        return (dh + args[-1], *rest)
    return run


def unserved_forward(bundle, op, u: Unserved) -> tuple:
    """A forward call no kernel serves (``Unserved``): ``Bundle.unserved`` on the op's eager forward."""
    return bundle.unserved(u, op.eager_forward, lambda: (u.call, u.x, u.w, u.b))


def unserved_backward(bundle, op, mask: int, u: Unserved) -> tuple:
    """A backward call no kernel serves: the gradients ``mask`` asks for (``spread``),
    the statistics in ATen's layout."""
    def args():
        return (u.call.param, mask, u.gy, u.x, *[t.reshape(u.call.stats_shape) for t in u.stats], u.w,
                u.b)
    return spread(mask, bundle.unserved(u, op.eager_backward, args), op.grads)


# ------------------------------------------------------- the compiled routes
# A torch call whose key was checked once runs, on later calls, straight from
# the key (its ``CallPlan``'s ``Route``; a call autograd records takes the op's
# custom ops instead): the kernel's runner on the arguments in its
# calling convention, every view and cast the key decides worked out here
# once. The runner makes contiguous (and aligned) copies where needed, as the
# checked path's ``contiguous`` does; the key pins the rest.
def kernel_forward(run, count, views):
    """A forward call -> ``run`` (a ``KernelRunner``) on (x[, weight[, bias]]),
    then ``count()``; ``views``: None, or (argument views, result views) for a
    dynamic kernel of another rank (``Bundle._route``)."""
    ins, outs = views or (None, None)

    def call(x, w, b):
        args = (x,) if w is None else (x, w) if b is None else (x, w, b)
        out = run(*args) if views is None else view_as(run(*view_as(args, ins)), outs)
        count()
        return out
    return call


def kernel_backward(run, count, views, fixes: tuple, cast, takes_weight: bool, mask: int, bits):
    """A backward call -> the gradients (``spread``): ``run`` on (grad_out, x,
    stats, [weight]), each statistic reshaped and cast (``cast(t, dtype name)``)
    as ``fixes`` says, (shape or None, dtype name or None) per statistic."""
    ins, outs = views or (None, None)
    plain = all(shape is None and dtype is None for shape, dtype in fixes)

    def call(gy, x, stats, w, b):
        args = [gy, x]
        if plain:
            args += stats
        else:
            for t, (shape, dtype) in zip(stats, fixes):
                if shape is not None:
                    t = t.reshape(shape)
                args.append(t if dtype is None else cast(t, dtype))
        if takes_weight:
            args.append(w)
        got = run(*args) if views is None else view_as(run(*view_as(args, ins)), outs)
        count()
        return spread(mask, got, bits)
    return call


def view_as(arrays, shapes) -> tuple:
    """Each array viewed in its shape (None: as it is; ``shapes`` None: all as they are)."""
    if shapes is None:
        return tuple(arrays)
    return tuple([a if s is None else a.reshape(s) for a, s in zip(arrays, shapes)])


def view_shapes(have, want) -> tuple | None:
    """Per position the shape to view an array in (None: it has it already), or
    None when no position needs one."""
    out = tuple([None if h == w else w for h, w in zip(have, want)])
    return None if all(s is None for s in out) else out


def params_of(weight, bias) -> dict:
    return {WEIGHT_GRAD: weight, BIAS_GRAD: bias}


def no_grads(op) -> tuple:
    return (None,) * len(op.grads)

