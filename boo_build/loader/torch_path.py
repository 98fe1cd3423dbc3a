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
that backward too, or the call takes the loader's path).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from ..errors import SignatureError
from ..ops.base import BIAS_GRAD, FORWARD, INPUT_GRAD, WEIGHT_GRAD
from .calls import Unserved
from .lookup import family_key
from .memo import remember
from .tokens import peek_default

LEFT_TO_TORCH = ("the bundle would send every call of it to torch eager (the build found torch eager faster at "
                 "every size it timed, for every kernel that would serve it): kept as it is")

_MISS = object()
_compiling = torch.compiler.is_compiling
_grad_on = torch.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled
_jit_tracing = torch._C._get_tracing_state
_Tensor = torch.Tensor


def all_to_torch(bundle: Any, families: Iterable[str]) -> bool:
    """Whether the bundle sends every call that its kernels of ``families``
    (``lookup.family_key``s: a norm's form, every mask) serve to torch eager,
    at every size (``Bundle.always_torch``); False where it has none of them."""
    want = set(families)
    keys = [s.key for s in bundle.signatures() if family_key(s) in want]
    return bool(keys) and all(bundle.always_torch(k) for k in keys)


def runs(m: torch.nn.Module, x: Any, w: Any, b: Any, op: str, param: Any, eps: Any, offset: float = 0.0) -> bool:
    """Whether module ``m``'s call on ``x`` with its weight and bias ``w``, ``b`` (as the
    op's entry point takes ``op``'s ``param``, ``eps`` and ``offset``) is one its bundle
    sends to torch eager: then it is counted, and the caller runs torch's function on
    them. False under tracing, ``torch.compile`` and autocast, for a tensor subclass and
    for parameters of another dtype than ``x``: those take the op's path."""
    if type(x) is not _Tensor or _compiling() or _any_autocast() or _jit_tracing():
        return False
    need = 0
    if _grad_on():  # the gradients autograd will want: the backward's mask
        need = ((INPUT_GRAD if x.requires_grad else 0) | (WEIGHT_GRAD if w is not None and w.requires_grad else 0)
                | (BIAS_GRAD if b is not None and b.requires_grad else 0))
    bundle = m._boo_bundle or peek_default()
    memo = m.__dict__.get("_boo_torch_path")
    if memo is None or memo[0] is not bundle:
        if bundle is None:  # the default bundle, not opened yet: the op's path opens it
            return False
        memo = m.__dict__["_boo_torch_path"] = (bundle, {})
    key = (x.shape, x.dtype, None if w is None else w.dtype, need)
    count = memo[1].get(key, _MISS)
    if count is _MISS:
        count = _decide(bundle, x, w, b, op, param, eps, offset, need)
        remember(memo[1], key, count)
    if count is None:
        return False
    count()
    return True


def _decide(bundle, x, w, b, op: str, param, eps, offset: float, need: int) -> Callable[[], None] | None:
    """The counter of a call the bundle sends to torch eager, forward and (``need``) the
    backward autograd will run; None where a kernel serves either, or none does (the
    op's path decides, and raises what it raises)."""
    if any(p is not None and p.dtype != x.dtype for p in (w, b)):  # cast first: the op's path
        return None
    try:
        _, sig, *_ = bundle.checks.prepare(op, x, param, w, b, eps, FORWARD, offset=offset)
        if sig is None:  # no elements: the op's path returns torch's results without a kernel
            return None
        count = bundle.torch_counter(sig)
        if count is not None and need and bundle.torch_counter(sig.replace(mask=need)) is None:
            return None
    except (Unserved, TypeError, ValueError, LookupError, SignatureError):
        return None
    return count


__all__ = ["LEFT_TO_TORCH", "all_to_torch", "runs"]
