"""The spellings of the norms in a Dynamo graph (``norm_pass.py``): each torch function and
ATen op a graph may call a norm by, with its parameters (``spelling_of``), and the norms no
kernel computes (``never_served``: batch, instance, local response norms).

Imports torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ..probe import BATCH_NORM, INSTANCE_NORM, LOCAL_RESPONSE_NORM


@dataclass(frozen=True)
class Spelling:
    name: str
    op: str
    params: tuple[str, ...]  # positional parameters, by the names keyword arguments use
    defaults: Mapping[str, Any]
    native: bool  # ATen's native op: returns (out, *statistics), not out


_LN = ("input", "normalized_shape", "weight", "bias", "eps")
_RMS = ("input", "normalized_shape", "weight", "eps")
_GN = ("input", "num_groups", "weight", "bias", "eps")
_NATIVE_GN = ("input", "weight", "bias", "N", "C", "HxW", "group", "eps")


@functools.cache  # built on first use (a documented cache: torch's functions as keys)
def _spellings() -> dict[Any, Spelling]:
    F, aten = torch.nn.functional, torch.ops.aten
    ln_d = {"weight": None, "bias": None, "eps": 1e-5}
    rms_d = {"weight": None, "eps": None}
    table = {
        F.layer_norm: Spelling("F.layer_norm", "layer_norm", _LN, ln_d, False),
        torch.layer_norm: Spelling("torch.layer_norm", "layer_norm", _LN, ln_d, False),
        aten.layer_norm.default: Spelling("aten.layer_norm", "layer_norm", _LN, ln_d, False),
        aten.native_layer_norm.default: Spelling("aten.native_layer_norm", "layer_norm", _LN, {}, True),
        F.rms_norm: Spelling("F.rms_norm", "rms_norm", _RMS, rms_d, False),
        torch.rms_norm: Spelling("torch.rms_norm", "rms_norm", _RMS, rms_d, False),
        aten.rms_norm.default: Spelling("aten.rms_norm", "rms_norm", _RMS, rms_d, False),
        F.group_norm: Spelling("F.group_norm", "group_norm", _GN, {"weight": None, "bias": None, "eps": 1e-5},
                                False),
        torch.group_norm: Spelling("torch.group_norm", "group_norm", _GN, {"weight": None, "bias": None,
                                                                             "eps": 1e-5}, False),
        aten.group_norm.default: Spelling("aten.group_norm", "group_norm", _GN, {"weight": None, "bias": None,
                                                                                   "eps": 1e-5}, False),
        aten.native_group_norm.default: Spelling("aten.native_group_norm", "group_norm", _NATIVE_GN, {}, True),
    }
    fused = getattr(aten, "_fused_rms_norm", None)  # CUDA's RMS norm after some decompositions
    if fused is not None:
        table[fused.default] = Spelling("aten._fused_rms_norm", "rms_norm", _RMS, {}, True)
    return table


@functools.cache  # the same, of the norms no kernel computes
def _never() -> dict[Any, tuple[str, str]]:
    """torch's norms no kernel computes, as graph nodes: target -> (spelling, why)."""
    F, aten = torch.nn.functional, torch.ops.aten
    batch, inst, lrn = (f"{why}; no kernel computes it" for why in (BATCH_NORM, INSTANCE_NORM, LOCAL_RESPONSE_NORM))
    table = {F.batch_norm: ("F.batch_norm", batch), torch.batch_norm: ("torch.batch_norm", batch),
             F.instance_norm: ("F.instance_norm", inst), torch.instance_norm: ("torch.instance_norm", inst),
             F.local_response_norm: ("F.local_response_norm", lrn)}
    for name in ("batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                 "instance_norm"):
        packet = getattr(aten, name, None)
        if packet is not None:
            table[packet.default] = (f"aten.{name}", batch if "batch" in name else inst)
    return table


def _target(target: Any) -> Any:
    return getattr(target, "default", target) if isinstance(target, torch._ops.OpOverloadPacket) else target


def spelling_of(target: Any) -> Spelling | None:
    """The norm a graph node's target is (an ATen op packet as its default overload), else None."""
    try:
        return _spellings().get(_target(target))
    except TypeError:  # unhashable
        return None


def never_served(target: Any) -> tuple[str, str] | None:
    """(spelling, why) where a graph node's target is a norm no kernel computes (batch norm...), else None."""
    try:
        return _never().get(_target(target))
    except TypeError:  # unhashable
        return None


__all__ = ["Spelling", "never_served", "spelling_of"]
