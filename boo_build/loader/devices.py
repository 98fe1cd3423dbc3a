"""Which devices this machine has, and which bundle targets they can run.

Loader world: stdlib only here (IREE's runtime is imported lazily, and only
when a GPU might exist), plus the pure-Python ``boo_build.targets``.

``discover()`` is cheap and keeps no state: the CPU comes from
``/proc/cpuinfo``; GPUs come from IREE's ``hip`` and ``cuda`` drivers, probed
only when the device nodes they need exist (``/dev/kfd``, ``/dev/nvidia*``) so
a CPU-only machine never pays for importing IREE's runtime. Every GPU probe
is guarded: a driver that fails to load means "no such GPU", never an error.
Callers keep the result.

NVIDIA compute capability: IREE's cuda driver dumps no device details (its
``dump_device_info`` is empty in 3.13), so it comes from the CUDA driver
library itself (``libcuda``'s ``cuDeviceGetAttribute`` through ctypes, by
device ordinal, the order IREE enumerates in), else from ``nvidia-smi``
(by GPU UUID, which IREE reports as the device path). Never from torch.
A CUDA target runs on every GPU of at least its compute capability (PTX is
compiled forward by the driver), except architecture-specific ones
(``sm_90a``), which run on exactly theirs.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterable

from ..targets import Target, cuda_arch, cuda_capability


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


def cpu_level(arch: str) -> int:
    """How capable a CPU arch is: 0 for ``generic`` (or anything not x86-64),
    then 1 for ``x86-64`` up to 4 for ``x86-64-v4``."""
    return X86_LEVELS.index(arch) + 1 if arch in X86_LEVELS else 0


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


# IREE's CUDA driver takes kernel results from a stream-ordered pool by
# default (cuMemAllocFromPoolAsync), and its allocator cannot export those
# buffers through DLPack (3.13: "CUDA buffer type is not supported for
# export"); plainly allocated results export, so outputs reach torch without
# a copy. Runtime flags are read when a driver is created (once per process).
# BOO_CUDA_ASYNC_ALLOCATIONS=1 keeps IREE's default (outputs are then copied).
CUDA_DRIVER_FLAGS = ("--cuda_async_allocations=false",)
ASYNC_ALLOCATIONS_ENV = "BOO_CUDA_ASYNC_ALLOCATIONS"


# IREE's CPU heap allocator zero-fills every buffer it allocates: a kernel's
# results and the transients of a multi-dispatch kernel, each call. On
# local-sync that runs on the calling thread, and it can cost more than the
# kernel (docs/cpu-performance.md, "Measurements behind the code"). IREE's caching allocator keeps
# freed buffers and hands one of the same size back, not zeroed again (every
# kernel writes all of its results). Bounded: it keeps a freed buffer while
# its pool holds at most 256 MiB besides (and at most 64 free buffers).
# local-task gained nothing measurable. BOO_LOCAL_SYNC_ALLOCATOR=<IREE
# allocator spec> replaces it, "none" turns it off; read when a device opens.
LOCAL_SYNC_ALLOCATOR = "caching:device_local=*;256mib;64"
ALLOCATOR_ENV = "BOO_LOCAL_SYNC_ALLOCATOR"


def driver_of(uri: str) -> str:
    """The runtime driver of a device URI: "local-sync", "cuda://0" -> "cuda"."""
    return uri.split("://", 1)[0].split("?", 1)[0]


def device_allocators(uri: str) -> list[str] | None:
    """The allocator specs the loader opens ``uri``'s device with (IREE's
    ``--device_allocator`` syntax), None for the driver's own allocator."""
    if driver_of(uri) != "local-sync":
        return None
    spec = os.environ.get(ALLOCATOR_ENV, LOCAL_SYNC_ALLOCATOR).strip()
    return None if spec.lower() in ("", "none") else [spec]


def configure_driver(uri: str) -> None:
    """Set the runtime flags the loader wants for ``uri``'s driver; call before
    the driver is first created. A runtime without the flag is left alone."""
    if driver_of(uri) != "cuda" or os.environ.get(ASYNC_ALLOCATIONS_ENV) == "1":
        return
    from .native import runtime

    try:
        runtime().parse_flags(*CUDA_DRIVER_FLAGS)
    except Exception:  # noqa: BLE001 - an unknown flag in another runtime build
        pass


def gpu_devices(driver_name: str) -> tuple[DeviceInfo, ...]:
    """GPUs of one IREE driver (``hip`` or ``cuda``); empty when the driver
    cannot load or finds nothing. Never raises."""
    try:
        from .native import runtime

        configure_driver(driver_name)
        driver = runtime().get_cached_hal_driver(driver_name)
        infos = driver.query_available_devices()
    except Exception:  # noqa: BLE001 - no library, no device, no permission: no GPU
        return ()
    found = []
    by_ordinal = by_uuid = None  # CUDA compute capabilities, read when needed
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
                if by_ordinal is None:
                    by_ordinal = libcuda_capabilities()
                if index in by_ordinal:
                    arch = cuda_arch(*by_ordinal[index])
                else:
                    if by_uuid is None:
                        by_uuid = nvidia_smi_capabilities()
                    cap = by_uuid.get(str(info.get("path", "")).lower())
                    arch = cuda_arch(*cap) if cap else ""
        if not arch:
            arch = "unknown"
        found.append(DeviceInfo(driver=driver_name, uri=f"{driver_name}://{index}", arch=arch, name=name))
    return tuple(found)


# CUdevice_attribute values (cuda.h): they are part of the driver's ABI.
_CU_COMPUTE_CAPABILITY_MAJOR, _CU_COMPUTE_CAPABILITY_MINOR = 75, 76


def libcuda_capabilities(library: str = "libcuda.so.1") -> dict[int, tuple[int, int]]:
    """(major, minor) compute capability per CUDA device ordinal, from the
    CUDA driver library through ctypes; ``{}`` when it cannot load or
    initialize (no driver, no GPU, no permission). Never raises."""
    import ctypes

    try:
        lib = ctypes.CDLL(library)
        if lib.cuInit(0) != 0:
            return {}
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return {}
        found = {}
        for ordinal in range(count.value):
            dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
            if (lib.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
                    and lib.cuDeviceGetAttribute(ctypes.byref(major), _CU_COMPUTE_CAPABILITY_MAJOR, dev) == 0
                    and lib.cuDeviceGetAttribute(ctypes.byref(minor), _CU_COMPUTE_CAPABILITY_MINOR, dev) == 0):
                found[ordinal] = (major.value, minor.value)
        return found
    except Exception:  # noqa: BLE001 - no library or a broken one: unknown, not an error
        return {}


def parse_nvidia_smi(text: str) -> dict[str, tuple[int, int]]:
    """``nvidia-smi --query-gpu=uuid,compute_cap --format=csv,noheader`` output
    -> {lower-case "gpu-<uuid>": (major, minor)}; lines it cannot read are skipped."""
    found = {}
    for line in (text or "").splitlines():
        uuid, sep, cap = line.partition(",")
        major, dot, minor = cap.strip().partition(".")
        if sep and dot and major.isdigit() and minor.isdigit() and uuid.strip():
            found[uuid.strip().lower()] = (int(major), int(minor))
    return found


def nvidia_smi_capabilities(timeout_s: float = 10.0) -> dict[str, tuple[int, int]]:
    """Compute capability per GPU UUID from ``nvidia-smi`` (``{}`` without it). Never raises."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=uuid,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else {}


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


def cuda_can_run(device_arch: str, target_arch: str) -> bool:
    """Whether an NVIDIA GPU of ``device_arch`` (``"sm_90"``) runs code built
    for ``target_arch``: PTX runs on its compute capability and every later
    one; an architecture-specific target (``sm_90a``) only on its own."""
    dev, tgt = cuda_capability(device_arch), cuda_capability(target_arch)
    if dev is None or tgt is None:
        return False
    if tgt[2]:
        return dev[:2] == tgt[:2]
    return dev[:2] >= tgt[:2]


def no_device_reason(arch: str) -> str:
    """Why a target of ``arch`` was not run: no device for it. The one wording
    of every "not run" record for it, from a local build and through Dask alike
    (the reason goes into the bundle index, which must not depend on where it ran)."""
    return f"not run: no device ({arch})"


def match_target(target: Target, devices: Iterable[DeviceInfo]) -> tuple[DeviceInfo | None, str]:
    """The first device that can run ``target`` and ``""``; or ``None`` and why
    not (``"not run: no device (gfx942)"``,
    ``"not run: CPU lacks x86-64-v4 (has x86-64-v3)"``)."""
    devices = tuple(devices)
    if target.driver in ("local-task", "local-sync"):
        cpus = [d for d in devices if d.is_cpu]
        if not cpus:
            return None, no_device_reason(target.arch)
        reasons = []
        for d in cpus:
            ok, why = cpu_can_run(d.arch, target.arch)
            if ok:
                return d, ""
            reasons.append(why)
        return None, reasons[0]
    same_driver = [d for d in devices if d.driver == target.driver]
    for d in same_driver:
        if gfx_arch(d.arch) == target.arch or (target.driver == "cuda" and cuda_can_run(d.arch, target.arch)):
            return d, ""
    if same_driver:
        others = ", ".join(sorted({d.arch for d in same_driver}))
        return None, f"{no_device_reason(target.arch)}; found {others}"
    return None, no_device_reason(target.arch)
