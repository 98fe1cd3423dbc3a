"""Which devices this machine has, and which bundle targets they can run.

Loader world: stdlib only here (IREE's runtime is imported lazily, and only
when a GPU might exist), plus the pure-Python ``boo_build.targets``.

``discover()`` is cheap and keeps no state: the CPU comes from
``/proc/cpuinfo``; GPUs come from IREE's ``hip`` and ``cuda`` drivers, probed
only when the device nodes they need exist (``/dev/kfd``, ``/dev/nvidia*``) so
a CPU-only machine never pays for importing IREE's runtime. Every GPU probe
is guarded: a driver that fails to load means "no such GPU", never an error.
Callers keep the result.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import sys
from dataclasses import dataclass
from typing import Iterable

from ..targets import Target


@dataclass(frozen=True)
class DeviceInfo:
    driver: str  # IREE runtime driver: local-task, hip, cuda
    uri: str  # device URI for iree.runtime: "local-task", "hip://0", "cuda://0"
    arch: str  # gfx arch ("gfx942"), CUDA "sm_90", or CPU level ("x86-64-v3", "generic")
    name: str  # human-readable model name

    @property
    def is_cpu(self) -> bool:
        return self.driver in ("local-task", "local-sync")


# x86-64 micro-architecture levels (psABI), as /proc/cpuinfo spells the flags.
# Each level requires the flags of the levels below it.
X86_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
_X86_LEVEL_FLAGS = {
    "x86-64-v2": frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
    # abm is how /proc/cpuinfo names LZCNT (on Intel and AMD alike).
    "x86-64-v3": frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    "x86-64-v4": frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
}


def read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text
    (``flags`` on x86, ``Features`` on arm)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


def x86_level(flags: Iterable[str]) -> str:
    """The highest x86-64 level whose flags (and those of every lower level) are all present."""
    have = set(flags)
    level = "x86-64"
    for name in X86_LEVELS[1:]:
        if not _X86_LEVEL_FLAGS[name] <= have:
            break
        level = name
    return level


def _model_name(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("model name", "hardware", "cpu model"):
            return value.strip()
    return platform.processor() or platform.machine() or "CPU"


def cpu_device(cpuinfo: str | None = None, machine: str | None = None) -> DeviceInfo:
    """The host CPU as the local-task device, with its x86-64 level (or
    ``generic`` on aarch64, or the machine name on anything else)."""
    machine = (machine or platform.machine()).lower()
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    if machine in ("x86_64", "amd64"):
        arch = x86_level(cpu_flags(text))
    elif machine in ("aarch64", "arm64"):
        arch = "generic"
    else:
        arch = machine
    return DeviceInfo(driver="local-task", uri="local-task", arch=arch, name=_model_name(text))


def _gpu_nodes_present(driver: str) -> bool:
    if not sys.platform.startswith("linux"):
        return True  # no cheap test elsewhere: ask the driver
    if driver == "hip":
        return os.path.exists("/dev/kfd")
    if driver == "cuda":
        return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/nvidiactl")
    return True


_INFO_LINE = re.compile(r"^\s*-\s*([\w-]+)\s*:\s*(.*?)\s*$", re.M)


def _parse_device_info(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _INFO_LINE.finditer(text or "")}


def gfx_arch(name: str) -> str:
    """``gfx942:sramecc+:xnack-`` -> ``gfx942`` (IREE targets the bare arch)."""
    return name.split(":", 1)[0].strip()


def gpu_devices(driver_name: str) -> tuple[DeviceInfo, ...]:
    """GPUs of one IREE driver (``hip`` or ``cuda``); empty when the driver
    cannot load or finds nothing. Never raises."""
    try:
        from .native import runtime

        driver = runtime().get_cached_hal_driver(driver_name)
        infos = driver.query_available_devices()
    except Exception:  # noqa: BLE001 - no library, no device, no permission: no GPU
        return ()
    found = []
    for index, info in enumerate(infos):
        try:
            fields = _parse_device_info(driver.dump_device_info(info["device_id"]))
        except Exception:  # noqa: BLE001
            fields = {}
        name = str(info.get("name") or driver_name)
        if driver_name == "hip":
            arch = gfx_arch(fields.get("gpu-arch-name", ""))
        else:
            cc = fields.get("gpu-compute-capability", "")
            arch = "sm_" + cc.replace(".", "") if cc else ""
        if not arch:
            arch = "unknown"
        found.append(DeviceInfo(driver=driver_name, uri=f"{driver_name}://{index}", arch=arch, name=name))
    return tuple(found)


def discover(*, gpus: bool | None = None) -> tuple[DeviceInfo, ...]:
    """Every device on this machine: the CPU first, then AMD (hip) and NVIDIA
    (cuda) GPUs. ``gpus=None`` probes a driver only where its device nodes
    exist; ``True`` always probes; ``False`` never does."""
    devices = [cpu_device()]
    for driver in ("hip", "cuda"):
        if gpus is False or (gpus is None and not _gpu_nodes_present(driver)):
            continue
        devices.extend(gpu_devices(driver))
    return tuple(devices)


def cpu_can_run(device_arch: str, target_arch: str) -> tuple[bool, str]:
    """Whether a CPU of ``device_arch`` runs code built for ``target_arch``;
    the reason when not."""
    if target_arch in X86_LEVELS:
        if device_arch not in X86_LEVELS:
            return False, f"not run: CPU is {device_arch}, target needs {target_arch}"
        if X86_LEVELS.index(device_arch) < X86_LEVELS.index(target_arch):
            return False, f"not run: CPU lacks {target_arch} (has {device_arch})"
        return True, ""
    if device_arch == target_arch:
        return True, ""
    return False, f"not run: CPU is {device_arch}, target needs {target_arch}"


def match_target(target: Target, devices: Iterable[DeviceInfo]) -> tuple[DeviceInfo | None, str]:
    """The first device that can run ``target`` and ``""``; or ``None`` and why
    not (``"not run: no device (gfx942)"``,
    ``"not run: CPU lacks x86-64-v4 (has x86-64-v3)"``)."""
    devices = tuple(devices)
    if target.driver in ("local-task", "local-sync"):
        cpus = [d for d in devices if d.is_cpu]
        if not cpus:
            return None, f"not run: no device ({target.arch})"
        reasons = []
        for d in cpus:
            ok, why = cpu_can_run(d.arch, target.arch)
            if ok:
                return d, ""
            reasons.append(why)
        return None, reasons[0]
    same_driver = [d for d in devices if d.driver == target.driver]
    for d in same_driver:
        if gfx_arch(d.arch) == target.arch:
            return d, ""
    if same_driver:
        others = ", ".join(sorted({d.arch for d in same_driver}))
        return None, f"not run: no device ({target.arch}); found {others}"
    return None, f"not run: no device ({target.arch})"
