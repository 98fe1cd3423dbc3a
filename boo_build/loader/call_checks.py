"""A call's argument checks (``CallChecks``: ``prepare``, ``prepare_backward``,
``check_array``, ``check_stats``, held by a ``Bundle`` as ``bundle.checks``),
memoized: the loader's hot path.

Everything these check about an array but its memory (its kind, device,
dtype, shape, and the ``KernelSignature`` a call's arrays make) depends only
on each array's (type, dtype, shape, device) and the call's scalars. The
first call of a kind checks in full and records the outcome; a later one
builds that key (a few attribute reads and a dict lookup, a fraction of the
full checks' cost) and checks per call only what the key cannot say: contiguity (and,
in the runner, alignment). A call the full check refuses is never recorded,
so it is refused with the same message every time. A backward call's
checks (input, weight, bias, grad_out, saved statistics) are one memo entry.

A torch call is recorded by its key on its first, fully checked, call, with
its route; later calls of that key run from the key alone (``plan_call``),
before any other check: torch's op where the build found
torch eager faster (``prefer_eager``; torch checks its own arguments), else
the kernel's runner with every view and cast the key decides worked out once
(``Bundle.torch_route``; the runner copies a tensor that is not contiguous
or aligned). The key pins everything the checks depend on but memory layout.

A call torch's op takes but no kernel can serve (an eps the signatures
refuse, a dtype no kernel takes) raises ``calls.Unserved`` once
its other checks are done (``Bundle.unserved`` decides what runs); like a
refused call, it is never recorded.

Stdlib only; the array kinds come from ``tensors.py``.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Callable, Iterable, NamedTuple

from .. import ops
from ..dtypes import CODES as _KERNEL_DTYPES
from ..errors import SignatureError
from ..ops.base import DEFAULT_EPS
from ..shapes import eps_problem
from ..signature import KernelSignature
from .calls import EagerCall, Unserved, call_layout
from .memo import remember as _remember
from .tensors import NumpyArrays, TorchArrays, arrays_of


class Route(NamedTuple):
    """How later torch calls of a checked key run (``Bundle.torch_route``)."""
    kernel: str  # the key of the kernel the calls count under
    run: Callable  # torch's op or a call of the kernel's runner, on the call's arguments
    eager: bool  # True: torch's op (the build found torch eager faster)


class CallPlan(NamedTuple):
    """What a call key's first, fully checked, call recorded (``CallChecks.plan_call``)."""
    arrays: Any  # the array kind (``tensors.TorchArrays`` or ``NumpyArrays``)
    sig: KernelSignature
    ns: Any  # the op's shape parameter (``Op.call_param``: the normalized shape; group norm's groups)
    route: Route | None  # torch calls only; None where they take the checked path
    grad: bool  # whether a tensor of the call requires grad (autograd may record it)


class CallChecks:
    """The argument checks of one bundle's calls, memoized per call key.

    ``device_type``: torch's name for the bundle's memory ("cpu" or "cuda");
    ``uri`` and ``target``: the bundle's device URI and target name, for the
    messages; ``torch_route(op, sig, stats)``: the ``Route`` later torch calls
    of a checked key take, or None (``Bundle.torch_route``)."""

    def __init__(self, device_type: str, uri: str, target: str,
                 torch_route: Callable[[Any, KernelSignature, tuple | None], Route | None]):
        self._device_type = device_type
        self._uri = uri
        self._target = target
        self._torch_route = torch_route
        self._plans: dict[tuple, CallPlan] = {}  # plan_call: call key -> its plan
        # a key's device part: whether a torch tensor is on the bundle's device type, all the
        # check asks (a bool: hashing a torch.device is slower); numpy arrays: None
        self._where = "is_cpu" if device_type == "cpu" else "is_cuda"
        # plan_call's key parts of an array, in one C call (cheaper than reading the
        # attributes one by one): a torch tensor's, else (no is_cpu) a numpy array's.
        # With requires_grad: a key whose tensors need none runs its route without
        # asking whether autograd records the call (``Bundle.routed``)
        self._key_parts = operator.attrgetter("dtype", "shape", self._where, "requires_grad")
        self._numpy_parts = operator.attrgetter("dtype", "shape")
        self._checked: dict[tuple, bool] = {}  # check_array / check_stats: keys that passed
        self._backward_plans: dict[tuple, CallPlan] = {}  # prepare_backward: call key -> the same
        self._layouts: dict[int, tuple] = {}  # stats_layout: id(kernel signature) -> (it, shape, dtype)

    def plan_call(self, op: str, mask: int, eps, normalized_shape, input, weight, bias, grad_out=None,
                  stats: tuple = (), offset=0.0) -> tuple[tuple | None, CallPlan | None]:
        """(call key, plan) of an ATen-style call (with ``grad_out``: a backward
        one): the plan its first call's checks recorded (``_plan``), else None;
        the key None for arguments that make none. The entry points look here first (a plan's
        ``route`` runs the call), and hand both to ``prepare``/``prepare_backward``.
        ``offset``: RMS norm's weight offset, keyed with eps (a pair where not 0)."""
        ns = tuple(normalized_shape) if type(normalized_shape) is list else normalized_shape
        if offset:  # rare (Gemma's norms): the common key keeps its form
            eps = (eps, "offset", offset)
        parts = self._key_parts
        try:
            # a torch call's key, written out (this runs on every call): the input's type, then
            # each array's parts; reading them all proves the others torch tensors too (a numpy
            # array has no ``is_cpu``), so their types are left out (each costs on every call)
            if grad_out is None:
                key: tuple = (op, mask, eps, ns, type(input), parts(input), None if weight is None else parts(weight),
                              None if bias is None else parts(bias))
                return key, self._plans.get(key)
            if len(stats) == 2:
                s, t = stats
                key = (op, mask, eps, ns, type(input), parts(input), None if weight is None else parts(weight),
                       None if bias is None else parts(bias), parts(grad_out), parts(s), parts(t))
            else:
                key = (op, mask, eps, ns, type(input), parts(input), None if weight is None else parts(weight),
                       None if bias is None else parts(bias), parts(grad_out), *[parts(t) for t in stats])
            return key, self._backward_plans.get(key)
        except AttributeError:  # a numpy array (no is_cpu: its own parts), not an array (refused later)
            try:
                return self._numpy_keyed(op, mask, eps, ns, input, weight, bias, grad_out, stats)
            except (AttributeError, TypeError):
                return None, None
        except TypeError:  # unhashable arguments
            return None, None

    def _numpy_keyed(self, op, mask, eps, ns, input, weight, bias, grad_out, stats) -> tuple:
        """``plan_call`` of a numpy call: each array's type and (dtype, shape)."""
        parts = self._numpy_parts
        key: tuple = (op, mask, eps, ns, type(input), parts(input), type(weight),
                      None if weight is None else parts(weight), type(bias), None if bias is None else parts(bias))
        if grad_out is None:
            return key, self._plans.get(key)
        key += (type(grad_out), parts(grad_out), *[(type(t), parts(t)) for t in stats])
        return key, self._backward_plans.get(key)

    def _plan(self, op, arrays, sig: KernelSignature, ns, tensors: tuple, stats: tuple | None = None) -> CallPlan:
        """A call key's plan; the route (torch calls only): ``torch_route``'s."""
        route = self._torch_route(ops.get(op), sig, stats) if arrays is TorchArrays else None
        return CallPlan(arrays, sig, ns, route, any([getattr(t, "requires_grad", False) for t in tensors]))

    def check_array(self, name: str, t, dtype: str | None, shape: tuple[int, ...] | None,
                    allowed: Iterable[str] = (), arrays=TorchArrays, first: str = "input"):
        """``t`` contiguous, after checking type (``arrays``, the kind of the call's
        ``first`` array), device, dtype (``dtype`` or one of ``allowed``; any
        kernel dtype when both are empty) and shape."""
        where = self._where
        try:  # what the checks depend on: (type, dtype, shape, device); AttributeError: not an array
            key = (name, dtype, shape, tuple(allowed) if allowed else (), arrays, first,
                   type(t), t.dtype, t.shape, getattr(t, where, None))
            if key in self._checked:
                return arrays.contiguous(t)
        except (AttributeError, TypeError):  # not an array (refused below), an unhashable shape
            key = None
        t = self._check_array(name, t, dtype, shape, allowed, arrays, first)
        if key is not None:
            _remember(self._checked, key, True)
        return t

    def _check_array(self, name, t, dtype, shape, allowed, arrays, first):
        if not arrays.owns(t):
            if name == first:
                raise TypeError(f"{name} must be a torch.Tensor or a numpy.ndarray, got {type(t).__name__}")
            other = next((k.name for k in (TorchArrays, NumpyArrays) if k.owns(t)), type(t).__name__)
            raise TypeError(f"{name} is a {other} but {first} is a {arrays.name}: "
                            "pass all torch tensors or all numpy arrays")
        if arrays is TorchArrays and t.device.type != self._device_type:  # numpy: host memory, staged on GPUs
            want = self._device_type
            raise ValueError(f"{name} is on device {t.device}, but this bundle runs on {self._uri} "
                             f"(target {self._target}): move it to a {want} tensor")
        got = arrays.dtype_name(t)
        if got is None and any(d is not None and d not in _KERNEL_DTYPES for d in (dtype, *allowed)):
            got = arrays.dtype_text(t)  # a call of a dtype no kernel takes (``Unserved``): the input's is asked
        if got is None or (dtype is not None and got != dtype) or (allowed and dtype is None and got not in allowed):
            ok = [dtype] if dtype is not None else list(dict.fromkeys(allowed))  # each dtype named once
            if ok:
                raise TypeError(f"{name} has dtype {t.dtype}, "
                                f"expected {' or '.join(arrays.dtype_prefix + d for d in ok)}")
            raise TypeError(f"{name} has dtype {t.dtype}: kernels take float32, float16 or bfloat16")
        if shape is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
        return arrays.contiguous(t)

    def prepare(self, op, input, normalized_shape, weight, bias, eps, mask, known: tuple | None = None,
                offset=0.0):
        """(array kind, signature, normalized shape, x, weight, bias) of an ATen-style
        call, the arrays checked and contiguous (``known``: ``plan_call``'s answer for
        it, if asked already; ``offset``: RMS norm's weight offset). The signature is
        None for an input with no elements: no kernel has a zero dim (the caller
        returns torch's results without one), but the rest of the call is checked alike."""
        key, plan = known or self.plan_call(op, mask, eps, normalized_shape, input, weight, bias, offset=offset)
        if plan is not None:
            arrays, sig, ns = plan.arrays, plan.sig, plan.ns
            if arrays.contiguous3(input, weight, bias):
                return arrays, sig, ns, input, weight, bias
        found = self._prepare(op, input, normalized_shape, weight, bias, eps, mask, offset)
        arrays, sig, ns, _, w, _ = found
        if key is not None and sig is not None and w is weight:  # not a stand-in weight of ones
            _remember(self._plans, key, self._plan(op, arrays, sig, ns, (input, weight, bias)))
        return found

    def _prepare(self, op, input, normalized_shape, weight, bias, eps, mask, offset):
        ns = ops.get(op).call_param(normalized_shape)
        arrays = arrays_of("input", input)
        try:
            x = self._check_array("input", input, None, None, (), arrays, "input")
        except TypeError as e:  # (its kind and device checked) a dtype no kernel takes: torch's op may
            dt = arrays.dtype_text(input)
            try:  # the rest is checked alike (the weight and bias in the input's dtype): raises Unserved
                return self._rest(op, arrays, arrays.contiguous(input), dt, ns, weight, bias, eps, mask, e, offset)
            except (TypeError, ValueError) as other:  # the dtype's error without the fallback, this one with it
                raise Unserved(e, f"{op}:dtype={dt}", arrays, refusal=other) from None
        return self._rest(op, arrays, x, arrays.dtype_name(x), ns, weight, bias, eps, mask, None, offset)

    def _rest(self, op, arrays, x, dt: str, ns, weight, bias, eps, mask, refused: Exception | None, offset):
        """``_prepare`` after the input's own checks (``refused``: the error of a
        dtype no kernel takes, else None), raising ``Unserved`` for a call torch's
        op takes but no kernel can serve, once every other check has passed."""
        shape = tuple(x.shape)
        spec = ops.get(op)
        fields = spec.call_fields(shape, ns)  # ValueError where the op's shape parameter does not fit
        ps, st = call_layout(spec, shape, ns)
        w = None if weight is None else self._check_array("weight", weight, dt, ps, (), arrays, "input")
        b = None if bias is None else self._check_array("bias", bias, dt, ps, (), arrays, "input")
        given = w
        if b is not None and w is None:
            # ATen allows a bias without a weight; a weight of ones is the same norm.
            w = arrays.full(ps, 1, dt, x)
        empty = 0 in shape
        stand_in = (lambda dims: tuple(d or 1 for d in dims)) if empty else (lambda dims: dims)
        sig_fields: dict[str, Any] = {k: stand_in(v) if k == "normalized_shape" else v for k, v in fields.items()}
        reason = None if refused is None else f"dtype={dt}"
        sdt = dt if refused is None else "float32"  # a dtype no kernel takes: float32's, to check the rest
        try:
            sig = KernelSignature(op=op, input_shape=stand_in(shape), dtype=sdt, mask=mask, eps=eps,
                                  affine=w is not None, bias=b is not None, weight_offset=offset, **sig_fields)
        except SignatureError as e:
            if not (isinstance(eps, numbers.Real) and eps_problem(eps)):  # not eps's, or eps not a number
                raise ValueError(str(e)) from None  # (torch refuses a string too): refused whatever the fallback
            try:  # a number torch takes (<= 0, inf, nan, a bool) that the kernels do not: is the rest fine?
                sig = KernelSignature(op=op, input_shape=stand_in(shape), dtype=sdt, mask=mask, eps=DEFAULT_EPS,
                                      affine=w is not None, bias=b is not None, weight_offset=offset, **sig_fields)
            except SignatureError as other:
                raise ValueError(str(other)) from None
            if refused is None:
                refused, reason = ValueError(str(e)), f"eps={eps}"
        if refused is not None:  # every check passed, but no kernel takes its dtype or eps
            call = EagerCall(op, shape, fields.get("normalized_shape", ()), dt, mask, eps, given is not None,
                             b is not None, spec.default_stats_dtype(dt), st, fields.get("groups"),
                             spec.with_offset(ns, offset), sig.weight_offset)
            raise Unserved(refused, f"{op}:{reason}", arrays, call, x, given, b)
        return arrays, (None if empty else sig), ns, x, w, b

    def prepare_backward(self, op, mask, grad_out, input, normalized_shape, stats: tuple, weight, bias, eps,
                         known: tuple | None = None, offset=0.0):
        """``prepare`` of a backward call, then the checks of ``grad_out`` (the
        input's dtype and shape) and of the saved ``stats`` (``check_stats``), in
        that order, memoized as one: -> (arrays, sig, ns, grad_out, x, stats, w, b),
        all contiguous. A backward call's Python time was mostly these checks."""
        key, plan = known or self.plan_call(op.name, mask, eps, normalized_shape, input, weight, bias, grad_out,
                                            stats, offset)
        if plan is not None:
            arrays, sig, ns = plan.arrays, plan.sig, plan.ns
            if arrays.contiguous3(input, weight, bias) and arrays.contiguous3(grad_out, *_pad2(stats)):
                return arrays, sig, ns, grad_out, input, stats, weight, bias
        try:
            arrays, sig, ns, x, w, b = self.prepare(op.name, input, normalized_shape, weight, bias, eps, mask,
                                                    offset=offset)
        except Unserved as u:  # the rest of the call is checked alike, then handed on
            if u.refusal is None:
                try:
                    u.gy = self.check_array("grad_out", grad_out, u.call.dtype, tuple(u.x.shape), arrays=u.arrays)
                    u.stats = tuple([self.check_stats(name, t, u.arrays, u.x, u.call.param, op)
                                     for name, t in zip(op.stats, stats)])
                except (TypeError, ValueError) as other:  # raised with the fallback (``Unserved.refusal``)
                    u.refusal = other
            raise
        gy = self.check_array("grad_out", grad_out, arrays.dtype_name(x), tuple(x.shape), arrays=arrays)
        stats = tuple([self.check_stats(name, t, arrays, x, ns, op) for name, t in zip(op.stats, stats)])
        if key is not None and sig is not None and w is weight and len(stats) <= 2:  # not a stand-in weight
            _remember(self._backward_plans, key,
                      self._plan(op.name, arrays, sig, ns, (input, weight, bias, grad_out, *stats), stats))
        return arrays, sig, ns, gy, x, stats, w, b

    def stats_layout(self, ks: KernelSignature) -> tuple:
        """(shape, dtype) kernel signature ``ks`` takes saved statistics in,
        memoized by identity (the signatures ``dispatch`` hands out recur)."""
        lay = self._layouts.get(id(ks))
        if lay is None or lay[0] is not ks:
            lay = (ks, ks.stats_shape, ks.stats_dtype)
            _remember(self._layouts, id(ks), lay)  # holds ks: its id is not reused while the entry lives
        return lay[1], lay[2]

    def check_stats(self, name: str, t, arrays, x, ns, op):
        """A saved statistic (mean, rstd) of ``op`` (``ns``: the call's shape parameter):
        float32 or the input's dtype, as many elements as ATen's layout of them has
        (any layout of them), contiguous."""
        where = self._where
        try:
            key = ("stats", op.name, name, arrays, ns, type(t), t.dtype, t.shape, getattr(t, where, None),
                   type(x), x.dtype, x.shape)
            if key in self._checked:
                return arrays.contiguous(t)
        except (AttributeError, TypeError):
            key = None
        t = self._check_array(name, t, None, None, ["float32", arrays.dtype_name(x) or arrays.dtype_text(x)], arrays,
                              "input")
        want = call_layout(op, tuple(x.shape), ns)[1]
        if math.prod(t.shape) != math.prod(want):
            raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(want)}")
        if key is not None:
            _remember(self._checked, key, True)
        return t


def _pad2(stats: tuple) -> tuple:
    """One or two statistics as two (None: absent), for ``contiguous3``."""
    return stats if len(stats) == 2 else (stats[0], None) if stats else (None, None)


__all__ = ["CallChecks", "CallPlan", "Route"]
