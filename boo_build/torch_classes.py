"""How torch module classes are named to users, which spelling of
``rms_classes`` names a class, how a norm written as a function call is
served, and where torch's autocast runs an op in float32: one definition
for the loader (``loader.nn.replace_norms``, its custom ops) and the trace
recorder (``boo_build.trace``), which must agree (whether a module computes
a norm is ``probe.py``'s). Imports torch (both callers run torch models)."""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import torch


def autocast_devices(aten_ops: Sequence[str]) -> frozenset[str]:
    """Device types where torch has an autocast kernel for each of ``aten_ops``
    (CUDA, which ROCm shares): there torch runs them in float32, and so do the
    custom ops standing in for them (and the trace records what they run)."""
    return frozenset(d for d in ("cuda",) if aten_ops and all(
        torch._C._dispatch_has_kernel_for_dispatch_key(a, "Autocast" + d.upper()) for a in aten_ops))


def class_label(cls: type) -> str:
    """A class as users write it: ``torch.nn.LayerNorm`` (not
    ``torch.nn.modules.normalization.LayerNorm``), else ``module.Qualname``."""
    if getattr(torch.nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def spelling_of(cls: type, spellings: Iterable[type | str]) -> type | str | None:
    """The first of ``spellings`` (a class, its name, its qualified name,
    ``module.Class``) that names ``cls``, else None."""
    names = (cls.__name__, cls.__qualname__, class_label(cls), f"{cls.__module__}.{cls.__qualname__}")
    for s in spellings:
        if s is cls if isinstance(s, type) else s in names:
            return s
    return None


# ---------------------------------------------------------------- function calls
# replace_norms swaps modules; a norm the model writes as a function call
# (``F.layer_norm``, ``torch.ops.aten.native_group_norm``, a subclass of torch's
# norm whose forward calls one) has no module to swap. How to serve one, per op:
SERVE_CALLS = {
    "layer_norm": ("hold a boo_build.loader.nn.LayerNorm in the model instead, or call "
                   "torch.ops.boo.layer_norm(x, normalized_shape, weight, bias, eps, bundle.token())[0]"),
    "rms_norm": ("hold a boo_build.loader.nn.RMSNorm in the model instead, or call "
                 "torch.ops.boo.rms_norm(x, normalized_shape, weight, eps, weight_offset, bundle.token())[0]"),
    "group_norm": ("hold a boo_build.loader.nn.GroupNorm in the model instead, or call "
                   "torch.ops.boo.group_norm(x, weight, bias, N, C, HxW, groups, eps, bundle.token())[0]"),
}


class FunctionCalls(NamedTuple):
    """The norm calls a recording saw made through one function (``boo_build.trace``'s
    ``Recording.function_calls``), which ``replace_norms`` cannot swap."""

    source: str  # how the model wrote them: "F.layer_norm", "aten.native_group_norm", ...
    op: str
    calls: int  # forward calls
    keys: tuple[str, ...]  # the kernel signatures they would run

    def __str__(self) -> str:
        sigs = f"{len(self.keys)} kernel signature{'s' if len(self.keys) > 1 else ''}"
        calls = f"{self.source}: {self.calls} call{'s' if self.calls != 1 else ''} ({sigs})"
        if self.source.startswith("inline "):  # a norm written inline (boo_build.inline_norms)
            return (f"{calls} are written inline, not modules: replace_norms cannot swap them; "
                    f"torch.compile(model, backend=\"boo\") serves them")
        return f"{calls} are function calls, not modules: replace_norms cannot swap them; to serve them, " \
            f"{SERVE_CALLS[self.op]}"


__all__ = ["class_label", "spelling_of", "FunctionCalls", "SERVE_CALLS"]
