"""What every op's torch custom ops share: results of the right kind for fake
implementations, ATen's gradient masks, second derivatives through torch's
eager backward, and where autocast runs an op in float32.

Imports torch: the op modules import it only when they register their
custom ops (``library``) or take the autograd path.
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch
from torch import Tensor

from ..dtypes import name_of, torch_dtype
from ..torch_classes import autocast_devices


@functools.lru_cache(maxsize=None)
def stats_dtype(op, dtype: torch.dtype) -> torch.dtype:
    """ATen's dtype of the statistics for an input of ``dtype``."""
    return torch_dtype(op.default_stats_dtype(name_of(dtype) or str(dtype).removeprefix("torch.")))


def stats_like(op, x: Tensor, t: Tensor) -> Tensor:
    """A kernel's statistics in the dtype the fake implementation promises
    (a bundle may hold only kernels built with other statistics dtypes)."""
    sd = stats_dtype(op, x.dtype)
    return t if t.dtype == sd else t.to(sd)


def stats_shape(x: Tensor, normalized_shape: Sequence[int]) -> tuple:
    shape = tuple(x.shape)  # symbolic sizes while tracing
    return shape[:len(shape) - len(normalized_shape)] + (1,) * len(normalized_shape)


def asked(output_mask: Sequence[bool], *params: Tensor | None) -> list[bool]:
    """Which gradients a backward returns: those asked for, the parameters' only where given."""
    m = [bool(v) for v in output_mask]
    if len(m) != 1 + len(params):
        raise ValueError(f"output_mask must have {1 + len(params)} booleans, got {list(output_mask)!r}")
    return [m[0]] + [want and p is not None for want, p in zip(m[1:], params)]


def spread(asked: Sequence[bool], grads: Sequence[Tensor]) -> tuple:
    it = iter(grads)
    return tuple(next(it) if a else None for a in asked)


def empty(t: Tensor) -> Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def second_order(ctx, eager, grads, positions) -> list:
    """Gradients of the saved tensors (the inputs at ``positions``) through
    torch's ``eager(*saved)`` (the asked gradients, in order), given the
    gradients of its outputs; None where ``ctx.needs_input_grad`` says none is needed."""
    need = [ctx.needs_input_grad[p] for p in positions]
    saved = ctx.saved_tensors
    create = torch.is_grad_enabled()  # backward(create_graph=True): keep the graph for higher orders
    with torch.enable_grad():
        ins = list(saved) if create else [None if t is None else t.detach().requires_grad_(n)
                                          for t, n in zip(saved, need)]
        outs = eager(*ins)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wanted = [t for t, n in zip(ins, need) if n]
        got = (torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True,
                                   create_graph=create)
               if pairs and wanted else [None] * len(wanted))
    it = iter(got)
    return [next(it) if n else None for n in need]


def register_autocast(custom_op, aten_op: str) -> None:
    for device in autocast_devices((aten_op,)):
        torch.library.register_autocast(custom_op, device, torch.float32)
