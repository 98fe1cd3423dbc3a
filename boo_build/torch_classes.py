"""How torch module classes are named to users, and which spelling of
``rms_classes`` names a class: one definition for ``loader.nn.replace_norms``
and the trace recorder (``boo_build.trace``), which must agree on both.
Imports torch (both callers run torch models)."""

from __future__ import annotations

from typing import Iterable

import torch


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


__all__ = ["class_label", "spelling_of"]
