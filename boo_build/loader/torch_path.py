"""Where a norm module's calls are torch's own, so that nothing is added where torch runs.

``replace_norms`` leaves a norm as torch's module where the bundle would send
every call of it to torch eager: every kernel that could serve it, forward and
backward, is one the build found torch eager faster than at every size it timed
(``all_to_torch``; the report says so, ``LEFT_TO_TORCH``). A swapped module
whose bundle sends a call's size to torch eager (a dynamic kernel decided per
size) calls torch's function itself (``runs``): the decision is taken once per
input shape, dtype and the gradients autograd will want, through the loader's
own checks and routing (``Bundle.torch_counter``), then a call costs a key and a
dict lookup. Such a call counts in ``stats()`` as ``eager`` under the kernel's
key; its backward is torch's autograd (the build found torch eager faster for
that backward too, or the call takes the loader's path), counted under the
backward kernel's key when the forward runs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from .. import ops
from ..errors import SignatureError
from ..ops.base import BIAS_GRAD, FORWARD, INPUT_GRAD, WEIGHT_GRAD
from .calls import Unserved
from .lookup import family_key
from .memo import remember
from .tokens import peek_default

LEFT_TO_TORCH = ("the bundle would send every call of it to torch eager (the build found torch eager faster at "
                 "every size it timed, for every kernel that would serve it): kept as it is")

_MISS = object()
# a module's decisions: (its bundle, {shape: the last (dtype, gradients wanted, counter or None)},
# {(shape, dtype, gradients wanted): counter or None})
MEMO = "_boo_torch_path"
# Dynamo's tracing (torch.compile, strict export; made True there): AOT tracing and
# non-strict export hand the module fake or functional tensors, which the type test turns away
_dynamo = torch.compiler.is_dynamo_compiling
_grad_on = torch.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled
_Tensor = torch.Tensor


def all_to_torch(bundle: Any, families: Iterable[str]) -> bool:
    """Whether the bundle sends every call that its kernels of ``families``
    (``lookup.family_key``s: a norm's form, every mask) serve to torch eager,
    at every size (``Bundle.always_torch``); False where it has none of them."""
    want = set(families)
    keys = [s.key for s in bundle.signatures() if family_key(s) in want]
    return bool(keys) and all(bundle.always_torch(k) for k in keys)


def runs(m: torch.nn.Module, x: Any, w: Any, b: Any) -> bool:
    """Whether norm module ``m``'s call on ``x`` with its weight and bias ``w``, ``b`` is one
    its bundle sends to torch eager: then it is counted, and the caller runs torch's function
    on them. False under ``torch.compile`` and autocast, for a tensor subclass (tracing), for
    parameters of another dtype than ``x``, and for a norm written by hand whose own code returned
    another dtype than ``x``'s (``_boo_out_dtypes``): those take the op's path."""
    if type(x) is not _Tensor or _dynamo() or _any_autocast():
        return False
    need = 0
    if _grad_on():  # the gradients autograd will want: the backward's mask
        need = ((INPUT_GRAD if x.requires_grad else 0) | (WEIGHT_GRAD if w is not None and w.requires_grad else 0)
                | (BIAS_GRAD if b is not None and b.requires_grad else 0))
    bundle = m._boo_bundle or peek_default()
    try:
        memo = m._boo_torch_path  # MEMO: an attribute read, the cheapest (forget() sets it)
    except AttributeError:  # a module saved before it had one
        memo = None
    if memo is None or memo[0] is not bundle:
        if bundle is None:  # the default bundle, not opened yet: the op's path opens it
            return False
        memo = m.__dict__[MEMO] = (bundle, {}, {})
    # the decision last taken for the shape, if the dtype and gradients are the same (one dict
    # lookup and two compares), else by all three
    shape = x.shape
    last = memo[1].get(shape)
    if last is not None and last[0] is x.dtype and last[1] == need:
        count = last[2]
    else:
        key = (shape, x.dtype, need)
        count = memo[2].get(key, _MISS)
        if count is _MISS:
            count = _decide(bundle, m, x, w, b, need)
            remember(memo[2], key, count)
        remember(memo[1], shape, (x.dtype, need, count))
    if count is None:
        return False
    count()
    return True


def forget(m: torch.nn.Module) -> None:
    """Drop module ``m``'s decisions (another bundle; its parameters move or change dtype:
    ``Module._apply``)."""
    m.__dict__[MEMO] = None


def _decide(bundle, m, x, w, b, need: int) -> Callable[[], Any] | None:
    """The counter of a call the bundle sends to torch eager, forward and (``need``) the
    backward autograd will run; None where a kernel serves either, or none does (the
    op's path decides, and raises what it raises)."""
    if any(p is not None and p.dtype != x.dtype for p in (w, b)):  # cast first: the op's path
        return None
    to = (getattr(m, "_boo_out_dtypes", None) or {}).get(x.dtype)
    if to is not None and to != x.dtype:  # a norm written by hand whose code returned another dtype: the
        return None  # op's path, which casts as it did (nothing per call here for the others)
    op, param = ("group_norm", m.num_groups) if isinstance(m, torch.nn.GroupNorm) else (
        "rms_norm" if isinstance(m, torch.nn.RMSNorm) else "layer_norm", m.normalized_shape)
    eps = ops.get(op).none_eps if m.eps is None else m.eps
    try:
        _, sig, *_ = bundle.checks.prepare(op, x, param, w, b, eps, FORWARD,
                                           offset=getattr(m, "weight_offset", 0.0))
        if sig is None:  # no elements: the op's path returns torch's results without a kernel
            return None
        count = bundle.torch_counter(sig)
        if count is None or not need:
            return count
        backward = bundle.torch_counter(sig.replace(mask=need))
    except (Unserved, TypeError, ValueError, LookupError, SignatureError):
        return None
    if backward is None:
        return None

    def both() -> None:  # the backward, torch's autograd, counted with its forward
        count()
        backward()
    return both


__all__ = ["LEFT_TO_TORCH", "MEMO", "all_to_torch", "forget", "runs"]
