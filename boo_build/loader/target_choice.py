"""Which of a bundle's targets to run, on which device present.

GPUs first (NVIDIA targets from the newest compute capability down; Vulkan
ones after HIP and CUDA, the named ones before the portable one), then CPUs
from the highest x86-64 level down (``devices.cpu_level``); the first
target with available kernels that a device present runs wins
(``devices.match_target``), else ``NoCompatibleDevice`` says why per target.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Mapping

from ..targets import Target, cuda_capability
from .errors import NoCompatibleDevice
from .format import BundleIndex, Status
from .split_format import BundleHeader


def _devmod():
    """``devices``, imported by the first device question (open_bundle's), not by
    ``import boo_build.loader`` (about 2 ms); by module: tests stand in for its ``discover``."""
    from . import devices

    return devices


def target_rank(t: Target) -> tuple:
    """Preference order: GPUs first (NVIDIA targets from the newest compute
    capability down), then CPUs from the highest level down."""
    cc = cuda_capability(t.arch) if t.driver == "cuda" else None
    level = cc[0] * 10 + cc[1] if cc else _devmod().cpu_level(t.arch)
    vulkan = 0 if t.driver != "vulkan" else 2 if t.arch == "vulkan" else 1  # the named, then the portable one
    return (1 if t.is_cpu else 0, vulkan, -level, t.name)


def bundle_targets(index: BundleHeader | BundleIndex | Mapping[str, Any]) -> dict[str, Target]:
    """The bundle's targets as ``Target``s (from its header, the typed index or its JSON)."""
    if isinstance(index, (BundleHeader, BundleIndex)):
        return {n: Target(name=n, driver=t.driver, flags=t.flags, arch=t.arch) for n, t in index.targets.items()}
    return {n: Target(name=n, driver=t["driver"], flags=tuple(t["flags"]), arch=t["arch"])
            for n, t in index["targets"].items()}


def _available(index: BundleHeader | BundleIndex | Mapping[str, Any]) -> dict[str, int]:
    """Available kernels per target."""
    if isinstance(index, BundleHeader):
        return dict(index.available)
    available: dict[str, int] = defaultdict(int)
    if isinstance(index, BundleIndex):
        for _, tname, te in index.entries():
            available[tname] += te.is_available
    else:
        for k in index["kernels"].values():
            for tname, entry in k["targets"].items():
                available[tname] += entry["status"] == Status.AVAILABLE
    return available


def _wanted_devices(device: Any, present: list) -> list:
    """The devices of ``present`` that ``device`` (a URI, a driver name or a
    ``DeviceInfo``) names; ``NoCompatibleDevice`` when none. A ``DeviceInfo`` of a device
    present is taken as given (a caller may describe fewer features than it has)."""
    wanted = device.uri if hasattr(device, "uri") else str(device)
    cands = [d for d in present if d.uri == wanted]
    if cands and hasattr(device, "uri"):  # as described: a caller may hold features back (16-bit types)
        cands = [device]
    if not cands and "://" not in wanted:  # "hip" -> first hip device, "local-task" -> the CPU
        cands = [d for d in present if d.driver == wanted or d.uri.split("://")[0] == wanted][:1]
    if not cands and wanted == "local-sync":  # the CPU, single-threaded
        cands = [dataclasses.replace(d, driver="local-sync", uri="local-sync") for d in present if d.is_cpu][:1]
    if not cands:
        raise NoCompatibleDevice(
            f"device {wanted!r} is not present on this machine; devices present: "
            + (", ".join(f"{d.uri} ({d.name}, {d.arch})" for d in present) or "none"),
            {"*": f"unknown device {wanted!r}"})
    return cands


def select_target(index: BundleHeader | BundleIndex | Mapping[str, Any], device: Any, path: str):
    """(target, device) to open the bundle on: for ``device`` (as in
    ``open_bundle``), else the best device present."""
    targets = bundle_targets(index)
    available = _available(index)
    # Vulkan devices are probed only for a bundle with Vulkan targets (it costs a driver); a
    # software one (lavapipe) is chosen only where ``device`` names it, never over the CPU
    present = list(_devmod().discover_for(targets.values()))
    software = [d for d in present if getattr(d, "software", False)]
    if device is not None:
        present = _wanted_devices(device, present)
    else:
        present = [d for d in present if d not in software]
    reasons: dict[str, str] = {}
    for t in sorted(targets.values(), key=target_rank):
        if not available.get(t.name):
            reasons[t.name] = "no available kernels for this target in the bundle"
            continue
        dev, why = _devmod().match_target(t, present)
        if dev is not None:
            return t, dev
        if device is None and software and (soft := _devmod().match_target(t, software)[0]) is not None:
            why = (f"only {soft.arch}, a software device on the CPU, runs it: never chosen by itself; open "
                   f"with device={soft.driver!r} to run the kernels there")
        reasons[t.name] = why or "no matching device"
    what = f"device {present[0].uri}" if device is not None else "any device present"
    lines = "\n".join(f"  {n} ({targets[n].driver}, {targets[n].arch}): {r}" for n, r in sorted(reasons.items()))
    raise NoCompatibleDevice(
        f"bundle {path} has no target that runs on {what}:\n{lines or '  (the bundle has no targets)'}", reasons)


__all__ = ["bundle_targets", "select_target", "target_rank"]
